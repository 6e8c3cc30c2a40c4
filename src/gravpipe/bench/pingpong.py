"""``gravpipe bench pingpong`` (run it as ``mpiexec -n 2 gravpipe bench pingpong``): the
round trip of one message between ranks 0 and 1 against its size, 1 B .. 64 MiB, and the
fit T = C1 + C2 * bytes of the one-way time (PARNASS, seed 001, Fig. 17). Small and large
messages are fitted apart too: MPI libraries switch protocol (eager -> rendezvous) in
between, which shows as a step in the curve and two different latencies.

Each point is the median over ``repeats`` round trips after one warm-up, with mpi4py's
buffer calls (Send/Recv on numpy arrays: no pickling).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import numpy as np

from gravpipe.bench.costfit import CostFit, fit_cost

DEFAULT_SIZES = [1] + [2 ** k for k in range(2, 27, 2)]  # 1 B .. 64 MiB
SMALL_MAX = 16 * 1024     # fitted as "small" up to here ...
LARGE_MIN = 1024 * 1024   # ... and as "large" from here on


def run(comm: Any, sizes: list[int] | None = None, repeats: int = 20) -> list[dict] | None:
    """One-way times per size, measured between ranks 0 and 1 (other ranks wait). Returns
    the rows on rank 0, None elsewhere."""
    if comm is None or comm.Get_size() < 2:
        raise ValueError("bench pingpong needs two MPI ranks: mpiexec -n 2 gravpipe bench pingpong")
    sizes = sorted(DEFAULT_SIZES if sizes is None else sizes)
    rows = []
    for size in sizes:
        seconds = _one_way(comm, size, repeats)
        if comm.Get_rank() == 0:
            rows.append({"bytes": size, "seconds": seconds, "gb_s": size / seconds / 1e9})
    comm.Barrier()
    return rows if comm.Get_rank() == 0 else None


def _one_way(comm: Any, size: int, repeats: int) -> float:
    """Median round trip / 2 between ranks 0 and 1 for ``size`` bytes."""
    rank = comm.Get_rank()
    buf = np.zeros(size, dtype=np.uint8)
    times = []
    for k in range(repeats + 1):  # the first round warms up buffers and connections
        comm.Barrier()
        t0 = time.perf_counter()
        if rank == 0:
            comm.Send(buf, dest=1, tag=k)
            comm.Recv(buf, source=1, tag=k)
        elif rank == 1:
            comm.Recv(buf, source=0, tag=k)
            comm.Send(buf, dest=0, tag=k)
        if k:
            times.append((time.perf_counter() - t0) / 2)
    return float(np.median(times))


def fits(rows: list[dict]) -> dict[str, CostFit]:
    """T = C1 + C2 * bytes over all sizes, small ones and large ones."""
    b = np.array([r["bytes"] for r in rows], float)
    t = np.array([r["seconds"] for r in rows], float)
    out = {"all": fit_cost(b, t)}
    for name, sel in (("small", b <= SMALL_MAX), ("large", b >= LARGE_MIN)):
        if sel.sum() >= 2:
            out[name] = fit_cost(b[sel], t[sel])
    return out


def plot(rows: list[dict], fitted: dict[str, CostFit], path: str) -> None:
    """One-way time and bandwidth against size, with the fitted lines (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b = np.array([r["bytes"] for r in rows], float)
    t = np.array([r["seconds"] for r in rows], float)
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    ax[0].loglog(b, t, "o", ms=4, label="measured (median)")
    for name, f in fitted.items():
        ax[0].loglog(b, f.latency_s + f.seconds_per_byte * b, "-", lw=1,
                     label=f"fit {name}: C1 {1e6 * f.latency_s:.2g} us, {f.bandwidth_gb_s:.3g} GB/s")
    ax[1].semilogx(b, b / t / 1e9, "o-", ms=4)
    ax[0].set(xlabel="message bytes", ylabel="one-way seconds", title="MPI ping-pong: T = C1 + C2 * bytes")
    ax[1].set(xlabel="message bytes", ylabel="GB/s", title="achieved bandwidth")
    for a in ax:
        a.grid(True, which="both", alpha=0.3)
    ax[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def as_json(rows: list[dict], fitted: dict[str, CostFit], machine: dict, library: str) -> dict:
    return {"benchmark": "pingpong", "machine": machine, "mpi_library": library, "timings": rows,
            "fits": {k: asdict(v) for k, v in fitted.items()}}
