"""Simulation: gravity x integrator x backend, the evolve loop, snapshots and checkpoints.

    sim = Simulation(gp.ic.plummer(1024, seed=1), integrator="hermite", eps=1/64)
    sim.evolve(t_end=10.0, snapshot_every=1.0, checkpoint_every=1.0, out="run1/")
    print(sim.energy_error(), sim.timings)

A run directory holds ``snapshot_NNNN.h5`` (GADGET-4 layout), ``checkpoint_NNNN.h5`` (the
same plus the exact integrator state) and ``diagnostics.csv``; every file is written
atomically. ``Simulation.resume(dir)`` continues from the newest checkpoint and reproduces
the uninterrupted run bit for bit (same backend, precision and thread count).
"""

from __future__ import annotations

import csv
import io as _stdio
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gravpipe import diagnostics, integrators
from gravpipe import io as gio
from gravpipe._validate import check_positive_scalar
from gravpipe.io.atomic import atomic_open
from gravpipe.particles import Particles
from gravpipe.backends import resolve_backend
from gravpipe.pipeline import Pipeline
from gravpipe.tree import DEFAULT_THETA, Tree, TreeGravity

LAGRANGIAN_FRACTIONS = (0.01, 0.1, 0.5, 0.9)
# Tree runs measure their potential energy with a tree of this opening angle (float64 list
# kernels, quadrupoles): O(N log N) where a float64 direct sum would cost O(N^2) per
# diagnostics row, with a relative error of W ~1e-6 (tests/test_tree.py).
DIAGNOSTICS_THETA = 0.25
CHECKPOINT_GLOB = "checkpoint_*.h5"


@dataclass
class Timings:
    """Wall time of the run so far, split as in the GRAPE time model (seed 000, eqs. 5-14).

    host: predict, correct, schedule, bookkeeping (T_host); transfer: pipeline j/i writes
    and result reads including format conversion (T_comm); compute: the force kernels
    (T_grape). Seconds; ``steps`` are blocks (Hermite) or shared steps (leapfrog).
    """

    host: float = 0.0
    transfer: float = 0.0
    compute: float = 0.0
    total: float = 0.0
    steps: int = 0
    particle_steps: int = 0
    interactions: int = 0

    @property
    def host_transfer_share(self) -> float:
        denom = self.host + self.transfer + self.compute
        return (self.host + self.transfer) / denom if denom > 0 else 0.0

    @property
    def particle_steps_per_second(self) -> float:
        return self.particle_steps / self.total if self.total > 0 else 0.0

    def __str__(self) -> str:
        return (f"steps {self.steps:,}, particle steps {self.particle_steps:,} "
                f"({self.particle_steps_per_second:.3g}/s); host {self.host:.3f} s, transfer {self.transfer:.3f} s, "
                f"compute {self.compute:.3f} s, total {self.total:.3f} s; host+transfer "
                f"{100 * self.host_transfer_share:.1f}% of the step time")


@dataclass
class RunConfig:
    """Everything needed to rebuild a Simulation (stored in each checkpoint)."""

    gravity: str
    integrator: str
    params: dict[str, float]
    eps: float
    G: float
    backend: str
    precision: str
    threads: int | None
    t0: float
    energy0: float  # total energy at t0
    evolve: dict[str, Any] = field(default_factory=dict)  # t_end, cadences, out of the last evolve
    theta: float | None = None  # opening angle of gravity="tree"
    # K and W at t0, the scale of the energy error when energy0 == 0 (None in checkpoints
    # written before they were stored, which all have energy0 != 0: such runs could not start)
    kinetic0: float | None = None
    potential0: float | None = None

    def initial_energy(self) -> diagnostics.Energy:
        """The energy at t0 (K and W are NaN for checkpoints that did not store them)."""
        nan = float("nan")
        return diagnostics.Energy(kinetic=nan if self.kinetic0 is None else self.kinetic0,
                                  potential=nan if self.potential0 is None else self.potential0,
                                  total=self.energy0)


