"""Independent float64 numpy references that the tests compare gravpipe against.

Written straight from the equations (no shared code with the package):
    acc_i  =  G sum_j m_j d_ij / (|d_ij|^2 + eps^2)^(3/2),          d_ij = x_j - x_i
    pot_i  = -G sum_j m_j / (|d_ij|^2 + eps^2)^(1/2)
    jerk_i =  G sum_j m_j [v_ij / r^3 - 3 (d_ij . v_ij) d_ij / r^5],  v_ij = v_j - v_i
with r^2 = |d_ij|^2 + eps^2 and pair (i, exclude[i]) left out.
"""

from __future__ import annotations

import numpy as np


def direct_sum_f64(pos_j, mass_j, pos_i, eps=0.0, G=1.0, vel_j=None, vel_i=None, exclude=None, chunk=512):
    """Return (acc (n_i,3), pot (n_i,), jerk (n_i,3) or None) in float64, chunked over i."""
    pos_j = np.asarray(pos_j, np.float64)
    pos_i = np.asarray(pos_i, np.float64)
    mass_j = np.asarray(mass_j, np.float64)
    n_i = len(pos_i)
    acc = np.zeros((n_i, 3))
    pot = np.zeros(n_i)
    jerk = np.zeros((n_i, 3)) if vel_i is not None else None
    for s in range(0, n_i, chunk):
        sl = slice(s, min(s + chunk, n_i))
        d = pos_j[None, :, :] - pos_i[sl, None, :]            # (c, Nj, 3)
        r2 = np.einsum("cjk,cjk->cj", d, d) + eps * eps
        with np.errstate(divide="ignore"):
            rinv = 1.0 / np.sqrt(r2)
        if exclude is not None:
            rows = np.arange(sl.stop - sl.start)
            ex = np.asarray(exclude)[sl]
            keep = ex >= 0
            rinv[rows[keep], ex[keep]] = 0.0
        rinv3 = rinv ** 3
        mr3 = mass_j[None, :] * rinv3
        acc[sl] = G * np.einsum("cj,cjk->ck", mr3, d)
        pot[sl] = -G * (mass_j[None, :] * rinv).sum(axis=1)
        if vel_i is not None:
            v = np.asarray(vel_j)[None, :, :] - np.asarray(vel_i)[sl, None, :]
            rv = np.einsum("cjk,cjk->cj", d, v)
            jerk[sl] = G * (np.einsum("cj,cjk->ck", mr3, v)
                            - 3.0 * np.einsum("cj,cjk->ck", mr3 * rv * rinv * rinv, d))
    return acc, pot, jerk


def rel_rms(approx, exact):
    """Relative RMS error sqrt(mean_i |approx_i - exact_i|^2 / |exact_i|^2).

    Rows of (n,3) arrays are compared as vectors; (n,) arrays elementwise. This per-particle
    form is stricter than the ratio of norms: particles with small |a| (near the centre of
    a cluster) weigh as much as the rest.
    """
    approx = np.asarray(approx, np.float64)
    exact = np.asarray(exact, np.float64)
    diff = approx - exact
    if diff.ndim == 2:
        num = np.sum(diff * diff, axis=1)
        den = np.sum(exact * exact, axis=1)
    else:
        num = diff * diff
        den = exact * exact
    return float(np.sqrt(np.mean(num / den)))
