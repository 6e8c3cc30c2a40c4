"""The linear cost model of one transfer, T = C1 + C2 * bytes (latency C1, inverse bandwidth
C2), as seed 000 (PCI-HIB) fits its host interface and seed 001 (PARNASS) its network."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CostFit:
    latency_s: float         # C1
    seconds_per_byte: float  # C2
    bandwidth_gb_s: float    # 1 / C2, 1e9 bytes per second
    max_rel_residual: float  # worst |T_fit / T - 1| over the points


def fit_cost(nbytes: np.ndarray, seconds: np.ndarray) -> CostFit:
    """Least-squares T = C1 + C2 * bytes with relative residuals (weights 1/T), so small
    messages (latency) and large ones (bandwidth) count alike."""
    b, t = np.asarray(nbytes, float), np.asarray(seconds, float)
    if len(b) < 2:
        raise ValueError("fit_cost: need at least two sizes")
    a = np.stack([np.ones_like(b), b], axis=1) / t[:, None]
    (c1, c2), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    model = c1 + c2 * b
    return CostFit(float(c1), float(c2), float(1e-9 / c2) if c2 > 0 else float("inf"),
                   float(np.max(np.abs(model / t - 1))))
