"""The treecode's kick-drift-kick leapfrog over MPI ranks with distributed state (Salmon &
Warren, seed 004): each rank holds only the particles of its curve domain.

A step on every rank:

1. **decompose**: the curve keys of the particles in the global box; the domains' cuts
   along the Hilbert curve are kept while they stay balanced (each rank's summed cost, the
   interactions of its particles in the last evaluation, within ``rebalance`` of the mean)
   and cut again by cost otherwise (:mod:`gravpipe.parallel.domain`): a cut moved at every
   step would send a tenth of the particles across a boundary through a dense core each
   time. The particles outside their rank's range migrate to their owner with all they
   carry (position, velocity, mass, id, acceleration, potential, cost: one Alltoallv per
   dtype); those that stay keep their place;
2. **step**: the core's ``LeapfrogIntegrator`` takes one kick-drift-kick step of the
   rank's particles; its force evaluation (after the drift) is collective: locally
   essential trees over the ranks' domains
   (:class:`~gravpipe.parallel.essential_forces.EssentialTreeForces`).

The step's arithmetic is the core's (kick, drift, the force check), as in one process;
between steps the particles change hands, so each step runs on the rank's set of that
step (the integrator restarts from the carried accelerations: no extra evaluation). A
step's forces are evaluated after its drift, so each particle is given to the rank whose
curve range holds the position the drift will take it to, and the curve and the octree
divide one frame, kept from step to step (the particles' box with a margin of
FRAME_MARGIN of its extent, renewed only when a particle leaves it): then every domain is a
union of whole octree cells when the tree is built. Domains cut at the start positions
split every cell along a boundary that particles drift across: 11% more interactions at
N = 2e5 on 2 ranks (3476 against 3142 a body).

Nothing of size N exists on any rank. Results are deterministic for a given number of
ranks (the stayers keep their order, arrivals follow in sender order) and within the
serial tree's error bounds for any number.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from gravpipe import _core
from gravpipe.parallel.domain import balanced_splitters, curve_keys, global_frame, migrate, owners
from gravpipe.parallel.essential_forces import Clock, EssentialTreeForces
from gravpipe.pipeline import PipelineStats

#: the per-particle state a checkpoint carries beyond the particles: name -> entries per particle
STATE_FIELDS = {"acc": 3, "pot": 1, "domain_cost": 1}
#: the domains' cuts (P - 1 curve keys, as int64) a checkpoint carries: the same P keeps them
SPLITTERS_FIELD = "domain_splitters"
#: the largest summed cost of a rank over the mean that keeps the domains' cuts
REBALANCE = 1.05
#: the octree's frame (6,: lo, hi) a checkpoint carries
FRAME_FIELD = "domain_frame"
#: the margin of a new frame on each side, in units of the particles' extent
FRAME_MARGIN = 0.125


class DomainLeapfrog:
    """The leapfrog of this rank's share of a treecode run (see the module docstring).

    pos (n, 3), vel (n, 3), mass (n,), ids (n,) int64: the particles this rank starts with
    (any share: the first step moves them to their domains; n may be 0 on some ranks).
    ``forces``: the collective force evaluation; dt: the step; t0: the time. ``restart``: a
    :meth:`checkpoint` of the same particles (acc (3n,), pot (n,), domain_cost (n,),
    steps (1,), grid_origin (1,), domain_frame (6,), and domain_splitters (P - 1,) when
    taken on the same P)
    continues without a force evaluation; else the start-up evaluation runs now
    (collective). ``rebalance``: the domains are cut again when a rank's summed cost
    exceeds this many times the mean.
    """

    def __init__(self, comm: Any, pos: np.ndarray, vel: np.ndarray, mass: np.ndarray, ids: np.ndarray, *,
                 forces: EssentialTreeForces, dt: float, t0: float, restart: dict[str, np.ndarray] | None = None,
                 rebalance: float = REBALANCE):
        self.comm, self.forces, self.dt = comm, forces, float(dt)
        self.rebalance = float(rebalance)
        self._splitters: np.ndarray | None = None  # uint64 (P - 1,): the domains' cuts
        self.cuts = 0  # how many times the domains were cut
        self._pos = np.ascontiguousarray(pos, np.float64).reshape(-1, 3)
        self._vel = np.ascontiguousarray(vel, np.float64).reshape(-1, 3)
        self._mass = np.ascontiguousarray(mass, np.float64)
        self._ids = np.ascontiguousarray(ids, np.int64)
        self.comm_clock = Clock()        # decomposition and migration (the evaluations count their own)
        self.seconds_decompose = 0.0
        #: this rank's seconds by stage since the start (``Evaluation.stages`` and "decompose":
        #: curve keys, the cut, the migration) and the evaluations counted
        self.stages: dict[str, float] = {}
        self.evaluations = 0
        self._stats = {"interactions": 0, "seconds_j_write": 0.0, "seconds_comm": 0.0, "seconds_total": 0.0}
        self._counters = {"steps": 0, "particle_steps": 0, "seconds_host": 0.0, "seconds_total": 0.0}
        self._last_migrated = 0
        self._frame: tuple[np.ndarray, np.ndarray] | None = None  # the kept frame (lo (3,), hi (3,))
        this = weakref.ref(self)  # the core calls back; a bound method would make an unseen cycle
        self._provider = _core.CallbackForces(lambda *views: this()._evaluate(*views))
        if restart is None:
            self._origin, self._steps = float(t0), 0
            n = len(self._mass)
            self._cost = np.ones(n, np.int64)
            self._acc, self._pot = np.zeros((n, 3)), np.zeros(n)  # carried by the first migration
            self._decompose()
            ev = self._evaluate_now()
            self._acc, self._pot, self._cost = ev.acc, ev.pot, ev.cost
        else:
            n = len(self._mass)
            self._acc = np.asarray(restart["acc"], np.float64).reshape(n, 3).copy()
            self._pot = np.asarray(restart["pot"], np.float64).reshape(n).copy()
            self._cost = np.asarray(restart["domain_cost"], np.int64).reshape(n).copy()
            self._steps, self._origin, self._frame, self._splitters = restored(restart, comm.Get_size())

    # ---- the clock -------------------------------------------------------------------------
    @property
    def time(self) -> float:
        """The time of every particle (grid_origin + steps dt, as the core counts it)."""
        return self._origin + self._steps * self.dt

    @property
    def grid_origin(self) -> float:
        return self._origin

    def _reached(self, t: float) -> bool:
        return reached(t, self._origin, self.dt, self._steps)

    def evolve_to(self, t: float) -> None:
        """Whole steps of dt to ``t``; an off-grid ``t`` ends with a shortened step to it,
        which becomes the grid's origin (the core's ``LeapfrogIntegrator.evolve_to``).
        Collective: every rank must ask for the same ``t``."""
        if not np.isfinite(t) or t < self.time - 1e-9 * self.dt:
            raise ValueError(f"evolve_to: t = {t!r} is before the current time {self.time!r} or not finite")
        while not self._reached(t):
            target = min(t, self._origin + (self._steps + 1) * self.dt)
            self._decompose(target - self.time)
            self._step(target)

    def _step(self, target: float) -> None:
        """One step to ``target`` (the next grid point, or an off-grid stop before it)."""
        n = len(self._mass)
        if n == 0:  # no particles here: take part in the evaluation only
            self._evaluate_now()
            self._advance_clock(target)
            return
        state = {"acc": self._acc.reshape(-1), "pot": self._pot, "grid_origin": np.array([self._origin])}
        core = _core.Leapfrog(self._provider, self._pos, self._vel, self._mass, self._origin, self.dt,
                              state, {"steps": np.array([self._steps], np.int64)})
        # the core holds its own copy for the step: one copy of the state at a time
        del state
        self._pos = self._vel = self._acc = self._pot = None
        core.evolve_to(target)
        self._pos, self._vel = core.positions().reshape(n, 3), core.velocities().reshape(n, 3)
        done = core.checkpoint()
        self._acc, self._pot = np.asarray(done["acc"]).reshape(n, 3), np.asarray(done["pot"])
        self._steps, self._origin = int(done["steps"][0]), float(done["grid_origin"][0])
        c = core.counters()
        for key in self._counters:
            self._counters[key] += c[key]

    def _advance_clock(self, target: float) -> None:
        want = (target - self._origin) / self.dt
        if abs(want - round(want)) <= 1e-9 * max(1.0, abs(round(want))):
            self._steps += 1
        else:
            self._origin, self._steps = float(target), 0
        self._counters["steps"] += 1

    # ---- decomposition ---------------------------------------------------------------------
    def _decompose(self, dt: float = 0.0) -> None:
        """Cut the domains by cost and move the particles there: only those that leave
        travel; the ones that stay keep their order, and the arrivals follow them, senders
        in rank order. Each particle goes where the step of ``dt`` about to be taken will
        drift it (x + dt (v + a dt / 2), the core's kick and drift), so that the domains the
        step's forces see are ranges of the curve, whole cells of the octree: owners by the
        start positions would split every cell along a boundary that particles drift across."""
        comm = self.comm
        t0 = _now()
        where = predicted(self._pos, self._vel, self._acc, dt)
        lo, hi = self._frame_of(where)
        keys = curve_keys(where, lo, hi, self.forces.threads)
        del where
        cost = np.maximum(self._cost, 1)
        owner = None if self._splitters is None else owners(keys, self._splitters)
        if owner is None or self._imbalance(owner, cost) > self.rebalance:
            with self.comm_clock:
                self._splitters = balanced_splitters(comm, keys, cost)
            owner = owners(keys, self._splitters)
            self.cuts += 1
        del keys
        leave = np.flatnonzero(owner != comm.Get_rank())
        fields = (self._pos, self._vel, self._mass, self._acc, self._pot)
        with self.comm_clock:
            f64 = np.column_stack([a[leave] for a in fields])
            i64 = np.column_stack((self._ids[leave], self._cost[leave]))
            f64, i64, self._last_migrated = migrate(comm, owner[leave], f64, i64)
        if len(leave) or len(f64):
            stay = np.ones(len(owner), bool)
            stay[leave] = False
            keep = np.flatnonzero(stay)
            cols = np.cumsum([0, 3, 3, 1, 3, 1])
            self._pos, self._vel, self._mass, self._acc, self._pot = (
                _kept_then(a, keep, f64[:, cols[k]:cols[k + 1]]) for k, a in enumerate(fields))
            self._ids, self._cost = (_kept_then(a, keep, i64[:, k]) for k, a in enumerate((self._ids, self._cost)))
        self.seconds_decompose += _now() - t0
        self.stages["decompose"] = self.stages.get("decompose", 0.0) + _now() - t0

    def _frame_of(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The frame for every rank's positions (this rank's: pos (n, 3)): the kept one while
        it holds them all, else their box widened by FRAME_MARGIN (collective)."""
        with self.comm_clock:
            self._frame = kept_frame(self.comm, self._frame, pos)
        return self._frame

    def _imbalance(self, owner: np.ndarray, cost: np.ndarray) -> float:
        """max / mean over the ranks of the summed cost each would hold with these owners."""
        with self.comm_clock:
            return imbalance(self.comm, cost_by_owner(owner, cost, self.comm.Get_size()))

    # ---- forces ------------------------------------------------------------------------------
    def forces_now(self) -> None:
        """Cut the domains, migrate and evaluate the forces of the current positions, as a
        step's force part does, the clock and the particles' motion untouched (collective):
        for measurements (the performance model's two-rank probe)."""
        self._decompose()
        ev = self._evaluate_now()
        self._acc, self._pot = ev.acc, ev.pot

    def _evaluate_now(self):
        """The evaluation of the current positions (start-up, or a rank without particles)."""
        acc, pot = np.empty((len(self._mass), 3)), np.empty(len(self._mass))
        self._evaluate(self._pos.reshape(-1), self._mass, acc.reshape(-1), pot)
        return self._last

    def _evaluate(self, pos_flat: np.ndarray, mass: np.ndarray, acc_flat: np.ndarray, pot: np.ndarray
                  ) -> tuple[int, float, float]:
        """The core's force callback: forces of this rank's particles (pos (3n,), mass (n,))
        into acc (3n,), pot (n,); keeps the costs. Returns (interactions of all ranks,
        seconds building trees, seconds in MPI)."""
        t0 = _now()
        pos = pos_flat.reshape(-1, 3)
        frame = self._frame_of(pos)
        ev = self.forces.evaluate(pos, mass, frame, self._last_migrated)
        self._last_migrated = 0
        acc_flat.reshape(-1, 3)[:] = ev.acc
        pot[:] = ev.pot
        self._cost = ev.cost
        self._last = ev
        self.evaluations += 1
        for name, seconds in ev.stages.items():
            self.stages[name] = self.stages.get(name, 0.0) + seconds
        s = self._stats
        s["interactions"] += ev.interactions
        s["seconds_j_write"] += ev.seconds_build
        s["seconds_comm"] += ev.seconds_comm
        s["seconds_total"] += _now() - t0
        return ev.interactions, ev.seconds_build, ev.seconds_comm

    # ---- what the run reads ---------------------------------------------------------------------
    def positions(self) -> np.ndarray:
        """This rank's positions (n, 3) at ``time`` (its domain's particles, in its order)."""
        return self._pos

    def velocities(self) -> np.ndarray:
        return self._vel

    def masses(self) -> np.ndarray:
        return self._mass

    def ids(self) -> np.ndarray:
        return self._ids

    def accelerations(self) -> np.ndarray:
        """The acceleration (n, 3) of this rank's particles from the last evaluation."""
        return self._acc

    def potentials(self) -> np.ndarray:
        """The potential (n,) of this rank's particles from the last evaluation (at ``time``)."""
        return self._pot

    def stage_summary(self) -> str:
        """This rank's mean seconds per evaluation by stage, in one line."""
        per = max(self.evaluations, 1)
        st = {k: v / per for k, v in self.stages.items()}
        let = st.get("export", 0.0) + st.get("exchange", 0.0) + st.get("graft", 0.0)
        return (f"domains cut {self.cuts} times in {self.evaluations} evaluations; "
                f"stages per step on this rank: decompose+migrate {st.get('decompose', 0.0):.3g} s, tree build "
                f"{st.get('build', 0.0):.3g} s, essential trees {let:.3g} s (export {st.get('export', 0.0):.3g}, "
                f"exchange {st.get('exchange', 0.0):.3g}, graft {st.get('graft', 0.0):.3g}), walk+forces "
                f"{st.get('walk_forces', 0.0):.3g} s")

    def checkpoint(self) -> dict[str, np.ndarray]:
        """What continues this rank's share bit for bit (see :data:`STATE_FIELDS`)."""
        cuts = {} if self._splitters is None else {SPLITTERS_FIELD: self._splitters.view(np.int64).copy()}
        if self._frame is not None:
            cuts[FRAME_FIELD] = np.concatenate(self._frame)
        return cuts | {"acc": self._acc.reshape(-1).copy(), "pot": self._pot.copy(), "domain_cost": self._cost.copy(),
                "steps": np.array([self._steps], np.int64), "grid_origin": np.array([self._origin])}

    def counters(self) -> dict[str, float]:
        """The steps taken (all particles' steps counted by the ranks that hold them) and seconds."""
        return dict(self._counters)

    @property
    def stats(self) -> PipelineStats:
        """Interactions of all ranks; tree builds as ``seconds_j_write``; MPI in ``seconds_comm``
        (the decomposition's included)."""
        s = dict(self._stats)
        s["seconds_comm"] += self.comm_clock.seconds
        walk = s["seconds_total"] - s["seconds_j_write"] - self._stats["seconds_comm"]
        return PipelineStats(interactions=s["interactions"], seconds_j_write=s["seconds_j_write"],
                             seconds_compute=max(walk, 0.0), seconds_comm=s["seconds_comm"])


def on_grid(t: float, origin: float, dt: float) -> tuple[bool, int]:
    """Whether ``t`` is a point origin + k dt of the grid (the core's tolerance), and k."""
    want = (t - origin) / dt
    whole = round(want)
    return abs(want - whole) <= 1e-9 * max(1.0, abs(whole)), whole


def reached(t: float, origin: float, dt: float, steps: int) -> bool:
    """Whether a clock of ``steps`` steps of dt from ``origin`` is at ``t``: on the grid by
    the core's tolerance, else exactly."""
    grid, whole = on_grid(t, origin, dt)
    return whole <= steps if grid else t <= origin + steps * dt


def _kept_then(a: np.ndarray, keep: np.ndarray, arrivals: np.ndarray) -> np.ndarray:
    """Rows ``keep`` of ``a`` (n, ...) followed by ``arrivals`` (m, width) reshaped to a's
    rows, in one new array: one copy of the stayers, not two (a[keep], then a concatenation)."""
    out = np.empty((len(keep) + len(arrivals),) + a.shape[1:], a.dtype)
    np.take(a, keep, axis=0, out=out[:len(keep)])
    out[len(keep):] = arrivals.reshape((-1,) + a.shape[1:])
    return out


def restored(restart: dict[str, np.ndarray], ranks: int
             ) -> tuple[int, float, tuple[np.ndarray, np.ndarray] | None, np.ndarray | None]:
    """(steps, grid origin, frame (lo, hi) or None, cuts (uint64 (ranks - 1,)) or None) of a
    checkpoint's run entries; cuts made for another number of ranks are not kept."""
    steps = int(np.asarray(restart["steps"]).reshape(-1)[0])
    origin = float(np.asarray(restart["grid_origin"]).reshape(-1)[0])
    frame = restart.get(FRAME_FIELD)
    if frame is not None:
        frame = np.asarray(frame, np.float64).reshape(6)
        frame = (frame[:3].copy(), frame[3:].copy())
    cuts = restart.get(SPLITTERS_FIELD)
    cuts = None if cuts is None or len(cuts) != ranks - 1 else np.asarray(cuts).astype(np.int64).view(np.uint64).copy()
    return steps, origin, frame, cuts


def predicted(pos: np.ndarray, vel: np.ndarray, acc: np.ndarray, dt: float) -> np.ndarray:
    """Where a step of ``dt`` drifts the particles (n, 3): x + dt (v + a dt / 2), the core's
    kick and drift; the positions themselves for dt = 0."""
    return pos if dt == 0 else pos + dt * (vel + (0.5 * dt) * acc)


def kept_frame(comm: Any, frame: tuple[np.ndarray, np.ndarray] | None, pos: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """The octree's frame (lo (3,), hi (3,)) for every rank's positions (this rank's: pos
    (n, 3), or any rows whose box is theirs): ``frame`` while it holds them all, else their
    box widened by FRAME_MARGIN of its extent on each side (collective)."""
    lo, hi = global_frame(comm, pos)
    if frame is not None and (lo >= frame[0]).all() and (hi <= frame[1]).all():
        return frame
    margin = FRAME_MARGIN * max(float((hi - lo).max()), 1e-300)
    return lo - margin, hi + margin


def cost_by_owner(owner: np.ndarray, cost: np.ndarray, ranks: int) -> np.ndarray:
    """The summed cost (int64 (ranks,)) of the particles each rank would own."""
    # integer costs, summed exactly (float64 below 2^53)
    return np.bincount(owner, weights=cost, minlength=ranks).astype(np.int64)


def imbalance(comm: Any, mine: np.ndarray) -> float:
    """max / mean over the ranks of the summed cost each would hold, from every rank's
    ``cost_by_owner`` (collective; integer sums: the same on every rank in any order)."""
    from mpi4py import MPI

    total = np.array(mine, np.int64)
    comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
    mean = total.mean()
    return float(total.max() / mean) if mean > 0 else 1.0


def _now() -> float:
    import time

    return time.perf_counter()
