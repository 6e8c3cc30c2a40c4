"""``gravpipe bench transfer``: host <-> device copy time against size, pageable and pinned
host memory, and the fit T = C1 + C2 * bytes (latency C1, inverse bandwidth C2), as seed 000
(PCI-HIB) characterises its host interface. Needs the CUDA backend.

Each point is the median of ``repeats`` cudaMemcpy calls timed with CUDA events. The fit
weights every point by 1/T, so small transfers (latency) and large ones (bandwidth) count
alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from gravpipe import _core
from gravpipe.backends import resolve_backend
from gravpipe.bench.costfit import fit_cost

DEFAULT_SIZES = [2 ** k for k in range(2, 29, 2)]  # 4 B .. 256 MiB


@dataclass(frozen=True)
class TransferFit:
    direction: str        # "h2d" or "d2h"
    pinned: bool
    latency_s: float      # C1
    seconds_per_byte: float  # C2
    bandwidth_gb_s: float    # 1 / C2, 1e9 bytes per second
    max_rel_residual: float  # worst |T_fit / T - 1| over the sizes


def run(sizes: list[int] | None = None, repeats: int = 20, device: int = 0) -> tuple[list[dict], list[TransferFit]]:
    """Timings (one dict per direction x memory kind x size) and their fits."""
    resolve_backend("cuda")  # BackendUnavailableError naming why, without CUDA
    sizes = sorted(DEFAULT_SIZES if sizes is None else sizes)
    if not sizes or sizes[0] < 1:
        raise ValueError("sizes: need positive byte counts")
    rows = _core.cuda_time_transfers([int(s) for s in sizes], int(repeats), int(device))
    return rows, [fit(rows, d, p) for d in ("h2d", "d2h") for p in (False, True)]


def fit(rows: list[dict], direction: str, pinned: bool) -> TransferFit:
    """T = C1 + C2 * bytes for one direction and memory kind (see costfit.fit_cost)."""
    sel = [r for r in rows if r["direction"] == direction and r["pinned"] == pinned]
    f = fit_cost(np.array([r["bytes"] for r in sel]), np.array([r["seconds"] for r in sel]))
    return TransferFit(direction, pinned, f.latency_s, f.seconds_per_byte, f.bandwidth_gb_s, f.max_rel_residual)


def plot(rows: list[dict], fits: list[TransferFit], path: str) -> None:
    """Time and bandwidth against size with the fitted lines (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    for f in fits:
        sel = [r for r in rows if r["direction"] == f.direction and r["pinned"] == f.pinned]
        b = np.array([r["bytes"] for r in sel], float)
        t = np.array([r["seconds"] for r in sel], float)
        label = f"{f.direction} {'pinned' if f.pinned else 'pageable'}"
        line, = ax[0].loglog(b, t, "o", ms=4, label=label)
        ax[0].loglog(b, f.latency_s + f.seconds_per_byte * b, "-", color=line.get_color(), lw=1)
        ax[1].semilogx(b, b / t / 1e9, "o-", ms=4, color=line.get_color(), label=label)
    ax[0].set(xlabel="bytes per transfer", ylabel="seconds", title="T = C1 + C2 * bytes")
    ax[1].set(xlabel="bytes per transfer", ylabel="GB/s", title="achieved bandwidth")
    for a in ax:
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def as_json(rows: list[dict], fits: list[TransferFit], machine: dict) -> dict:
    return {"benchmark": "transfer", "machine": machine, "timings": rows, "fits": [asdict(f) for f in fits]}
