"""Where a run's particles live, in one table (the twin of :mod:`gravpipe.gravity` and
:mod:`gravpipe.integrators`).

- "memory": arrays of this process (any gravity, integrator and backend);
- "domains": over MPI ranks, each rank holding only its share (distributed state,
  :class:`~gravpipe.domain_run.DomainRun`): the treecode's curve domains, or direct
  summation's N/P j-particles;
- "pages": the pages of a scratch file under a memory budget (``memory_budget``, ``scratch``,
  ``page_bytes``): the treecode's leapfrog on the CPU in one process, bit for bit the
  in-memory run;
- "domain_pages": over MPI ranks, each rank paging its share in a scratch file of its own
  under its ``memory_budget`` (:class:`~gravpipe.paged_domain_run.PagedDomainRun`): the
  treecode's leapfrog on the CPU, bit for bit the "domains" run on the same ranks.

The options a user gives and the ranks it runs on choose the entry (:func:`resolve`);
:class:`gravpipe.Simulation` builds the run of that name (``MemoryRun``, ``DomainRun``, ``PagedRun``,
``PagedDomainRun``), :class:`gravpipe.Tree` the tree
(in memory, or over a paged store), ``gravpipe run`` and resume pass the options through.
No other module asks where particles live.

    home = residence.resolve({"memory_budget": "2GiB", "scratch": "/scratch"}, {"gravity": "tree"})
    kw = home.run_kwargs(options, {"gravity": "tree", "eps": 1/64})   # checked; what the run takes
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from gravpipe import io as gio

#: the Simulation keywords that choose a residence (None: not given)
OPTIONS = ("memory_budget", "scratch", "page_bytes")


@dataclass(frozen=True)
class Residence:
    """One place for a run's particles.

    options: the keywords of :data:`OPTIONS` it takes (given: the particles live here);
    limits: {run keyword: the values it allows} (None among them: not given), checked before
    any work and not passed on (the place fixes them); holds(run config dict): whether a
    checkpoint's run lived here.
    """

    name: str
    description: str
    options: tuple[str, ...]
    limits: dict[str, tuple[Any, ...]]
    holds: Callable[[dict], bool]

    def check(self, options: dict[str, Any], run_kwargs: dict[str, Any]) -> None:
        """ValueError naming a keyword this residence does not take or a value it cannot run."""
        for key, value in options.items():
            if value is not None and key not in self.options:
                raise ValueError(f"{key}: only for a run out of core (give memory_budget and scratch)")
        for key in self.options:
            if key in ("memory_budget", "scratch") and options.get(key) is None:
                raise ValueError("memory_budget and scratch go together (an out-of-core run needs both)")
        for key, allowed in self.limits.items():
            value = run_kwargs.get(key)
            if key == "comm":
                _check_one_process(self, value)
                continue
            if value not in allowed:
                shown = " or ".join(f"{key}={a!r}" for a in allowed if a is not None) or f"no {key}"
                where = "in one process" if "comm" in self.limits else "each rank paging its share"
                raise ValueError(f"{key}={value!r}: out of core (memory_budget) runs {shown} only: the leapfrog "
                                 f"with the tree, on the CPU, {where}")

    def run_kwargs(self, options: dict[str, Any], run_kwargs: dict[str, Any]) -> dict[str, Any]:
        """The keywords of the run (or tree) that lives here, checked: the caller's without
        those this residence fixes, with the options it takes."""
        self.check(options, run_kwargs)
        kw = {k: v for k, v in run_kwargs.items() if k not in self.limits}
        kw.update({k: options[k] for k in self.options if options.get(k) is not None})
        return kw

    def resume_kwargs(self, checkpoint: Path, out: str | Path, comm: Any, options: dict[str, Any]) -> dict[str, Any]:
        """The keywords a resume of ``checkpoint`` (in ``out``) passes to the run's ``resume``:
        the options given (each checked: this residence takes it, a paged run keeps its page
        size) and ``comm`` where a run here can have one."""
        if "comm" in self.limits:
            _check_one_process(self, comm, f"{checkpoint}: ")
        given = {k: v for k, v in options.items() if v is not None}
        if "page_bytes" in given:
            raise ValueError("page_bytes: a resumed out-of-core run keeps its page size")
        for key in given:
            if key not in self.options:
                raise ValueError(f"{checkpoint}: the run in {out} is in memory; {key} applies to out-of-core runs only")
        return ({"comm": comm} if "comm" not in self.limits else {}) | given


def _check_one_process(home: Residence, comm: Any, where: str = "") -> None:
    """ValueError unless a run that lives in ``home`` (whose limits allow only comm=None) has
    one process: ``comm`` given, or mpiexec's several processes (each would otherwise run
    the whole simulation on its own, writing the same files)."""
    from gravpipe.parallel.comm import resolve_comm

    resolved = resolve_comm(comm)
    if resolved is not None:
        raise ValueError(f"{where}a run out of core in one process resumes in one process; this one has "
                         f"{resolved.Get_size()} MPI ranks: resume it without mpiexec (a run out of core over "
                         "ranks starts under mpiexec with --memory-budget and --scratch)")


RESIDENCES: dict[str, Residence] = {
    "memory": Residence(
        "memory", "the particles as arrays of this process (or of each MPI rank)", options=(), limits={},
        holds=lambda config: not config.get("out_of_core")),
    "domains": Residence(
        "domains", "over MPI ranks, each rank holding only its share of the particles (distributed state)",
        options=(), limits={}, holds=lambda config: bool(config.get("distributed"))),
    "pages": Residence(
        "pages", "the particles in the pages of a scratch file, everything that grows with N within a memory budget",
        options=OPTIONS,
        limits={"gravity": ("tree",), "integrator": (None, "leapfrog"), "backend": (None, "auto", "cpu"),
                "comm": (None,), "eta": (None,), "eta_s": (None,), "dt_max": (None,)},
        holds=lambda config: bool(config.get("out_of_core")) and not config.get("distributed")),
    "domain_pages": Residence(
        "domain_pages", "over MPI ranks, each rank's share in the pages of its own scratch file within its memory "
        "budget", options=("memory_budget", "scratch"),
        limits={"gravity": ("tree",), "integrator": (None, "leapfrog"), "backend": (None, "auto", "cpu"),
                "eta": (None,), "eta_s": (None,), "dt_max": (None,)},
        holds=lambda config: bool(config.get("out_of_core")) and bool(config.get("distributed"))),
}


def resolve(options: dict[str, Any], run_kwargs: dict[str, Any] | None = None) -> Residence:
    """The residence the options choose: "pages" when any of :data:`OPTIONS` is given
    (memory_budget and scratch then both needed), "domain_pages" for such a run over
    several MPI ranks; "domains" for a run over several MPI ranks (``run_kwargs``' comm, or
    mpiexec's); else "memory"."""
    if any(options.get(k) is not None for k in OPTIONS):
        several = _several_ranks((run_kwargs or {}).get("comm"))
        return RESIDENCES["domain_pages" if several else "pages"]
    if _several_ranks((run_kwargs or {}).get("comm")):
        return RESIDENCES["domains"]
    return RESIDENCES["memory"]


def _several_ranks(comm: Any) -> bool:
    from gravpipe.parallel.comm import resolve_comm

    return resolve_comm(comm) is not None


def of_checkpoint(path: Path, comm: Any = None) -> Residence:
    """Where a resume of checkpoint ``path`` runs: in pages when an out-of-core run wrote it
    (its /Parameters: run_config); on several ranks (``comm``, or mpiexec's) over domains,
    whatever wrote it; else in memory (a set written over domains, resumed in one process,
    is read whole)."""
    raw = None
    first = path
    if path.is_dir():
        members = gio.set_members(path)
        first = members[0] if members else path
    if first.is_file():
        with gio.open_blocks(first, member=path.is_dir()) as snap:
            raw = snap.parameters.get("run_config")
    config = json.loads(raw) if raw else {}
    if RESIDENCES["domain_pages"].holds(config):
        if not _several_ranks(comm):
            raise ValueError(f"{path}: a run out of core over MPI ranks resumes over ranks (mpiexec -n P gravpipe "
                             "run --resume ..., each rank paging its share)")
        return RESIDENCES["domain_pages"]
    if RESIDENCES["pages"].holds(config):
        return RESIDENCES["pages"]
    if _several_ranks(comm):
        return RESIDENCES["domains"]
    return RESIDENCES["memory"]
