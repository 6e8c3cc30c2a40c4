"""Hermite on distributed shares (gravpipe.parallel.direct_share) at P = 1 and 2 ranks.

The script launches itself under mpiexec (the one beside this Python) — run it plainly:

    python benchmarks/mpi/hermite_share.py [-n 16384] [--steps 4] [--dt-max 0.03125] [--repeat 3]

For each repeat it runs P = 1, then P = 2 (one thread per rank, OMP_NUM_THREADS=1): a
Plummer sphere (seed 1, eps 1/64, mixed precision, CPU), the start-up evaluation untimed,
then --steps steps of dt_max timed. Each rank prints one line:

- rss_mib: peak resident memory of the process (getrusage ru_maxrss);
- state_bytes: the particle state the rank holds: its n particles at 176 bytes each (the
  integrator's pos, vel, predicted pos and vel, acc, jerk: 3 float64 each; mass, pot: one
  float64; own time and step: one int64) plus the exchange buffers at their largest (216
  bytes per gathered i-particle: the block, its unpacked pos/vel/exclusion and partials;
  56 per partial-force record received);
- comm: the share of the step time spent in collectives (block-time agreement, i-block
  gather, partial-force return);
- interactions/s: all ranks' interactions over the step time;
- bytes/block: what the rank sent and received per block step.

Then the median step time of each P and the ratio of P = 2 to P = 1.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

STATE_BYTES_PER_PARTICLE = 176
BLOCK_BYTES_PER_ENTRY, RECEIVE_BYTES_PER_RECORD = 216, 56


def worker(n: int, steps: int, dt_max: float) -> None:
    """One run under mpiexec: each rank prints a JSON line."""
    import numpy as np
    from mpi4py import MPI

    import gravpipe as gp
    from gravpipe.parallel.direct_share import ShareDirect

    comm = MPI.COMM_WORLD
    p_all, r = comm.Get_size(), comm.Get_rank()
    p = gp.ic.plummer(n, seed=1)
    lo, hi = n * r // p_all, n * (r + 1) // p_all
    pos, vel, mass = (np.array(a[lo:hi]) for a in (p.pos, p.vel, p.mass))
    del p  # the rank keeps its share only (the whole model, ~1 MiB here, is in the peak RSS)
    run = ShareDirect(comm, pos, vel, mass, eps=1 / 64, backend="cpu", precision="mixed", threads=1,
                      params={"dt_max": dt_max})
    before, blocks_before, traffic_before = run.stats, run.counters()["steps"], run.traffic()
    comm.Barrier()
    t0 = time.perf_counter()
    run.evolve_to(steps * dt_max)
    wall = time.perf_counter() - t0
    step_time = comm.allreduce(wall, op=MPI.MAX)
    after, traffic = run.stats, run.traffic()
    blocks = run.counters()["steps"] - blocks_before
    moved = (traffic["bytes_sent"] + traffic["bytes_received"]
             - traffic_before["bytes_sent"] - traffic_before["bytes_received"])
    sizes = run.local_sizes()
    line = {"ranks": p_all, "rank": r, "n": sizes["n"], "n_total": n, "blocks": blocks,
            "seconds": step_time, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "state_bytes": sizes["n"] * STATE_BYTES_PER_PARTICLE + sizes["largest_block"] * BLOCK_BYTES_PER_ENTRY
            + sizes["largest_receive"] * RECEIVE_BYTES_PER_RECORD,
            "comm_share": (after.seconds_comm - before.seconds_comm) / wall,
            "interactions_per_second": (after.interactions - before.interactions) / step_time,
            "bytes_per_block": moved / max(1, blocks), "largest_block": sizes["largest_block"]}
    for q in range(p_all):  # one rank at a time, so the lines do not interleave
        if q == r:
            print(json.dumps(line), flush=True)
        comm.Barrier()


def launch(ranks: int, args: argparse.Namespace) -> list[dict]:
    mpiexec = Path(sys.executable).parent / "mpiexec"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [str(mpiexec), "-n", str(ranks), sys.executable, "-m", "mpi4py", __file__, "--worker",
           "-n", str(args.n), "--steps", str(args.steps), "--dt-max", repr(args.dt_max)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return [json.loads(s) for s in out.splitlines() if s.startswith("{")]


def machine_lines() -> list[str]:
    from gravpipe import _core
    from gravpipe.bench import machine

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    return [f"machine: {machine.cpu_model()}, {os.cpu_count()} cores, isa {_core.available_isas()[0]}, "
            f"load average {os.getloadavg()[0]:.2f} at start",
            f"date: {time.strftime('%Y-%m-%d %H:%M')}, commit {commit}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=16384)
    ap.add_argument("--steps", type=int, default=4, help="steps of dt_max timed")
    ap.add_argument("--dt-max", type=float, default=1 / 32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.n, args.steps, args.dt_max)
        return
    print("\n".join(machine_lines()))
    print(f"Hermite on shares: N = {args.n} Plummer, eps 1/64, mixed, CPU, 1 thread per rank, "
          f"{args.steps} steps of dt_max = {args.dt_max}")
    print(f"{'P':>2} {'rank':>4} {'n':>6} {'blocks':>6} {'seconds':>8} {'rss MiB':>8} {'state MiB':>9} "
          f"{'comm':>6} {'interactions/s':>15} {'bytes/block':>11}")
    times: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.repeat):
        for ranks in (1, 2):
            lines = launch(ranks, args)
            times[ranks].append(lines[0]["seconds"])
            for d in lines:
                print(f"{d['ranks']:>2} {d['rank']:>4} {d['n']:>6} {d['blocks']:>6} {d['seconds']:>8.3f} "
                      f"{d['rss_mib']:>8.1f} {d['state_bytes'] / 2**20:>9.2f} {d['comm_share']:>6.1%} "
                      f"{d['interactions_per_second']:>15.4g} {d['bytes_per_block']:>11.0f}")
    median = {p: statistics.median(t) for p, t in times.items()}
    print(f"median seconds: P=1 {median[1]:.3f}, P=2 {median[2]:.3f}; "
          f"ratio P=2 / P=1 = {median[2] / median[1]:.3f}")


if __name__ == "__main__":
    main()
