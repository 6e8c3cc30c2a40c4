"""Context switches and CPU seconds of each thread of the process during one out-of-core step
(N = 1e7 at a budget of 1/10 by default): voluntary switches (a thread waits), involuntary
ones (it is preempted), and user + system CPU, read from /proc/self/task every 50 ms, so
threads that live only for the walk (the prefetch, the next sort's run maker) are counted
too. The optional third argument is the budget as a fraction of the particle data (default
0.1; below ~1e7 particles 1/10 is less than the least budget). BENCHMARKS.md,
"Where the out-of-core step's CPU goes".

    python benchmarks/ooc/thread_switches.py 1e7 /path/to/scratch [0.1]
"""
import os
import sys
import threading
import time

from step_report import budget

import gravpipe as gp
from gravpipe.ooc import OutOfCore


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _switches() -> dict[str, tuple[int, int, float, str]]:
    """Thread id -> (voluntary switches, involuntary switches, CPU seconds, name) so far
    (Linux; the helpers name themselves: gp-prefetch, gp-next-runs, gp-read-ahead)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                fields = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read().rsplit(")", 1)[1].split()  # after the name, which may hold spaces
        except OSError:  # the thread ended meanwhile
            continue
        cpu = (int(stat[11]) + int(stat[12])) / CLOCK_TICKS  # utime + stime
        out[tid] = (int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"]), cpu,
                    fields.get("Name", "?").strip())
    return out


def main() -> None:
    n, scratch = int(float(sys.argv[1])), sys.argv[2]
    fraction = float(sys.argv[3]) if len(sys.argv) > 3 else 0.1
    p = gp.ic.plummer(n, seed=1)
    with OutOfCore.from_particles(p, scratch, budget(n, fraction), eps=1e-3, threads=2) as o:
        o.forces(next_dt=1 / 128)
        o.step(1 / 128)
        first = _switches()
        last = dict(first)
        done = threading.Event()

        watcher_tid = []  # this watcher's own switches are not the step's

        def watch() -> None:
            watcher_tid.append(str(threading.get_native_id()))
            while not done.is_set():
                last.update(_switches())
                time.sleep(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        st = o.step(1 / 128)
        done.set()
        watcher.join()
        last.update(_switches())
    print(f"step {st.total:.2f} s: walk {st.walk_forces:.2f} s, sort {st.sort:.2f} s")
    rows = []
    for tid, (v, nv, cpu, name) in last.items():
        if tid in watcher_tid:
            continue
        v0, nv0, cpu0, _ = first.get(tid, (0, 0, 0.0, name))
        rows.append((v - v0 + nv - nv0, tid, name, v - v0, nv - nv0, cpu - cpu0, tid in first))
    for total, tid, name, v, nv, cpu, old in sorted(rows, reverse=True):
        if total > 50 or cpu > 0.05:
            print(f"thread {tid} {name} ({'before the step' if old else 'new in the step'}): "
                  f"voluntary {v}, involuntary {nv}, CPU {cpu:.2f} s")


if __name__ == "__main__":
    main()
