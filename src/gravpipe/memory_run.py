"""A run whose particles live in this process's memory (the residence "memory" of
:mod:`gravpipe.residence`): gravity x integrator x backend, on one process or over MPI ranks.

:class:`gravpipe.Simulation` builds it; its evolve loop, run directory and records are
:class:`~gravpipe.run_loop.RunLoop`'s. ``resume`` continues from a checkpoint and
reproduces the uninterrupted run bit for bit (same backend, precision and thread count).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from gravpipe import _core, diagnostics, integrators, parallel
from gravpipe import gravity as gravity_registry
from gravpipe import io as gio
from gravpipe._validate import check_positive_scalar
from gravpipe.particles import Particles

from gravpipe.run_loop import LAGRANGIAN_FRACTIONS, RunConfig, RunLoop, Timings


class MemoryRun(RunLoop):
    """A run with its particles in memory (built by :class:`gravpipe.Simulation`).

    Parameters
    ----------
    particles : Particles (N-body units by default: G = M = 1).
    gravity : a kind of :data:`gravpipe.gravity.GRAVITY`: "direct" (O(N^2) on the force
        pipeline) or "tree" (Barnes-Hut treecode with quadrupoles, opening angle ``theta``;
        it gives no jerks, so it runs with leapfrog; ``precision`` selects its list
        kernels, as for the pipeline; it computes on the CPU).
    integrator : "hermite" (block time steps; takes eta, eta_s, dt_max) or "leapfrog"
        (shared step; takes dt). None: the gravity kind's default (hermite for direct,
        leapfrog for tree).
    eps : Plummer softening length (>= 0).
    backend, precision, threads : as for :class:`gravpipe.Pipeline`.
    eta, eta_s, dt_max, dt : integrator parameters (None: the core's default, see
        ``gravpipe.integrators.INTEGRATORS``).
    t0 : the time of ``particles``.
    theta : tree opening angle (gravity="tree" only; None: the core's default).
    comm : None, or a communicator of one rank: a run in memory is one process (runs over
        several MPI ranks keep their state distributed: :class:`gravpipe.domain_run.DomainRun`). None: COMM_WORLD when
        started by ``mpiexec -n P`` with P > 1, else a serial run. ``threads`` then defaults
        to the rank's share of its machine's cores.
    """

    def __init__(self, particles: Particles, gravity: str = "direct", integrator: str | None = None, *,
                 eps: float = 1 / 64, G: float = 1.0, backend: str = "auto", precision: str = "mixed",
                 threads: int | None = None, eta: float | None = None, eta_s: float | None = None,
                 dt_max: float | None = None, dt: float | None = None, t0: float = 0.0,
                 theta: float | None = None, comm: Any = None, precise_energy: bool | None = None):
        self._setup(particles, gravity, integrator, eps=eps, G=G, backend=backend, precision=precision,
                    threads=threads, integrator_params={"eta": eta, "eta_s": eta_s, "dt_max": dt_max, "dt": dt},
                    t0=t0, gravity_params={"theta": theta}, comm=comm, restart=None,
                    precise_energy=precise_energy)

    def _setup(self, particles: Particles, gravity: str, integrator: str | None, *, eps: float, G: float,
               backend: str, precision: str, threads: int | None, integrator_params: dict[str, float | None],
               t0: float, gravity_params: dict[str, float | None], comm: Any,
               restart: tuple[RunConfig, dict[str, np.ndarray], list[dict]] | None,
               precise_energy: bool | None = None) -> None:
        """The constructor's work; ``restart`` (config, integrator state, diagnostics
        history) continues a run from a checkpoint (see :meth:`resume`)."""
        if not isinstance(particles, Particles):
            raise ValueError("particles: expected gravpipe.Particles (see gravpipe.ic or gravpipe.io.read)")
        kind, gparams = gravity_registry.resolve(gravity, gravity_params)
        spec, params = integrators.resolve(integrator or kind.default_integrator, integrator_params)
        if spec.needs_jerk and not kind.delivers_jerk:
            usable = [n for n, s in integrators.INTEGRATORS.items() if not s.needs_jerk]
            raise ValueError(f"gravity={kind.name!r} needs integrator={' or '.join(map(repr, usable))} "
                             f"({spec.name} needs jerks, which the {kind.name} solver does not compute)")
        eps = check_positive_scalar("eps", eps)
        if not math.isfinite(float(t0)):
            raise ValueError(f"t0: must be finite, got {t0!r}")
        self._spec, self._kind = spec, kind
        self._eps, self._G = eps, float(G)
        if parallel.resolve_comm(comm) is not None:
            raise ValueError("a run over several MPI ranks keeps its particles distributed: it is a "
                             "gravpipe.domain_run.DomainRun, which gravpipe.Simulation builds under mpiexec")
        self.comm = None
        self._source = kind.build(eps=eps, G=G, backend=backend, precision=precision, threads=threads, **gparams)
        self._mass = np.array(particles.mass)
        self._ids = np.array(particles.id)
        self._run_dir: Path | None = None  # the run directory this run writes to
        if restart is None:
            state, self.history = None, []
            start, run_params = float(t0), params
        else:
            self.config, state, self.history = restart
            self._precise_energy = self.config.precise_energy
            start, run_params = self.config.t0, self.config.params
        self._core = spec.build(self._source.provider, np.array(particles.pos), np.array(particles.vel),
                                self._mass, start, run_params, state)
        if restart is None:
            # the start-up evaluation's potential gives E0 (or the precise check, by option)
            self._precise_energy = kind.precise_rows if precise_energy is None else bool(precise_energy)
            energy0 = self.energy()
            self.config = RunConfig(kind.name, spec.name, params, eps, float(G), backend, precision, threads,
                                    float(t0), energy0.total, theta=gparams.get("theta"),
                                    kinetic0=energy0.kinetic, potential0=energy0.potential,
                                    precise_energy=self._precise_energy)
        # step counts of the run before this process (a resumed run continues the count, so
        # the steps columns of diagnostics.csv match an uninterrupted run)
        last = self.history[-1] if self.history else {}
        self._steps_before = (int(last.get("steps", 0)), int(last.get("particle_steps", 0)))
        # the start-up force evaluation on all particles is not part of any step
        self._startup = self._raw_timings()
        if restart is None:
            self._record()

    # ---- state -----------------------------------------------------------------------
    @property
    def time(self) -> float:
        """The current time: every particle is synchronized here (N-body time units)."""
        return self._core.time

    @property
    def provider(self) -> gravity_registry.ForceSource:
        """The force source of this run (a :class:`gravpipe.Pipeline` for gravity="direct",
        a :class:`gravpipe.tree.TreeGravity` for "tree"): backend, counters, threads."""
        return self._source

    @property
    def grid_origin(self) -> float:
        """Stops at ``grid_origin + k * quantum`` are reached by whole steps; any other stop
        costs one extra force evaluation on all particles and becomes the new origin."""
        return self._core.grid_origin

    @property
    def backend(self) -> str:
        """The backend that computes the forces ("cpu", ...), as chosen by ``backend="auto"``."""
        return self._source.backend

    @property
    def backend_detail(self) -> str:
        """What the backend runs on, e.g. "isa=avx2, threads=2": the threads this run uses
        (``Pipeline.backend_detail`` names the machine's maximum)."""
        p = self._source
        return f"isa={p.isa}, threads={p.threads}" if p.backend == "cpu" else p.backend_detail

    @property
    def quantum(self) -> float:
        """The integrator's step on its grid (dt_max for Hermite, dt for leapfrog): stops at
        ``grid_origin`` plus multiples of it cost no extra force evaluation."""
        return self.config.params[self._spec.quantum_key]

    @property
    def particles(self) -> Particles:
        """A synchronized copy of the particles at ``time``."""
        return Particles(self._core.positions(), self._core.velocities(), self._mass, self._ids)

    def energy(self, precise: bool | None = None) -> diagnostics.Energy:
        """Kinetic, potential and total energy now.

        ``precise`` False: the potential of the run's last force evaluation (the
        integrator's own, at ``time``: no extra evaluation), carrying the run's force error:
        the tree's at its theta for "tree" (|dW/W| ~1e-4 at theta 0.6, mixed, Plummer); the
        pipeline's precision for "direct" (mixed: |dW/W| ~1e-7-1e-6; double: rounding, with
        Hermite's corrector move to second order). True: computed again in float64 as the
        gravity kind's ``diagnostic_potential`` does: a float64 direct sum on the run's
        backend for "direct" (rounding only; one O(N^2) evaluation, ~3-5 mixed steps), a
        float64 tree at theta 0.25 for "tree" (|dW/W| ~1e-6; 7-12 evaluations' time).
        None: the run's ``precise_energy`` (by default the gravity kind's ``precise_rows``:
        precise for "direct", the run's own for "tree")."""
        p, eps, G = self.particles, self._eps, self._G
        precise = self._precise_energy if precise is None else precise
        pot = self._kind.diagnostic_potential(self._source, p.pos, p.mass, eps, G) if precise \
            else self._core.potentials()
        return diagnostics.energy(p, eps, G, pot=pot)

    def _raw_timings(self) -> Timings:
        c = self._core.counters()
        s = self._source.stats
        return Timings(host=c["seconds_host"], transfer=s.seconds_j_write + s.seconds_i_write + s.seconds_result_read,
                       compute=s.seconds_compute, comm=s.seconds_comm, total=c["seconds_total"], steps=c["steps"],
                       particle_steps=c["particle_steps"], interactions=s.interactions)

    # ---- evolution (the loop is RunLoop.evolve) ------------------------------------------
    def _advance_to(self, t: float) -> None:
        self._core.evolve_to(t)

    @property
    def n(self) -> int:
        """The number of particles."""
        return len(self._mass)

    def _record(self) -> None:
        radii = diagnostics.lagrangian_radii(self.particles, LAGRANGIAN_FRACTIONS)
        self._append_row(self.energy(), radii)

    # ---- files -------------------------------------------------------------------------
    def _parameters(self) -> dict[str, Any]:
        c = self.config
        return {"integrator": c.integrator, "gravity": c.gravity, "eps": c.eps, "G": c.G,
                "precision": c.precision, "backend": self._source.backend, "run_config": json.dumps(asdict(c))}

    def write_snapshot(self, path: str | Path) -> Path:
        """Write the particles at ``time`` as an HDF5 snapshot (GADGET-4 layout, written
        atomically) with the run's parameters; returns the path."""
        return gio.write_snapshot(path, self.particles, self.time, parameters=self._parameters())

    def write_checkpoint(self, path: str | Path) -> Path:
        """A snapshot plus the exact integrator state and the diagnostics history."""
        state = dict(self._core.checkpoint())
        if hasattr(self._source, "checkpoint_state"):
            state.update(self._source.checkpoint_state())
        # history rows without the wall-clock columns, which differ from run to run
        keys = [k for k in self.history[0] if not k.startswith("seconds_")]
        for k in keys:
            state[f"history_{k}"] = np.array([row[k] for row in self.history])
        return gio.write_snapshot(path, self.particles, self.time, parameters=self._parameters(),
                                  integrator_state=state)

    @classmethod
    def from_model(cls, model: str, n: int, seed: int, **kwargs: Any) -> MemoryRun:
        """A run of a generated model (a name of ``ic.IC_MODELS``: plummer, uniform-sphere, ...)."""
        from gravpipe import ic
        make = {"plummer": ic.plummer, "uniform-sphere": ic.uniform_sphere, "uniform-cube": ic.uniform_cube}
        if model not in make:
            raise ValueError(f"model: unknown {model!r} (expected one of {', '.join(make)})")
        return cls(make[model](n, seed=seed), **kwargs)

    @classmethod
    def from_snapshot(cls, path: str | Path, **kwargs: Any) -> MemoryRun:
        """A run of the particles of a snapshot (any reader's format, :func:`gravpipe.io.read`);
        ``t0`` defaults to the file's time."""
        particles, t0 = gio.read(path)
        if kwargs.get("t0") is None:
            kwargs["t0"] = t0
        return cls(particles, **kwargs)

    def summary_lines(self) -> list[str]:
        """Lines a report adds after the time breakdown: the balance of MPI domains, if any."""
        balance = getattr(self._source, "balance_summary", None)  # MPI domains (gravity tree on ranks)
        return [balance()] if balance is not None else []

    def close(self) -> None:
        """Nothing to release: the particles are arrays of this process."""

    @classmethod
    def resume(cls, checkpoint: Path, out: str | Path, threads: int | None = None, comm: Any = None) -> MemoryRun:
        """Continue from ``checkpoint`` of the run in ``out`` (same backend and precision as
        the original run; ``threads`` defaults to the original run's; ``comm`` as for the
        constructor: the same number of ranks continues bit for bit, another one correctly)."""
        path = checkpoint
        snap = gio.read_snapshot(path)
        if snap.integrator_state is None or "run_config" not in snap.parameters:
            raise ValueError(f"{path}: not a gravpipe checkpoint (no integrator state)")
        config = RunConfig(**json.loads(snap.parameters["run_config"]))
        state = {k: v for k, v in snap.integrator_state.items() if not k.startswith("history_")}
        integrators.check_restart(config.integrator, state, snap.particles.n, f"{path}: /Integrator")
        hist_cols = {k[len("history_"):]: v for k, v in snap.integrator_state.items() if k.startswith("history_")}
        n_rows = len(next(iter(hist_cols.values()))) if hist_cols else 0
        history = [{k: v[i].item() for k, v in hist_cols.items()} for i in range(n_rows)]
        if "outputs" not in json.loads(snap.parameters["run_config"]):
            config.outputs = _legacy_output_counts(config, path, snap.time)
        sim = cls.__new__(cls)
        sim._setup(snap.particles, config.gravity, config.integrator, eps=config.eps, G=config.G,
                   backend=config.backend, precision=config.precision,
                   threads=threads if threads is not None else config.threads, integrator_params=config.params,
                   t0=config.t0, gravity_params={"theta": config.theta}, comm=comm,
                   restart=(config, state, history))
        sim._run_dir = Path(out).resolve()
        return sim


def _legacy_output_counts(config: RunConfig, checkpoint: Path, time: float) -> dict[str, int]:
    """Files written before a checkpoint of gravpipe 0.1.0, which numbered them by time."""
    every = config.evolve.get("snapshot_every")
    snapshots = round((time - config.t0) / every) if every else 0
    return {"snapshot": snapshots, "checkpoint": int(checkpoint.stem.split("_")[-1])}


