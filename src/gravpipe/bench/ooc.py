"""``gravpipe bench ooc``: the treecode out of core (gravpipe.ooc) against the same step in core.

Three measurements (seed 004, Salmon & Warren, out-of-core treecode):

* ``swap``: the analogue of their Fig. 5: bytes swapped (read + written to the scratch file)
  in one full leapfrog step, against the in-core bytes (the page cache), for several page
  sizes. The data a step works on is what the in-core run holds: 96 bytes a particle (pos,
  vel, acc: 3 x 8 each; mass, id, pot: 8 each).
* ``ratio``: one full step (kick-drift, sort, build, moments, walk + forces, kick) out of core
  against the same step in core (the C++ leapfrog over the in-core tree), measured in the same
  run, with the whole budget (particle cache, the tree's paged cells and their cache, groups,
  sort buffer, tables) at a fraction of the data. Two steps each: the second is a run's
  steady state (out of core its kick-drift rides on the sort), the first is shown beside it.
* ``demo``: one full step from an IC file (any N, never N elements in memory but the tree's
  cells), its stages, bytes read and written, peak RSS, force errors on sampled particles
  against a float64 direct sum, and interactions and MAC tests per body.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import numpy as np

#: bytes a particle of the in-core run's state (pos, vel, acc 24 each; mass, id, pot 8 each)
DATA_BYTES_PER_PARTICLE = 96
DEFAULT_PAGE_SIZES = [1 << 16, 1 << 18, 1 << 20, 1 << 22]
DEFAULT_CACHE_FRACTIONS = [1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0]


def peak_rss_bytes() -> int:
    """VmHWM of this process (bytes): the most resident memory it has had."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _budget_for_cache(n: int, cache: int, page: int, threads: int, n_leaf: int = 16) -> int:
    """The budget whose particle cache is ``cache`` bytes, with room for every cell of the
    tree in its own cache (the swap figure varies the particles' cache alone): the store's
    tables, the cache and the larger of the tree's and the sort's needs, from the parts of
    the least budget that plan_budget checks."""
    from gravpipe.ooc import CELLS_PER_PARTICLE_AT_16, DEFAULT_N_CRIT, _least_budget, tree_keep_free
    lb = _least_budget(n, page, threads, n_leaf, DEFAULT_N_CRIT, 4)
    nodes = int(CELLS_PER_PARTICLE_AT_16 * 16 / n_leaf * n) + 1
    cells = (128 + 72) * nodes + lb.tree + tree_keep_free(n, threads, DEFAULT_N_CRIT, n_leaf)
    return lb.tables + max(cache, lb.store - lb.tables) + max(cells, lb.sort) + lb.blocks


def _model(name: str, n: int, seed: int):
    import gravpipe as gp
    if name == "plummer":
        return gp.ic.plummer(n, seed=seed)
    rng = np.random.default_rng(seed)
    return gp.Particles(pos=rng.random((n, 3)) - 0.5, vel=np.zeros((n, 3)), mass=np.full(n, 1.0 / n))


def swap(n: int, scratch: str, page_sizes: list[int], fractions: list[float], *, model: str = "plummer",
         eps: float = 1e-3, dt: float = 1 / 128, threads: int | None = None, progress=None) -> list[dict]:
    """Bytes read and written in one full step for each page size and cache fraction."""
    from gravpipe import _core
    from gravpipe.ooc import OutOfCore
    p = _model(model, n, 1)
    threads = threads or _core.max_threads()
    data = DATA_BYTES_PER_PARTICLE * n
    rows = []
    for page in page_sizes:
        for frac in fractions:
            # at least the frames for one pinned page set (x, y, z, m) per thread besides the
            # threads' transient pins, read-ahead and a spare (PagedParticles): below that every
            # leaf is copied page by page and the walk crawls. The smallest fractions are not
            # reachable with large pages; the row records the real cache.
            cache = max(int(frac * data), (5 * threads + 3) * page)
            budget = _budget_for_cache(n, cache, page, threads)
            if progress:
                progress(f"swap: page {page} B, cache {frac:g} of the data")
            with OutOfCore.from_particles(p, scratch, budget, eps=eps, threads=threads, page_bytes=page,
                                          cache_bytes=cache) as o:
                o.forces()
                st = o.step(dt)
                rows.append({"n": n, "model": model, "page_bytes": page, "cache_fraction": frac,
                             "cache_bytes": o.store.frames * page, "budget_bytes": budget,
                             "data_bytes": data, "bytes_read": st.bytes_read, "bytes_written": st.bytes_written,
                             "bytes_swapped": st.bytes_read + st.bytes_written, "seconds_step": st.total,
                             "stages": _stages(st), **_device(st)})
            if progress:
                r = rows[-1]
                progress(f"  read {r['bytes_read']} B, written {r['bytes_written']} B, {r['seconds_step']:.2f} s")
    return rows


