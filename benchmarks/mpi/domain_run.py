"""Runs over MPI ranks with distributed state (``gravpipe.domain_run.DomainRun``): memory per
rank and scaling of whole treecode leapfrog steps.

    python benchmarks/mpi/domain_run.py memory -n 4000000 --ranks 1 2 4 --repeat 3 --dir DIR
    python benchmarks/mpi/domain_run.py memory --gravity direct -n 262144 --ranks 1 2 --dir DIR
    python benchmarks/mpi/domain_run.py scaling -n 1000000 --repeat 3 --dir DIR

memory: a Plummer model of N in DIR (written block by block once), then for each P a run
from that file over 2 leapfrog steps (P = 1: the serial in-memory run, ``gravpipe.Simulation``
in one process; P > 1: ``mpiexec -n P``, each rank reading its share), 1 thread a rank.
Each rank reports its resident set after ``import gravpipe`` (and MPI's start: the
interpreter's own share) and its peak (VmHWM); the figure is the largest rank's peak above
its own share, against the serial run's (median of the repeats). ``--gravity direct``: the
same for Hermite block steps to t = 1/256 (N/P j-particles a rank), with each rank's share
of the block steps' time spent in MPI.

scaling: seconds per leapfrog step (4 steps after one untimed step: over ranks the first
step cuts the domains by measured cost, as the start-up could not) of a Plummer model; strong: N on P = 1 x 2 threads (serial run) against P = 2 x 1 thread; weak: N/2 on
P = 1 x 1 thread against N on P = 2 x 1 thread. Efficiency: t_1 / t_2 (strong: the same
cores), t_1 / t_2 (weak: the same work a core). Each line of output is one JSON record
with the machine named; the summary prints medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def vm(field: str) -> float:
    """A /proc/self/status field in MiB (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(field)


def probe(args: argparse.Namespace) -> None:
    """One run (in this process, or this rank of mpiexec's), its memory and step times."""
    ranks = int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))
    comm = None
    if ranks > 1:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    import gravpipe as gp
    from gravpipe.bench import machine

    own = vm("VmRSS")
    t0 = time.perf_counter()
    kw = {"gravity": "tree", "dt": 1 / 128} if args.gravity == "tree" else {"gravity": "direct"}
    if args.file:
        sim = gp.Simulation.from_snapshot(args.file, threads=args.threads, **kw)
    else:
        sim = gp.Simulation.from_model("plummer", args.n, seed=1, threads=args.threads, **kw)
    start = time.perf_counter() - t0
    if args.warmup:  # steady steps: the first one also cuts the domains by measured cost
        sim.evolve(args.warmup / 128, progress=False)
    if comm is not None:
        comm.Barrier()
    t1 = time.perf_counter()
    sim.evolve((args.warmup + args.steps) / 128 if args.gravity == "tree" else 1 / 256, progress=False)
    wall = time.perf_counter() - t1
    if comm is not None:
        from mpi4py import MPI

        wall = comm.allreduce(wall, op=MPI.MAX)
    row = {"ranks": ranks, "rank": 0 if comm is None else comm.Get_rank(), "n": sim.n,
           "n_rank": sim.particles.n, "threads": args.threads, "own_mib": own, "peak_mib": vm("VmHWM"),
           "startup_s": start, "seconds_per_step": wall / args.steps, "steps": args.steps,
           "cpu": machine.describe()["cpu"]}
    t = sim.timings
    row["comm_share"] = t.comm / t.total if t.total > 0 else 0.0
    row["interactions"] = t.interactions  # of all ranks, in the timed steps and the warm-up
    row["block_steps"] = t.steps
    if sim.residence == "domains":
        row["summary"] = sim.summary_lines()
    rows = [row] if comm is None else comm.gather(row)
    if rows is not None:
        for r in rows:
            print(json.dumps(r), flush=True)


def launch(ranks: int, *probe_args: str) -> list[dict]:
    cmd = [sys.executable, str(HERE), "probe", *probe_args]
    if ranks > 1:
        cmd = [str(Path(sys.executable).parent / "mpiexec"), "-n", str(ranks), *cmd]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def memory(args: argparse.Namespace) -> None:
    import gravpipe as gp

    ic = Path(args.dir) / f"plummer_{args.n}.h5"
    if not ic.exists():
        with gp.io.streamed_snapshot(ic, args.n, 0.0) as out:
            for block in gp.ic.plummer_blocks(args.n, seed=1):
                out.write(block)
    table: dict[int, list[float]] = {}
    for _ in range(args.repeat):
        for p in args.ranks:
            rows = launch(p, "--file", str(ic), "--threads", "1", "--steps", "2", "--gravity", args.gravity)
            for r in rows:
                print(json.dumps(r | {"case": "memory"}), flush=True)
            table.setdefault(p, []).append(max(r["peak_mib"] - r["own_mib"] for r in rows))
    serial = statistics.median(table[min(table)])
    for p, values in table.items():
        m = statistics.median(values)
        print(f"# memory N={args.n} P={p}: largest rank's peak above its own share {m:.1f} MiB "
              f"(runs {', '.join(f'{v:.1f}' for v in values)}), {m / serial:.3f} of P={min(table)}")


def scaling(args: argparse.Namespace) -> None:
    cases = {"strong_1": (1, args.n, 2), "strong_2": (2, args.n, 1), "weak_1": (1, args.n // 2, 1),
             "weak_2": (2, args.n, 1)}
    times: dict[str, list[float]] = {k: [] for k in cases}
    work: dict[str, float] = {}
    for _ in range(args.repeat):
        for name, (p, n, threads) in cases.items():
            rows = launch(p, "-n", str(n), "--threads", str(threads), "--steps", "4", "--warmup", "1")
            for r in rows:
                print(json.dumps(r | {"case": name}), flush=True)
            times[name].append(rows[0]["seconds_per_step"])
            work[name] = rows[0]["interactions"] / rows[0]["n"]
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"# strong N={args.n}: P=1x2 threads {med['strong_1']:.3f} s/step, P=2x1 {med['strong_2']:.3f} s/step, "
          f"efficiency {med['strong_1'] / med['strong_2']:.3f}")
    eff = med["weak_1"] / med["weak_2"]
    per = eff * work["weak_2"] / work["weak_1"]  # the same interactions a core
    print(f"# weak N/P={args.n // 2}: P=1 {med['weak_1']:.3f} s/step, P=2 {med['weak_2']:.3f} s/step, "
          f"efficiency {eff:.3f} ({per:.3f} per interaction: {work['weak_1']:.0f} -> {work['weak_2']:.0f} "
          f"interactions a body)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--file")
    p.add_argument("-n", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--gravity", choices=["tree", "direct"], default="tree")
    p.add_argument("--warmup", type=int, default=0, help="steps before the timed ones")
    for name in ("memory", "scaling"):
        q = sub.add_parser(name)
        q.add_argument("-n", type=int, default=4_000_000 if name == "memory" else 1_000_000)
        q.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
        q.add_argument("--repeat", type=int, default=3)
        q.add_argument("--dir", default=".")
        q.add_argument("--gravity", choices=["tree", "direct"], default="tree")
    args = ap.parse_args()
    {"probe": probe, "memory": memory, "scaling": scaling}[args.what](args)


if __name__ == "__main__":
    main()
