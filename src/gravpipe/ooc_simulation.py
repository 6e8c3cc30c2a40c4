"""A run whose particles live in the pages of a scratch file (the residence "pages" of
:mod:`gravpipe.residence`): the leapfrog with the treecode out of core, with the in-memory
run's snapshots, checkpoints, diagnostics and resume.

    sim = gp.Simulation(gp.ic.plummer(100_000, seed=1), gravity="tree", eps=1/64, dt=1/128,
                        memory_budget="256MiB", scratch="/scratch")     # its run: a PagedRun
    sim.evolve(1.0, snapshot_every=0.25, checkpoint_every=0.5, out="run/")
    sim = gp.Simulation.resume("run/")                                 # bit for bit

The particles live in the pages of a :class:`gravpipe.ooc.OutOfCore` store, never whole in
memory: initial conditions come block by block (:meth:`PagedRun.from_snapshot`,
:meth:`~PagedRun.from_blocks`, :meth:`~PagedRun.from_model`, or in-memory ``Particles``),
snapshots and checkpoints are streamed from the pages (chunked HDF5, the GADGET-4 layout),
and the diagnostics rows are computed in passes over the pages (``streamed_diagnostics``),
in blocks of a small share of the budget (:func:`block_rows`).

The same numbers as in memory: for the same particles, parameters and thread count every
step is the in-memory tree leapfrog's bit for bit (``ooc``), and a run resumed from a
checkpoint continues bit for bit, under any memory budget. The energy of a row uses the
potential of the run's own last force evaluation (the store's ``pot``), as in memory; with
``precise_energy`` the in-memory run's precise potential instead: a second tree at
``gravity.DIAGNOSTICS_THETA`` with float64 lists (written to the store's ``pot_check`` field,
so the run's forces stay).

What the residence refuses, by design: several processes (no MPI), another integrator than
the leapfrog, another backend than the CPU; files are in the store's curve order (every
reader uses ``ParticleIDs``); ``particles`` gathers every particle into memory (small runs
and tests).
"""

from __future__ import annotations

import json
import math
import os
import time as _time
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from gravpipe import diagnostics, integrators, streamed_diagnostics
from gravpipe import gravity as gravity_registry
from gravpipe import io as gio
from gravpipe._validate import check_positive_scalar
from gravpipe.ooc import OutOfCore, StepTimes
from gravpipe.particles import Particles
from gravpipe.run_loop import LAGRANGIAN_FRACTIONS, RunConfig, RunLoop, Timings
from gravpipe.store import check_scratch_dir, format_bytes, page_bytes_for_budget, parse_byte_size
from gravpipe.tree_params import DEFAULT_N_CRIT, DEFAULT_N_LEAF

__all__ = ["PagedRun"]

#: the share of the memory budget that the blocks of a pass over the pages (diagnostics rows,
#: snapshots, checkpoints, reading a file into the pages) may hold at once: they come on top
#: of the store's budget, so they stay a small part of it
BLOCK_SHARE = 1 / 32
#: bytes a row of such a block takes with numpy's temporaries (pos, vel, mass, id, one more
#: field, and the intermediates of the finiteness checks and the radii)
BLOCK_ROW_BYTES = 256


