"""Where a run's particles live, in one table (the twin of :mod:`gravpipe.gravity` and
:mod:`gravpipe.integrators`).

- "memory": arrays of this process (any gravity, integrator and backend; MPI ranks);
- "pages": the pages of a scratch file under a memory budget (``memory_budget``, ``scratch``,
  ``page_bytes``): the treecode's leapfrog on the CPU in one process, bit for bit the
  in-memory run (:mod:`gravpipe.ooc_simulation`).

:class:`gravpipe.Simulation`, ``gravpipe run`` and resume read this table; no other module
asks where particles live.

    home = residence.resolve({"memory_budget": "2GiB", "scratch": "/scratch"})
    run = home.start(particles, gravity="tree", eps=1/64)     # a PagedRun
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from gravpipe import io as gio
from gravpipe.memory_run import MemoryRun
from gravpipe.ooc_simulation import PagedRun
from gravpipe.run_loop import RunLoop

#: the Simulation keywords that choose a residence (None: not given)
OPTIONS = ("memory_budget", "scratch", "page_bytes")


@dataclass(frozen=True)
class Residence:
    """One place for a run's particles.

    options: the keywords of :data:`OPTIONS` it takes (given: a run lives here);
    limits: {run keyword: the values it allows} (None among them: not given), checked
    before any work; run_class: the run it builds, with the constructors ``(particles,
    **kw)``, ``from_model(model, n, seed, **kw)``, ``from_snapshot(path, **kw)`` and
    ``resume(checkpoint, out, threads, **kw)``.
    """

    name: str
    description: str
    options: tuple[str, ...]
    limits: dict[str, tuple[Any, ...]]
    run_class: type[RunLoop]
    #: whether a checkpoint's run config (a dict) is of a run that lived here
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
            if value not in allowed:
                shown = " or ".join(f"{key}={a!r}" for a in allowed if a is not None) or f"no {key}"
                raise ValueError(f"{key}={value!r}: out of core (memory_budget) runs {shown} only: the leapfrog "
                                 "with the tree, on the CPU, in one process")

    def _kwargs(self, options: dict[str, Any], run_kwargs: dict[str, Any]) -> dict[str, Any]:
        """The run class's keywords: the options this residence takes, the run's keywords
        without those it fixes (checked to be their one value or left out)."""
        self.check(options, run_kwargs)
        kw = {k: v for k, v in run_kwargs.items() if k not in self.limits}
        kw.update({k: options[k] for k in self.options if options.get(k) is not None})
        return kw

    def start(self, particles: Any, options: dict[str, Any], **run_kwargs: Any) -> RunLoop:
        """A new run of ``particles``: its first forces evaluated, its first row recorded."""
        return self.run_class(particles, **self._kwargs(options, run_kwargs))

    def from_model(self, model: str, n: int, seed: int, options: dict[str, Any], **run_kwargs: Any) -> RunLoop:
        """A new run of a generated model (``ic``), drawn as this residence holds it."""
        return self.run_class.from_model(model, n, seed, **self._kwargs(options, run_kwargs))

    def from_snapshot(self, path: str | Path, options: dict[str, Any], **run_kwargs: Any) -> RunLoop:
        """A new run of a snapshot's particles, read as this residence holds them."""
        return self.run_class.from_snapshot(path, **self._kwargs(options, run_kwargs))

    def resume(self, checkpoint: Path, out: str | Path, threads: int | None, comm: Any,
               options: dict[str, Any]) -> RunLoop:
        """The run of ``checkpoint`` (the newest of ``out``), continued here."""
        if "comm" in self.limits and comm not in self.limits["comm"]:
            raise ValueError(f"{checkpoint}: an out-of-core run resumes in one process (comm must be None)")
        given = {k: v for k, v in options.items() if v is not None}
        if "page_bytes" in given:
            raise ValueError("page_bytes: a resumed out-of-core run keeps its page size")
        for key in given:
            if key not in self.options:
                raise ValueError(f"{checkpoint}: the run in {out} is in memory; {key} applies to out-of-core runs only")
        extra = {"comm": comm} if "comm" not in self.limits else {}
        return self.run_class.resume(checkpoint, out, threads, **extra, **given)


RESIDENCES: dict[str, Residence] = {
    "memory": Residence(
        "memory", "the particles as arrays of this process (or of each MPI rank)", options=(), limits={},
        run_class=MemoryRun, holds=lambda config: not config.get("out_of_core")),
    "pages": Residence(
        "pages", "the particles in the pages of a scratch file, everything that grows with N within a memory budget",
        options=OPTIONS,
        limits={"gravity": ("tree",), "integrator": (None, "leapfrog"), "backend": (None, "auto", "cpu"),
                "comm": (None,), "eta": (None,), "eta_s": (None,), "dt_max": (None,)},
        run_class=PagedRun, holds=lambda config: bool(config.get("out_of_core"))),
}


def resolve(options: dict[str, Any]) -> Residence:
    """The residence the options choose: "pages" when any of :data:`OPTIONS` is given
    (memory_budget and scratch then both needed), else "memory"."""
    if any(options.get(k) is not None for k in OPTIONS):
        return RESIDENCES["pages"]
    return RESIDENCES["memory"]


def of_checkpoint(path: Path) -> Residence:
    """The residence of the run that wrote checkpoint ``path`` (its /Parameters: run_config);
    a multi-file set (a folder: MPI ranks) is a run in memory."""
    raw = None
    if path.is_file():
        with gio.open_blocks(path) as snap:
            raw = snap.parameters.get("run_config")
    config = json.loads(raw) if raw else {}
    return next(r for r in RESIDENCES.values() if r.holds(config))