def _device(st) -> dict:
    """The scratch disk's own counters of a step's stages (StepTimes.stage_device; empty,
    with device "", for a scratch that has no block device to measure)."""
    return {"device": st.device, "stage_device": {k: dict(v) for k, v in st.stage_device.items()}}


def _stages(st) -> dict:
    return {"kick_drift": st.kick_drift, "sort": st.sort, "build": st.build, "moments": st.moments,
            "walk_forces": st.walk_forces}


def in_core_steps(p, eps: float, dt: float, threads: int, steps: int = 2) -> tuple[list[float], np.ndarray, np.ndarray]:
    """``steps`` steps of the C++ leapfrog over the in-core tree (forces at t0 done before
    the clock): the seconds of each, positions and velocities after the last."""
    from gravpipe import _core
    from gravpipe.tree import TreeGravity
    g = TreeGravity(eps, 1.0, threads=threads)
    lf = _core.Leapfrog(g.provider, np.ascontiguousarray(p.pos), np.ascontiguousarray(p.vel),
                        np.ascontiguousarray(p.mass), 0.0, dt)
    seconds = []
    for k in range(1, steps + 1):
        t0 = time.perf_counter()
        lf.evolve_to(k * dt)
        seconds.append(time.perf_counter() - t0)
    return seconds, lf.positions(), lf.velocities()


