"""The one table of snapshot contents: every dataset and header attribute, described once.

Writing, reading, checkpoints and ``describe`` (the future ``gravpipe info``) all walk these
tables instead of naming datasets in several places (the idea of SWIFT's
``io_make_output_field``). Adding an output field means adding one row to
``PARTICLE_FIELDS`` and, if it is an extra per-particle array, one keyword to
``write_snapshot``.

File layout (GADGET-4 HDF5, so that yt and pynbody open the files)::

    /Header          attributes of HEADER_ATTRS
    /PartType1/      datasets of PARTICLE_FIELDS (gravpipe writes slot 1, "halo"/dark matter)
    /Parameters      attributes: gravpipe metadata (units, G, integrator, eps, versions, ...)
                     and the neutral cosmology of NON_COSMOLOGICAL (Omega0, OmegaLambda,
                     HubbleParam) that yt and pynbody look for there
    /Integrator      checkpoints only: caller-supplied arrays (datasets) and scalars (attributes)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

#: Version of gravpipe's own conventions inside the GADGET layout (the ``/Parameters``
#: keys, ``/Integrator``). Bump it when a reader would need to tell old files from new.
FORMAT_VERSION = 1

#: Number of GADGET particle types; the header arrays have this length.
N_TYPES = 6

#: The particle type (``/PartType<k>`` group and header slot) that gravpipe writes.
GRAVPIPE_PART_TYPE = 1

HEADER_GROUP = "Header"
PARAMETERS_GROUP = "Parameters"
INTEGRATOR_GROUP = "Integrator"
#: prefix of the /Integrator entries that hold a run's diagnostics history (one array per
#: column): a record, not state to continue from, so it may hold NaN (a virial ratio with
#: no potential, a column older rows lack)
HISTORY_PREFIX = "history_"

#: Unit system recorded in ``/Parameters`` when the caller does not give one.
NBODY_UNITS = "N-body (Henon): G = M = 1"


def part_group_name(part_type: int) -> str:
    """HDF5 group name of a particle type, e.g. ``PartType1``."""
    return f"PartType{part_type}"


@dataclass(frozen=True)
class SnapshotField:
    """One per-particle dataset in ``/PartType<k>``.

    Attributes
    ----------
    name : str
        Dataset name in the file (GADGET-4 spelling).
    dtype : numpy.dtype
        The dtype gravpipe writes.
    components : int
        1 for a dataset of shape (N,), 3 for shape (N, 3).
    unit : str
        Physical meaning of one unit of the stored numbers.
    description : str
        One line for ``describe``.
    source : str
        Where the data lives in memory: a ``Particles`` attribute (``pos``, ``vel``,
        ``mass``, ``id``) when ``origin == "particles"``, else the name of the extra array
        (``potential``, ``acceleration``: keywords of ``write_snapshot`` and attributes of
        ``Snapshot``).
    origin : "particles" or "extra"
        Whether the field belongs to the ``Particles`` container or is an extra output.
    required : bool
        Reading fails when a required field is absent. ``Masses`` is not required: GADGET
        files may instead give one mass per type in the header ``MassTable``.
    """

    name: str
    dtype: np.dtype
    components: int
    unit: str
    description: str
    source: str
    origin: Literal["particles", "extra"]
    required: bool

    def shape(self, n: int) -> tuple[int, ...]:
        """Expected dataset shape for ``n`` particles."""
        return (n,) if self.components == 1 else (n, self.components)

    def accepts(self, dtype: np.dtype) -> bool:
        """Whether a dataset of ``dtype`` (possibly written by another code) can be read.

        Float fields accept any real float width (float32 files are upcast to float64);
        integer fields accept any integer width and signedness.
        """
        kind = np.dtype(self.dtype).kind
        wanted = "f" if kind == "f" else "iu"
        return np.dtype(dtype).kind in wanted


PARTICLE_FIELDS: tuple[SnapshotField, ...] = (
    SnapshotField("Coordinates", np.dtype(np.float64), 3, "N-body length",
                  "positions", "pos", "particles", True),
    SnapshotField("Velocities", np.dtype(np.float64), 3, "N-body velocity",
                  "velocities", "vel", "particles", True),
    SnapshotField("Masses", np.dtype(np.float64), 1, "N-body mass",
                  "masses", "mass", "particles", False),
    SnapshotField("ParticleIDs", np.dtype(np.uint64), 1, "dimensionless",
                  "unique particle identifiers", "id", "particles", True),
    SnapshotField("Potential", np.dtype(np.float64), 1, "N-body specific energy (G M / length)",
                  "gravitational potential per unit mass",
                  "potential", "extra", False),
    SnapshotField("Acceleration", np.dtype(np.float64), 3, "N-body acceleration",
                  "gravitational acceleration", "acceleration", "extra", False),
)

#: Fields by dataset name, and the extra (non-Particles) fields by source name.
FIELDS_BY_NAME: dict[str, SnapshotField] = {f.name: f for f in PARTICLE_FIELDS}
EXTRA_FIELDS: dict[str, SnapshotField] = {f.source: f for f in PARTICLE_FIELDS if f.origin == "extra"}


@dataclass(frozen=True)
class HeaderAttr:
    """One attribute of ``/Header``: name, dtype, shape (``()`` for a scalar) and meaning."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    description: str


