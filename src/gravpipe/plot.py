"""Pictures of a run directory, drawn from its ``diagnostics.csv`` (``gravpipe plot DIR``).

    from gravpipe import plot
    paths = plot.plot_run("run1/")     # run1/energy_error.png, lagrangian_radii.png, time_breakdown.png

matplotlib is a dependency of gravpipe, imported only when a plot is drawn; figures are
rendered with the Agg backend (no display needed). Should the import fail anyway (a broken
environment), ``MissingMatplotlib`` (an ImportError) says why and what to reinstall.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np

from gravpipe.io.atomic import atomic_open

DIAGNOSTICS_FILE = "diagnostics.csv"
PLOT_FILES = ("energy_error.png", "lagrangian_radii.png", "time_breakdown.png")
_PHASES = ("host", "transfer", "compute")
_REQUIRED = ("time", "energy_error")
INSTALL_HINT = "reinstall it with: pip install matplotlib"


class MissingMatplotlib(ImportError):
    """matplotlib, a dependency of gravpipe, cannot be imported."""


def read_diagnostics(run_dir: str | Path) -> dict[str, np.ndarray]:
    """Columns of ``run_dir/diagnostics.csv`` as float64 arrays (empty cells -> NaN).

    Raises FileNotFoundError when the directory or the file is missing and ValueError
    when the file has no rows or lacks the ``time`` / ``energy_error`` columns.
    """
    d = Path(run_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such run directory")
    path = d / DIAGNOSTICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (written by 'gravpipe run --out {d}')")
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ValueError(f"{path}: no rows")
    missing = [c for c in _REQUIRED if c not in rows[0]]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)}; not a gravpipe diagnostics file")
    try:
        return {key: np.array([_cell(row[key]) for row in rows]) for key in rows[0]}
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _cell(text: str | None) -> float:
    # rows restored from a checkpoint have empty wall-clock cells
    return float(text) if text not in (None, "") else math.nan


def phase_seconds(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Wall seconds spent between consecutive rows, per phase (host, transfer, compute).

    The CSV holds cumulative counters of the process that wrote each row; a resumed run
    starts counting again from zero, so a value below its predecessor starts a new
    process and counts in full. Rows without timings (restored from a checkpoint) give 0.
    """
    out = {}
    for phase in _PHASES:
        cum = columns.get(f"seconds_{phase}", np.full(len(columns["time"]), math.nan))
        prev = np.concatenate(([0.0], cum[:-1]))
        prev = np.where(np.isnan(prev) | (cum < prev), 0.0, prev)
        out[phase] = np.nan_to_num(cum - prev, nan=0.0)
    return out


def _import_matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise MissingMatplotlib(f"matplotlib (a dependency of gravpipe) cannot be imported ({exc}); "
                                f"{INSTALL_HINT}") from None
    matplotlib.use("Agg")  # files only, never a window
    from matplotlib.figure import Figure

    return Figure


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write energy_error.png, lagrangian_radii.png and time_breakdown.png into ``run_dir``.

    Returns the paths written (atomically). Raises MissingMatplotlib, FileNotFoundError
    or ValueError as ``read_diagnostics`` does.
    """
    figure_class = _import_matplotlib()
    cols = read_diagnostics(run_dir)
    d = Path(run_dir)
    drawers = (_energy_error, _lagrangian_radii, _time_breakdown)
    paths = []
    for name, draw in zip(PLOT_FILES, drawers):
        fig = figure_class(figsize=(7, 4.5), layout="constrained")
        draw(fig.add_subplot(), cols)
        path = d / name
        with atomic_open(path, "wb") as fh:
            fig.savefig(fh, format="png", dpi=110)
        paths.append(path)
    return paths


def _energy_error(ax: Any, cols: dict[str, np.ndarray]) -> None:
    t, de = cols["time"], np.abs(cols["energy_error"])
    shown = de > 0  # the first row is exactly zero; a log axis cannot show it
    ax.semilogy(t[shown], de[shown], marker=".", lw=1)
    ax.set_xlabel("time [N-body units]")
    # diagnostics.relative_energy_error: a run that starts at E0 = 0 is measured against |K0| + |W0|
    starts_at_zero = "total" in cols and cols["total"][0] == 0
    ax.set_ylabel(r"$|E - E_0| \,/\, (|K_0| + |W_0|)$" if starts_at_zero else r"$|E - E_0| \,/\, |E_0|$")
    ax.set_title("relative energy error")
    ax.grid(True, which="both", alpha=0.3)


def _lagrangian_radii(ax: Any, cols: dict[str, np.ndarray]) -> None:
    keys = sorted((k for k in cols if k.startswith("r_lagr_")), key=lambda k: int(k.rsplit("_", 1)[1]))
    for key in keys:
        ax.semilogy(cols["time"], cols[key], lw=1.2, label=f"{key.rsplit('_', 1)[1]}% of the mass")
    ax.set_xlabel("time [N-body units]")
    ax.set_ylabel("radius [N-body units]")
    ax.set_title("Lagrangian radii (about the centre of mass)" if keys else "no Lagrangian radii in diagnostics.csv")
    if keys:
        ax.legend(fontsize="small")
    ax.grid(True, which="both", alpha=0.3)


def _time_breakdown(ax: Any, cols: dict[str, np.ndarray]) -> None:
    t = cols["time"]
    per = phase_seconds(cols)
    # bars span the interval that ends at each row
    left = np.concatenate(([t[0]], t[:-1]))
    width = np.maximum(t - left, 0.0)
    bottom = np.zeros_like(t)
    totals = {p: float(per[p].sum()) for p in _PHASES}
    grand = sum(totals.values())
    for phase in _PHASES:
        share = f" {100 * totals[phase] / grand:.1f}%" if grand > 0 else ""
        ax.bar(left, per[phase], width=width, bottom=bottom, align="edge", label=f"{phase}{share}")
        bottom = bottom + per[phase]
    ax.set_xlabel("time [N-body units]")
    ax.set_ylabel("wall seconds per output interval")
    ax.set_title("time breakdown: host / transfer / compute")
    ax.legend(fontsize="small")
