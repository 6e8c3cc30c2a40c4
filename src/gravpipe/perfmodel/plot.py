"""The treecode's predicted step time against N (1e6-1e10) and ranks P (1-1024) on a
machine file, marking where communication or I/O takes over (``gravpipe model plot``).

A rank runs in core while its N/P particles fit in the node's memory at
``IN_CORE_BYTES_PER_PARTICLE`` (particles, tree cells, lists); beyond it, out of core with
a budget of 3/4 of the memory, so the I/O term of the store's passes appears.
"""

from __future__ import annotations

import numpy as np

from gravpipe.perfmodel.model import Breakdown, Model

IN_CORE_BYTES_PER_PARTICLE = 300
SIZES = np.logspace(6, 10, 33)
RANKS = (1, 4, 16, 64, 256, 1024)


def tree_step(doc: dict, n: float, ranks: int, theta: float = 0.6) -> tuple[Breakdown, bool]:
    """One leapfrog step of the treecode per rank, and whether it runs out of core."""
    m = Model(doc)
    memory = float(doc.get("machine", {}).get("memory_bytes", 64 * 2**30))
    b = m.tree_evaluation(int(n), theta, "cpu", None, ranks)
    b.host += n / ranks * float(doc["constants"]["host"]["leapfrog_particle_step_s"])
    ooc = n / ranks * IN_CORE_BYTES_PER_PARTICLE > memory
    if ooc:
        b = b + m.ooc_io(n / ranks, int(0.75 * memory))
    return b, ooc


def dominant(b: Breakdown) -> str:
    """"compute" (host + transfer + pipeline), "communication" or "io": the largest."""
    parts = {"compute": b.host + b.transfer + b.pipeline, "communication": b.communication, "io": b.io}
    return max(parts, key=parts.get)


def plot_tree_scaling(doc: dict, path: str, theta: float = 0.6) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(12, 4.8))
    marks = {"communication": ("s", "tab:red"), "io": ("^", "tab:purple")}
    for p in RANKS:
        rows = [tree_step(doc, n, p, theta) for n in SIZES]
        t = np.array([b.total for b, _ in rows])
        line, = ax[0].loglog(SIZES, t, "-", label=f"P = {p}")
        for (b, _), n, tt in zip(rows, SIZES, t):
            d = dominant(b)
            if d in marks:
                ax[0].plot(n, tt, marks[d][0], color=marks[d][1], ms=5, mfc="none")
    for d, (mk, col) in marks.items():
        ax[0].plot([], [], mk, color=col, mfc="none", label=f"{d} takes over")
    ax[0].set(xlabel="N", ylabel="predicted seconds per step",
              title=f"treecode step, theta {theta:g}: {doc.get('machine', {}).get('name', '?')}")
    ax[0].grid(True, which="both", alpha=0.3)
    ax[0].legend(fontsize=7)
    ranks = np.array([2 ** k for k in range(11)])
    grid = np.zeros((len(ranks), len(SIZES)))
    code = {"compute": 0, "communication": 1, "io": 2}
    for i, p in enumerate(ranks):
        for j, n in enumerate(SIZES):
            grid[i, j] = code[dominant(tree_step(doc, n, int(p), theta)[0])]
    from matplotlib.colors import ListedColormap
    ax[1].pcolormesh(SIZES, ranks, grid, cmap=ListedColormap(["tab:green", "tab:red", "tab:purple"]),
                     vmin=-0.5, vmax=2.5, shading="nearest")
    ax[1].set(xscale="log", yscale="log", xlabel="N", ylabel="ranks P",
              title="largest term: green compute, red communication, purple I/O")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