HEADER_ATTRS: tuple[HeaderAttr, ...] = (
    HeaderAttr("NumPart_ThisFile", np.dtype(np.uint64), (N_TYPES,), "particles of each type in this file"),
    HeaderAttr("NumPart_Total", np.dtype(np.uint64), (N_TYPES,), "particles of each type in the snapshot"),
    HeaderAttr("NumPart_Total_HighWord", np.dtype(np.uint32), (N_TYPES,),
               "high 32 bits of NumPart_Total (GADGET-2 convention; zero here)"),
    HeaderAttr("MassTable", np.dtype(np.float64), (N_TYPES,),
               "mass per type when all particles of a type share it (0: see Masses)"),
    HeaderAttr("Time", np.dtype(np.float64), (), "simulation time, N-body time units"),
    HeaderAttr("Redshift", np.dtype(np.float64), (), "always 0 (not a cosmological run)"),
    HeaderAttr("BoxSize", np.dtype(np.float64), (), "0 for an isolated (non-periodic) system"),
    HeaderAttr("NumFilesPerSnapshot", np.dtype(np.int32), (), "files per snapshot (1; P for a set written by P MPI ranks)"),
)

HEADER_ATTR_NAMES: frozenset[str] = frozenset(a.name for a in HEADER_ATTRS)

#: Cosmological parameters written to ``/Parameters`` with values that mean "not a
#: cosmological run". GADGET-4 keeps its run parameters there, and both readers take them
#: from that group when it is non-empty (the GADGET-2 header no longer has them):
#:
#: - pynbody (``GadgetHDFSnap``) reads Omega0, OmegaLambda and HubbleParam from
#:   ``/Parameters``; when they are absent it assumes its default cosmology (h = 0.68),
#:   and every unit conversion of positions and masses (``kpc a h^-1`` ...) is then off by
#:   a factor 1/h. With HubbleParam = 1 (and a = 1 from Redshift = 0) the conversions leave
#:   the numbers unchanged.
#: - yt (``GadgetHDF5Dataset``) merges ``/Parameters`` into the header; when OmegaLambda is
#:   present it also reads Omega0 and HubbleParam, and OmegaLambda = 0 marks the run as
#:   non-cosmological, so ``current_time`` is the header ``Time`` (not a scale factor).
#:
#: BoxSize stays in ``/Header`` only: pynbody would read a ``/Parameters`` BoxSize = 0 as a
#: zero-size periodic box. The writer rejects other values for these keys.
NON_COSMOLOGICAL: dict[str, float] = {"Omega0": 0.0, "OmegaLambda": 0.0, "HubbleParam": 1.0}

#: The gravitational constant in cgs (CODATA 2018), cm^3 g^-1 s^-2: ties the unit attributes
#: below to the run's G.
G_CGS = 6.6743e-8
#: Seconds in the Gyr of pynbody's ``Time_GYR`` (Julian years).
SECONDS_PER_GYR = 1e9 * 365.25 * 86400.0

#: GADGET-4's unit attributes, written to ``/Parameters`` so that readers convert the numbers
#: in the file to physical units consistently with the run's G (``G`` in /Parameters):
#: UnitLength_in_cm and UnitMass_in_g as given (``parameters``: a physical scale of the
#: run), else the N-body scale 1 cm and 1 / G_cgs g, where G = 1 in cgs-like units; the
#: time unit follows from G = G_cgs M T^2 / L^3 and the velocity unit is L / T. pynbody
#: reads them from /Parameters (and the time from ``Time_GYR``, which it would otherwise
#: take for a cosmological age); yt's Gadget frontend takes units only from its
#: ``unit_base`` argument: ``io.unit_base(path)`` gives it these.
UNIT_ATTRS = ("UnitLength_in_cm", "UnitMass_in_g", "UnitVelocity_in_cm_per_s", "UnitTime_in_s")

#: ``/Parameters`` keys that gravpipe itself fills in; ``describe`` explains them.
STANDARD_PARAMETERS: dict[str, str] = {
    "units": "unit system of every number in the file",
    "G": "gravitational constant in those units",
    "integrator": "time integrator that produced the run",
    "eps": "Plummer softening length",
    "code_version": "gravpipe version that wrote the file",
    "gravpipe_format_version": "version of gravpipe's conventions inside the GADGET layout",
    "Omega0": "matter density: 0, not a cosmological run (read by yt, pynbody)",
    "OmegaLambda": "cosmological constant: 0 tells yt the run is not cosmological",
    "HubbleParam": "h = 1 so that pynbody's h-scaled units leave the numbers unchanged",
    "UnitLength_in_cm": "length unit in cm (GADGET-4; N-body units: 1)",
    "UnitMass_in_g": "mass unit in g (GADGET-4; N-body units: 1/G_cgs, so that G = 1)",
    "UnitVelocity_in_cm_per_s": "velocity unit in cm/s (GADGET-4): length unit / time unit",
    "UnitTime_in_s": "time unit in s, from G = G_cgs M T^2 / L^3",
    "Time_GYR": "the header Time in Gyr (pynbody's time)",
}