def ratio(n: int, scratch: str, *, budget_fraction: float = 0.1, page: int | None = None, model: str = "plummer",
          eps: float = 1e-3, dt: float = 1 / 128, threads: int | None = None, repeat: int = 1,
          progress=None) -> dict:
    """The out-of-core step against the in-core one, same particles, same run (best of
    ``repeat`` each), the whole budget ``budget_fraction`` of the data (the default split
    between the particles' cache and the rest, gravpipe.ooc.plan_budget). Two steps of each
    are timed: the first (its kick-drift a pass of its own) and the second, the steady state
    of a run (the kick-drift inside the sort, in the frame the first step's closing kick
    predicted); the ratio is the second's. Also checks that the two runs agree bit for bit.

    ``ratio`` is the best out-of-core step over the best in-core one. On a shared host whose
    speed drifts over minutes, the two bests can come from different phases; each repeat
    also measures the two back to back, and ``ratios_per_repeat`` / ``ratio_median`` give
    those pairs' ratios, which drift cancels from."""
    from gravpipe import _core
    from gravpipe.ooc import OutOfCore
    from gravpipe.store import page_bytes_for_budget
    threads = threads or _core.max_threads()
    p = _model(model, n, 1)
    data = DATA_BYTES_PER_PARTICLE * n
    budget = int(budget_fraction * data)
    page = page or page_bytes_for_budget(budget)
    best_in, best_out, out_row = None, None, None
    pairs = []  # (in core, out of core) second steps, measured back to back
    for _ in range(repeat):
        if progress:
            progress(f"ratio: in-core steps, N = {n}")
        sec_in, pos_in, vel_in = in_core_steps(p, eps, dt, threads)
        if best_in is None or sec_in[1] < best_in[1]:
            best_in = sec_in
        if progress:
            progress(f"ratio: out-of-core steps, N = {n}")
        with OutOfCore.from_particles(p, scratch, budget, eps=eps, threads=threads, page_bytes=page) as o:
            cache = o.plan.cache
            o.forces(next_dt=dt)  # as a run starts (PagedRun)
            first = o.step(dt)
            o.store.reset_stats()
            st = o.step(dt)
            pairs.append((sec_in[1], st.total))
            if progress:  # each pair as it comes: a run cut short still leaves its figures
                progress(f"  in core {sec_in[1]:.2f} s, out of core {st.total:.2f} s: ratio {st.total / sec_in[1]:.3f}; "
                         f"read {st.bytes_read / 1e9:.2f} GB, stalls {o.stats['stall_seconds']:.2f} thread-s")
            identical = bool(np.array_equal(o.gather("pos"), pos_in) and np.array_equal(o.gather("vel"), vel_in))
            ts = o.tree_stats
            if best_out is None or st.total < best_out[1]:
                best_out = [first.total, st.total]
                s = o.stats
                out_row = {"stages": _stages(st), "stages_first_step": _stages(first),
                           "kick_drift_in_sort": st.kick_drift_in_sort,
                           "bytes_read": st.bytes_read, "bytes_written": st.bytes_written,
                           "bytes_read_first_step": first.bytes_read, "bytes_written_first_step": first.bytes_written,
                           "cell_bytes_read": st.cell_bytes_read, "cell_bytes_written": st.cell_bytes_written,
                           "cell_cache_bytes": st.cell_cache_bytes, "cache_bytes": cache,
                           "misses": int(s["misses"]), "stall_seconds": float(s["stall_seconds"]),
                           "prefetched": int(s["prefetched"]), "prefetch_hits": int(s["prefetch_hits"]),
                           "sort": st.sort_detail, "identical_to_in_core": identical,
                           "stage_bytes": {k: list(v) for k, v in st.stage_bytes.items()},
                           "stage_cpu_seconds": dict(st.stage_cpu),
                           "stage_context_switches": dict(st.stage_switches),
                           **_device(st),
                           "interactions": int(ts.pp_interactions + ts.pc_interactions),
                           "pp_per_body": ts.pp_per_body, "pc_per_body": ts.pc_per_body,
                           "mac_per_body": ts.mac_per_body, "cells": int(ts.nodes),
                           "budget_peak_bytes": int(o.store._core.budget_peak),
                           "io_mode": o.store.io_mode, "scratch_in_memory": o.store.in_memory,
                           "walk_prefetch_runs": int(st.prefetch_runs),
                           "walk_prefetch_reads": o.store.batched_reads}
        del pos_in, vel_in
    ratios = [b / a for a, b in pairs]
    return {"n": n, "model": model, "threads": threads, "page_bytes": page, "data_bytes": data,
            "load_average_after": list(os.getloadavg()),
            "cache_fraction": out_row["cache_bytes"] / data, "budget_bytes": budget, "budget_fraction": budget_fraction,
            "seconds_in_core": best_in[1], "seconds_out_of_core": best_out[1], "ratio": best_out[1] / best_in[1],
            "seconds_per_repeat": [list(pr) for pr in pairs],
            "ratios_per_repeat": ratios,
            "ratio_median": float(np.median(ratios)),
            "seconds_in_core_first_step": best_in[0], "seconds_out_of_core_first_step": best_out[0],
            "ratio_first_step": best_out[0] / best_in[0],
            "interactions_per_s_out_of_core": out_row["interactions"] / best_out[1],
            **out_row}


def direct_errors(ooc, k: int = 1000, seed: int = 0, chunk: int = 1 << 20) -> dict:
    """|a_tree - a_direct| / |a_direct| on ``k`` sampled particles of an OutOfCore whose
    forces are done, against a float64 direct sum (the CPU pipeline in double precision)
    over every particle, read block by block: the i-set in memory, the j-set streamed. A
    particle's own term is left out (exclude), as the tree leaves it out."""
    from gravpipe.pipeline import Pipeline
    n = ooc.n
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(n, min(k, n), replace=False))  # store positions
    pos_i = np.stack([ooc.store.read("pos", int(i), int(i) + 1)[0] for i in idx])
    acc_i = np.stack([ooc.store.read("acc", int(i), int(i) + 1)[0] for i in idx])
    pipe = Pipeline("cpu", "double", ooc.params["eps"], ooc.params["G"], threads=ooc.threads)
    ref = np.zeros((len(idx), 3))
    for b, blk in ooc.blocks(["pos", "mass"], chunk):
        pipe.set_j(blk["pos"], blk["mass"])
        own = idx - b
        exclude = np.where((own >= 0) & (own < len(blk["mass"])), own, -1)
        ref += pipe.forces(pos_i, exclude=exclude)[0]
    err = np.linalg.norm(acc_i - ref, axis=1) / np.linalg.norm(ref, axis=1)
    return {"sample": int(len(idx)), "median": float(np.median(err)), "p99": float(np.percentile(err, 99)),
            "max": float(err.max())}


