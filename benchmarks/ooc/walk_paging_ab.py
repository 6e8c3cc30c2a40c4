"""What paging costs the out-of-core walk: the same tree evaluation at a budget of 1/10 of
the particle data and at 3x it (every page cached, no reads), alternating in one process so
that the host's drift hits both alike. Prints wall and CPU seconds of the walk, stalls and
bytes read. BENCHMARKS.md, "Where the out-of-core step's CPU goes".

    python benchmarks/ooc/walk_paging_ab.py 1e7 /path/to/scratch
"""
import resource
import sys

import gravpipe as gp
from gravpipe.ooc import OutOfCore


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    n, scratch = int(float(sys.argv[1])), sys.argv[2]
    p = gp.ic.plummer(n, seed=1)
    for _ in range(2):
        for fraction in (0.1, 3.0):
            with OutOfCore.from_particles(p, scratch, int(fraction * 96 * n), eps=1e-3) as o:
                o.forces()
                a, c0 = dict(o.store.stats()), cpu_seconds()
                st = o.forces()  # sorted already: the tree and its walk alone
                c1, b = cpu_seconds(), dict(o.store.stats())
                print(f"budget {fraction} of the data: walk {st.walk_forces:.2f} s, cpu {c1 - c0:.2f} s, "
                      f"stalls {b['stall_seconds'] - a['stall_seconds']:.2f} thread-s, "
                      f"read {(b['bytes_read'] - a['bytes_read']) / 2**30:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
