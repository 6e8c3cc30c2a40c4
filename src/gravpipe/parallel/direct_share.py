"""Direct summation over MPI ranks with distributed state (GRAPE-6's j-memory per board;
PARNASS, seed 001; phiGRAPE; NBODY6++): each rank stores, predicts and corrects only its
own share of the particles, and nothing of size N exists on any rank.

A Hermite block step (the core's HermiteIntegrator on a share, with
``_core.ShareDirectForces`` as its force provider):

1. every rank offers its earliest step end; the least over the ranks is the block time
   (one MPI_Allreduce of an int64 with MPI_MIN);
2. the active particles of every rank, predicted to the block time, are gathered to all
   ranks (MPI_Allgatherv of the block: its size, not N; a block larger than ``max_block``
   goes in rounds);
3. every rank computes the partial forces (acc, jerk, pot) of its j-share on the whole block
   in its own Pipeline;
4. each rank receives the partials of its own active particles from every rank
   (MPI_Alltoallv) and adds them in rank order 0, 1, ..., P-1: a run is bitwise
   reproducible for a given P (MPI_Allreduce promises no order);
5. each rank corrects its own active particles and gives them new steps.

A rank with no active particle, or none at all, takes part in every collective. The
shared-step leapfrog runs on the same exchange with all particles active. The step lives
in the core; this module validates the inputs (on every rank, agreeing), builds the
pieces and supplies the collectives through mpi4py.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from gravpipe import _core, integrators
from gravpipe._validate import as_float_array, check_magnitude, check_positive_scalar
from gravpipe.parallel import consistency
from gravpipe.parallel.consistency import agreed
from gravpipe.pipeline import Pipeline, PipelineStats


class ShareDirect:
    """Direct-summation gravity and an integrator on this rank's share of the particles.

    Every method marked *collective* must be called by every rank of ``comm``, in the same
    order and with the same arguments.

    Parameters
    ----------
    comm : an mpi4py communicator (any size, 1 included).
    pos, vel : (n,3) float64, this rank's particles only (any n >= 0; all ranks together
        hold at least 2), N-body units.
    mass : (n,) float64 >= 0 (the total over all ranks > 0).
    integrator : "hermite" (block steps; params eta, eta_s, dt_max) or "leapfrog" (shared
        step; param dt). Defaults and checks: :func:`gravpipe.integrators.resolve`.
    eps, G, backend, precision, threads : as for :class:`gravpipe.Pipeline`; each rank has
        its own Pipeline. backend "cuda": rank k of a machine uses its GPU k mod the GPU
        count (ranks share the GPU when there is one). ``threads`` given also sets the
        process's OpenMP threads (``_core.set_max_threads``), which the integrator's own
        loops use, as a Simulation on ranks does: ranks sharing a machine should each take
        their share of its cores (``gravpipe.parallel.threads_per_rank``).
    params : integrator parameters (None entries: the core's defaults).
    t0 : the time of the particles (of the original start when ``restart`` is given, as for
        a Simulation: the checkpoint carries its own clock).
    restart : a :meth:`checkpoint` of this rank, taken on the same number of ranks with the
        same particles (pos, vel at the checkpoint's time): the run continues bit for bit.
    max_block : the most active particles gathered in one round, and the most partial-force
        records a rank receives in one (None: the largest share, at least P).

    Collective: the constructor (one force evaluation on all particles unless restarting).
    Raises ValueError on every rank when any rank's input is bad, naming the rank.
    """

    def __init__(self, comm: Any, pos: np.ndarray, vel: np.ndarray, mass: np.ndarray, *,
                 integrator: str = "hermite", eps: float = 1 / 64, G: float = 1.0, backend: str = "auto",
                 precision: str = "mixed", threads: int | None = None, params: dict[str, float | None] | None = None,
                 t0: float = 0.0, restart: dict[str, np.ndarray] | None = None, max_block: int | None = None):
        self.comm = comm
        self.rank, self.ranks = comm.Get_rank(), comm.Get_size()
        spec, run_params = agreed(comm, lambda: integrators.resolve(integrator, dict(params or {})))
        consistency.check_same_on_all_ranks(comm, {
            "gravpipe core": json.dumps(_core.defaults(), sort_keys=True, default=str),
            "integrator": spec.name, "params": json.dumps(run_params, sort_keys=True), "eps": repr(eps),
            "G": repr(G), "backend": backend, "precision": precision, "t0": repr(t0),
            "restart": repr(restart is not None), "max_block": repr(max_block)})
        self.integrator = spec.name
        self.params = run_params
        pos, vel, mass = agreed(comm, lambda: _check_share(pos, vel, mass, precision))
        self.n = len(mass)
        self.shares = np.array(comm.allgather(self.n), dtype=np.int64)  # (P,): one count per rank
        total_mass = sum(comm.allgather(float(mass.sum())))
        if self.shares.sum() < 2 or not total_mass > 0:
            raise ValueError(f"particles: the ranks hold {int(self.shares.sum())} particles of total mass "
                             f"{total_mass!r} together; at least 2, with a mass > 0, are needed")
        self.n_total = int(self.shares.sum())
        self.max_block = int(max_block) if max_block is not None else max(int(self.shares.max()), self.ranks)
        if threads is not None:
            agreed(comm, lambda: _core.set_max_threads(int(threads)))
        self.pipeline = agreed(comm, lambda: _rank_pipeline(comm, backend, precision, eps, G, threads))
        self._mpi = MpiCollectives(comm)
        self._forces = _core.ShareDirectForces(self.pipeline.provider, self.rank, self.ranks, self.n_total,
                                               self.max_block, self._mpi.min, self._mpi.allgather,
                                               self._mpi.allgatherv, self._mpi.alltoallv)
        f64, i64 = agreed(comm, lambda: _split_restart(spec.name, restart, self.n))
        build = _core.share_hermite if spec.name == "hermite" else _core.share_leapfrog
        step = ([run_params["eta"], run_params["eta_s"], run_params["dt_max"]] if spec.name == "hermite"
                else [run_params["dt"]])
        self._core = build(self._forces, pos, vel, mass, float(t0), *step, f64, i64)
        self.mass = mass  # (n,) this rank's masses, as given

    # ---- the run ----------------------------------------------------------------------
    def evolve_to(self, t: float) -> None:
        """Advance every rank's share to time ``t`` (>= ``time``); grid times
        ``grid_origin + k quantum`` cost no extra evaluation. Collective: every rank passes
        the same ``t`` (ValueError on every rank otherwise)."""
        t = float(t)
        everyone = self.comm.allgather(t)
        if any(x != everyone[0] for x in everyone):
            raise ValueError(f"evolve_to: the ranks asked for different times {everyone}")
        self._core.evolve_to(t)

    @property
    def time(self) -> float:
        """The time every particle of every rank is synchronized at (N-body units)."""
        return self._core.time

    @property
    def grid_origin(self) -> float:
        return self._core.grid_origin

    def positions(self) -> np.ndarray:
        """(n,3) float64: this rank's particles at ``time``, in the order given."""
        return self._core.positions()

    def velocities(self) -> np.ndarray:
        """(n,3) float64: this rank's velocities at ``time``, in the order given."""
        return self._core.velocities()

    def potentials(self) -> np.ndarray:
        """(n,) float64: each of this rank's particles' potential (from all ranks) from the
        last force evaluation, at ``time`` (Hermite: with its corrector's first-order
        move), so that 0.5 sum m pot over all ranks is the potential energy."""
        return self._core.potentials()

    def checkpoint(self) -> dict[str, np.ndarray]:
        """This rank's integrator state at ``time`` (a grid time for Hermite): per-particle
        arrays of its share (Hermite: t_ticks, dt_ticks (n,) int64, acc, jerk (3n,), pot
        (n,)) and one-entry scalars (now_ticks, timeline_t0; leapfrog: steps, grid_origin).
        With this rank's positions and velocities at ``time`` it is ``restart``."""
        return self._core.checkpoint()

    def counters(self) -> dict[str, float]:
        """The core integrator's: steps (blocks), particle_steps (this rank's), seconds_host,
        seconds_total."""
        return self._core.counters()

    # ---- costs --------------------------------------------------------------------------
    @property
    def stats(self) -> PipelineStats:
        """This rank's pipeline counters, with the interactions of all ranks and this rank's
        wall time in the collectives (block-time agreement, i-block gather, partial-force
        return, Python's mpi4py calls included) as ``seconds_comm``."""
        return PipelineStats(**self._forces.stats())

    def traffic(self) -> dict[str, int]:
        """This rank's messages since the start: requests (force evaluations: Hermite blocks,
        leapfrog steps, the start), rounds, agreements, bytes_sent and bytes_received (the
        payload to and from other ranks), largest_block and largest_receive (entries)."""
        return self._forces.traffic()

    @property
    def bytes_per_step(self) -> float:
        """Bytes this rank sent and received per force evaluation (a Hermite block step or a
        leapfrog step, the agreements included), averaged since the start."""
        t = self.traffic()
        return (t["bytes_sent"] + t["bytes_received"]) / max(1, t["requests"])

    def local_sizes(self) -> dict[str, int]:
        """The entries of this rank's largest per-particle arrays: its share ``n`` (the
        integrator's state and the pipeline's j-set), ``largest_block`` (the gathered active
        particles of one round) and ``largest_receive`` (partial-force records received in
        one); none exceeds ``max_block``, none holds N."""
        t = self.traffic()
        return {"n": self.n, "pipeline_j": int(self.pipeline.n_j), "largest_block": t["largest_block"],
                "largest_receive": t["largest_receive"], "max_block": self.max_block}


class MpiCollectives:
    """The four collectives of ``_core.ShareDirectForces`` over an mpi4py communicator,
    called by the core with numpy views of its own buffers (valid during the call)."""

    def __init__(self, comm: Any):
        from mpi4py import MPI

        self.comm = comm
        self._MPI = MPI
        self._one, self._least = np.empty(1, np.int64), np.empty(1, np.int64)

    def min(self, value: int) -> int:
        """The least of every rank's value (order-free: a minimum is exact)."""
        self._one[0] = value
        self.comm.Allreduce(self._one, self._least, op=self._MPI.MIN)
        return int(self._least[0])

    def allgather(self, mine: np.ndarray, everyone: np.ndarray) -> None:
        self.comm.Allgather(mine, everyone)

    def allgatherv(self, send: np.ndarray, counts: np.ndarray, recv: np.ndarray) -> None:
        self.comm.Allgatherv(send, [recv, counts])

    def alltoallv(self, send: np.ndarray, send_counts: np.ndarray, recv: np.ndarray,
                  recv_counts: np.ndarray) -> None:
        self.comm.Alltoallv([send, send_counts], [recv, recv_counts])


def _check_share(pos: Any, vel: Any, mass: Any, precision: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One rank's particles as C-contiguous float64: pos, vel (n,3), mass (n,) >= 0,
    finite, within the precision's range; n may be 0."""
    pos_a = as_float_array("pos", pos, (None, 3))
    vel_a = as_float_array("vel", vel, (None, 3))
    mass_a = as_float_array("mass", mass, (None,))
    if not len(pos_a) == len(vel_a) == len(mass_a):
        raise ValueError(f"pos, vel, mass: different lengths {len(pos_a)}, {len(vel_a)}, {len(mass_a)}")
    negative = np.flatnonzero(mass_a < 0)
    if negative.size:
        raise ValueError(f"mass: negative value {mass_a[negative[0]]!r} at index {negative[0]}")
    if precision in ("mixed", "double"):
        check_magnitude("pos", pos_a, precision)
        check_magnitude("vel", vel_a, precision)
    return pos_a, vel_a, mass_a


def _rank_pipeline(comm: Any, backend: str, precision: str, eps: float, G: float,
                   threads: int | None) -> Pipeline:
    """This rank's Pipeline; on CUDA, GPU (rank on this machine) mod (GPUs it has)."""
    eps = check_positive_scalar("eps", eps)
    if backend == "cuda" or (backend == "auto" and _core.cuda_report()["device_count"] > 0):
        from mpi4py import MPI

        local = comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            device = local.Get_rank() % max(1, int(_core.cuda_report()["device_count"]))
        finally:
            local.Free()
        return Pipeline(backend=backend, precision=precision, eps=eps, G=G, threads=threads, device=device)
    return Pipeline(backend=backend, precision=precision, eps=eps, G=G, threads=threads)


def _split_restart(name: str, restart: dict[str, Any] | None, n: int):
    """A checkpoint of this rank's share, checked, as the core's (float64, int64) dicts."""
    if restart is None:
        return None, None
    integrators.check_restart(name, restart, n)
    arrays = {k: v for k, v in restart.items() if isinstance(v, np.ndarray)}
    f64 = {k: np.ascontiguousarray(v, np.float64) for k, v in arrays.items() if v.dtype.kind == "f"}
    i64 = {k: np.ascontiguousarray(v, np.int64) for k, v in arrays.items() if v.dtype.kind in "iu"}
    return f64, i64
