"""Force errors of the treecode keyed in its particles' bounding cube (the tight frame) and
in a leapfrog step's frame (the bounds grown by 1/256 of their extent on every side:
curve_order.hpp, step_frame), against a float64 direct sum, over 12 Plummer sets.

    python benchmarks/tree_frame_accuracy.py [N] [THETA]

Prints, for each frame, the median over the sets of the median relative error of the
acceleration on 600 sampled particles, and the mean 99th percentile.
"""
from __future__ import annotations

import sys

import numpy as np

import gravpipe as gp

CELLS = float((1 << 21) - 1)  # grid cells per axis, less one (curve_box)
EPS = 1 / 64
SAMPLE = 600


def direct_acc(p: gp.Particles, idx: np.ndarray) -> np.ndarray:
    """Float64 direct sum on particles idx (self excluded), (len(idx), 3)."""
    d = p.pos[None, :, :] - p.pos[idx, None, :]
    r2 = (d * d).sum(-1) + EPS * EPS
    inv3 = r2 ** -1.5
    inv3[np.arange(len(idx)), idx] = 0.0
    return (p.mass[None, :, None] * d * inv3[:, :, None]).sum(1)


def grown_frame(pos: np.ndarray) -> tuple[list[float], float]:
    """step_frame's cube when the positions have not moved: their bounds with room."""
    lo, hi = pos.min(0), pos.max(0)
    room = np.ldexp(np.max(hi - lo), -8)
    return list(lo - room), CELLS / np.max((hi + room) - (lo - room))


def main() -> None:
    n = int(float(sys.argv[1])) if len(sys.argv) > 1 else 12000
    theta = float(sys.argv[2]) if len(sys.argv) > 2 else 0.6
    errors: dict[str, list[tuple[float, float]]] = {"tight": [], "grown": []}
    for seed in range(11, 23):
        p = gp.ic.plummer(n, seed=seed)
        idx = np.random.default_rng(seed).choice(n, SAMPLE, replace=False)
        ref = direct_acc(p, idx)
        for name, frame in [("tight", None), ("grown", grown_frame(p.pos))]:
            a, _ = gp.Tree(p.pos, p.mass, eps=EPS, theta=theta, frame=frame).forces()
            err = np.linalg.norm(a[idx] - ref, axis=1) / np.linalg.norm(ref, axis=1)
            errors[name].append((float(np.median(err)), float(np.percentile(err, 99))))
    print(f"Plummer N = {n}, theta = {theta}, eps = {EPS}, 12 sets (seeds 11-22), {SAMPLE} sampled particles each")
    for name, rows in errors.items():
        v = np.array(rows)
        print(f"{name:6s} median of medians {np.median(v[:, 0]):.3e}, mean p99 {v[:, 1].mean():.3e}")


if __name__ == "__main__":
    main()
