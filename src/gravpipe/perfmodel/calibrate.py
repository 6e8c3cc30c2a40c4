"""``gravpipe bench model``: calibrate the model's constants on this machine, keep them in
the user cache, then run configurations and print the prediction next to the measurement.

Every constant comes from the existing benchmarks' own functions (``gravpipe.bench``:
``direct.measure_pipeline``, ``hermite.run``, ``tree.measure_tree``, ``ooc.ratio``,
``storage.run``, ``pingpong.run`` and ``benchmarks/mpi_scaling.py`` under ``mpiexec -n 2``).
The machine is shared and slow to settle, so every timing is the median of repeats of
small problems, and calibration sizes are not comparison sizes: a configuration is
"calibrated" only when the constants came from the same measurement (goal 25%), the others
(other N, theta, thread counts, ranks) test the model (goal 30%).

A shared machine's speed drifts from minute to minute, so calibration points and the
configurations compared are measured in the same interleaved rounds (each round measures
every point once; the figure is the median over rounds), and each direct-summation point is
a sustained loop of calls (>= 0.2 s, the mean per call), as a run's steps are, not the best
of a few short calls.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np

import gravpipe as gp
from gravpipe.perfmodel import machinefile
from gravpipe.perfmodel.model import Breakdown, Model, predict
from gravpipe.tree import DEFAULT_THETA

GOAL_CALIBRATED, GOAL_OTHER = 0.25, 0.30
EPS = 1 / 64


#: max / min over the rounds of each point measured in rounds: the machine's own noise
SPREAD: dict = {}


def _threads() -> int:
    from gravpipe import _core
    return int(_core.max_threads())


def _rounds(tasks: dict[str, Callable[[], object]], rounds: int, say, what: str) -> dict[str, list]:
    """Every task once per round, ``rounds`` rounds: drift over minutes hits all alike."""
    out: dict[str, list] = {k: [] for k in tasks}
    for r in range(rounds):
        say(f"{what}: round {r + 1} of {rounds} ({len(tasks)} points)")
        for k, fn in tasks.items():
            out[k].append(fn())
    return out


def _med(values, key=None):
    """The median element (by ``key``) of an odd or even list: the lower middle one."""
    v = sorted(values, key=key)
    return v[(len(v) - 1) // 2]


_PLUMMER: dict[int, object] = {}


def _plummer(n: int):
    if n not in _PLUMMER:
        _PLUMMER[n] = gp.ic.plummer(n, seed=1)
    return _PLUMMER[n]


def _direct_seconds(n: int, precision: str, jerk: bool, threads: int | None, n_i: int | None = None,
                    min_seconds: float = 0.2) -> float:
    """Compute seconds per call of the direct pipeline (n_i of a Plummer N against all N, own
    term excluded), the mean over a loop of calls lasting >= min_seconds."""
    p = _plummer(n)
    pipe = gp.Pipeline(backend="cpu", precision=precision, eps=EPS, threads=threads)
    pipe.set_j(p.pos, p.mass, p.vel if jerk else None)
    k = n if n_i is None else n_i
    pos, vel = np.ascontiguousarray(p.pos[:k]), (np.ascontiguousarray(p.vel[:k]) if jerk else None)
    exclude = np.arange(k)
    pipe.forces(pos, vel, exclude=exclude)  # warm
    pipe.reset_stats()
    calls, t0 = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - t0 < min_seconds:
        pipe.forces(pos, vel, exclude=exclude)
        calls += 1
    return pipe.stats.seconds_compute / calls


# ---- calibration -------------------------------------------------------------------------

N_KERNEL = 8192
DIRECT_CAL = {f"{m} {p}": (N_KERNEL, p, m != "acc+pot", None, None)
              for m in ("acc+pot", "acc+jerk+pot") for p in ("mixed", "double")}
DIRECT_CAL["acc+pot mixed 1 thread"] = (N_KERNEL, "mixed", False, 1, None)
DIRECT_CMP = {"direct acc+pot mixed N=4096": (4096, "mixed", False, None, None),
              "direct acc+pot mixed N=16384": (16384, "mixed", False, None, None),
              "direct acc+jerk+pot mixed N=16384 n_i=256 (a Hermite block)": (16384, "mixed", True, None, 256),
              "direct acc+jerk+pot mixed N=16384 n_i=1024": (16384, "mixed", True, None, 1024),
              "direct acc+pot mixed N=16384 threads=1": (16384, "mixed", False, 1, None)}


def _direct(rounds: int, say) -> tuple[dict, dict]:
    tasks = {k: (lambda a=a: _direct_seconds(*a)) for k, a in (DIRECT_CAL | DIRECT_CMP).items()}
    raw = _rounds(tasks, rounds, say, "direct summation")
    res = {k: float(np.median(v)) for k, v in raw.items()}
    SPREAD.update({k: max(v) / min(v) for k, v in raw.items()})
    th = _threads()
    n = N_KERNEL
    kernel = {m: {p: n * (n - 1) / res[f"{m} {p}"] for p in ("mixed", "double")} for m in ("acc+pot", "acc+jerk+pot")}
    one, many = res["acc+pot mixed 1 thread"], res["acc+pot mixed"]
    eff = min(1.0, max(-0.5, (one / many - 1) / (th - 1))) if th > 1 else 1.0
    return {"kernel": kernel, "threads": th, "small_i_half": 0.0, "call_s": 0.0, "parallel_efficiency": eff}, res


def _blocks_fit(rows, kernel: dict) -> tuple[float, float]:
    """(call_s, small_i_half) from the Hermite runs' compute time: compute = blocks call_s +
    N (particle_steps + blocks n_half) / R (eqs. 12, 14: the pipelines' loss on small
    i-sets; on a shared CPU the fork and join of every block is most of it)."""
    r = kernel["acc+jerk+pot"]["mixed"]
    y = np.array([h.seconds_compute - h.n * h.particle_steps / r for h in rows])
    a = np.array([[h.blocks, h.blocks * h.n / r] for h in rows], float)
    (c, nh), *_ = np.linalg.lstsq(a / np.abs(y)[:, None], np.sign(y), rcond=None)
    if c < 0 or nh < 0:  # the padding alone (it grows with the j-set, as eq. 14's does)
        c, nh = 0.0, max(0.0, float(np.median(y / a[:, 1])))
    return float(c), float(nh)


def _j_fraction(rows, tr: dict) -> float:
    """The share of the N j-particles a Hermite block writes, from the runs' transfer time
    against T = blocks C1 + C2 (f blocks N 56 + particle_steps 112 bytes) (eq. 13)."""
    c1, c2 = tr["latency_s"], tr["seconds_per_byte"]
    if c2 <= 0:
        return 1.0
    f = [(h.seconds_transfer - h.blocks * c1 - c2 * h.particle_steps * 112) / (c2 * h.blocks * h.n * 56)
         for h in rows]
    return float(min(1.0, max(0.0, np.median(f))))


HERMITE_CAL = (1024, 8192)
HERMITE_CMP = 4096
WHOLE_RUN = (2048, 0.25)


def _whole_run(n: int, t_end: float, gravity: str = "direct") -> float:
    """Wall seconds of what ``gravpipe run`` does: the model drawn, the first forces, the
    evolve with its diagnostics rows."""
    t0 = time.perf_counter()
    sim = gp.Simulation.from_model("plummer", n, 1, gravity=gravity, eps=EPS, threads=_threads())
    sim.evolve(t_end, progress=False)
    return time.perf_counter() - t0


def _hermite(t_end: float, rounds: int, say) -> tuple[dict, dict, list, object, float]:
    from gravpipe.bench import hermite
    th = _threads()
    tasks = {n: (lambda n=n: hermite.run(n=n, t_end=t_end, threads=th)) for n in HERMITE_CAL + (HERMITE_CMP,)}
    tasks["whole"] = lambda: _whole_run(*WHOLE_RUN)
    res = _rounds(tasks, rounds, say, f"Hermite block steps, t = 0 -> {t_end:g}")
    for key, v in res.items():
        w = [x if isinstance(x, float) else x.seconds_total for x in v]
        SPREAD[("hermite", key)] = max(w) / min(w)
    rows = [_med(res[n], key=lambda r: r.seconds_total) for n in HERMITE_CAL]
    cmp_row = _med(res[HERMITE_CMP], key=lambda r: r.seconds_total)
    whole = float(np.median(res["whole"]))
    ps = np.array([r.particle_steps for r in rows], float)
    bl = np.array([r.blocks for r in rows], float)
    ns = np.array([r.n for r in rows], float)
    spp, bpt = ps / ns / t_end, bl / t_end
    lx = math.log(ns[-1] / ns[0])
    consts = {"n_ref": int(ns[0]), "eta_ref": rows[0].eta, "steps_per_particle_per_time": float(spp[0]),
              "steps_n_exponent": float(math.log(spp[-1] / spp[0]) / lx),
              "blocks_per_time": float(bpt[0]), "blocks_n_exponent": float(math.log(bpt[-1] / bpt[0]) / lx)}
    # host = a particle_steps + b interactions (eq. 11's T_host2 per particle step, and the host's
    # share that grows with the pipeline's work: on a shared machine the host thread waits for
    # time slices while the pipeline threads run), relative least squares
    host = np.array([r.seconds_host for r in rows])
    inter = np.array([r.interactions for r in rows], float)
    a = np.stack([ps, inter], axis=1) / host[:, None]
    (ca, cb), *_ = np.linalg.lstsq(a, np.ones_like(host), rcond=None)
    if ca < 0 or cb < 0:
        ca, cb = float(np.median(host / ps)), 0.0
    return consts, {"hermite_particle_step_s": float(ca), "hermite_block_j_s": 0.0,
                    "hermite_interaction_s": float(cb)}, rows, cmp_row, whole


TREE_CAL = [(30000, 0.5, None), (30000, 0.8, None), (120000, 0.5, None), (120000, 0.8, None), (30000, 0.5, 1)]
TREE_CMP = [(60000, 0.6, None), (250000, 0.6, None), (120000, 0.4, None), (120000, 0.6, 1)]
TREE_RUN = (120000, 4 / 128)
TREE_COUNT_SIZES = (480000, 1000000, 2000000)  # interaction counts only, for the law's N dependence


TREE_MIN_SECONDS = 0.3  # of work per round and point: one 0.02 s evaluation varies 1.65x between rounds
_TREE_FIELDS = ("seconds_sort", "seconds_build", "seconds_moments", "seconds_walk", "seconds_evaluate",
                "pp_per_body", "pc_per_body", "mac_per_body")


def _tree_once(n: int, theta: float, threads: int | None, min_seconds: float = TREE_MIN_SECONDS):
    """(seconds, stats) of one treecode evaluation (build + forces) of a Plummer N: the mean
    over evaluations repeated until >= min_seconds of work (the stage seconds likewise)."""
    from types import SimpleNamespace

    from gravpipe.bench.tree import make_model, measure_tree
    if ("tree", n) not in _PLUMMER:
        _PLUMMER[("tree", n)] = make_model("plummer", n)
    pos, mass = _PLUMMER[("tree", n)]
    secs, stats = [], []
    while not secs or sum(secs) < min_seconds:
        sec, st, _ = measure_tree(pos, mass, EPS, theta, True, 1, threads, "mixed")
        secs.append(sec)
        stats.append(st)
    mean = SimpleNamespace(**{f: float(np.mean([getattr(s, f) for s in stats])) for f in _TREE_FIELDS},
                           evaluations=len(secs))
    return float(np.mean(secs)), mean


def _tree_counts(n: int, theta: float) -> tuple[float, float, float]:
    """(pp, pc, MAC tests) per body of one evaluation: counts do not vary between repeats."""
    return tuple(getattr(_tree_once(n, theta, None, 0.0)[1], f) for f in ("pp_per_body", "pc_per_body",
                                                                           "mac_per_body"))


def _tree_run(n: int, t_end: float) -> dict:
    """A tree leapfrog run as ``gravpipe run --gravity tree`` does it: its wall time and the
    host seconds per particle step of its kicks and drifts."""
    t0 = time.perf_counter()
    sim = gp.Simulation.from_model("plummer", n, 1, gravity="tree", eps=EPS, threads=_threads())
    before = sim.timings
    sim.evolve(t_end, progress=False)
    t = sim.timings
    return {"wall": time.perf_counter() - t0,
            "host_per_particle_step": (t.host - before.host) / max(t.particle_steps - before.particle_steps, 1)}


def _tree(rounds: int, say) -> tuple[dict, list, dict, dict]:
    tasks = {k: (lambda k=k: _tree_once(*k)) for k in TREE_CAL + TREE_CMP}
    tasks["run"] = lambda: _tree_run(*TREE_RUN)
    res = _rounds(tasks, rounds, say, "treecode")
    for key, v in res.items():
        w = [x["wall"] if isinstance(x, dict) else x[0] for x in v]
        SPREAD[("tree", key)] = max(w) / min(w)
    med = {k: _med(res[k], key=lambda r: r[0]) for k in TREE_CAL + TREE_CMP}
    run = _med(res["run"], key=lambda r: r["wall"])
    run["host_per_particle_step"] = float(np.median([r["host_per_particle_step"] for r in res["run"]]))
    rows = []
    for (n, th, threads) in TREE_CAL[:4]:
        sec, st = med[(n, th, threads)]
        rows.append({"n": n, "theta": th, "seconds": sec, "sort": st.seconds_sort, "build": st.seconds_build,
                     "moments": st.seconds_moments, "walk": st.seconds_walk, "evaluate": st.seconds_evaluate,
                     "pp": st.pp_per_body, "pc": st.pc_per_body, "mac": st.mac_per_body})
    # the interaction counts (deterministic: one evaluation each) of larger N for the law's N
    # dependence: on 3e4 and 1.2e5 alone the far field's log10 N slope is the steep one of small
    # N and overshoots N = 1e7 by ~16%
    say(f"treecode: interaction counts at N = {', '.join(f'{k:.0e}' for k in TREE_COUNT_SIZES)}")
    counts = [{"n": k, "theta": t, **dict(zip(("pp", "pc", "mac"), _tree_counts(k, t)))}
              for k in TREE_COUNT_SIZES for t in (TREE_CAL[0][1], TREE_CAL[1][1])]
    for k in TREE_COUNT_SIZES:
        _PLUMMER.pop(("tree", k), None)
    law = rows + counts
    sizes = sorted({r["n"] for r in law})
    thetas = sorted({r["theta"] for r in law})
    nl = np.array([r["n"] for r in law], float)
    thl = np.array([r["theta"] for r in law], float)
    ppl, pcl = np.array([r["pp"] for r in law]), np.array([r["pc"] for r in law])
    # pp = a theta^-p (eq. 21's near field does not grow with N)
    (lp, la), *_ = np.linalg.lstsq(np.stack([-np.log(thl), np.ones_like(thl)], 1), np.log(ppl), rcond=None)
    # pc theta^q = b + c log10 N (eq. 21's far field), q from the theta pairs at each N
    q = float(np.mean([math.log(pcl[(nl == k) & (thl == thetas[0])][0] / pcl[(nl == k) & (thl == thetas[-1])][0])
                       / math.log(thetas[-1] / thetas[0]) for k in sizes]))
    (c, b), *_ = np.linalg.lstsq(np.stack([np.log10(nl), np.ones_like(nl)], 1), pcl * thl ** q, rcond=None)
    n = np.array([r["n"] for r in rows], float)
    th = np.array([r["theta"] for r in rows], float)
    pp, pc = np.array([r["pp"] for r in rows]), np.array([r["pc"] for r in rows])
    mac = np.array([r["mac"] for r in rows])
    ev = np.array([r["evaluate"] for r in rows])
    a = np.stack([n * pp, n * pc], 1) / ev[:, None]
    (pp_s, pc_s), *_ = np.linalg.lstsq(a, np.ones_like(ev), rcond=None)
    if pp_s <= 0 or pc_s < 0:
        pp_s = pc_s = float(np.median(ev / (n * (pp + pc))))
    walk = np.array([r["walk"] for r in rows])
    per = {k: float(np.median([r[k] / r["n"] for r in rows])) for k in ("sort", "build", "moments")}
    th_all = _threads()
    one = med[TREE_CAL[4]][0]
    eff = min(1.0, max(-0.5, (one / rows[0]["seconds"] - 1) / (th_all - 1))) if th_all > 1 else 1.0
    consts = {"threads": th_all, "sort_per_body_s": per["sort"], "build_per_body_s": per["build"],
              "moments_per_body_s": per["moments"], "mac_s": float(np.median(walk / (n * mac))),
              "pp_s": float(pp_s), "pc_s": float(pc_s), "pp_a": float(math.exp(la)), "pp_theta_exp": float(lp),
              "pc_b": float(b), "pc_c": float(c), "pc_theta_exp": q, "mac_a": float(np.median(mac / (pp + pc))),
              "n_crit_ref": 256, "parallel_efficiency": eff}
    return consts, rows + counts, {k: med[k] for k in TREE_CMP}, run


def _cpu_transfer(repeats: int) -> dict:
    """T = C1 + C2 * bytes of the pipeline's writes and reads (format conversion on the
    CPU), from its own stage timers."""
    from gravpipe.bench.costfit import fit_cost
    b, s = [], []
    for n in (256, 4096, 65536):
        p = gp.ic.plummer(n, seed=1)
        pipe = gp.Pipeline(backend="cpu", precision="mixed", eps=EPS)
        k = min(n, 256)
        for _ in range(repeats):
            pipe.reset_stats()
            pipe.set_j(p.pos, p.mass)
            pipe.forces(np.ascontiguousarray(p.pos[:k]), exclude=np.arange(k))
            st = pipe.stats
            b += [st.bytes_j_write, st.bytes_i_write + st.bytes_result_read]
            s += [st.seconds_j_write, st.seconds_i_write + st.seconds_result_read]
    b, s = np.array(b, float), np.maximum(np.array(s, float), 1e-9)
    f = fit_cost(b, s)
    return {"latency_s": max(0.0, f.latency_s), "seconds_per_byte": max(f.seconds_per_byte, 0.0)}


def _storage(scratch: str, say) -> dict:
    from gravpipe.bench import storage
    say("storage: block write/read on the scratch disk")
    rows, _ = storage.run(disk_dir=scratch, shm_dir=os.path.join(scratch, "no-shm"),
                          sizes=[65536, 1 << 20, 4 << 20])
    fits = storage.fits(rows)
    return {"latency_s": float(np.mean([max(f.latency_s, 0.0) for f in fits])),
            "seconds_per_byte": float(np.mean([f.seconds_per_byte for f in fits])),
            "_fits": [asdict(f) for f in fits]}


def _ooc(n: int, budget: int, scratch: str, say) -> dict:
    from gravpipe.bench import ooc
    say(f"out of core: one leapfrog step, N = {n}, budget {budget / 2**20:.0f} MiB, and in core")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        row = ooc.ratio(n, scratch, budget_fraction=budget / (ooc.DATA_BYTES_PER_PARTICLE * n), repeat=3)
    pairs = np.array(row["seconds_per_repeat"])
    row["seconds_in_core"], row["seconds_out_of_core"] = float(np.median(pairs[:, 0])), float(np.median(pairs[:, 1]))
    return row


def _mpi_probe(out: str, say) -> dict | str:
    """``mpiexec -n 2`` the probe; its JSON, or the reason it was skipped."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed"
    mpiexec = shutil.which("mpiexec") or shutil.which(os.path.join(os.path.dirname(sys.executable), "mpiexec"))
    if not mpiexec:
        return "no mpiexec on PATH"
    say("2 MPI ranks: ping-pong, j-parallel direct sum, treecode with essential trees")
    cmd = [mpiexec, "-n", "2", sys.executable, "-m", "gravpipe.perfmodel._mpi_probe", out]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        return "mpiexec -n 2 took more than 240 s"
    if r.returncode != 0 or not os.path.exists(out):
        return f"mpiexec -n 2 failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-300:]}"
    with open(out) as f:
        return json.load(f)