def block_rows(budget: int) -> int:
    """Rows of the blocks a pass over the pages reads at once under a memory budget (bytes):
    ~BLOCK_SHARE of it, 4096 rows at least (a 24 MiB budget: 4096 rows, ~1 MiB), 1 << 20 at
    most (N = 1e8 in 4 GiB: ~0.5 M rows, ~130 MiB)."""
    return int(min(1 << 20, max(1 << 12, budget * BLOCK_SHARE // BLOCK_ROW_BYTES)))


class PagedRun(RunLoop):
    """A leapfrog run of the treecode out of core (see the module docstring).

    Built by ``Simulation(particles, gravity="tree", memory_budget=..., scratch=...)``, by
    :meth:`from_snapshot` (an IC file of any N, read block by block) or :meth:`from_blocks`
    (IC blocks, e.g. ``ic.model_blocks``), and by :meth:`resume`. Parameters as for
    ``Simulation`` (eps, G, precision, threads, dt, t0, theta) plus ``memory_budget``
    ("4GiB" or bytes: everything that grows with N), ``scratch`` (directory of the scratch
    file), ``page_bytes`` (default: from the budget, gravpipe.store.page_bytes_for_budget),
    ``n_leaf`` and ``n_crit`` (the tree's). Close it (or use ``with``) to remove the scratch file; a run
    that fails removes it too.
    """

    # ---- construction ---------------------------------------------------------------------
    def __init__(self, particles: Particles, scratch: str | os.PathLike, memory_budget: str | int, **kwargs: Any):
        if not isinstance(particles, Particles):
            raise ValueError("particles: expected gravpipe.Particles (see gravpipe.ic or gravpipe.io.read)")
        settings = _Settings.check(scratch, memory_budget, **kwargs)
        run = OutOfCore.from_particles(particles, scratch, settings.budget, block_rows(settings.budget),
                                       **settings.store_kwargs())
        self._start(run, settings, restart=None)

    @classmethod
    def from_blocks(cls, blocks: Iterable[Particles], n: int, scratch: str | os.PathLike, memory_budget: str | int,
                    **kwargs: Any) -> PagedRun:
        """A run of ``n`` particles arriving as consecutive ``Particles`` blocks
        (``ic.plummer_blocks``, ``ic.model_blocks``): initial conditions of any N drawn
        straight into the pages."""
        settings = _Settings.check(scratch, memory_budget, **kwargs)
        run = OutOfCore.from_blocks(blocks, n, scratch, settings.budget, **settings.store_kwargs())
        return cls._started(run, settings)

    @classmethod
    def from_snapshot(cls, path: str | os.PathLike, scratch: str | os.PathLike, memory_budget: str | int,
                      **kwargs: Any) -> PagedRun:
        """A run of the particles of a GADGET-layout snapshot, read block by block; ``t0``
        defaults to the file's time."""
        if kwargs.get("t0") is None:
            with gio.open_blocks(path) as snap:
                kwargs["t0"] = snap.time
        settings = _Settings.check(scratch, memory_budget, **kwargs)
        run = OutOfCore.from_snapshot(path, scratch, settings.budget, block_rows(settings.budget),
                                      **settings.store_kwargs())
        return cls._started(run, settings)

    @classmethod
    def from_model(cls, model: str, n: int, seed: int, scratch: str | os.PathLike, memory_budget: str | int,
                   **kwargs: Any) -> PagedRun:
        """A run of a generated model drawn block by block into the pages (a name of
        ``ic.BLOCK_MODELS``)."""
        from gravpipe import ic
        if model not in ic.BLOCK_MODELS:
            raise ValueError(f"model {model!r}: out of core draws models block by block: {', '.join(ic.BLOCK_MODELS)}")
        return cls.from_blocks(ic.model_blocks(model, n, seed=seed), n, scratch, memory_budget, **kwargs)

    @classmethod
    def _started(cls, run: OutOfCore, settings: _Settings) -> PagedRun:
        sim = cls.__new__(cls)
        sim._start(run, settings, restart=None)
        return sim

    def _start(self, run: OutOfCore, settings: _Settings,
               restart: tuple[RunConfig, dict[str, Any], list[dict]] | None) -> None:
        """Evaluate the first forces (a new run) and record the first row; or take over a
        resumed run's config, step counters and history. Closes ``run`` on failure."""
        self._run = run
        self._kind = gravity_registry.GRAVITY["tree"]
        self._settings = settings
        self._steps_total = StepTimes()
        self._startup_seconds = 0.0
        self._interactions = 0
        self._run_dir = None
        try:
            if restart is None:
                run.dt, run.t = settings.dt, settings.t0
                t0 = _time.perf_counter()
                run.forces(next_dt=settings.dt)  # and the first step's kick-drift and sort prepared
                self._startup_seconds = _time.perf_counter() - t0
                self._precise_energy = settings.precise_energy
                energy0 = self._energy_now()
                self.config = RunConfig("tree", "leapfrog", {"dt": settings.dt}, settings.eps, settings.G, "cpu",
                                        settings.precision, run.threads, settings.t0, energy0.total,
                                        theta=settings.theta, kinetic0=energy0.kinetic,
                                        potential0=energy0.potential, out_of_core=settings.record(),
                                        precise_energy=settings.precise_energy)
                self.history: list[dict] = []
                self._steps_before = (0, 0)
                self._record(energy0)
            else:
                self.config, state, self.history = restart
                self._precise_energy = self.config.precise_energy
                run.dt = settings.dt  # its steps and grid origin came with the checkpoint
                # every checkpoint records a row first: its counts are the run's so far
                last = self.history[-1] if self.history else {}
                self._steps_before = (int(last.get("steps", 0)), int(last.get("particle_steps", 0)))
        except BaseException:
            run.close()
            raise

    # ---- state ---------------------------------------------------------------------------
    @property
    def time(self) -> float:
        """The current time (N-body time units): grid_origin + steps * dt, as in core."""
        return self._run.t

    @property
    def grid_origin(self) -> float:
        return self._run.grid_origin

    @property
    def quantum(self) -> float:
        """The leapfrog's step dt."""
        return self.config.params["dt"]

    @property
    def n(self) -> int:
        return self._run.n

    @property
    def backend(self) -> str:
        return "cpu"

    @property
    def backend_detail(self) -> str:
        r = self._run
        return (f"isa={r.params['isa']}, threads={r.threads}, out of core: budget {format_bytes(r.plan.budget)}, "
                f"cache {format_bytes(r.plan.cache)}, pages of {format_bytes(self._settings.page_bytes)} in "
                f"{self._settings.scratch}")

    @property
    def provider(self) -> OutOfCore:
        """The out-of-core tree and its store (counters: ``.stats``, ``.last`` step times)."""
        return self._run

    @property
    def particles(self) -> Particles:
        """Every particle at ``time`` in the order they were given, gathered into memory
        (N x 64 bytes: for small runs and tests)."""
        r = self._run
        return Particles(r.gather("pos"), r.gather("vel"), r.gather("mass"), r.gather("id"))

    @property
    def timings(self) -> Timings:
        """Time of the steps of this process (start-up excluded): host = kick-drift and the
        external sort; compute = build, moments, walk + forces (the closing kick rides on the walk)."""
        s = self._steps_total
        steps = self._steps_this_process
        return Timings(host=s.kick_drift + s.sort, transfer=0.0,
                       compute=s.build + s.moments + s.walk_forces, total=s.total, steps=steps,
                       particle_steps=steps * self.n, interactions=self._interactions)

    @property
    def startup_seconds(self) -> float:
        return self._startup_seconds

    _steps_this_process = 0

    # ---- evolution (the loop is RunLoop.evolve) ------------------------------------------
    def evolve(self, t_end: float, snapshot_every: float | None = None, checkpoint_every: float | None = None,
               out: str | Path | None = None, progress: bool = True, overwrite: bool = False) -> None:
        """As :meth:`gravpipe.Simulation.evolve`. A failure while stepping or writing (a full
        scratch disk, a corrupt page) closes the run: its scratch file is removed, the files
        already written (checkpoints) stay as they were."""
        if self._run.closed:
            raise ValueError("this out-of-core run is closed (its scratch file is gone); resume it from a "
                             "checkpoint")
        try:
            super().evolve(t_end, snapshot_every, checkpoint_every, out, progress, overwrite)
        except BaseException:
            if self._stepping:  # not a bad argument, which leaves the run intact
                self.close()
            raise
        finally:
            self._stepping = False

    _stepping = False  # set once evolve has started to step (from then on a failure closes the run)

    def _advance_to(self, t: float) -> None:
        """Whole steps of dt to ``t``; off the grid, one shortened step to ``t`` that
        becomes the new grid origin: the integrator's evolve_to."""
        self._stepping = True
        self._step(self._run.evolve_to(t))

    def _step(self, st: StepTimes) -> None:
        """Add the steps of ``st`` (evolve_to's sums) to this process's."""
        total = self._steps_total
        for f in ("kick_drift", "sort", "build", "moments", "walk_forces"):
            setattr(total, f, getattr(total, f) + getattr(st, f))
        total.bytes_read += st.bytes_read
        total.bytes_written += st.bytes_written
        self._interactions += st.interactions
        self._steps_this_process += st.steps

    # ---- diagnostics ---------------------------------------------------------------------
    def _blocks(self, fields: list[str]):
        rows = block_rows(self._settings.budget)
        return lambda: (blk for _, blk in self._run.blocks(fields, rows))

    def _energy_now(self, precise: bool | None = None) -> diagnostics.Energy:
        pot = "pot"
        if self._precise_energy if precise is None else precise:
            self._run.diagnostic_potential(gravity_registry.DIAGNOSTICS_THETA)
            pot = "pot_check"
        s = streamed_diagnostics.sums(self._blocks(["mass", "vel", pot]), {
            "kinetic": streamed_diagnostics.kinetic_block,
            "potential": lambda b: 0.5 * float(np.dot(b["mass"], b[pot]))})
        return diagnostics.Energy(kinetic=s["kinetic"], potential=s["potential"], total=s["kinetic"] + s["potential"])

    def energy(self, precise: bool | None = None) -> diagnostics.Energy:
        """Kinetic, potential and total energy now, in passes over the pages: the potential
        of the run's last force evaluation, or with ``precise`` (default: the run's
        ``precise_energy``) the diagnostic tree's, as :meth:`gravpipe.Simulation.energy`."""
        return self._energy_now(precise)

    def _record(self, energy: diagnostics.Energy | None = None) -> None:
        e = energy if energy is not None else self._energy_now()
        radii = streamed_diagnostics.lagrangian_radii(self._blocks(["pos", "mass"]), LAGRANGIAN_FRACTIONS)
        self._append_row(e, radii)

    # ---- files ---------------------------------------------------------------------------
    def _parameters(self) -> dict[str, Any]:
        c = self.config
        return {"integrator": c.integrator, "gravity": c.gravity, "eps": c.eps, "G": c.G,
                "precision": c.precision, "backend": "cpu", "out_of_core": 1,
                "run_config": json.dumps(asdict(c))}

    def write_snapshot(self, path: str | Path) -> Path:
        """The particles at ``time`` as a GADGET-layout snapshot streamed from the pages
        (store order; written atomically); returns the path."""
        self._run.write_snapshot(path, block_rows(self._settings.budget), parameters=self._parameters())
        return Path(path)

    def write_checkpoint(self, path: str | Path) -> Path:
        """A snapshot plus the exact state (the forces of the last evaluation, the caller's
        order, the curve keys, the step counters) and the diagnostics history, streamed."""
        state: dict[str, Any] = {}  # the integrator adds its steps and grid origin
        keys = [k for k in self.history[0] if not k.startswith("seconds_")]
        for k in keys:
            state[f"history_{k}"] = np.array([row[k] for row in self.history])
        self._run.write_checkpoint(path, self._parameters(), state, block_rows(self._settings.budget))
        return Path(path)

    @classmethod
    def resume(cls, checkpoint: Path, out: str | Path, threads: int | None = None, *,
               scratch: str | os.PathLike | None = None, memory_budget: str | int | None = None) -> PagedRun:
        """Continue from ``checkpoint`` of the run in ``out``, read block by block into a new
        store: bit for bit the uninterrupted run (with the original thread count, the
        default; any budget, scratch directory or page size). ``scratch`` and
        ``memory_budget`` default to the original run's."""
        path = checkpoint
        with gio.open_blocks(path) as snap:
            params, scalars = snap.parameters, snap.integrator_scalars
        if scalars is None or "run_config" not in params:
            raise ValueError(f"{path}: not a gravpipe checkpoint (no integrator state)")
        raw = json.loads(params["run_config"])
        if not raw.get("out_of_core"):
            raise ValueError(f"{path}: an in-core run's checkpoint; resume it with Simulation.resume")
        config = RunConfig(**raw)
        ooc = dict(config.out_of_core)
        history_cols = {k[len("history_"):]: v for k, v in scalars.items() if k.startswith("history_")}
        rows = len(next(iter(history_cols.values()))) if history_cols else 0
        history = [{k: v[i].item() for k, v in history_cols.items()} for i in range(rows)]
        settings = _Settings.check(scratch if scratch is not None else ooc["scratch"],
                                   memory_budget if memory_budget is not None else ooc["memory_budget"],
                                   eps=config.eps, G=config.G, precision=config.precision,
                                   threads=threads if threads is not None else config.threads,
                                   dt=config.params["dt"], t0=config.t0, theta=config.theta,
                                   page_bytes=ooc["page_bytes"], n_leaf=ooc["n_leaf"], n_crit=ooc["n_crit"])
        run = OutOfCore.from_checkpoint(path, settings.scratch, settings.budget, block_rows(settings.budget),
                                        **settings.store_kwargs())
        sim = cls.__new__(cls)
        sim._start(run, settings, restart=(config, scalars, history))
        sim._run_dir = Path(out).resolve()
        return sim

    def summary_lines(self) -> list[str]:
        """Lines a report adds after the time breakdown: the stages and the store's traffic."""
        s, t = self._run.stats, self._steps_total
        return [f"out of core, stages summed over the steps: kick-drift {t.kick_drift:.2f} s, sort {t.sort:.2f} s, "
                f"build {t.build:.2f} s, moments {t.moments:.2f} s, walk+forces+kick {t.walk_forces:.2f} s; "
                f"store read {format_bytes(int(s['bytes_read']))}, written {format_bytes(int(s['bytes_written']))}, "
                f"{s['misses']:,} misses, {float(s['stall_seconds']):.2f} s stalled"]

    # ---- lifetime ------------------------------------------------------------------------
    def close(self) -> None:
        """Remove the scratch file (the run cannot step any more)."""
        self._run.close()

    def __repr__(self) -> str:
        return f"PagedRun(n={self.n}, t={self.time:g}, {self._run!r})"


class _Settings:
    """The checked parameters of an out-of-core run."""

    def __init__(self, **kw: Any):
        self.__dict__.update(kw)

    @classmethod
    def check(cls, scratch: str | os.PathLike, memory_budget: str | int, *, eps: float = 1 / 64, G: float = 1.0,
              precision: str = "mixed", threads: int | None = None, dt: float | None = None, t0: float = 0.0,
              theta: float | None = None, page_bytes: str | int | None = None, n_leaf: int = DEFAULT_N_LEAF,
              n_crit: int = DEFAULT_N_CRIT, precise_energy: bool | None = None) -> _Settings:
        if scratch is None or memory_budget is None:
            raise ValueError("memory_budget and scratch go together (an out-of-core run needs both)")
        check_scratch_dir(scratch)
        _, params = integrators.resolve("leapfrog", {"dt": dt})
        _, gparams = gravity_registry.resolve("tree", {"theta": theta})
        if not math.isfinite(float(t0)):
            raise ValueError(f"t0: must be finite, got {t0!r}")
        page = parse_byte_size(page_bytes) if page_bytes is not None else page_bytes_for_budget(memory_budget)
        return cls(scratch=str(scratch), budget=parse_byte_size(memory_budget), page_bytes=page,
                   eps=check_positive_scalar("eps", eps), G=float(G), precision=precision, threads=threads,
                   dt=float(params["dt"]), t0=float(t0), theta=float(gparams["theta"]), n_leaf=int(n_leaf),
                   n_crit=int(n_crit), precise_energy=gravity_registry.GRAVITY["tree"].precise_rows
                   if precise_energy is None else bool(precise_energy))

    def store_kwargs(self) -> dict[str, Any]:
        """The OutOfCore constructor's parameters."""
        return dict(eps=self.eps, G=self.G, theta=self.theta, threads=self.threads, precision=self.precision,
                    page_bytes=self.page_bytes, n_leaf=self.n_leaf, n_crit=self.n_crit)

    def record(self) -> dict[str, Any]:
        """What RunConfig.out_of_core keeps (a resumed run's defaults)."""
        return {"memory_budget": self.budget, "scratch": os.path.abspath(self.scratch), "page_bytes": self.page_bytes,
                "n_leaf": self.n_leaf, "n_crit": self.n_crit}
