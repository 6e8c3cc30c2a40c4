"""Simulation: gravity x integrator x backend x where the particles live, the evolve loop,
snapshots and checkpoints.

    sim = Simulation(gp.ic.plummer(1024, seed=1), integrator="hermite", eps=1/64)
    sim.evolve(t_end=10.0, snapshot_every=1.0, checkpoint_every=1.0, out="run1/")
    print(sim.energy_error(), sim.timings)

    big = Simulation.from_model("plummer", 10**8, seed=1, gravity="tree",
                                memory_budget="4GiB", scratch="/scratch")   # pages of a scratch file

``evolve`` reaches any end time exactly (off the integrator's step grid at the cost of one
extra force evaluation on all particles). A run directory holds ``snapshot_NNNN.h5``
(GADGET-4 layout), ``checkpoint_NNNN.h5`` (the same plus the exact integrator state) and
``diagnostics.csv``, numbered in the order written; every file is written atomically.
``Simulation.resume(dir)`` continues from the newest checkpoint and reproduces the
uninterrupted run bit for bit (same backend, precision and thread count).

Where the particles live is chosen through :mod:`gravpipe.residence` as gravity is through
:mod:`gravpipe.gravity`: in memory (:class:`~gravpipe.memory_run.MemoryRun`), spread over
MPI ranks each holding its domain (:class:`~gravpipe.domain_run.DomainRun`) or, with
``memory_budget`` and ``scratch``, in pages (:class:`~gravpipe.ooc_simulation.PagedRun`).
A Simulation is the same object either way and forwards to its run.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

from gravpipe import diagnostics, residence
from gravpipe.domain_run import DomainRun
from gravpipe.memory_run import MemoryRun
from gravpipe.ooc_simulation import PagedRun
from gravpipe.paged_domain_run import PagedDomainRun
from gravpipe.particles import Particles

# RunConfig, Timings, run_files and latest_checkpoint are public here too (users and the CLI
# import them from here)
from gravpipe.run_loop import (  # noqa: F401
    RunConfig,
    RunLoop,
    Timings,
    latest_checkpoint,
    run_files,
)


#: the run of each residence (:data:`gravpipe.residence.RESIDENCES`), each with the
#: constructors ``(particles, **kw)``, ``from_model(model, n, seed, **kw)``,
#: ``from_snapshot(path, **kw)`` and ``resume(checkpoint, out, threads, **kw)``
RUNS: dict[str, type[RunLoop]] = {"memory": MemoryRun, "domains": DomainRun, "pages": PagedRun,
                                   "domain_pages": PagedDomainRun}
assert set(RUNS) == set(residence.RESIDENCES), "every residence needs its run"


def _placed(home: residence.Residence, options: dict[str, Any], run_kw: dict[str, Any]) -> dict[str, Any]:
    """``home.run_kwargs``: over several MPI ranks checked under ``consistency.agreed``, so
    that an option every rank refuses alike is said once and no rank aborts."""
    from gravpipe.parallel import consistency
    from gravpipe.parallel.comm import resolve_comm

    comm = resolve_comm(run_kw.get("comm"))
    if comm is None:
        return home.run_kwargs(options, run_kw)
    return consistency.agreed(comm, lambda: home.run_kwargs(options, run_kw))


def _options(memory_budget: Any, scratch: Any, page_bytes: Any = None) -> dict[str, Any]:
    return {"memory_budget": memory_budget, "scratch": scratch, "page_bytes": page_bytes}


class Simulation:
    """An N-body simulation.

    Parameters
    ----------
    particles : Particles (N-body units by default: G = M = 1).
    gravity : a kind of :data:`gravpipe.gravity.GRAVITY`: "direct" (O(N^2) on the force
        pipeline) or "tree" (Barnes-Hut treecode with quadrupoles, opening angle ``theta``;
        it gives no jerks, so it runs with leapfrog; ``precision`` selects its list
        kernels, as for the pipeline).
    integrator : "hermite" (block time steps; takes eta, eta_s, dt_max) or "leapfrog"
        (shared step; takes dt). None: the gravity kind's default (hermite for direct,
        leapfrog for tree).
    eps : Plummer softening length (>= 0).
    backend, precision, threads : as for :class:`gravpipe.Pipeline`.
    eta, eta_s, dt_max, dt : integrator parameters (None: the core's default, see
        ``gravpipe.integrators.INTEGRATORS``).
    t0 : the time of ``particles``.
    theta : tree opening angle (gravity="tree" only; None: the core's default).
    comm : an mpi4py communicator. gravity="tree": the state is distributed (residence
        "domains", :class:`~gravpipe.domain_run.DomainRun`): each rank keeps only the
        particles of its curve domain, forces come from locally essential trees, files are
        multi-file sets each rank writes its member of, and ``particles`` is this rank's
        share. gravity="direct": split over the ranks j-parallel, every rank holding all
        particles. Rank 0 prints and writes diagnostics.csv. None: COMM_WORLD when started
        by ``mpiexec -n P`` with P > 1, else a serial run. ``threads`` then defaults to the
        rank's share of its machine's cores.
    precise_energy : diagnostics rows from a precise potential of their own (True) or from
        the run's last force evaluation (False); None: the gravity kind's default
        (:meth:`energy`).
    memory_budget, scratch, page_bytes : the particles in the pages of a scratch file in
        ``scratch``, everything that grows with N within ``memory_budget`` ("4GiB" or bytes;
        residence "pages": gravity="tree", the leapfrog, the CPU, one process; ``page_bytes``
        default: from the budget). Over several MPI ranks (residence "domain_pages") each rank
        pages its own share in a scratch file of its own within ``memory_budget`` a rank.
        Without them the particles live in memory.
    n_leaf, n_crit : the paged tree's leaf and group sizes (pages only).
    """

    def __init__(self, particles: Particles, gravity: str = "direct", integrator: str | None = None, *,
                 memory_budget: str | int | None = None, scratch: str | Path | None = None,
                 page_bytes: str | int | None = None, **kwargs: Any):
        options = _options(memory_budget, scratch, page_bytes)
        run_kw = dict(kwargs, gravity=gravity, integrator=integrator)
        home = residence.resolve(options, run_kw)
        self._run = RUNS[home.name](particles, **_placed(home, options, run_kw))

    @classmethod
    def _of(cls, run: RunLoop) -> Simulation:
        sim = cls.__new__(cls)
        sim._run = run
        return sim

    @classmethod
    def from_model(cls, model: str, n: int, seed: int = 1, gravity: str = "direct", integrator: str | None = None,
                   *, memory_budget: str | int | None = None, scratch: str | Path | None = None,
                   page_bytes: str | int | None = None, **kwargs: Any) -> Simulation:
        """A run of a generated model (plummer, uniform-sphere, uniform-cube; ``gravpipe.ic``):
        in memory the whole model, in pages drawn block by block (plummer and uniform-cube).
        Other parameters as for the constructor."""
        options = _options(memory_budget, scratch, page_bytes)
        run_kw = dict(kwargs, gravity=gravity, integrator=integrator)
        home = residence.resolve(options, run_kw)
        return cls._of(RUNS[home.name].from_model(model, n, seed, **_placed(home, options, run_kw)))

    @classmethod
    def from_snapshot(cls, path: str | Path, gravity: str = "direct", integrator: str | None = None, *,
                      memory_budget: str | int | None = None, scratch: str | Path | None = None,
                      page_bytes: str | int | None = None, **kwargs: Any) -> Simulation:
        """A run of a snapshot's particles (``t0`` defaults to the file's time): read whole in
        memory, block by block into pages. Other parameters as for the constructor."""
        options = _options(memory_budget, scratch, page_bytes)
        run_kw = dict(kwargs, gravity=gravity, integrator=integrator)
        home = residence.resolve(options, run_kw)
        return cls._of(RUNS[home.name].from_snapshot(path, **_placed(home, options, run_kw)))

    @classmethod
    def resume(cls, out: str | Path, threads: int | None = None, comm: Any = None, *,
               memory_budget: str | int | None = None, scratch: str | Path | None = None) -> Simulation:
        """Continue from the newest checkpoint in ``out`` where the run lived (same backend
        and precision as the original run; ``threads`` defaults to the original run's;
        ``comm`` as for the constructor: the same number of ranks continues bit for bit,
        another one correctly). A paged run resumes in pages, ``memory_budget`` and
        ``scratch`` defaulting to the original run's (any budget continues bit for bit)."""
        checkpoint = latest_checkpoint(out)
        home = residence.of_checkpoint(checkpoint, comm)
        kw = home.resume_kwargs(checkpoint, out, comm, _options(memory_budget, scratch))
        return cls._of(RUNS[home.name].resume(checkpoint, out, threads, **kw))

    # ---- the run's state and records ------------------------------------------------------
    @property
    def residence(self) -> str:
        """Where the particles live: "memory", "domains", "pages" or "domain_pages"
        (:data:`gravpipe.residence.RESIDENCES`)."""
        return next(name for name, run in RUNS.items() if isinstance(self._run, run))

    @property
    def time(self) -> float:
        """The current time: every particle is synchronized here (N-body time units)."""
        return self._run.time

    @property
    def grid_origin(self) -> float:
        """Stops at ``grid_origin + k * quantum`` are reached by whole steps; any other stop
        costs one extra force evaluation on all particles and becomes the new origin."""
        return self._run.grid_origin

    @property
    def quantum(self) -> float:
        """The integrator's step on its grid (dt_max for Hermite, dt for leapfrog)."""
        return self._run.quantum

    @property
    def n(self) -> int:
        """The number of particles."""
        return self._run.n

    @property
    def particles(self) -> Particles:
        """A synchronized copy of the particles at ``time`` in the order they were given
        (a paged run gathers them into memory: small runs and tests; over domains, this
        rank's particles only)."""
        return self._run.particles

    @property
    def config(self) -> RunConfig:
        """Everything needed to rebuild the run (stored in each checkpoint)."""
        return self._run.config

    @property
    def history(self) -> list[dict]:
        """The diagnostics rows so far (those of diagnostics.csv)."""
        return self._run.history

    @property
    def timings(self) -> Timings:
        """The time breakdown of the steps taken by this process (start-up excluded)."""
        return self._run.timings

    @property
    def startup_seconds(self) -> float:
        """Wall time of the start-up (the first force evaluation on all particles)."""
        return self._run.startup_seconds

    @property
    def provider(self) -> Any:
        """The force source (a :class:`gravpipe.Pipeline`, a :class:`gravpipe.tree.TreeGravity`,
        the MPI forms, or the paged tree :class:`gravpipe.ooc.OutOfCore`): counters, threads."""
        return self._run.provider

    @property
    def backend(self) -> str:
        """The backend that computes the forces ("cpu", ...), as chosen by ``backend="auto"``."""
        return self._run.backend

    @property
    def backend_detail(self) -> str:
        """What the backend runs on, e.g. "isa=avx2, threads=2", and where the particles live."""
        return self._run.backend_detail

    @property
    def comm(self) -> Any:
        """The mpi4py communicator of the ranks (None in one process)."""
        return self._run.comm

    def summary_lines(self) -> list[str]:
        """Lines a run report adds after the time breakdown (MPI balance, the pages' traffic)."""
        return self._run.summary_lines()

    # ---- evolution, diagnostics, files ----------------------------------------------------
    def evolve(self, t_end: float, snapshot_every: float | None = None, checkpoint_every: float | None = None,
               out: str | Path | None = None, progress: bool = True, overwrite: bool = False) -> None:
        """Advance to ``t_end``, writing files to ``out`` (see :meth:`RunLoop.evolve`)."""
        self._run.evolve(t_end, snapshot_every, checkpoint_every, out, progress, overwrite)

    def energy(self, precise: bool | None = None) -> diagnostics.Energy:
        """Kinetic, potential and total energy now (see the run's ``energy``: the run's own
        potential, or with ``precise`` a float64 one of its own)."""
        return self._run.energy(precise)

    def energy_error(self) -> float:
        """Relative energy error against the start of the run (see :meth:`RunLoop.energy_error`)."""
        return self._run.energy_error()

    def write_snapshot(self, path: str | Path) -> Path:
        """The particles at ``time`` as a snapshot (GADGET-4 layout, atomic); returns the path."""
        return self._run.write_snapshot(path)

    def write_checkpoint(self, path: str | Path) -> Path:
        """A snapshot plus the exact state that continues the run bit for bit."""
        return self._run.write_checkpoint(path)

    # ---- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Release what the run holds outside this process's arrays (a paged run's scratch
        file; it cannot step any more). Nothing for a run in memory."""
        self._run.close()

    def __enter__(self) -> Simulation:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Simulation(n={self.n}, t={self.time:g}, residence={self.residence!r}, {self.backend_detail})"