def _domain_fit(probe: dict, net: dict, serial: dict) -> dict:
    """The two-rank tree's constants from the probe's calibration sizes: the essential trees'
    bytes ``k (N/P)^(2/3)`` a rank, and what a step costs besides each rank's own tree as
    the serial constants (``serial``: "tree" and "cpu") predict it at one thread and the essential trees' bytes
    priced at the ping-pong fit, ``T = C1 + C2 N/P``: C1 the latency-bound collectives of the
    domain cut, C2 a body's curve key, migration, export and graft, and what a rank's own
    tree at one thread costs beyond the prediction from the serial constants (that
    shortfall, ~25% on 2 cores, is a rank's to pay at every step, so the fit carries it)."""
    p = int(probe.get("ranks", 2))
    cal = [t for t in probe["trees"] if t["calibration"]]
    k = float(np.median([t["bytes_essential"] / p / (t["n"] / p) ** (2 / 3) for t in cal]))
    lat, spb = net["latency_s"], net["seconds_per_byte"]
    x = np.array([t["n"] / p for t in cal], float)
    zero = {"bytes_coeff": 0.0, "domain_fixed_s": 0.0, "domain_per_body_s": 0.0}
    model = Model({"constants": {**serial, "network": net, "let": zero}})

    def own_tree(n: int) -> float:
        b = model.tree_evaluation(n, DEFAULT_THETA, "cpu", 1, p)
        return b.host + b.pipeline

    y = np.array([t["seconds"] - own_tree(t["n"]) - 2 * lat - spb * t["bytes_essential"] / p for t in cal])
    (c2, c1), *_ = np.linalg.lstsq(np.stack([x, np.ones_like(x)], 1), y, rcond=None)
    if c1 < 0 or c2 < 0:
        c1, c2 = 0.0, max(0.0, float(np.median(y / x)))
    return {"bytes_coeff": k, "domain_fixed_s": float(c1), "domain_per_body_s": float(c2),
            "source": f"{p} ranks, N = {', '.join(str(t['n']) for t in cal)}: step - predicted own tree - priced bytes"}


