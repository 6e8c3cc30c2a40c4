"""The step-time model: seed 000's decomposition T = T_host + T_transfer + T_pipeline
(PCI-HIB eqs. 2-22), extended with the communication term of MPI ranks (seed 001, ping-pong
T = C1 + C2 * bytes) and the I/O term of the out-of-core store (seed 002/004, block
T = C1 + C2 * bytes), every term from the constants of a machine file
(:mod:`gravpipe.perfmodel.machinefile`).

Terms, as the seeds write them (N particles, P ranks, n_i i-particles of a call):

- pipeline: direct summation ``n_j (n_i + n_half) / R`` (R the kernel's rate in the mode
  and precision at the thread count; n_half the small-i-set falloff, the analogue of the
  padding factors g_1..g_3 of eqs. 9, 14, 22); the treecode ``N (pp t_pp + pc t_pc)``,
  interactions per body from theta, N and n_crit (the shape of eq. 21:
  ``pp ~ a theta^-p f(n_g)``, ``pc ~ theta^-q (b + c log10 N)``);
- host: Hermite ``particle_steps t_ps + blocks n_j t_jpred`` (eqs. 6, 11); leapfrog
  ``N t_kd``; tree ``N (t_sort + t_build + t_moments) + MAC tests t_mac`` (eq. 17);
- transfer: ``calls C1 + C2 bytes`` (eq. 2);
- communication: the locally essential tree, ``bytes = k (N/P)^(2/3)`` (surface of a
  domain), from min(P - 1, 26) neighbours, the allgather of every domain's top cells
  (P x 4 KiB: the term that grows with P) and allreduces of 2 ceil(log2 P) messages; every
  step cuts the domains again and migrates the particles that left (the state distributed:
  each rank holds its domain): ``domain_fixed log2 P + domain_per_body N/P``;
  direct on shares: the active i-set gathered and its partial forces returned;
- I/O: bytes swapped per step ``(read_passes + write_passes) * 96 N`` in pages, ``pages C1 +
  C2 bytes``.

A whole run (:func:`predict`) is what ``gravpipe run`` does: the start-up force evaluation,
the steps to t_end (Hermite: block steps from the block-size distribution of a Plummer
model, ``steps per particle ~ s (N/N_ref)^a (eta/eta_ref)^-1/2``), and the diagnostics rows
(a float64 all-pairs evaluation each, for direct gravity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gravpipe.perfmodel.machinefile import MachineFileError

TERMS = ("host", "transfer", "pipeline", "communication", "io")
BYTES_J = {"acc+pot": 32, "acc+jerk+pot": 56}       # per j-particle written (pos, mass[, vel])
BYTES_I = {"acc+pot": 32, "acc+jerk+pot": 56}       # per i-particle written
BYTES_RESULT = {"acc+pot": 32, "acc+jerk+pot": 56}  # per result read
OOC_BYTES_PER_PARTICLE = 96                       # gravpipe.bench.ooc.DATA_BYTES_PER_PARTICLE
LET_NEIGHBOURS = 26
DOMAIN_ROUNDS = 66        # allreduces of a domain cut: frame, total cost, <= 63 bisection rounds, boxes
TOP_BYTES_PER_RANK = 4096  # a domain's top cells (multipoles) and curve key range, allgathered
DIRECT_ROW_WORK, TREE_ROW_WORK, OWN_ROW_WORK = 100, 200, 10  # gravity.py, run_loop.py


@dataclass
class Breakdown:
    host: float = 0.0
    transfer: float = 0.0
    pipeline: float = 0.0
    communication: float = 0.0
    io: float = 0.0

    @property
    def total(self) -> float:
        return self.host + self.transfer + self.pipeline + self.communication + self.io

    def __add__(self, o: "Breakdown") -> "Breakdown":
        return Breakdown(*(getattr(self, t) + getattr(o, t) for t in TERMS))

    def scaled(self, k: float) -> "Breakdown":
        return Breakdown(*(k * getattr(self, t) for t in TERMS))

    def as_dict(self) -> dict[str, float]:
        return {t: getattr(self, t) for t in TERMS}

    def largest(self) -> str:
        return max(TERMS, key=lambda t: getattr(self, t))


@dataclass
class Prediction:
    """What a run costs: one force evaluation on all N, one step, the whole run."""
    seconds_per_force_evaluation: float
    seconds_per_step: float
    seconds: float
    steps: float
    breakdown: Breakdown                 # of the whole run
    step_breakdown: Breakdown            # of one step
    settings: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"seconds_per_force_evaluation": self.seconds_per_force_evaluation,
                "seconds_per_step": self.seconds_per_step, "seconds": self.seconds, "steps": self.steps,
                "breakdown": self.breakdown.as_dict(), "step_breakdown": self.step_breakdown.as_dict(),
                "settings": self.settings, "notes": self.notes}


class Model:
    """The constants of one machine file and the terms built from them."""

    def __init__(self, doc: dict):
        self.doc = doc
        self.c = doc["constants"]

    # ---- machine -------------------------------------------------------------------
    def threads(self, threads: int | None) -> int:
        cores = int(self.c["cpu"]["cores"])
        return cores if threads is None else max(1, min(int(threads), cores))

    def _device(self, backend: str) -> dict:
        if backend == "cuda":
            if "cuda" not in self.c:
                raise MachineFileError(f"{self.name}: has no GPU constants (constants.cuda); "
                                       "use --backend cpu or a machine file with a GPU")
            return self.c["cuda"]
        return self.c["cpu"]

    @property
    def name(self) -> str:
        return str(self.doc.get("machine", {}).get("name", "machine"))

    def rate(self, mode: str, precision: str, backend: str = "cpu", threads: int | None = None) -> float:
        """Interactions per second of the direct kernel on large i-sets."""
        dev = self._device(backend)
        r = float(dev["kernel"][mode][precision])
        if backend == "cuda":
            return r
        return r * self.speedup(threads, dev) / self.speedup(int(dev["threads"]), dev)

    def speedup(self, threads: int | None, part: dict) -> float:
        """Threads' speed-up over one, 1 + (t - 1) e (e: the part's measured parallel
        efficiency, 1 when not given; below 0 on a shared machine whose other cores are
        busy, where a second thread waits for time slices at every join)."""
        e = float(part.get("parallel_efficiency", 1.0))
        return 1 + (self.threads(threads) - 1) * e

    def _transfer(self, backend: str) -> dict:
        t = self.c["transfer"]
        return t["cuda"] if backend == "cuda" and "cuda" in t else t["cpu"]

    # ---- direct summation ------------------------------------------------------------
    def direct_call(self, n_i: float, n_j: float, mode: str = "acc+pot", precision: str = "mixed",
                    backend: str = "cpu", threads: int | None = None, calls: float = 1.0) -> Breakdown:
        """``calls`` pipeline calls of n_i i-particles against n_j j-particles (eqs. 2-4, 7)."""
        dev = self._device(backend)
        r = self.rate(mode, precision, backend, threads)
        nh = float(dev["small_i_half"])
        pipe = calls * (float(dev["call_s"]) + n_j * (n_i + nh) / r)
        tr = self._transfer(backend)
        nbytes = calls * (n_j * BYTES_J[mode] + n_i * (BYTES_I[mode] + BYTES_RESULT[mode]))
        return Breakdown(pipeline=pipe, transfer=calls * float(tr["latency_s"]) + float(tr["seconds_per_byte"]) * nbytes)

    def message(self, nbytes: float, count: float = 1.0) -> float:
        net = self.c["network"]
        return count * float(net["latency_s"]) + float(net["seconds_per_byte"]) * nbytes * count

    def allreduce(self, nbytes: float, ranks: int) -> float:
        if ranks <= 1:
            return 0.0
        return self.message(nbytes, 2 * math.ceil(math.log2(ranks)))

    def direct_evaluation(self, n: int, mode: str, precision: str, backend: str, threads: int | None,
                          ranks: int = 1, n_i: float | None = None) -> Breakdown:
        """One force evaluation of n_i (default all N) particles; over P ranks each holds
        N/P j-particles and the partial forces are reduced (j-parallel)."""
        k = float(n if n_i is None else n_i)
        b = self.direct_call(k, n / ranks, mode, precision, backend, threads)
        b.communication = self.allreduce(k * BYTES_RESULT[mode], ranks)
        return b

    # ---- Hermite block steps -----------------------------------------------------------
    def hermite_work(self, n: int, t: float, eta: float) -> tuple[float, float]:
        """(particle steps, block steps) over a time t of a Plummer model of n particles."""
        h = self.c["hermite"]
        x = n / float(h["n_ref"])
        e = (eta / float(h["eta_ref"])) ** -0.5
        ps = n * float(h["steps_per_particle_per_time"]) * x ** float(h["steps_n_exponent"]) * e * t
        blocks = float(h["blocks_per_time"]) * x ** float(h["blocks_n_exponent"]) * e * t
        blocks = max(1.0, min(blocks, ps))
        return ps, blocks

    def hermite_steps(self, n: int, particle_steps: float, blocks: float, precision: str, backend: str,
                      threads: int | None, ranks: int = 1) -> Breakdown:
        nj = n / ranks
        mean_i = particle_steps / blocks
        b = self.direct_call(mean_i, nj, "acc+jerk+pot", precision, backend, threads, calls=blocks)
        host = self.c["host"]
        # the share of the j-set a block rewrites (the integrator keeps j-particles between blocks)
        f = float(host.get("hermite_j_fraction", 1.0))
        tr = self._transfer(backend)
        b.transfer -= (1 - f) * float(tr["seconds_per_byte"]) * blocks * nj * BYTES_J["acc+jerk+pot"]
        b.host = (particle_steps * float(host["hermite_particle_step_s"]) + blocks * nj * float(host["hermite_block_j_s"])
                  + particle_steps * nj * float(host.get("hermite_interaction_s", 0.0)))
        if ranks > 1:
            b.communication = blocks * (self.allreduce(mean_i * BYTES_RESULT["acc+jerk+pot"], ranks)
                                        + self.message(mean_i * BYTES_I["acc+jerk+pot"], math.ceil(math.log2(ranks))))
        return b

    # ---- treecode ----------------------------------------------------------------------
    def tree_work(self, n: float, theta: float, n_crit: int | None = None) -> dict[str, float]:
        """Interactions and MAC tests per body (pp, pc, mac) for n bodies of a Plummer model."""
        t = self.c["tree"]
        nc = float(n_crit or t["n_crit_ref"])

        def f(ng: float) -> float:  # eq. 21's near-field part, n_g = n_crit / 4
            return ng + 14 * ng ** (2 / 3) + 84 * ng ** (1 / 3)

        pp = float(t["pp_a"]) * theta ** -float(t["pp_theta_exp"]) * f(nc / 4) / f(float(t["n_crit_ref"]) / 4)
        pc = theta ** -float(t["pc_theta_exp"]) * max(0.0, float(t["pc_b"]) + float(t["pc_c"]) * math.log10(max(n, 2)))
        pp = min(pp, n)
        return {"pp": pp, "pc": pc, "mac": float(t["mac_a"]) * (pp + pc)}

    def tree_evaluation(self, n: int, theta: float, backend: str = "cpu", threads: int | None = None,
                        ranks: int = 1, n_crit: int | None = None) -> Breakdown:
        """One self-gravity evaluation (sort, build, moments, walk, lists) on each rank's N/P,
        with the domain cut and the essential trees over ranks (the state distributed: each
        rank holds its domain, as ``gravpipe run`` over ranks keeps it)."""
        t = self.c["tree"]
        nl = n / ranks
        scale = self.speedup(int(t["threads"]), t) / self.speedup(threads, t)
        w = self.tree_work(n, theta, n_crit)
        host = nl * (float(t["sort_per_body_s"]) + float(t["build_per_body_s"]) + float(t["moments_per_body_s"])
                     + w["mac"] * float(t["mac_s"])) * scale
        pipe = nl * (w["pp"] * float(t["pp_s"]) + w["pc"] * float(t["pc_s"])) * scale
        if backend == "cuda":
            self._device("cuda")
            pipe /= float(t.get("cuda_list_speedup", 1.0))
        b = Breakdown(host=host, pipeline=pipe)
        if ranks > 1:
            let = float(self.c["let"]["bytes_coeff"]) * nl ** (2 / 3)
            # the essential tree from the neighbours, the allgather of every domain's top cells
            # and key range (P pieces: it grows with P while the rest shrinks), an allreduce
            top = float(self.c["let"].get("top_bytes_per_rank", TOP_BYTES_PER_RANK))
            b.communication = (self.message(let, 1) + (min(ranks - 1, LET_NEIGHBOURS) - 1) * self.message(0)
                               + self.message(0, math.ceil(math.log2(ranks))) + self.message((ranks - 1) * top)
                               - self.message(0) + self.allreduce(64, ranks))
            b = b + self.tree_domain(n, ranks)
        return b

    def tree_domain(self, n: float, ranks: int) -> Breakdown:
        """What a step of the tree over ranks costs besides each rank's own tree and the
        essential trees' bytes (every step cuts the domains again): the latency-bound
        collectives of the domain cut (the splitters' bisection: ~DOMAIN_ROUNDS allreduces, each 2 log2 P
        messages deep) and the per-body work of curve keys, migration, export and graft.
        The last two from ``bench model``'s two-rank calibration (``let.domain_fixed_s`` at
        P = 2, scaled by log2 P; ``let.domain_per_body_s`` a body of N/P); a machine file
        without them prices the collectives at its network latency and the per-body work
        at 0."""
        if ranks <= 1:
            return Breakdown()
        let = self.c["let"]
        deep = math.ceil(math.log2(ranks))
        fixed = let.get("domain_fixed_s")
        comm = (float(fixed) * deep if fixed is not None else DOMAIN_ROUNDS * self.allreduce(8, ranks))
        return Breakdown(communication=comm, host=float(let.get("domain_per_body_s", 0.0)) * n / ranks)

    def ooc_io(self, n_local: float, memory_budget: int) -> Breakdown:
        """Bytes swapped in one step out of core (the store's passes over the data), in pages."""
        from gravpipe.store import page_bytes_for_budget
        o, s = self.c["ooc"], self.c["storage"]
        data = OOC_BYTES_PER_PARTICLE * n_local
        swapped = (float(o["read_passes"]) + float(o["write_passes"])) * data
        page = page_bytes_for_budget(int(memory_budget))
        exposed = float(o.get("exposed_fraction", 1.0))  # what read-ahead and write-behind do not hide
        return Breakdown(io=exposed * (swapped / page * float(s["latency_s"]) + swapped * float(s["seconds_per_byte"])))


def _ceil_steps(t: float, dt: float) -> int:
    return max(0, math.ceil(t / dt - 1e-9))


def predict(machine: dict, *, gravity: str = "direct", integrator: str | None = None, n: int = 2048,
            theta: float = 0.6, t_end: float = 4.0, threads: int | None = None, ranks: int = 1,
            memory_budget: int | None = None, backend: str = "cpu", precision: str = "mixed",
            eta: float = 0.02, dt_max: float = 0.125, dt: float = 1 / 128, n_crit: int | None = None,
            precise_energy: bool | None = None) -> Prediction:
    """The time of ``gravpipe run`` with these settings from a Plummer model at t = 0, on the
    machine of ``machine`` (a machine-file document)."""
    if gravity not in ("direct", "tree"):
        raise ValueError(f"gravity: unknown {gravity!r} (direct or tree)")
    integrator = integrator or ("hermite" if gravity == "direct" else "leapfrog")
    if integrator not in ("hermite", "leapfrog"):
        raise ValueError(f"integrator: unknown {integrator!r} (hermite or leapfrog)")
    if gravity == "tree" and integrator == "hermite":
        raise ValueError("gravity tree runs leapfrog (the treecode computes no jerks)")
    if n < 2 or ranks < 1 or not (t_end >= 0) or not (theta > 0):
        raise ValueError("n must be >= 2, ranks >= 1, t_end >= 0, theta > 0")
    if memory_budget is not None and gravity != "tree":
        raise ValueError("memory_budget (out of core) is for gravity tree with leapfrog")
    if backend in (None, "auto"):  # as backend="auto" picks: the GPU for direct sums when there is one
        backend = "cuda" if gravity == "direct" and "cuda" in machine["constants"] else "cpu"
    if backend not in ("cpu", "cuda"):
        raise ValueError(f"backend: unknown {backend!r} (auto, cpu or cuda)")
    m = Model(machine)
    th = m.threads(threads)
    settings = {"gravity": gravity, "integrator": integrator, "n": n, "theta": theta if gravity == "tree" else None,
                "t_end": t_end, "threads": th, "ranks": ranks, "memory_budget": memory_budget, "backend": backend,
                "precision": precision, "machine": m.name}
    notes: list[str] = []
    if precise_energy is None:
        precise_energy = gravity == "direct"
    row_eval = m.direct_evaluation(n, "acc+pot", "double", "cpu" if backend == "cpu" else backend, th, ranks)
    if gravity == "direct":
        mode = "acc+jerk+pot" if integrator == "hermite" else "acc+pot"
        evaluation = m.direct_evaluation(n, mode, precision, backend, th, ranks)
        evaluation.host += n / ranks * float(m.c["host"]["hermite_particle_step_s" if integrator == "hermite"
                                                           else "leapfrog_particle_step_s"])
        if integrator == "hermite":
            ps, blocks = m.hermite_work(n, t_end, eta)
            steps_b = m.hermite_steps(n, ps, blocks, precision, backend, th, ranks) if t_end > 0 else Breakdown()
            steps = blocks if t_end > 0 else 0.0
            quanta = _ceil_steps(t_end, dt_max)
            notes.append(f"{ps:.3g} particle steps in {blocks:.3g} blocks (mean block {ps / max(blocks, 1):.0f})")
        else:
            steps = _ceil_steps(t_end, dt)
            ps, quanta = steps * n, steps
            steps_b = evaluation.scaled(steps)
        row_work = DIRECT_ROW_WORK
    else:
        evaluation = m.tree_evaluation(n, theta, backend, th, ranks, n_crit)
        kick = Breakdown(host=n / ranks * float(m.c["host"]["leapfrog_particle_step_s"]))
        step = evaluation + kick
        if memory_budget is not None:
            step = step + m.ooc_io(n / ranks, memory_budget)
            notes.append("out of core: every step swaps the store's passes over the particles' pages")
        steps = _ceil_steps(t_end, dt)
        ps, quanta = steps * n, steps
        steps_b = step.scaled(steps)
        row_work = TREE_ROW_WORK
    if not precise_energy:
        row_work = OWN_ROW_WORK
    rows = 2 + min(max(quanta - 1, 0), math.floor(ps / (row_work * n)))
    row_cost = row_eval if precise_energy else Breakdown(host=n / ranks * 1e-7)
    start = evaluation if memory_budget is None else evaluation + m.ooc_io(n / ranks, memory_budget)
    total = start + steps_b + row_cost.scaled(rows)
    per_step = steps_b.scaled(1 / steps) if steps else evaluation
    notes.append(f"{steps:.4g} steps, {rows} diagnostics rows "
                 f"({'float64 all-pairs each' if precise_energy else 'from the run own forces'})")
    return Prediction(seconds_per_force_evaluation=evaluation.total, seconds_per_step=per_step.total,
                      seconds=total.total, steps=float(steps), breakdown=total, step_breakdown=per_step,
                      settings=settings, notes=notes)