def demo(path: str, scratch: str, budget: str, *, eps: float = 1e-3, dt: float = 1 / 128, page: int | None = None,
         n_leaf: int = 16, theta: float | None = None, sample: int = 1000, threads: int | None = None,
         progress=print) -> dict:
    """One full step of the particles of the IC file ``path`` out of core (``theta``: the
    tree's opening angle, None for the default)."""
    from gravpipe import ooc as ooc_mod
    t0 = time.perf_counter()
    extra = {} if theta is None else {"theta": theta}
    with ooc_mod.OutOfCore.from_snapshot(path, scratch, budget, eps=eps, page_bytes=page, n_leaf=n_leaf,
                                         threads=threads, **extra) as o:
        t_load = time.perf_counter() - t0
        progress(f"loaded {o.n} particles in {t_load:.1f} s; {o!r}")
        first = o.forces()
        progress(f"first forces {first.total:.1f} s: {first}")
        o.store.reset_stats()
        st = o.step(dt)
        progress(f"step {st.total:.1f} s: {st}")
        ts = o.tree_stats
        s = o.stats
        rss_step = peak_rss_bytes()  # before the direct check's own buffers
        row = {"n": o.n, "theta": o.params["theta"], "peak_rss_bytes_step": rss_step, "file": path, "budget_bytes": o.plan.budget, "cache_bytes": o.plan.cache,
               "page_bytes": page, "n_leaf": n_leaf, "seconds_load": t_load, "seconds_first_forces": first.total,
               "seconds_step": st.total, "stages": _stages(st), "sort": st.sort_detail,
               "bytes_read": st.bytes_read, "bytes_written": st.bytes_written,
               "budget_peak_bytes": int(o.store._core.budget_peak), "cells": int(ts.nodes),
               "pp_per_body": ts.pp_per_body, "pc_per_body": ts.pc_per_body,
               "interactions_per_body": ts.pp_per_body + ts.pc_per_body, "mac_per_body": ts.mac_per_body,
               "stall_seconds": float(s["stall_seconds"]), **_device(st)}
        if sample > 0:
            t1 = time.perf_counter()
            row["errors"] = direct_errors(o, sample)
            row["seconds_direct_check"] = time.perf_counter() - t1
            progress(f"errors vs float64 direct sum: {row['errors']}")
    row["peak_rss_bytes"] = peak_rss_bytes()
    return row


def plot_swap(rows: list[dict], path: str) -> None:
    """Bytes swapped per step against in-core (cache) bytes, one line per page size."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for page in sorted({r["page_bytes"] for r in rows}):
        rs = sorted((r for r in rows if r["page_bytes"] == page), key=lambda r: r["cache_bytes"])
        ax.loglog([r["cache_bytes"] for r in rs], [max(r["bytes_swapped"], 1) for r in rs], "o-",
                  label=f"page {page // 1024} KiB")
    data = rows[0]["data_bytes"]
    ax.axvline(data, color="grey", ls=":", label="particle data")
    ax.set_xlabel("in-core bytes (page cache)")
    ax.set_ylabel("bytes swapped per step (read + written)")
    ax.set_title(f"out-of-core treecode, {rows[0]['model']} N = {rows[0]['n']:.0e}, one leapfrog step\n"
                 "(cf. Salmon & Warren 1997, Fig. 5)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def default_name(kind: str, n: int, suffix: str, date: str) -> str:
    return str(Path("benchmarks") / "results" / f"ooc_{kind}_{n:.0e}_{date}.{suffix}".replace("+", ""))
