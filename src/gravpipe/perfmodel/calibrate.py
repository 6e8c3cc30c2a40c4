"""``gravpipe bench model``: calibrate the model's constants on this machine, keep them in
the user cache, then run configurations and print the prediction next to the measurement.

Every constant comes from the existing benchmarks' own functions (``gravpipe.bench``:
``direct.measure_pipeline``, ``hermite.run``, ``tree.measure_tree``, ``ooc.ratio``,
``storage.run``, ``pingpong.run`` and ``benchmarks/mpi_scaling.py`` under ``mpiexec -n 2``).
The machine is shared and slow to settle, so every timing is the median of repeats of
small problems, and calibration sizes are not comparison sizes: a configuration is
"calibrated" only when the constants came from the same measurement (goal 25%), the others
(other N, theta, thread counts, ranks) test the model (goal 30%).
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

GOAL_CALIBRATED, GOAL_OTHER = 0.25, 0.30
EPS = 1 / 64


def _median(fn: Callable[[], float], k: int) -> float:
    return float(np.median([fn() for _ in range(k)]))


def _threads() -> int:
    from gravpipe import _core
    return int(_core.max_threads())


# ---- calibration -------------------------------------------------------------------------

def _kernel(n: int, repeats: int, say) -> dict:
    from gravpipe.bench.direct import measure_pipeline
    th = _threads()
    say(f"kernel: all pairs N = {n} and small i-sets, {th} threads")
    t = {}
    for mode in ("acc+pot", "acc+jerk+pot"):
        for prec in ("mixed", "double"):
            t[(mode, prec)] = min(measure_pipeline(n, prec, mode != "acc+pot", threads=th)[0] for _ in range(repeats))
    one = min(measure_pipeline(n, "mixed", False, threads=1)[0] for _ in range(repeats))
    best = min(measure_pipeline(n, "mixed", False, threads=th)[0] for _ in range(repeats))
    eff = min(1.0, max(0.0, (one / best - 1) / (th - 1))) if th > 1 else 1.0
    kernel = {m: {p: n * (n - 1) / t[(m, p)] for p in ("mixed", "double")} for m in ("acc+pot", "acc+jerk+pot")}
    return {"kernel": kernel, "threads": th, "small_i_half": 0.0, "call_s": 0.0, "parallel_efficiency": eff,
            "_raw": {"n": n, "seconds": {f"{m} {p}": v for (m, p), v in t.items()}, "acc+pot mixed 1 thread": one}}


def _blocks_fit(rows, kernel: dict) -> tuple[float, float]:
    """(call_s, small_i_half) from the Hermite runs' compute time: compute = blocks call_s +
    N (particle_steps + blocks n_half) / R (eqs. 12, 14: the pipelines' loss on small
    i-sets; on a shared CPU the fork and join of every block is most of it)."""
    r = kernel["acc+jerk+pot"]["mixed"]
    y = np.array([h.seconds_compute - h.n * h.particle_steps / r for h in rows])
    a = np.array([[h.blocks, h.blocks * h.n / r] for h in rows], float)
    (c, nh), *_ = np.linalg.lstsq(a, y, rcond=None)
    if c < 0 or nh < 0:
        c, nh = max(0.0, float(np.median(y / a[:, 0]))), 0.0
    return float(c), float(nh)


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


def _hermite(sizes: list[int], t_end: float, repeats: int, say) -> tuple[dict, dict, list]:
    from gravpipe.bench import hermite
    rows = []
    for n in sizes:
        say(f"hermite: Plummer N = {n}, t = 0 -> {t_end:g}, median of {repeats}")
        runs = sorted((hermite.run(n=n, t_end=t_end, threads=_threads()) for _ in range(repeats)),
                      key=lambda r: r.seconds_total)
        rows.append(runs[len(runs) // 2])
    ps = np.array([r.particle_steps for r in rows], float)
    bl = np.array([r.blocks for r in rows], float)
    ns = np.array([r.n for r in rows], float)
    spp = ps / ns / t_end
    bpt = bl / t_end
    lx = math.log(ns[-1] / ns[0])
    consts = {"n_ref": int(ns[0]), "eta_ref": rows[0].eta, "steps_per_particle_per_time": float(spp[0]),
              "steps_n_exponent": float(math.log(spp[-1] / spp[0]) / lx),
              "blocks_per_time": float(bpt[0]), "blocks_n_exponent": float(math.log(bpt[-1] / bpt[0]) / lx)}
    # host = a particle_steps + b blocks N (prediction of the j-particles), least squares
    host = np.array([r.seconds_host for r in rows])
    a = np.stack([ps, bl * ns], axis=1) / host[:, None]
    (ca, cb), *_ = np.linalg.lstsq(a, np.ones_like(host), rcond=None)
    if ca < 0 or cb < 0:
        ca, cb = float(np.median(host / ps)), 0.0
    return consts, {"hermite_particle_step_s": float(ca), "hermite_block_j_s": float(cb)}, rows


def _leapfrog_host(n: int, repeats: int) -> float:
    def once() -> float:
        sim = gp.Simulation(gp.ic.plummer(n, seed=1), integrator="leapfrog", eps=EPS, threads=_threads())
        before = sim.timings
        sim.evolve(8 / 128, progress=False)
        t = sim.timings
        return (t.host - before.host) / max(t.particle_steps - before.particle_steps, 1)
    return _median(once, repeats)


def _tree_rows(n: int, theta: float, repeats: int, threads: int | None = None):
    from gravpipe.bench.tree import make_model, measure_tree
    pos, mass = make_model("plummer", n)
    rows = []
    for _ in range(repeats):
        sec, st, _ = measure_tree(pos, mass, EPS, theta, True, 1, threads, "mixed")
        rows.append((sec, st))
    rows.sort(key=lambda r: r[0])
    return rows[len(rows) // 2]  # the median evaluation, with its own breakdown


def _tree(sizes: list[int], thetas: list[float], repeats: int, say) -> tuple[dict, list]:
    rows = []
    for n in sizes:
        for th in thetas:
            say(f"tree: Plummer N = {n}, theta {th:g}")
            sec, st = _tree_rows(n, th, repeats)
            rows.append({"n": n, "theta": th, "seconds": sec, "sort": st.seconds_sort, "build": st.seconds_build,
                         "moments": st.seconds_moments, "walk": st.seconds_walk, "evaluate": st.seconds_evaluate,
                         "pp": st.pp_per_body, "pc": st.pc_per_body, "mac": st.mac_per_body})
    n = np.array([r["n"] for r in rows], float)
    th = np.array([r["theta"] for r in rows], float)
    pp, pc = np.array([r["pp"] for r in rows]), np.array([r["pc"] for r in rows])
    mac = np.array([r["mac"] for r in rows])
    # pp = a theta^-p
    (lp, la), *_ = np.linalg.lstsq(np.stack([-np.log(th), np.ones_like(th)], 1), np.log(pp), rcond=None)
    # pc theta^q = b + c log10 N, q from the theta pairs at each N
    q = float(np.mean([math.log(pc[(n == k) & (th == thetas[0])][0] / pc[(n == k) & (th == thetas[-1])][0])
                       / math.log(thetas[-1] / thetas[0]) for k in sizes]))
    (c, b), *_ = np.linalg.lstsq(np.stack([np.log10(n), np.ones_like(n)], 1), pc * th ** q, rcond=None)
    ev = np.array([r["evaluate"] for r in rows])
    a = np.stack([n * pp, n * pc], 1) / ev[:, None]
    (pp_s, pc_s), *_ = np.linalg.lstsq(a, np.ones_like(ev), rcond=None)
    if pp_s <= 0 or pc_s < 0:
        pp_s, pc_s = float(np.median(ev / (n * (pp + pc)))), float(np.median(ev / (n * (pp + pc))))
    walk = np.array([r["walk"] for r in rows])
    th_all = _threads()
    eff = 1.0
    if th_all > 1:
        say(f"tree: Plummer N = {sizes[0]}, theta {thetas[0]:g}, 1 thread")
        one = _tree_rows(sizes[0], thetas[0], repeats, 1)[0]
        eff = min(1.0, max(0.0, (one / rows[0]["seconds"] - 1) / (th_all - 1)))
    per = {k: float(np.median([r[k] / r["n"] for r in rows])) for k in ("sort", "build", "moments")}
    return {"threads": _threads(), "sort_per_body_s": per["sort"], "build_per_body_s": per["build"],
            "moments_per_body_s": per["moments"], "mac_s": float(np.median(walk / (n * mac))),
            "pp_s": float(pp_s), "pc_s": float(pc_s), "pp_a": float(math.exp(la)), "pp_theta_exp": float(lp),
            "pc_b": float(b), "pc_c": float(c), "pc_theta_exp": q, "mac_a": float(np.median(mac / (pp + pc))),
            "n_crit_ref": 256, "parallel_efficiency": eff}, rows


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


# ---- the run -------------------------------------------------------------------------------

def run(quick: bool = True, progress: Callable[[str], None] | None = None,
        cache: str | os.PathLike | None = None) -> dict:
    say = progress or (lambda _m: None)
    from gravpipe.bench import machine as bench_machine
    info = bench_machine.describe()
    reps = 3 if quick else 5
    t0 = time.perf_counter()
    scratch = tempfile.mkdtemp(prefix="gravpipe-model-", dir=os.environ.get("GRAVPIPE_SCRATCH", "/var/tmp"))
    try:
        k = _kernel(8192, reps, say)
        tr = _cpu_transfer(reps)
        herm, host, hrows = _hermite([2048, 8192], 0.125 if quick else 0.25, reps, say)
        k["call_s"], k["small_i_half"] = _blocks_fit(hrows, k["kernel"])
        host["leapfrog_particle_step_s"] = _leapfrog_host(4096, reps)
        tree, trows = _tree([30000, 120000], [0.5, 0.8], reps, say)
        stor = _storage(scratch, say)
        n_ooc, budget = 200_000, 32 << 20
        ooc_row = _ooc(n_ooc, budget, scratch, say)
        data = 96 * n_ooc
        probe = _mpi_probe(os.path.join(scratch, "mpi.json"), say)
        net = {"latency_s": 3e-6, "seconds_per_byte": 1 / 8e9, "source": "assumed (no ping-pong measured)"}
        let = {"bytes_coeff": 0.0}
        if isinstance(probe, dict):
            net = {"latency_s": max(probe["pingpong"]["latency_s"], 0.0),
                   "seconds_per_byte": probe["pingpong"]["seconds_per_byte"], "source": "ping-pong, 2 ranks"}
            tr2 = probe["tree"]
            let = {"bytes_coeff": tr2.get("bytes_essential_per_eval", 0.0) / 2 / (tr2["n"] / 2) ** (2 / 3)}
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        constants = {
            "cpu": {"cores": cores, "threads": k["threads"], "kernel": k["kernel"],
                    "small_i_half": k["small_i_half"], "call_s": k["call_s"],
                    "parallel_efficiency": k["parallel_efficiency"]},
            "transfer": {"cpu": tr}, "host": host, "hermite": herm, "tree": tree,
            "ooc": {"read_passes": ooc_row["bytes_read"] / data, "write_passes": ooc_row["bytes_written"] / data},
            "storage": {"latency_s": stor["latency_s"], "seconds_per_byte": stor["seconds_per_byte"]},
            "network": net, "let": let,
        }
        doc = {"schema": machinefile.SCHEMA,
               "machine": {"name": socket.gethostname(), "hostname": socket.gethostname(), "cpu": info["cpu"],
                           "cores": cores, "isa": info["isa"], "gpu": info["gpu"]},
               "gravpipe": gp.__version__, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "source": f"gravpipe bench model{' --quick' if quick else ''}", "constants": constants}
        path = machinefile.save(doc, cache or machinefile.cache_path())
        say(f"constants written to {path} ({time.perf_counter() - t0:.0f} s)")
        configs = _configs(doc, k, hrows, trows, ooc_row, probe, reps, quick, say)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for c in configs:
        c["ratio"] = c["predicted_s"] / c["measured_s"] if c["measured_s"] > 0 else float("nan")
        c["goal"] = GOAL_CALIBRATED if c["calibrated"] else GOAL_OTHER
        c["within_goal"] = bool(abs(c["ratio"] - 1) <= c["goal"])
    return {"benchmark": "model", "machine": info, "calibration_file": str(path), "seconds": time.perf_counter() - t0,
            "configs": configs, "constants": constants,
            "calibration": {"kernel": k["_raw"], "hermite": [asdict(r) for r in hrows], "tree": trows,
                            "storage_fits": stor["_fits"],
                            "ooc": {kk: ooc_row[kk] for kk in ("n", "page_bytes", "cache_bytes", "budget_bytes",
                                                               "bytes_read", "bytes_written", "seconds_in_core",
                                                               "seconds_out_of_core", "stages")},
                            "mpi": probe}}


def _row(name: str, kind: str, calibrated: bool, pred: Breakdown | float, measured: float, **extra) -> dict:
    b = pred if isinstance(pred, Breakdown) else Breakdown(pipeline=float(pred))
    return {"name": name, "kind": kind, "calibrated": calibrated, "predicted_s": b.total, "measured_s": measured,
            "breakdown": b.as_dict(), **extra}


def _configs(doc, k, hrows, trows, ooc_row, probe, reps, quick, say) -> list[dict]:
    from gravpipe.bench import hermite
    from gravpipe.bench.direct import measure_pipeline
    m = Model(doc)
    th = _threads()
    out = []
    say("comparing: direct summation")
    for n, mode, prec, threads, n_i, cal in ((4096, "acc+pot", "mixed", None, None, False),
                                              (16384, "acc+pot", "mixed", None, None, False),
                                              (8192, "acc+jerk+pot", "double", None, None, True),
                                              (16384, "acc+jerk+pot", "mixed", None, 256, False),
                                              (8192, "acc+pot", "mixed", 1, None, False)):
        meas = min(measure_pipeline(n, prec, mode != "acc+pot", threads=threads, n_i=n_i)[0] for _ in range(reps))
        kk = n if n_i is None else n_i
        pred = m.direct_call(kk, n, mode, prec, "cpu", threads)
        pred.transfer = 0.0  # measure_pipeline times the kernel alone, best of its calls
        pred.pipeline -= m._device("cpu")["call_s"]
        name = f"direct {mode} {prec} N={n}" + (f" n_i={n_i}" if n_i else "") + (f" threads={threads}" if threads else "")
        out.append(_row(name, "direct", cal, pred, meas, n=n, n_i=kk))
    n_h = 4096
    say(f"comparing: Hermite N = {n_h}")
    runs = sorted((hermite.run(n=n_h, t_end=0.125, threads=th) for _ in range(reps)), key=lambda h: h.seconds_total)
    r = runs[len(runs) // 2]
    ps, blocks = m.hermite_work(n_h, 0.125, r.eta)
    out.append(_row(f"hermite block steps N={n_h} t=0.125", "hermite", False,
                    m.hermite_steps(n_h, ps, blocks, "mixed", "cpu", th), r.seconds_total, n=n_h,
                    particle_steps_predicted=ps, particle_steps_measured=r.particle_steps,
                    blocks_predicted=blocks, blocks_measured=r.blocks))
    for hr in hrows:
        ps, blocks = m.hermite_work(hr.n, hr.t_end, hr.eta)
        out.append(_row(f"hermite block steps N={hr.n} t={hr.t_end:g}", "hermite", True,
                        m.hermite_steps(hr.n, ps, blocks, "mixed", "cpu", th), hr.seconds_total, n=hr.n))
    n_w, t_w = 1024, 0.5
    say(f"comparing: a whole run, Hermite N = {n_w} to t = {t_w:g}")

    def whole() -> float:
        t0 = time.perf_counter()
        sim = gp.Simulation.from_model("plummer", n_w, 1, eps=EPS, threads=th)
        sim.evolve(t_w, progress=False)
        return time.perf_counter() - t0
    meas = _median(whole, reps)
    p = predict(doc, n=n_w, t_end=t_w, threads=th, backend="cpu")
    out.append(_row(f"whole run hermite N={n_w} t_end={t_w:g} (start-up, rows)", "run", False, p.breakdown, meas, n=n_w))
    for n, theta, threads in ((60000, 0.6, None), (250000 if quick else 1000000, 0.6, None),
                              (120000, 0.4, None), (120000, 0.6, 1)):
        say(f"comparing: tree N = {n}, theta {theta:g}" + (f", {threads} thread" if threads else ""))
        sec, st = _tree_rows(n, theta, reps, threads)
        w = m.tree_work(n, theta)
        out.append(_row(f"tree N={n} theta={theta:g}" + (f" threads={threads}" if threads else ""), "tree", False,
                        m.tree_evaluation(n, theta, "cpu", threads), sec, n=n, theta=theta,
                        interactions_per_body_predicted=w["pp"] + w["pc"],
                        interactions_per_body_measured=st.pp_per_body + st.pc_per_body))
    for tr in trows:
        out.append(_row(f"tree N={tr['n']} theta={tr['theta']:g}", "tree", True,
                        m.tree_evaluation(tr["n"], tr["theta"], "cpu"), tr["seconds"], n=tr["n"], theta=tr["theta"]))
    n_o = ooc_row["n"]
    kick = Breakdown(host=n_o * float(doc["constants"]["host"]["leapfrog_particle_step_s"]))
    incore = m.tree_evaluation(n_o, 0.6, "cpu") + kick
    out.append(_row(f"tree leapfrog step in core N={n_o} (eps 1e-3)", "tree", False, incore,
                    ooc_row["seconds_in_core"], n=n_o))
    out.append(_row(f"out-of-core leapfrog step N={n_o} budget {ooc_row['budget_bytes'] / 2**20:.0f} MiB", "ooc", True,
                    incore + m.ooc_io(n_o, ooc_row["budget_bytes"]), ooc_row["seconds_out_of_core"], n=n_o,
                    bytes_swapped=ooc_row["bytes_read"] + ooc_row["bytes_written"]))
    if isinstance(probe, dict):
        d = probe["direct"]
        out.append(_row(f"2 ranks direct acc+pot N={d['n']} (1 thread each)", "mpi", False,
                        m.direct_evaluation(d["n"], "acc+pot", "mixed", "cpu", 1, 2), d["seconds"], n=d["n"]))
        t2 = probe["tree"]
        out.append(_row(f"2 ranks tree N={t2['n']} (1 thread each)", "mpi", False,
                        m.tree_evaluation(t2["n"], 0.6, "cpu", 1, 2), t2["seconds"], n=t2["n"]))
    else:
        out.append({"name": "2 ranks", "kind": "mpi", "skipped": probe})
    return [c for c in out if "skipped" not in c] + [c for c in out if "skipped" in c]
