"""The cost of going out of core for the treecode's force evaluation (issue 10, item 4):
one self-gravity evaluation (keys, build, moments, walk, lists, kernels) with the particles
in memory (gravpipe.Tree) vs read from the pages of a scratch file whose cache holds a
fraction of them (gravpipe.tree.paged_forces), on the same particles, bitwise equal.

    python benchmarks/ooc_tree.py -n 1000000 --cache-fraction 0.1 --page-bytes 64KiB

Prints one JSON line: seconds in core and out of core (best of --repeat, cold cache each
time), their ratio, interactions per second, pages and bytes read (swapped) per
evaluation, peak budget use, and the machine. The leapfrog kick and drift, and the sort
out of core, are not in this figure yet (the store is written in curve order first).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np

import gravpipe as gp
from gravpipe.bench import machine
from gravpipe.store import ParticleStore, from_particles, parse_byte_size

DATA_BYTES_PER_PARTICLE = 96  # the store's fields: pos, vel, acc (3 x 8 B each), mass, id, pot


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=1_000_000)
    ap.add_argument("--cache-fraction", type=float, default=0.1, help="page cache / particle data bytes")
    ap.add_argument("--page-bytes", default="64KiB")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--scratch", default=None, help="folder for the scratch file (default: a temporary one)")
    args = ap.parse_args()
    p = gp.ic.plummer(args.n, seed=1)
    page = parse_byte_size(args.page_bytes)
    data = DATA_BYTES_PER_PARTICLE * args.n
    cache = max(64 * page, int(args.cache_fraction * data) // page * page)

    best_in = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        tree = gp.Tree(p.pos, p.mass, eps=1 / 64, threads=args.threads)
        acc, _ = tree.forces()
        best_in = min(best_in, time.perf_counter() - t0)
    interactions = tree.stats.pp_interactions + tree.stats.pc_interactions

    scratch = args.scratch or tempfile.mkdtemp(prefix="gravpipe-ooc-")
    # the store's own least budget + the cache + keys, cells and blocks (measured: the peak)
    budget = ParticleStore.least_budget(args.n, page_bytes=page) + cache + 40 * args.n + (256 << 20)
    store, order = from_particles(p, scratch, memory_budget=budget, page_bytes=page, cache_bytes=cache)
    best_out, counters = float("inf"), {}
    with store:
        for _ in range(args.repeat):
            store.evict_all()
            store.reset_stats()
            t0 = time.perf_counter()
            acc_p, _, _ = gp.tree.paged_forces(store, eps=1 / 64, threads=args.threads)
            seconds = time.perf_counter() - t0
            if seconds < best_out:
                best_out, counters = seconds, store.stats()
    assert np.array_equal(acc_p, acc[order]), "out-of-core forces differ from in-core"
    info = machine.describe()
    print(json.dumps({
        "n": args.n, "page_bytes": page, "cache_bytes": cache, "data_bytes": data,
        "cache_fraction": cache / data, "seconds_in_core": best_in, "seconds_out_of_core": best_out,
        "ratio": best_out / best_in, "interactions_per_second_in_core": interactions / best_in,
        "interactions_per_second_out_of_core": interactions / best_out,
        "pages_read": counters["pages_read"], "bytes_read": counters["bytes_read"],
        "bytes_swapped": counters["bytes_swapped"], "stall_seconds": counters["stall_seconds"],
        "io_mode": counters["io_mode"], "budget_bytes": counters["budget_bytes"],
        "budget_used_bytes": counters["budget_used_bytes"], "bitwise_equal": True,
        "cpu": info["cpu"], "threads": info["openmp_threads"],
    }))


if __name__ == "__main__":
    main()
