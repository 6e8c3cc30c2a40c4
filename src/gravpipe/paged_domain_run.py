"""A treecode run over MPI ranks with each rank out of core (the residence "domain_pages" of
:mod:`gravpipe.residence`): each rank holds its share of the particles and of the tree in
the pages of its own scratch file, everything that grows with N within its
``memory_budget`` (Salmon & Warren, seed 004: every processor pages its own share).

The run of :class:`~gravpipe.domain_run.DomainRun` with the tree, its leapfrog
:class:`~gravpipe.parallel.paged_domain_leapfrog.PagedDomainLeapfrog` (bit for bit the
in-memory distributed run on the same ranks), and everything that reads the particles
block by block: the initial conditions drawn or read straight into the stores, the rows'
energies and Lagrangian radii, and the snapshot and checkpoint sets each rank writes from
its own pages (``io.write_share_blocks``). Nothing of size N/P is held in memory.

Built by :class:`gravpipe.Simulation` for a run over several MPI ranks given
``memory_budget`` and ``scratch`` (``mpiexec -n P gravpipe run --gravity tree
--memory-budget B --scratch DIR``): B is each rank's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gravpipe import streamed_diagnostics
from gravpipe import io as gio
from gravpipe.diagnostics import Energy
from gravpipe.domain_run import (DomainRun, _check_range, _checked_options, _file_fact, _history, _ranks,
                                 own_share, per_particle_widths)
from gravpipe.gravity import DIAGNOSTICS_THETA
from gravpipe.parallel import consistency
from gravpipe.parallel.domain_diagnostics import RankReductions
from gravpipe.parallel.essential_forces import EssentialTreeForces
from gravpipe.parallel.paged_domain_leapfrog import PagedDomainLeapfrog
from gravpipe.particles import Particles
from gravpipe.run_loop import LAGRANGIAN_FRACTIONS, RunConfig, Timings
from gravpipe.store import check_scratch_dir, parse_byte_size

#: what a run's blocks carry: a callable returning an iterator of dicts of "pos" (m, 3),
#: "vel" (m, 3), "mass" (m,), "id" (m,) (and a checkpoint's per-particle state)
Blocks = Any


class PagedDomainRun(DomainRun):
    """A treecode run over MPI ranks, each out of core (see the module docstring).

    ``particles``: the whole model, the same on every rank (each rank stores its slice);
    ``memory_budget`` ("2GiB" or bytes) and ``scratch`` (a directory) are each rank's.
    Other parameters as for :class:`DomainRun` (gravity "tree", the leapfrog, the CPU).
    """

    def __init__(self, particles: Particles, gravity: str = "tree", integrator: str | None = None, *,
                 memory_budget: str | int, scratch: str | Path, comm: Any = None, **kwargs: Any):
        comm = _ranks(comm)
        share, origin = own_share(particles, comm)
        self._setup_paged(comm, lambda: iter([share]), len(share["mass"]), particles.n, origin,
                          dict(kwargs, gravity=gravity, integrator=integrator), memory_budget, scratch)

    @classmethod
    def from_model(cls, model: str, n: int, seed: int, *, memory_budget: str | int, scratch: str | Path,
                   comm: Any = None, **kwargs: Any) -> PagedDomainRun:
        """A run of a generated model, each rank drawing its share block by block into its store."""
        from gravpipe import ic

        comm = _ranks(comm)
        b, e = gio.file_share(int(n), comm.Get_rank(), comm.Get_size())
        run = cls.__new__(cls)
        run._setup_paged(comm, lambda: ic.model_share_blocks(model, int(n), seed, b, e), e - b, int(n),
                         {"initial conditions": f"{model} n={n} seed={seed}"}, kwargs, memory_budget, scratch,
                         blocks_bytes=min(int(n), ic.IC_BLOCK) * ic.BYTES_PER_BLOCK_PARTICLE)
        return run

    @classmethod
    def from_snapshot(cls, path: str | Path, *, memory_budget: str | int, scratch: str | Path, comm: Any = None,
                      **kwargs: Any) -> PagedDomainRun:
        """A run of a snapshot's (or a set's) particles, each rank reading its share block by
        block into its store; ``t0`` defaults to the file's time."""
        comm = _ranks(comm)
        head, blocks = consistency.agreed(comm, lambda: gio.read_share_blocks(path, comm.Get_rank(), comm.Get_size()))
        if kwargs.get("t0") is None:
            kwargs["t0"] = head.time
        run = cls.__new__(cls)
        run._setup_paged(comm, blocks, head.n, head.n_total, {"initial conditions": _file_fact(path)}, kwargs,
                         memory_budget, scratch)
        return run

    # ---- construction ---------------------------------------------------------------------
    def _setup_paged(self, comm: Any, blocks: Blocks, n_local: int, n_total: int, origin: dict[str, str],
                     kw: dict[str, Any], memory_budget: str | int, scratch: str | Path,
                     restart: tuple[RunConfig, dict[str, np.ndarray], list[dict]] | None = None,
                     blocks_bytes: int = 0) -> None:
        """The run's set-up; ``blocks_bytes``: memory one of ``blocks``' blocks takes while made."""
        kw = dict(kw, gravity=kw.get("gravity") or "tree")  # the residence takes the treecode only
        budget = consistency.agreed(comm, lambda: _checked_budget(memory_budget, scratch))
        o = self._agreed_setup(comm, n_total, origin, kw, restart, _paged_options, {"memory_budget": budget})
        self._forces: Any = EssentialTreeForces(comm, o.eps, o.G, theta=o.gparams["theta"], threads=o.threads,
                                                precision=o.precision)
        # each rank fills its own store (a bad particle, a full disk: that rank's to say)
        self._engine: Any = consistency.agreed(comm, lambda: PagedDomainLeapfrog(
            comm, blocks, n_local, forces=self._forces, dt=o.params["dt"], t0=o.start, memory_budget=budget,
            scratch=scratch, restart=o.state, check=lambda blk: _check_range(blk, o.precision),
            blocks_bytes=blocks_bytes))
        self._engine.start()
        self._finish_setup(o, kw, restart, out_of_core={"memory_budget": budget})

    # ---- state -----------------------------------------------------------------------------
    @property
    def backend(self) -> str:
        return "cpu"

    @property
    def backend_detail(self) -> str:
        f = self._forces
        return (f"isa={f.isa}, threads={f.threads}, distributed state: curve domains over {self.comm.Get_size()} MPI "
                f"ranks, each out of core within {self._engine.budget / 2**20:.0f} MiB")

    def _blocks(self, fields: list[str]) -> Iterator[dict[str, np.ndarray]]:
        return self._engine.blocks(fields)

    @property
    def particles(self) -> Particles:
        """A copy of the particles this rank holds (read from its pages: for small runs and
        tests; the run itself never holds them)."""
        fields = ["pos", "vel", "mass", "id"]
        got = list(self._blocks(fields))
        if not got:
            raise ValueError("this rank holds no particles")
        return Particles(*(np.concatenate([g[f] for g in got]) for f in fields))

    @property
    def local_n(self) -> int:
        return self._engine.n

    def energy(self, precise: bool | None = None) -> Energy:
        """Kinetic, potential and total energy of all ranks' particles (collective), summed
        block by block: the potential of the last evaluation, or with ``precise`` a float64
        tree at DIAGNOSTICS_THETA over the ranks."""
        precise = self._precise_energy if precise is None else precise
        pot = "pot"
        if precise:
            self._engine.diagnostic_potential(DIAGNOSTICS_THETA)
            pot = "pot_check"
        k = w = 0.0
        for blk in self._blocks(["vel", "mass", pot]):
            k += 0.5 * float(np.dot(blk["mass"], np.einsum("ij,ij->i", blk["vel"], blk["vel"])))
            w += 0.5 * float(np.dot(blk["mass"], blk[pot]))
        k, w = RankReductions(self.comm).sum(np.array([k, w]))
        return Energy(kinetic=float(k), potential=float(w), total=float(k + w))

    def _raw_timings(self) -> Timings:
        e = self._engine
        c, s = e.counters(), e.stats
        total = c["seconds_total"] + e.seconds_decompose
        host = max(total - s.seconds_j_write - s.seconds_compute - s.seconds_comm, 0.0)
        return Timings(host=host, transfer=s.seconds_j_write, compute=s.seconds_compute, comm=s.seconds_comm,
                       total=total, steps=c["steps"], particle_steps=c["steps"] * self._n,
                       interactions=s.interactions)

    def _record(self) -> None:
        radii = streamed_diagnostics.lagrangian_radii(lambda: self._blocks(["pos", "mass"]), LAGRANGIAN_FRACTIONS,
                                                      RankReductions(self.comm))
        self._append_row(self.energy(), radii)

    def summary_lines(self) -> list[str]:
        return [str(self._forces.balance), self._engine.stage_summary()]

    def close(self) -> None:
        """Remove this rank's scratch files."""
        self._engine.close()

    # ---- files -------------------------------------------------------------------------------
    def write_snapshot(self, path: str | Path) -> Path:
        """A multi-file set in the folder ``path``, member k written by rank k from its pages
        (collective, atomic for the set)."""
        return gio.write_share_blocks(self.comm, path, self.local_n,
                                      lambda: self._blocks(["pos", "vel", "mass", "id"]), self.time,
                                      parameters=self._parameters())

    def write_checkpoint(self, path: str | Path) -> Path:
        """A snapshot set plus each rank's per-particle state (accelerations, potentials,
        domain costs) from its pages, and the run's clock, cuts and history in member 0."""
        state = dict(self._engine.checkpoint())
        for k in [k for k in self.history[0] if not k.startswith("seconds_")]:
            state[f"history_{k}"] = np.array([row[k] for row in self.history])
        # with their dtypes: a rank without particles yields no block to take them from
        widths = {k: (w, "i8" if k == "domain_cost" else "f8")
                  for k, w in per_particle_widths(self.config.gravity, self.config.integrator).items()}
        return gio.write_share_blocks(self.comm, path, self.local_n,
                                      lambda: self._blocks(["pos", "vel", "mass", "id", *widths]), self.time,
                                      parameters=self._parameters(), integrator_state=state,
                                      per_particle_state_widths=widths)

    @classmethod
    def resume(cls, checkpoint: Path, out: str | Path, threads: int | None = None, comm: Any = None, *,
               memory_budget: str | int | None = None, scratch: str | Path | None = None) -> PagedDomainRun:
        """Continue from ``checkpoint``, each rank reading its share block by block into its
        store: on the number of ranks that wrote it bit for bit. ``memory_budget`` (default:
        the run's) and ``scratch`` (required) are each rank's."""
        comm = _ranks(comm)
        head, blocks = gio.read_share_blocks(checkpoint, comm.Get_rank(), comm.Get_size())
        if head.state is None or "run_config" not in head.parameters:
            raise ValueError(f"{checkpoint}: not a gravpipe checkpoint (no integrator state)")
        if scratch is None:
            raise ValueError("scratch: a resume out of core needs a directory for the scratch files")
        config = RunConfig(**json.loads(head.parameters["run_config"]))
        if config.gravity != "tree":
            raise ValueError(f"{checkpoint}: a {config.gravity} run; out of core over ranks runs the tree")
        kw = dict(gravity=config.gravity, integrator=config.integrator, eps=config.eps, G=config.G,
                  backend=config.backend, precision=config.precision,
                  threads=threads if threads is not None else config.threads, theta=config.theta, t0=config.t0,
                  **config.params)
        config.distributed = True
        budget = memory_budget if memory_budget is not None else (config.out_of_core or {}).get("memory_budget")
        if budget is None:
            raise ValueError("memory_budget: give each rank's budget to resume out of core")
        state = {k: v for k, v in head.state.items() if not k.startswith("history_")}
        run = cls.__new__(cls)
        run._setup_paged(comm, _with_costs(blocks), head.n, head.n_total, {"checkpoint": _file_fact(checkpoint)},
                         kw, budget, scratch, restart=(config, state, _history(head.state)))
        run._run_dir = Path(out).resolve()
        return run


def _paged_options(n: int, ranks: int, kw: dict[str, Any]) -> tuple:
    """The run's options checked: DomainRun's, and the tree's leapfrog on the CPU."""
    got = _checked_options(n, ranks, kw)
    kind, spec, backend = got[0], got[2], got[4]
    if kind.name != "tree" or spec.name != "leapfrog" or backend not in ("auto", "cpu"):
        raise ValueError(f"out of core over MPI ranks (memory_budget) runs gravity='tree' with the leapfrog on the "
                         f"CPU; got gravity={kind.name!r}, integrator={spec.name!r}, backend={backend!r}")
    return got


def _checked_budget(memory_budget: str | int, scratch: str | Path) -> int:
    """Each rank's budget in bytes; the scratch directory checked (exists, writable)."""
    check_scratch_dir(scratch, "scratch")
    return int(parse_byte_size(memory_budget))


def _with_costs(blocks: Blocks) -> Blocks:
    """A checkpoint's blocks with unit domain costs where one of one process has none."""
    def gen() -> Iterator[dict[str, np.ndarray]]:
        for blk in blocks():
            if "domain_cost" not in blk:
                blk = dict(blk, domain_cost=np.ones(len(blk["mass"]), np.int64))
            yield blk
    return gen
