"""What a whole `gravpipe run` costs, from the command to its exit: wall time against one force
evaluation of the same run, and peak memory against its budget.

    python benchmarks/whole_run.py cost [-n 1000000] [--repeat 3] [--json F]
        gravpipe run -n N --gravity tree --dt 1/64 --t-end 1/32 (two steps, in memory): wall time
        of the command / the seconds of one of its steps (one force evaluation, the reference,
        measured in the same run). Goal: <= 6.
    python benchmarks/whole_run.py rss FILE --memory-budget 24MiB --scratch DIR [--repeat 3] [--json F]
        gravpipe run FILE --gravity tree --memory-budget B --scratch DIR --t-end 1/64 (two steps
        in pages): peak RSS of the process, and above the budget; the interpreter's own share (a
        process that only imports gravpipe's run modules) measured in the same run.

Each run is a child process; its peak RSS is the kernel's (os.wait4: that child's ru_maxrss).
Prints the machine, each run and the median of the repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

from gravpipe.bench import machine
from gravpipe.store import format_bytes, parse_byte_size


def measure(cmd: list[str]) -> tuple[float, int, str]:
    """(wall seconds, peak RSS bytes, stdout+stderr) of ``cmd`` in a fresh process (os.wait4
    gives that child's own ru_maxrss, whatever ran before it)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {proc.returncode}\n{out}")
    return wall, usage.ru_maxrss * 1024, out


def gravpipe_cmd() -> list[str]:
    return [sys.executable, "-m", "gravpipe.cli"]


def cost(args: argparse.Namespace) -> dict:
    cmd = gravpipe_cmd() + ["run", "-n", str(args.n), "--gravity", "tree", "--dt", "1/64", "--t-end", "1/32",
                            "--no-progress"]
    rows = []
    for k in range(args.repeat):
        wall, rss, out = measure(cmd)
        total = float(re.search(r"^\s+total\s+([0-9.]+) s", out, re.M).group(1))
        steps = int(re.search(r"; ([0-9,]+) steps,", out).group(1).replace(",", ""))
        per_eval = total / steps
        rows.append({"wall_s": wall, "step_s": per_eval, "evaluations": wall / per_eval, "peak_rss": rss})
        print(f"  run {k + 1}: wall {wall:.2f} s, one evaluation (a step) {per_eval:.2f} s: "
              f"{wall / per_eval:.2f} evaluations; peak RSS {format_bytes(rss)}", flush=True)
    med = statistics.median(r["evaluations"] for r in rows)
    print(f"median: {med:.2f} force evaluations of wall time from the command to its exit (goal <= 6)")
    return {"command": " ".join(cmd[2:]), "runs": rows, "median_evaluations": med}


def rss(args: argparse.Namespace) -> dict:
    budget = parse_byte_size(args.memory_budget)
    base_cmd = [sys.executable, "-c", "import gravpipe, gravpipe.cli, gravpipe.simulation, h5py, rich"]
    _, base, _ = measure(base_cmd)
    print(f"  the interpreter and libraries alone: {format_bytes(base)}")
    cmd = gravpipe_cmd() + ["run", args.file, "--gravity", "tree", "--memory-budget", args.memory_budget,
                            "--scratch", args.scratch, "--t-end", args.t_end, "--no-progress"]
    rows = []
    for k in range(args.repeat):
        wall, peak, _ = measure(cmd)
        rows.append({"wall_s": wall, "peak_rss": peak, "above_budget": peak - budget})
        print(f"  run {k + 1}: peak RSS {format_bytes(peak)} = budget {format_bytes(budget)} + "
              f"{format_bytes(peak - budget)} (wall {wall:.1f} s)", flush=True)
    med = statistics.median(r["peak_rss"] for r in rows)
    print(f"median peak RSS {format_bytes(int(med))}: budget + {format_bytes(int(med - budget))} "
          f"(the interpreter and libraries alone {format_bytes(base)}; goal: budget + 230 MiB)")
    return {"command": " ".join(cmd[2:]), "budget": budget, "interpreter_rss": base, "runs": rows,
            "median_peak_rss": med}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("cost")
    c.add_argument("-n", type=int, default=1_000_000)
    r = sub.add_parser("rss")
    r.add_argument("file")
    r.add_argument("--memory-budget", required=True)
    r.add_argument("--scratch", required=True)
    r.add_argument("--t-end", default="1/64")
    for p in (c, r):
        p.add_argument("--repeat", type=int, default=3)
        p.add_argument("--json", default=None)
    args = ap.parse_args()
    info = machine.describe()
    print(f"machine: {info['cpu']}, {info['logical_cpus']} logical CPUs, isa {info['isa']}; "
          f"load {os.getloadavg()[0]:.1f}")
    doc = {"machine": info, **(cost(args) if args.what == "cost" else rss(args))}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