# ---- the run -------------------------------------------------------------------------------

def run(quick: bool = True, progress: Callable[[str], None] | None = None,
        cache: str | os.PathLike | None = None) -> dict:
    say = progress or (lambda _m: None)
    from gravpipe.bench import machine as bench_machine
    info = bench_machine.describe()
    rounds = 3 if quick else 5
    t0 = time.perf_counter()
    scratch = tempfile.mkdtemp(prefix="gravpipe-model-", dir=os.environ.get("GRAVPIPE_SCRATCH", "/var/tmp"))
    try:
        k, direct_res = _direct(rounds, say)
        tr = _cpu_transfer(rounds)
        herm, host, hrows, hcmp, whole = _hermite(0.125 if quick else 0.25, rounds, say)
        k["call_s"], k["small_i_half"] = _blocks_fit(hrows, k["kernel"])
        host["hermite_j_fraction"] = _j_fraction(hrows, tr)
        tree, trows, tcmp, trun = _tree(rounds, say)
        host["leapfrog_particle_step_s"] = trun["host_per_particle_step"]
        stor = _storage(scratch, say)
        n_ooc, budget = 200_000, 32 << 20
        ooc_row = _ooc(n_ooc, budget, scratch, say)
        data = 96 * n_ooc
        probe = _mpi_probe(os.path.join(scratch, "mpi.json"), say)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        cpu = {"cores": cores, "threads": k["threads"], "kernel": k["kernel"], "small_i_half": k["small_i_half"],
               "call_s": k["call_s"], "parallel_efficiency": k["parallel_efficiency"]}
        net = {"latency_s": 3e-6, "seconds_per_byte": 1 / 8e9, "source": "assumed (no ping-pong measured)"}
        let = {"bytes_coeff": 0.0}
        if isinstance(probe, dict):
            net = {"latency_s": max(probe["pingpong"]["latency_s"], 0.0),
                   "seconds_per_byte": probe["pingpong"]["seconds_per_byte"], "source": "ping-pong, 2 ranks"}
            let = _domain_fit(probe, net, {"tree": tree, "cpu": cpu})
        constants = {
            "cpu": cpu,
            "transfer": {"cpu": tr}, "host": host, "hermite": herm, "tree": tree,
            "ooc": {"read_passes": ooc_row["bytes_read"] / data, "write_passes": ooc_row["bytes_written"] / data,
                    "exposed_fraction": 1.0},
            "storage": {"latency_s": stor["latency_s"], "seconds_per_byte": stor["seconds_per_byte"]},
            "network": net, "let": let,
        }
        # the share of the store's I/O time that the step waits for: (out of core - in core) / I/O
        io_full = Model({"constants": constants}).ooc_io(n_ooc, ooc_row["budget_bytes"]).io
        if io_full > 0:
            constants["ooc"]["exposed_fraction"] = float(min(1.0, max(
                0.0, (ooc_row["seconds_out_of_core"] - ooc_row["seconds_in_core"]) / io_full)))
        doc = {"schema": machinefile.SCHEMA,
               "machine": {"name": socket.gethostname(), "hostname": socket.gethostname(), "cpu": info["cpu"],
                           "cores": cores, "isa": info["isa"], "gpu": info["gpu"]},
               "gravpipe": gp.__version__, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "source": f"gravpipe bench model{' --quick' if quick else ''}", "constants": constants}
        path = machinefile.save(doc, cache or machinefile.cache_path())
        say(f"constants written to {path} ({time.perf_counter() - t0:.0f} s)")
        configs = _configs(doc, direct_res, hrows, hcmp, whole, trows, tcmp, trun, ooc_row, probe)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for c in configs:
        if "skipped" in c:
            continue
        c["ratio"] = c["predicted_s"] / c["measured_s"] if c["measured_s"] > 0 else float("nan")
        c["goal"] = GOAL_CALIBRATED if c["calibrated"] else GOAL_OTHER
        c["within_goal"] = bool(abs(c["ratio"] - 1) <= c["goal"])
    return {"benchmark": "model", "machine": info, "load_average_after": list(os.getloadavg()),
            "calibration_file": str(path), "seconds": time.perf_counter() - t0, "rounds": rounds,
            "configs": configs, "constants": constants,
            "calibration": {"direct_seconds_per_call": direct_res, "hermite": [asdict(r) for r in hrows],
                            "tree": trows, "storage_fits": stor["_fits"],
                            "ooc": {kk: ooc_row[kk] for kk in ("n", "page_bytes", "cache_bytes", "budget_bytes",
                                                               "bytes_read", "bytes_written", "seconds_in_core",
                                                               "seconds_out_of_core", "seconds_per_repeat", "stages")},
                            "mpi": probe}}


