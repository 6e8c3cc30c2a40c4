"""A run whose particles are spread over MPI ranks (the residence "domains" of
:mod:`gravpipe.residence`): each rank holds only its share, nothing of size N exists on any
rank (Salmon & Warren, seed 004; GADGET-4's distributed state).

- gravity="tree": the leapfrog over curve domains with locally essential trees
  (:class:`~gravpipe.parallel.domain_leapfrog.DomainLeapfrog`); particles migrate as the
  domains move, balanced by each particle's interactions.
- gravity="direct": Hermite block steps (or the leapfrog) on N/P j-particles per rank,
  active i-blocks gathered and partial forces returned to their owners
  (:class:`~gravpipe.parallel.direct_share.ShareDirect`); particles stay on their rank.
- Diagnostics rows: energies and Lagrangian radii by reductions over the ranks
  (:mod:`gravpipe.parallel.domain_diagnostics`), the same on every rank.
- Files: each rank writes its own member of a GADGET-4 multi-file set from its own
  particles (``io.write_share``); a snapshot, a set or a checkpoint is read block-wise, each
  rank taking its share (``io.read_share``), and the first step moves the particles to
  their domains. A run resumed on the number of ranks that wrote its checkpoint takes back
  what each rank wrote and continues bit for bit; on another number, correctly.

Built by :class:`gravpipe.Simulation` for runs under ``mpiexec -n P`` (P > 1) or with a
communicator of several ranks; the evolve loop, run directory and records are
:class:`~gravpipe.run_loop.RunLoop`'s, rank 0 printing and writing ``diagnostics.csv``.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from gravpipe import _core, integrators, parallel
from gravpipe import gravity as gravity_registry
from gravpipe import io as gio
from gravpipe._validate import check_magnitude, check_positive_scalar
from gravpipe.backends import resolve_backend
from gravpipe.diagnostics import Energy
from gravpipe.gravity import DIAGNOSTICS_THETA
from gravpipe.parallel import consistency, domain_diagnostics
from gravpipe.parallel.domain import global_frame
from gravpipe.parallel.direct_share import ShareDirect
from gravpipe.parallel.domain_leapfrog import STATE_FIELDS as DOMAIN_STATE
from gravpipe.parallel.domain_leapfrog import DomainLeapfrog
from gravpipe.parallel.essential_forces import EssentialTreeForces
from gravpipe.particles import Particles
from gravpipe.run_loop import LAGRANGIAN_FRACTIONS, RunConfig, RunLoop, Timings

#: a share: "pos" (n, 3), "vel" (n, 3), "mass" (n,) float64, "id" (n,) int64 (n may be 0)
Share = dict[str, np.ndarray]


class DomainRun(RunLoop):
    """A run over MPI ranks with distributed state (built by :class:`gravpipe.Simulation`).

    ``particles``: the whole model, the same on every rank (each rank keeps its slice
    [N r / P, N (r + 1) / P) and drops the rest; ``from_model`` and ``from_snapshot`` never
    hold more than the share). Other parameters as for ``MemoryRun``: gravity "tree" (the
    leapfrog, on the CPU) or "direct" (Hermite or the leapfrog, any backend: one GPU per
    rank, ranks sharing one when there is one). ``comm``: the communicator (None:
    COMM_WORLD under mpiexec).
    """

    def __init__(self, particles: Particles, gravity: str = "direct", integrator: str | None = None, *,
                 comm: Any = None, **kwargs: Any):
        if not isinstance(particles, Particles):
            raise ValueError("particles: expected gravpipe.Particles (see gravpipe.ic or gravpipe.io.read)")
        comm = _ranks(comm)
        share, origin = own_share(particles, comm)
        self._setup(comm, share, particles.n, origin, dict(kwargs, gravity=gravity, integrator=integrator))

    @classmethod
    def from_model(cls, model: str, n: int, seed: int, *, comm: Any = None, **kwargs: Any) -> DomainRun:
        """A run of a generated model, each rank drawing its share (``ic.model_share``)."""
        from gravpipe import ic

        comm = _ranks(comm)
        b, e = gio.file_share(int(n), comm.Get_rank(), comm.Get_size())
        share = consistency.agreed(comm, lambda: ic.model_share(model, int(n), seed, b, e))
        run = cls.__new__(cls)
        run._setup(comm, share, int(n), {"initial conditions": f"{model} n={n} seed={seed}"}, kwargs)
        return run

    @classmethod
    def from_snapshot(cls, path: str | Path, *, comm: Any = None, **kwargs: Any) -> DomainRun:
        """A run of a snapshot's (or a set's) particles, each rank reading its share block-wise;
        ``t0`` defaults to the file's time."""
        comm = _ranks(comm)
        got = consistency.agreed(comm, lambda: gio.read_share(path, comm.Get_rank(), comm.Get_size()))
        if kwargs.get("t0") is None:
            kwargs["t0"] = got.time
        share = {"pos": got.pos, "vel": got.vel, "mass": got.mass, "id": got.ids}
        run = cls.__new__(cls)
        run._setup(comm, share, got.n_total, {"initial conditions": _file_fact(path)}, kwargs)
        return run

    # ---- construction ---------------------------------------------------------------------
    def _setup(self, comm: Any, share: Share, n_total: int, origin: dict[str, str], kw: dict[str, Any],
               restart: tuple[RunConfig, dict[str, np.ndarray], list[dict]] | None = None) -> None:
        o = self._agreed_setup(comm, n_total, origin, kw, restart, _checked_options)
        # a bad particle is one rank's to find: every rank raises, none waits in a collective
        consistency.agreed(comm, lambda: _check_range(share, o.precision))
        self._mass, self._ids = np.ascontiguousarray(share["mass"]), np.ascontiguousarray(share["id"], np.int64)
        if o.kind.name == "tree":
            self._forces: Any = EssentialTreeForces(comm, o.eps, o.G, theta=o.gparams["theta"], threads=o.threads,
                                                    precision=o.precision)
            self._engine: Any = DomainLeapfrog(comm, share["pos"], share["vel"], self._mass, self._ids,
                                               forces=self._forces, dt=o.params["dt"], t0=o.start, restart=o.state)
        else:
            self._engine = ShareDirect(comm, share["pos"], share["vel"], self._mass, integrator=o.spec.name, eps=o.eps,
                                       G=o.G, backend=o.backend, precision=o.precision, threads=o.threads,
                                       params=o.params, t0=o.start, restart=o.state)
            self._forces = self._engine
        self._finish_setup(o, kw, restart)

    def _agreed_setup(self, comm: Any, n_total: int, origin: dict[str, str], kw: dict[str, Any],
                      restart: tuple[RunConfig, dict[str, np.ndarray], list[dict]] | None, checked: Any,
                      facts: dict[str, Any] | None = None) -> SimpleNamespace:
        """The options checked by ``checked`` (the same on every rank), the threads, the
        ranks' agreement on every input (and ``facts``), and a restart's history: what the
        engine is built from (kind, gparams, spec, params, backend, eps, G, precision, t0,
        threads, start, state). Collective."""
        self.comm = comm
        self._n = int(n_total)
        kind, gparams, spec, params, backend, eps, G, precision, t0 = consistency.agreed(
            comm, lambda: checked(self._n, comm.Get_size(), kw))
        threads = kw.get("threads")
        if _runs_on_cpu_threads(kind.name, backend):
            threads = parallel.threads_per_rank(comm) if threads is None else int(threads)
            # the integrator's own loops (predict, correct, schedule, kick) too: ranks sharing a
            # machine would otherwise each start a thread per core and spin against each other
            _core.set_max_threads(threads)
        self._check_ranks_agree(origin, {
            "gravity": kind.name, "integrator": spec.name, "params": params, "gravity_params": gparams,
            "eps": eps, "G": G, "backend": backend, "precision": precision, "t0": t0, "N": self._n,
            **(facts or {}), "restart": asdict(restart[0]) if restart is not None else None})
        self._spec, self._kind, self._eps, self._G = spec, kind, eps, G
        self._run_dir: Path | None = None
        state = None
        if restart is None:
            self.history = []
        else:
            self.config, state, self.history = restart
        start = t0 if restart is None else self.config.t0
        return SimpleNamespace(kind=kind, gparams=gparams, spec=spec, params=params, backend=backend, eps=eps, G=G,
                               precision=precision, t0=t0, threads=threads, start=start, state=state)

    def _finish_setup(self, o: SimpleNamespace, kw: dict[str, Any],
                      restart: tuple[RunConfig, dict[str, np.ndarray], list[dict]] | None, **config: Any) -> None:
        """The run's config (from the start-up energy; ``config``: more RunConfig fields) or a
        restart's, the clock's counts, and the first diagnostics row. Collective."""
        if restart is None:
            self._precise_energy = o.kind.precise_rows if kw.get("precise_energy") is None \
                else bool(kw["precise_energy"])
            e0 = self.energy()
            self.config = RunConfig(o.kind.name, o.spec.name, o.params, o.eps, o.G, o.backend, o.precision, o.threads,
                                    o.t0, e0.total, theta=o.gparams.get("theta"), kinetic0=e0.kinetic,
                                    potential0=e0.potential, precise_energy=self._precise_energy,
                                    distributed=True, **config)
        else:
            self._precise_energy = self.config.precise_energy
        last = self.history[-1] if self.history else {}
        self._steps_before = (int(last.get("steps", 0)), int(last.get("particle_steps", 0)))
        self._startup = self._raw_timings()
        if restart is None:
            self._record()

    def _check_ranks_agree(self, origin: dict[str, str], setup: dict[str, Any]) -> None:
        """Every rank must run the same gravpipe and core on the same inputs (collective)."""
        import gravpipe

        facts = {"gravpipe version": gravpipe.__version__,
                 "C++ core defaults": json.dumps(_core.defaults(), sort_keys=True, default=str)}
        facts.update({key: json.dumps(value, sort_keys=True, default=str) for key, value in setup.items()})
        facts.update(origin)
        consistency.check_same_on_all_ranks(self.comm, facts)

    # ---- state -----------------------------------------------------------------------------
    @property
    def time(self) -> float:
        """The current time: every particle is synchronized here (N-body time units)."""
        return self._engine.time

    @property
    def grid_origin(self) -> float:
        """Stops at ``grid_origin + k * quantum`` are whole steps; others cost one more evaluation."""
        return self._engine.grid_origin

    @property
    def quantum(self) -> float:
        """The leapfrog's step dt."""
        return self.config.params[self._spec.quantum_key]

    @property
    def n(self) -> int:
        """The number of particles of all ranks."""
        return self._n

    @property
    def provider(self) -> Any:
        """The force evaluation: the treecode with locally essential trees, or direct
        summation on the shares (counters, threads)."""
        return self._forces

    @property
    def backend(self) -> str:
        return "cpu" if isinstance(self._engine, DomainLeapfrog) else self._engine.pipeline.backend

    @property
    def backend_detail(self) -> str:
        ranks = self.comm.Get_size()
        if isinstance(self._engine, DomainLeapfrog):
            f = self._forces
            return f"isa={f.isa}, threads={f.threads}, distributed state: curve domains over {ranks} MPI ranks"
        return f"{self._engine.pipeline.backend_detail}; distributed state: N/P j-particles on each of {ranks} MPI ranks"

    def _local(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """This rank's (pos (n, 3), vel (n, 3), mass (n,), ids (n,)) at ``time``: the tree's
        particles move between ranks (its leapfrog holds them), direct summation's stay."""
        e = self._engine
        if isinstance(e, DomainLeapfrog):
            return e.positions(), e.velocities(), e.masses(), e.ids()
        return e.positions(), e.velocities(), self._mass, self._ids

    @property
    def particles(self) -> Particles:
        """A copy of the particles this rank holds at ``time`` (its share, in its order);
        ValueError on a rank that holds none."""
        pos, vel, mass, ids = self._local()
        return Particles(pos.copy(), vel.copy(), mass.copy(), ids.copy())

    @property
    def local_n(self) -> int:
        """The number of particles this rank holds."""
        return len(self._local()[2])

    def energy(self, precise: bool | None = None) -> Energy:
        """Kinetic, potential and total energy of all ranks' particles now (collective): the
        potential of the last evaluation, or with ``precise`` a float64 tree at theta
        ``DIAGNOSTICS_THETA`` over the ranks (|dW/W| ~1e-6)."""
        precise = self._precise_energy if precise is None else precise
        pos, vel, mass, _ = self._local()
        pot = self._precise_potential() if precise else self._engine.potentials()
        return domain_diagnostics.energy(self.comm, vel, mass, pot)

    def _precise_potential(self) -> np.ndarray:
        """A float64 potential of this rank's particles over all ranks (collective): a tree at
        DIAGNOSTICS_THETA for "tree", a direct sum on the shares for "direct" (O(N^2))."""
        pos, vel, mass, _ = self._local()
        if isinstance(self._engine, DomainLeapfrog):
            f = self._forces
            fine = EssentialTreeForces(self.comm, f.eps, f.G, theta=DIAGNOSTICS_THETA, threads=f.threads,
                                       precision="double")
            return fine.evaluate(pos, mass, global_frame(self.comm, pos)).pot
        exact = ShareDirect(self.comm, pos, vel, mass, integrator="leapfrog", eps=self._eps, G=self._G,
                            backend=self._engine.pipeline.backend, precision="double",
                            threads=self._engine.pipeline.threads if self.backend == "cpu" else None,
                            t0=self.time)
        return exact.potentials()

    def _raw_timings(self) -> Timings:
        """This rank's counts since the start: for the tree, builds, exports and grafts as
        "transfer", walks and kernels as "compute", MPI (migration, pieces, reductions) as
        "comm"; particle steps of all ranks."""
        e = self._engine
        c, s = e.counters(), e.stats
        if isinstance(e, DomainLeapfrog):
            total = c["seconds_total"] + e.seconds_decompose
            host = max(total - s.seconds_j_write - s.seconds_compute - s.seconds_comm, 0.0)
            return Timings(host=host, transfer=s.seconds_j_write, compute=s.seconds_compute, comm=s.seconds_comm,
                           total=total, steps=c["steps"], particle_steps=c["steps"] * self._n,
                           interactions=s.interactions)
        # every rank computes on every active particle of a block: its pipeline's i-count is
        # the particle steps of all ranks, known without a collective
        return Timings(host=c["seconds_host"], transfer=s.seconds_j_write + s.seconds_i_write + s.seconds_result_read,
                       compute=s.seconds_compute, comm=s.seconds_comm, total=c["seconds_total"], steps=c["steps"],
                       particle_steps=s.i_particles, interactions=s.interactions)

    def _advance_to(self, t: float) -> None:
        self._engine.evolve_to(t)

    def _record(self) -> None:
        pos, _, mass, _ = self._local()
        radii = domain_diagnostics.lagrangian_radii(self.comm, pos, mass, LAGRANGIAN_FRACTIONS)
        self._append_row(self.energy(), radii)

    def summary_lines(self) -> list[str]:
        """The balance of the domains and what the ranks exchanged."""
        if isinstance(self._engine, DomainLeapfrog):
            return [str(self._forces.balance), self._engine.stage_summary()]
        t = self._engine.traffic()
        return [f"this rank's exchange: {t['requests']:,} force evaluations, {self._engine.bytes_per_step:.3e} bytes "
                f"sent + received per evaluation, largest i-block {t['largest_block']:,}"]

    def close(self) -> None:
        """Nothing to release: each rank's particles are arrays of its process."""

    # ---- files -------------------------------------------------------------------------------
    def _parameters(self) -> dict[str, Any]:
        c = self.config
        return {"integrator": c.integrator, "gravity": c.gravity, "eps": c.eps, "G": c.G,
                "precision": c.precision, "backend": "cpu", "run_config": json.dumps(asdict(c))}

    def write_snapshot(self, path: str | Path) -> Path:
        """A multi-file set in the folder ``path``, member k holding rank k's particles
        (collective, atomic for the set)."""
        return gio.write_share(self.comm, path, *self._local(), self.time, parameters=self._parameters())

    def write_checkpoint(self, path: str | Path) -> Path:
        """A snapshot set plus each rank's integrator rows (the per-particle state of
        :func:`per_particle_widths`) in its own member and the run's clock and diagnostics
        history in member 0."""
        state = dict(self._engine.checkpoint())
        n = self.local_n
        rows = {k: np.asarray(state.pop(k)).reshape(n, w) if w > 1 else np.asarray(state.pop(k))
                for k, w in per_particle_widths(self.config.gravity, self.config.integrator).items()}
        keys = [k for k in self.history[0] if not k.startswith("seconds_")]
        for k in keys:
            state[f"history_{k}"] = np.array([row[k] for row in self.history])
        return gio.write_share(self.comm, path, *self._local(), self.time, parameters=self._parameters(),
                               integrator_state=state, per_particle_state=rows)

    @classmethod
    def resume(cls, checkpoint: Path, out: str | Path, threads: int | None = None, comm: Any = None) -> DomainRun:
        """Continue from ``checkpoint`` (a set of any number of members, or a single file),
        each rank reading its share: on the number of ranks that wrote it bit for bit."""
        comm = _ranks(comm)
        got = gio.read_share(checkpoint, comm.Get_rank(), comm.Get_size())
        if got.state is None or "run_config" not in got.parameters:
            raise ValueError(f"{checkpoint}: not a gravpipe checkpoint (no integrator state)")
        config = RunConfig(**json.loads(got.parameters["run_config"]))
        state = _share_state(got, config, checkpoint, comm)
        history = _history(got.state)
        share = {"pos": got.pos, "vel": got.vel, "mass": got.mass, "id": got.ids}
        kw = dict(gravity=config.gravity, integrator=config.integrator, eps=config.eps, G=config.G,
                  backend=config.backend, precision=config.precision,
                  threads=threads if threads is not None else config.threads, theta=config.theta, t0=config.t0,
                  **config.params)
        config.distributed = True
        run = cls.__new__(cls)
        run._setup(comm, share, got.n_total, {"checkpoint": _file_fact(checkpoint)}, kw,
                   restart=(config, state, history))
        run._run_dir = Path(out).resolve()
        return run


def own_share(particles: Particles, comm: Any) -> tuple[Share, dict[str, str]]:
    """This rank's slice [N r / P, N (r + 1) / P) of a whole model every rank holds, and
    the fact every rank must agree on about it (its digest)."""
    if not isinstance(particles, Particles):
        raise ValueError("particles: expected gravpipe.Particles (see gravpipe.ic or gravpipe.io.read)")
    b, e = gio.file_share(particles.n, comm.Get_rank(), comm.Get_size())
    share = {"pos": particles.pos[b:e], "vel": particles.vel[b:e], "mass": particles.mass[b:e],
             "id": particles.id[b:e]}
    return share, {"initial conditions (digest)": consistency.particles_digest(particles)}


def _checked_options(n: int, ranks: int, kw: dict[str, Any]) -> tuple:
    """The run's options checked (the same on every rank): (gravity kind, its parameters,
    integrator spec, its parameters, backend, eps, G, precision, t0)."""
    if n < 2:
        raise ValueError(f"a run over {ranks} MPI ranks needs at least 2 particles, got {n}")
    kind, gparams = gravity_registry.resolve(kw.get("gravity") or "direct", {"theta": kw.get("theta")})
    spec, params = integrators.resolve(kw.get("integrator") or kind.default_integrator,
                                       {k: kw.get(k) for k in ("eta", "eta_s", "dt_max", "dt")})
    if spec.needs_jerk and not kind.delivers_jerk:
        raise ValueError(f"gravity={kind.name!r} needs the leapfrog ({spec.name} needs jerks, which the "
                         f"{kind.name} solver does not compute)")
    backend = kw.get("backend") or "auto"
    if backend == "cuda" and kind.name == "tree":
        raise ValueError("backend='cuda': the tree over MPI ranks evaluates its lists on the CPU only; use "
                         "backend='cpu' or one process")
    resolve_backend(backend)  # an unknown backend name is still an error
    eps = check_positive_scalar("eps", kw.get("eps", 1 / 64))
    G, precision = float(kw.get("G", 1.0)), kw.get("precision") or "mixed"
    t0 = float(kw.get("t0") or 0.0)
    if not math.isfinite(t0):
        raise ValueError(f"t0: must be finite, got {t0!r}")
    return kind, gparams, spec, params, backend, eps, G, precision, t0


def _check_range(share: Share, precision: str) -> None:
    """``check_magnitude`` of a share's positions and velocities, naming the particle by its
    id (an index into one rank's share says nothing to the user)."""
    for name in ("pos", "vel"):
        check_magnitude(name, share[name], precision, ids=share["id"])


def _runs_on_cpu_threads(gravity: str, backend: str) -> bool:
    """Whether the force solver runs on this process's CPU threads, so that ranks sharing a
    machine must split its cores: the tree always; direct summation where ``backend``
    resolves to the CPU ("auto" picks CUDA on a GPU machine, and the CUDA pipeline takes no
    threads)."""
    return gravity == "tree" or resolve_backend(backend).name == "cpu"


def _ranks(comm: Any) -> Any:
    """The communicator of a distributed run: ValueError for one process."""
    resolved = parallel.resolve_comm(comm)
    if resolved is None:
        raise ValueError("a run with distributed state needs several MPI ranks (mpiexec -n P, P > 1, or comm=)")
    return resolved


def _file_fact(path: str | Path) -> str:
    """What every rank must agree on about an input file: its path, size and time stamp."""
    p = Path(path).resolve()
    files = sorted(p.iterdir()) if p.is_dir() else [p]
    h = hashlib.blake2b(digest_size=8)
    for f in files:
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return f"{p} ({h.hexdigest()})"


def per_particle_widths(gravity: str, integrator: str) -> dict[str, int]:
    """{name: entries per particle} of the integrator state a checkpoint splits over the
    members: the core integrator's (``integrators.INTEGRATORS[...].state``), and for the
    tree the domains' cost too."""
    if gravity == "tree":
        return dict(DOMAIN_STATE)
    return {k: per for k, (_, per, _) in integrators.INTEGRATORS[integrator].state.items() if per}


def _share_state(got: gio.Share, config: RunConfig, checkpoint: Path, comm: Any) -> dict[str, np.ndarray]:
    """This rank's share of a checkpoint's integrator state: its rows of every per-particle
    array (flat, as the integrators take them) and the run's one-entry arrays. A checkpoint
    of one process holds its arrays whole (not split per particle): they are sliced here
    like the particles; a tree run's missing domain costs are ones."""
    state, n = dict(got.state), len(got.mass)
    b, e = gio.file_share(got.n_total, comm.Get_rank(), comm.Get_size())
    for key, width in per_particle_widths(config.gravity, config.integrator).items():
        value = state.get(key)
        if value is None and key == "domain_cost":
            value = np.ones(n, np.int64)
        if value is None:
            raise ValueError(f"{checkpoint}: /Integrator/{key}: missing (a {config.integrator} checkpoint holds it)")
        value = np.asarray(value).reshape(-1)
        if len(value) == got.n_total * width and len(value) != n * width:  # whole, from one process
            value = value[b * width:e * width]
        if value.size != n * width:
            raise ValueError(f"{checkpoint}: /Integrator/{key}: {value.size} entries for this rank's {n} particles")
        state[key] = value
    if config.gravity == "tree" and "grid_origin" not in state:  # older checkpoints: the run's start
        state["grid_origin"] = np.array([config.t0])
    return {k: v for k, v in state.items() if not k.startswith("history_")}


def _history(state: dict[str, Any]) -> list[dict]:
    cols = {k[len("history_"):]: v for k, v in state.items() if k.startswith("history_")}
    rows = len(next(iter(cols.values()))) if cols else 0
    return [{k: v[i].item() for k, v in cols.items()} for i in range(rows)]
