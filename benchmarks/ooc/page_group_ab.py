"""What the page group "body" (pos and mass sharing their pages) does to one out-of-core
leapfrog step: one process per layout, so run it alternating, e.g.

    for i in 1 2 3; do for l in grouped columns; do
        python benchmarks/ooc/page_group_ab.py 1e7 0.1 $l /scratch; done; done

"columns" gives pos and mass a column each (the layout before the page group). Prints the
second step's stages (the steady state: kick-drift inside the sort), the CPU seconds, the
seconds threads stalled on I/O, the cache misses and the bytes read from the particle store.
Machine: whatever runs it (print it beside the figures).
"""
import resource
import sys

import gravpipe as gp
import gravpipe.store as gstore
from gravpipe.ooc import OutOfCore


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    n, frac, layout, scratch = int(float(sys.argv[1])), float(sys.argv[2]), sys.argv[3], sys.argv[4]
    if layout not in ("grouped", "columns"):
        raise SystemExit(f"layout must be 'grouped' or 'columns', got {layout!r}")
    if layout == "columns":
        gstore.PAGE_GROUPS.clear()
    p = gp.ic.plummer(n, seed=1)
    with OutOfCore.from_particles(p, scratch, int(frac * 96 * n), eps=1e-3) as o:
        o.forces()
        o.step(1 / 128)
        a, c0 = dict(o.store.stats()), cpu_seconds()
        st = o.step(1 / 128)
        b, sd = dict(o.store.stats()), st.sort_detail
        print(f"{layout:8s} total {st.total:.2f} sort {st.sort:.2f} (runs {sd['seconds_runs']:.2f} merge "
              f"{sd['seconds_merge']:.2f} permute {sd['seconds_permute']:.2f}) moments {st.moments:.2f} walk "
              f"{st.walk_forces:.2f} cpu {cpu_seconds() - c0:.2f} stall {b['stall_seconds'] - a['stall_seconds']:.2f} "
              f"misses {b['misses'] - a['misses']} read {(b['bytes_read'] - a['bytes_read']) / 2**30:.2f} GiB",
              flush=True)


if __name__ == "__main__":
    main()