def _row(name: str, kind: str, calibrated: bool, pred: Breakdown | float, measured: float, **extra) -> dict:
    b = pred if isinstance(pred, Breakdown) else Breakdown(pipeline=float(pred))
    return {"name": name, "kind": kind, "calibrated": calibrated, "predicted_s": b.total, "measured_s": measured,
            "breakdown": b.as_dict(), **extra}


def _configs(doc, direct_res, hrows, hcmp, whole, trows, tcmp, trun, ooc_row, probe) -> list[dict]:
    m = Model(doc)
    th = _threads()
    out = []
    for name, (n, prec, jerk, threads, n_i) in (DIRECT_CAL | DIRECT_CMP).items():
        mode = "acc+jerk+pot" if jerk else "acc+pot"
        kk = n if n_i is None else n_i
        pred = m.direct_call(kk, n, mode, prec, "cpu", threads)
        pred.transfer = 0.0  # the compute stage alone, as measured
        label = name if name.startswith("direct") else f"direct {name} N={n}"
        out.append(_row(label, "direct", name in DIRECT_CAL, pred, direct_res[name], n=n, n_i=kk,
                        spread=SPREAD.get(name)))
    for r, cal in [(h, True) for h in hrows] + [(hcmp, False)]:
        ps, blocks = m.hermite_work(r.n, r.t_end, r.eta)
        out.append(_row(f"hermite block steps N={r.n} t=0->{r.t_end:g}", "hermite", cal,
                        m.hermite_steps(r.n, ps, blocks, "mixed", "cpu", th), r.seconds_total, n=r.n,
                        particle_steps_predicted=ps, particle_steps_measured=r.particle_steps,
                        blocks_predicted=blocks, blocks_measured=r.blocks, spread=SPREAD.get(("hermite", r.n))))
    n_w, t_w = WHOLE_RUN
    p = predict(doc, n=n_w, t_end=t_w, threads=th, backend="cpu")
    out.append(_row(f"whole run: hermite N={n_w} t_end={t_w:g} (IC, first forces, rows)", "run", False,
                    p.breakdown, whole, n=n_w, spread=SPREAD.get(("hermite", "whole"))))
    for r in trows:
        if "seconds" not in r:  # an interaction count of the law's fit, not timed
            continue
        out.append(_row(f"tree N={r['n']} theta={r['theta']:g}", "tree", True,
                        m.tree_evaluation(r["n"], r["theta"], "cpu"), r["seconds"], n=r["n"], theta=r["theta"],
                        spread=SPREAD.get(("tree", (r["n"], r["theta"], None)))))
    for (n, theta, threads), (sec, st) in tcmp.items():
        w = m.tree_work(n, theta)
        out.append(_row(f"tree N={n} theta={theta:g}" + (f" threads={threads}" if threads else ""), "tree", False,
                        m.tree_evaluation(n, theta, "cpu", threads), sec, n=n, theta=theta,
                        interactions_per_body_predicted=w["pp"] + w["pc"],
                        interactions_per_body_measured=st.pp_per_body + st.pc_per_body,
                        spread=SPREAD.get(("tree", (n, theta, threads)))))
    n_r, t_r = TREE_RUN
    p = predict(doc, gravity="tree", n=n_r, t_end=t_r, threads=th, backend="cpu")
    out.append(_row(f"whole run: tree leapfrog N={n_r} t_end={t_r:g} (IC, first forces, rows)", "run", False,
                    p.breakdown, trun["wall"], n=n_r, spread=SPREAD.get(("tree", "run"))))
    n_o = ooc_row["n"]
    kick = Breakdown(host=n_o * float(doc["constants"]["host"]["leapfrog_particle_step_s"]))
    incore = m.tree_evaluation(n_o, 0.6, "cpu") + kick
    pairs = np.array(ooc_row["seconds_per_repeat"])
    out.append(_row(f"tree leapfrog step in core N={n_o} (eps 1e-3)", "tree", False, incore,
                    ooc_row["seconds_in_core"], n=n_o, spread=float(pairs[:, 0].max() / pairs[:, 0].min())))
    out.append(_row(f"out-of-core leapfrog step N={n_o} budget {ooc_row['budget_bytes'] / 2**20:.0f} MiB", "ooc",
                    True, incore + m.ooc_io(n_o, ooc_row["budget_bytes"]), ooc_row["seconds_out_of_core"], n=n_o,
                    bytes_swapped=ooc_row["bytes_read"] + ooc_row["bytes_written"],
                    spread=float(pairs[:, 1].max() / pairs[:, 1].min())))
    if isinstance(probe, dict):
        d = probe["direct"]
        out.append(_row(f"2 ranks direct acc+pot N={d['n']} (1 thread each)", "mpi", False,
                        m.direct_evaluation(d["n"], "acc+pot", "mixed", "cpu", 1, 2), d["seconds"], n=d["n"]))
        p = int(probe.get("ranks", 2))
        for t2 in probe["trees"]:
            pred = m.tree_evaluation(t2["n"], DEFAULT_THETA, "cpu", 1, p)
            out.append(_row(f"{p} ranks tree N={t2['n']} (1 thread each; a step's forces as `gravpipe run` pays: "
                            "domain cut, migration, essential trees)", "mpi",
                            t2["calibration"], pred, t2["seconds"], n=t2["n"], spread=t2["spread"],
                            own_tree_seconds_measured=t2["local_tree_seconds"],
                            own_tree_seconds_predicted=pred.host + pred.pipeline - m.tree_domain(t2["n"], p).host,
                            interactions_per_body_measured=t2["interactions_per_body"],
                            interactions_per_body_predicted=sum(
                                v for kk, v in m.tree_work(t2["n"], DEFAULT_THETA).items() if kk != "mac")))
    else:
        out.append({"name": "2 ranks", "kind": "mpi", "skipped": probe})
    return out