class Simulation:
    """An N-body simulation.

    Parameters
    ----------
    particles : Particles (N-body units by default: G = M = 1).
    gravity : "direct" (O(N^2) on the force pipeline) or "tree" (Barnes-Hut treecode,
        opening angle ``theta``, default ``tree.DEFAULT_THETA`` (0.6) with quadrupoles; leapfrog only, as the tree
        gives no jerks; ``precision`` selects its list kernels, as for the pipeline; the
        tree runs on the CPU, so ``backend`` must be "auto" or "cpu").
    integrator : "hermite" (block time steps; takes eta, eta_s, dt_max) or "leapfrog"
        (shared step; takes dt).
    eps : Plummer softening length (>= 0).
    backend, precision, threads : as for :class:`gravpipe.Pipeline`.
    eta, eta_s, dt_max, dt : integrator parameters (None: the integrator's default).
    theta : tree opening angle (gravity="tree" only).
    """

    def __init__(self, particles: Particles, gravity: str = "direct", integrator: str = "hermite", *,
                 eps: float = 1 / 64, G: float = 1.0, backend: str = "auto", precision: str = "mixed",
                 threads: int | None = None, eta: float | None = None, eta_s: float | None = None,
                 dt_max: float | None = None, dt: float | None = None, t0: float = 0.0,
                 theta: float | None = None, _restart: tuple[RunConfig, dict[str, np.ndarray], list[dict]] | None = None):
        if not isinstance(particles, Particles):
            raise ValueError("particles: expected gravpipe.Particles (see gravpipe.ic or gravpipe.io.read)")
        if gravity not in ("direct", "tree"):
            raise ValueError(f"gravity: unknown {gravity!r} (expected 'direct' or 'tree')")
        spec, params = integrators.resolve(integrator, {"eta": eta, "eta_s": eta_s, "dt_max": dt_max, "dt": dt})
        if gravity == "tree" and spec.name != "leapfrog":
            raise ValueError(f"gravity='tree' needs integrator='leapfrog' ({spec.name} needs jerks, "
                             "which the treecode does not compute)")
        if gravity != "tree" and theta is not None:
            raise ValueError("theta: only for gravity='tree'")
        eps = check_positive_scalar("eps", eps)
        if not math.isfinite(float(t0)):
            raise ValueError(f"t0: must be finite, got {t0!r}")
        self._spec = spec
        if gravity == "tree":
            theta = DEFAULT_THETA if theta is None else theta
            if backend == "cuda":
                raise ValueError("backend: gravity='tree' runs on the CPU; got backend='cuda' "
                                 "(use 'cpu' or 'auto')")
            resolve_backend(backend)  # an unknown backend name is still an error
            self._pipe = TreeGravity(eps, G, theta=theta, threads=threads, precision=precision)
        else:
            self._pipe = Pipeline(backend=backend, precision=precision, eps=eps, G=G, threads=threads)
        self._mass = np.array(particles.mass)
        self._ids = np.array(particles.id)
        self._gravity = gravity
        if _restart is None:
            energy0 = diagnostics.energy(particles, eps, G, pot=self._diagnostic_pot(particles, eps, G))
            self.config = RunConfig(gravity, spec.name, params, eps, float(G), backend, precision, threads,
                                    float(t0), energy0.total, theta=self._pipe.theta if gravity == "tree" else None,
                                    kinetic0=energy0.kinetic, potential0=energy0.potential)
            state, self.history = None, []
        else:
            self.config, state, self.history = _restart
        self._core = spec.build(self._pipe._impl, np.array(particles.pos), np.array(particles.vel),
                                self._mass, self.config.t0, self.config.params, state)
        # step counts of the run before this process (a resumed run continues the count, so
        # the steps columns of diagnostics.csv match an uninterrupted run)
        last = self.history[-1] if self.history else {}
        self._steps_before = (int(last.get("steps", 0)), int(last.get("particle_steps", 0)))
        # the start-up force evaluation on all particles is not part of any step
        self._startup = self._raw_timings()
        if _restart is None:
            self._record()

    # ---- state -----------------------------------------------------------------------
    @property
    def time(self) -> float:
        return self._core.time

    @property
    def backend(self) -> str:
        """The backend that computes the forces ("cpu", ...), as chosen by ``backend="auto"``."""
        return self._pipe.backend

    @property
    def backend_detail(self) -> str:
        """What the backend runs on, e.g. "isa=avx2, threads=2": the threads this run uses
        (``Pipeline.backend_detail`` names the machine's maximum)."""
        p = self._pipe
        return f"isa={p.isa}, threads={p.threads}" if p.backend == "cpu" else p.backend_detail

    @property
    def quantum(self) -> float:
        """Output times must be multiples of this (dt_max for Hermite, dt for leapfrog)."""
        return self.config.params[self._spec.quantum_key]

    @property
    def particles(self) -> Particles:
        """A synchronized copy of the particles at ``time``."""
        return Particles(self._core.positions(), self._core.velocities(), self._mass, self._ids)

    def energy(self) -> diagnostics.Energy:
        """Kinetic, potential and total energy now. The potential is a float64 direct sum
        for gravity="direct" and a float64 tree at ``DIAGNOSTICS_THETA`` for gravity="tree"."""
        p, c = self.particles, self.config
        return diagnostics.energy(p, c.eps, c.G, pot=self._diagnostic_pot(p, c.eps, c.G))

    def _diagnostic_pot(self, p: Particles, eps: float, G: float) -> np.ndarray:
        """Potentials (N,) for the energy diagnostics, float64. Direct runs: an all-pairs
        sum on the pipeline in double precision (float64 throughout), on the run's backend
        and threads, so that a CPU run with --threads 1 does not take all cores or the GPU
        for its diagnostics. Tree runs: a fine float64 tree, O(N log N) as their steps."""
        if self._gravity == "tree":
            return Tree(p.pos, p.mass, eps, G, theta=DIAGNOSTICS_THETA, precision="double",
                        threads=self._pipe.threads).forces()[1]
        exact = Pipeline(backend=self._pipe.backend, precision="double", eps=eps, G=G,
                         threads=self._pipe.threads if self._pipe.backend == "cpu" else None)
        exact.set_j(p.pos, p.mass)
        return exact.forces(p.pos, exclude=np.arange(p.n))[1]

    def energy_error(self) -> float:
        """Relative energy error against the start of the run: (E - E0) / |E0|, or
        (E - E0) / (|K0| + |W0|) when E0 == 0 (``diagnostics.relative_energy_error``)."""
        return diagnostics.relative_energy_error(self.energy(), self.config.initial_energy())

    def _raw_timings(self) -> Timings:
        c = self._core.counters()
        s = self._pipe.stats
        return Timings(host=c["seconds_host"], transfer=s.seconds_j_write + s.seconds_i_write + s.seconds_result_read,
                       compute=s.seconds_compute, total=c["seconds_total"], steps=c["steps"],
                       particle_steps=c["particle_steps"], interactions=s.interactions)

    @property
    def timings(self) -> Timings:
        """The time breakdown of the steps taken by this process (start-up excluded)."""
        now, base = self._raw_timings(), self._startup
        return Timings(*(getattr(now, f) - getattr(base, f) for f in Timings.__dataclass_fields__))

    @property
    def startup_seconds(self) -> float:
        """Wall time of the start-up (the first force evaluation on all particles)."""
        return self._startup.total

    # ---- evolution -------------------------------------------------------------------
    def evolve(self, t_end: float, snapshot_every: float | None = None, checkpoint_every: float | None = None,
               out: str | Path | None = None, progress: bool = True) -> None:
        """Advance to ``t_end``, writing snapshots/checkpoints into ``out`` at multiples of
        the given intervals (counted from t0). All times must be multiples of ``quantum``."""
        t_end = self._on_grid("t_end", t_end)
        if t_end < self.time:
            raise ValueError(f"t_end: {t_end} is before the current time {self.time}")
        cadences = {"snapshot": snapshot_every, "checkpoint": checkpoint_every}
        for name, every in cadences.items():
            if every is not None:
                cadences[name] = self._on_grid(f"{name}_every", every, interval=True)
        if out is None and any(v is not None for v in cadences.values()):
            raise ValueError("out: snapshot_every / checkpoint_every need an output directory")
        out_dir = Path(out) if out is not None else None
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
        self.config.evolve = {"t_end": t_end, "snapshot_every": cadences["snapshot"],
                              "checkpoint_every": cadences["checkpoint"], "out": str(out_dir) if out_dir else None}
        stops = self._stops(t_end, cadences)
        with _progress_bar(progress, self.time, t_end) as bar:
            for t_stop, what in stops:
                self._core.evolve_to(t_stop)
                self._record()
                if "snapshot" in what:
                    self.write_snapshot(out_dir / f"snapshot_{self._index(cadences['snapshot']):04d}.h5")
                if "checkpoint" in what:
                    self.write_checkpoint(out_dir / f"checkpoint_{self._index(cadences['checkpoint']):04d}.h5")
                if out_dir is not None:
                    self._write_diagnostics(out_dir / "diagnostics.csv")
                bar(self.time, self.timings.steps, self.history[-1]["energy_error"])

    def _on_grid(self, name: str, value: float, interval: bool = False) -> float:
        v = float(value)
        k = (v - (0.0 if interval else self.config.t0)) / self.quantum
        if not math.isfinite(v) or (interval and v <= 0) or abs(k - round(k)) > 1e-9 * max(1.0, abs(k)):
            what = "a positive multiple" if interval else "t0 plus a multiple"
            raise ValueError(f"{name}: {value!r} must be {what} of {self._spec.quantum_key} = {self.quantum}")
        return (0.0 if interval else self.config.t0) + round(k) * self.quantum

    def _stops(self, t_end: float, cadences: dict[str, float | None]) -> list[tuple[float, set[str]]]:
        """(time, {"snapshot", "checkpoint"}) stops after now, up to and including t_end."""
        q, t0 = self.quantum, self.config.t0
        now_k, end_k = round((self.time - t0) / q), round((t_end - t0) / q)
        marks: dict[int, set[str]] = {end_k: set()}
        for name, every in cadences.items():
            if every is not None:
                step = round(every / q)
                for k in range(step * (now_k // step + 1), end_k + 1, step):
                    marks.setdefault(k, set()).add(name)
        # progress and diagnostics at least every ~1/50 of the run, on a grid counted from
        # t0 (not from now), so that a resumed run records the same rows as an uninterrupted one
        stride = max(1, end_k // 50)
        for k in range(stride * (now_k // stride + 1), end_k, stride):
            marks.setdefault(k, set())
        return [(t0 + k * q, marks[k]) for k in sorted(marks) if k > now_k]

    def _index(self, every: float) -> int:
        return round((self.time - self.config.t0) / every)

    def _record(self) -> None:
        p = self.particles
        e = diagnostics.energy(p, self.config.eps, self.config.G, pot=self._diagnostic_pot(p, self.config.eps, self.config.G))
        radii = diagnostics.lagrangian_radii(p, LAGRANGIAN_FRACTIONS)
        t = self.timings
        row = {"time": self.time, "kinetic": e.kinetic, "potential": e.potential, "total": e.total,
               "energy_error": diagnostics.relative_energy_error(e, self.config.initial_energy()),
               "virial_ratio": 2 * e.kinetic / abs(e.potential) if e.potential else float("nan")}
        row.update({f"r_lagr_{int(100 * f)}": float(r) for f, r in zip(LAGRANGIAN_FRACTIONS, radii)})
        steps0, psteps0 = self._steps_before
        row.update({"steps": steps0 + t.steps, "particle_steps": psteps0 + t.particle_steps,
                    "seconds_host": t.host, "seconds_transfer": t.transfer, "seconds_compute": t.compute})
        self.history.append(row)

    # ---- files -------------------------------------------------------------------------
    def _parameters(self) -> dict[str, Any]:
        c = self.config
        return {"integrator": c.integrator, "gravity": c.gravity, "eps": c.eps, "G": c.G,
                "precision": c.precision, "backend": self._pipe.backend, "run_config": json.dumps(asdict(c))}

    def write_snapshot(self, path: str | Path) -> Path:
        return gio.write_snapshot(path, self.particles, self.time, parameters=self._parameters())

    def write_checkpoint(self, path: str | Path) -> Path:
        """A snapshot plus the exact integrator state and the diagnostics history."""
        state = dict(self._core.checkpoint())
        # history rows without the wall-clock columns, which differ from run to run
        keys = [k for k in self.history[0] if not k.startswith("seconds_")]
        for k in keys:
            state[f"history_{k}"] = np.array([row[k] for row in self.history])
        return gio.write_snapshot(path, self.particles, self.time, parameters=self._parameters(),
                                  integrator_state=state)

    def _write_diagnostics(self, path: Path) -> None:
        buf = _stdio.StringIO()
        # rows restored from a checkpoint have no wall-clock columns: left empty
        writer = csv.DictWriter(buf, fieldnames=list(self.history[-1]), restval="")
        writer.writeheader()
        writer.writerows(self.history)
        with atomic_open(path, "w", newline="") as fh:
            fh.write(buf.getvalue())

    @classmethod
    def resume(cls, out: str | Path, threads: int | None = None) -> Simulation:
        """Continue from the newest checkpoint in ``out`` (same backend and precision as
        the original run; ``threads`` defaults to the original run's)."""
        path = latest_checkpoint(out)
        snap = gio.read_snapshot(path)
        if snap.integrator_state is None or "run_config" not in snap.parameters:
            raise ValueError(f"{path}: not a gravpipe checkpoint (no integrator state)")
        config = RunConfig(**json.loads(snap.parameters["run_config"]))
        state = {k: v for k, v in snap.integrator_state.items() if not k.startswith("history_")}
        hist_cols = {k[len("history_"):]: v for k, v in snap.integrator_state.items() if k.startswith("history_")}
        n_rows = len(next(iter(hist_cols.values()))) if hist_cols else 0
        history = [{k: v[i].item() for k, v in hist_cols.items()} for i in range(n_rows)]
        restart = (config, state, history)
        kw = dict(config.params)
        return cls(snap.particles, config.gravity, config.integrator, eps=config.eps, G=config.G,
                   backend=config.backend, precision=config.precision,
                   threads=threads if threads is not None else config.threads, t0=config.t0,
                   theta=config.theta, _restart=restart, **kw)


def latest_checkpoint(out: str | Path) -> Path:
    """The newest checkpoint file in a run directory (by its index)."""
    d = Path(out)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such run directory")
    found = sorted(d.glob(CHECKPOINT_GLOB))
    if not found:
        raise FileNotFoundError(f"{d}: no checkpoint_*.h5 to resume from")
    return found[-1]


class _progress_bar:
    """A rich progress bar when ``enabled`` and stdout is a terminal; otherwise nothing."""

    def __init__(self, enabled: bool, t_start: float, t_end: float):
        import sys

        self.enabled = enabled and sys.stdout.isatty()
        self.t_start, self.t_end = t_start, t_end

    def __enter__(self):
        if not self.enabled:
            return lambda *a: None
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self._p = Progress(TextColumn("t = {task.fields[t]:.4g}"), BarColumn(),
                           TextColumn("steps {task.fields[steps]:,}  dE/E {task.fields[de]:.2e}"),
                           TimeRemainingColumn())
        self._p.start()
        task = self._p.add_task("evolve", total=max(self.t_end - self.t_start, 1e-300), t=self.t_start,
                                steps=0, de=0.0)
        return lambda t, steps, de: self._p.update(task, completed=t - self.t_start, t=t, steps=steps, de=de)

    def __exit__(self, *exc):
        if self.enabled:
            self._p.stop()
        return False
