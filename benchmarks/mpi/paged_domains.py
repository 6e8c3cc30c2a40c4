"""The treecode over MPI ranks with each rank out of core (``PagedDomainLeapfrog``): one run
of a Plummer model whose ranks each hold and page only their share under a memory budget,
timed by stage (Salmon & Warren, seed 004: 80 million bodies on 16 processors paging their
shares, 5363 s a step).

    mpiexec -n 2 python benchmarks/mpi/paged_domains.py -n 100000000 --memory-budget 1792MiB \
        --scratch DIR --steps 1 --json OUT.json

Each rank draws its share of the model block by block straight into its store (nothing of
size N/P in memory), the start-up cuts the domains and migrates the particles (the share of
the model file is not a domain), evaluates the forces, and then takes ``--steps`` leapfrog
steps of dt. Printed per rank and step: seconds by stage (decompose and migrate, kick-drift,
bounds, sort, build of the paged tree, export of the essential pieces, their exchange, graft,
walk + forces + closing kick), the bytes of pages read and written, interactions per second,
and the rank's peak resident set (VmHWM) against its budget. The reference measured in the
same run is the start-up evaluation: the step's walk rate over it.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator

import numpy as np
from mpi4py import MPI

from gravpipe import ic
from gravpipe.bench import machine
from gravpipe.io import file_share
from gravpipe.parallel.essential_forces import EssentialTreeForces
from gravpipe.parallel.paged_domain_leapfrog import PagedDomainLeapfrog
from gravpipe.store import parse_byte_size


def vm(field: str) -> float:
    """A /proc/self/status field in MiB (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(field)


def share_blocks(model: str, n: int, seed: int, begin: int, end: int) -> Iterator[dict[str, np.ndarray]]:
    """This rank's particles [begin, end) of the model, block by block."""
    start = 0
    for blk in ic.model_blocks(model, n, seed):
        lo, hi = max(begin, start), min(end, start + blk.n)
        if lo < hi:
            yield {"pos": blk.pos[lo - start:hi - start], "vel": blk.vel[lo - start:hi - start],
                   "mass": blk.mass[lo - start:hi - start], "id": blk.id[lo - start:hi - start]}
        start += blk.n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1_000_000)
    ap.add_argument("--model", default="plummer")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--memory-budget", default="1792MiB", help="each rank's budget")
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--dt", type=float, default=1 / 128)
    ap.add_argument("--eps", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--theta", type=float, default=0.6)
    ap.add_argument("--n-leaf", type=int, default=16)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    own = vm("VmRSS")
    b, e = file_share(args.n, comm.rank, comm.size)
    forces = EssentialTreeForces(comm, eps=args.eps, G=1.0, threads=args.threads, theta=args.theta,
                                 n_leaf=args.n_leaf)
    t0 = time.perf_counter()
    run = PagedDomainLeapfrog(comm, lambda: share_blocks(args.model, args.n, args.seed, b, e), e - b, forces=forces,
                              dt=args.dt, t0=0.0, memory_budget=parse_byte_size(args.memory_budget),
                              scratch=args.scratch,
                              blocks_bytes=min(args.n, ic.IC_BLOCK) * ic.BYTES_PER_BLOCK_PARTICLE)
    run.start()
    startup = time.perf_counter() - t0
    records = [{"stage": "start-up", "seconds": startup, "stages": dict(run.last_stages),
                "import": dict(run.last_import),
                "interactions_rank": int(run._tree_stats.get("pp_interactions", 0)
                                         + run._tree_stats.get("pc_interactions", 0))}]
    for k in range(args.steps):
        t1 = time.perf_counter()
        io0 = _io(run)
        run.evolve_to(run.time + args.dt)
        io1 = _io(run)
        records.append({"stage": f"step {k + 1}", "seconds": time.perf_counter() - t1, "stages": dict(run.last_stages),
                        "import": dict(run.last_import),
                        "bytes_read": io1[0] - io0[0], "bytes_written": io1[1] - io0[1],
                        "interactions_rank": int(run._tree_stats["pp_interactions"]
                                                 + run._tree_stats["pc_interactions"])})
    peak = vm("VmHWM")
    mine = {"rank": comm.rank, "n_rank": run.n, "peak_rss_mib": peak, "own_rss_mib": own,
            "budget_mib": parse_byte_size(args.memory_budget) / 2**20, "records": records,
            "cuts": run.cuts, "summary": run.stage_summary()}
    everyone = comm.gather(mine)
    run.close()
    if comm.rank == 0:
        out = {"machine": machine.describe(),
               "n": args.n, "ranks": comm.size, "model": args.model, "threads_per_rank": args.threads,
               "dt": args.dt, "eps": args.eps, "theta": args.theta, "n_leaf": args.n_leaf,
               "ranks_detail": everyone}
        for r in everyone:
            print(f"rank {r['rank']}: N/P {r['n_rank']:,}, peak RSS {r['peak_rss_mib']:.0f} MiB "
                  f"(interpreter {r['own_rss_mib']:.0f} MiB) of a {r['budget_mib']:.0f} MiB budget")
            for rec in r["records"]:
                st = ", ".join(f"{k} {v:.1f}" for k, v in rec["stages"].items())
                rate = rec["interactions_rank"] / max(rec["stages"].get("walk_forces", 0.0), 1e-9)
                io = (f"; pages read {rec['bytes_read'] / 1e9:.2f} GB, written {rec['bytes_written'] / 1e9:.2f} GB"
                      if "bytes_read" in rec else "")
                imp = rec["import"]
                print(f"  {rec['stage']}: {rec['seconds']:.1f} s ({st}){io}; walk {rate:.3e} interactions/s; "
                      f"imported {imp.get('particles', 0):,} particles, {imp.get('cells', 0):,} cells "
                      f"({imp.get('graft_bytes', 0) / 2**20:.1f} MiB), sent {imp.get('bytes_sent', 0) / 2**20:.1f} MiB; "
                      f"in transit {imp.get('transit_bytes', 0) / 2**20:.1f} MiB, "
                      f"{imp.get('transit_over', 0) / 2**20:.1f} MiB of it past the budget")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1, default=str)


def _io(run: PagedDomainLeapfrog) -> tuple[int, int]:
    """Bytes of pages read and written by this rank's stores so far."""
    r, w = run.io_bytes["read"], run.io_bytes["written"]
    if run._store is not None:
        c = run._store._core.counters()
        r, w = r + int(c["bytes_read"]), w + int(c["bytes_written"])
    return r, w


if __name__ == "__main__":
    main()
