"""The evolve loop, the run directory and the run's records (RunConfig, Timings), shared by the
runs of every residence (:mod:`gravpipe.residence`): :class:`~gravpipe.memory_run.MemoryRun` and
:class:`~gravpipe.ooc_simulation.PagedRun`, which :class:`~gravpipe.Simulation` forwards to.

:class:`RunLoop` finds the stops of a run (files due, diagnostics rows, the end), claims the
run directory, numbers and writes the files and ``diagnostics.csv``. A run class supplies:

- ``time``, ``grid_origin``, ``quantum``, ``n``, ``config`` (a ``simulation.RunConfig``),
  ``history`` (diagnostics rows), ``timings`` (``.steps``, ``.particle_steps``; RunLoop's
  from ``_raw_timings()`` and ``_startup`` where the run counts as its core does),
  ``_steps_before`` (steps and particle steps before this process), ``_kind`` (the
  gravity kind: ``row_work``), ``comm`` (None in one process);
- ``_advance_to(t)``: evolve to ``t`` exactly (off the step grid by a shortened step);
- ``_record()``: append a diagnostics row; ``_row_due()``: whether one is due;
- ``energy()``, ``write_snapshot(path)`` and ``write_checkpoint(path)``.
"""

from __future__ import annotations

import csv
import io as _stdio
import math
import os
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gravpipe import diagnostics, integrators, parallel
from gravpipe.parallel import consistency
from gravpipe._validate import check_positive_scalar
from gravpipe.errors import CheckpointSkippedWarning
from gravpipe.io.atomic import atomic_open, stale_temporaries

LAGRANGIAN_FRACTIONS = (0.01, 0.1, 0.5, 0.9)
#: force evaluations' worth of particle steps between diagnostics rows that take their
#: potential from the run's own forces (each costs O(N log N): ~1% of a tree run)
OWN_ROW_WORK = 10
CHECKPOINT_GLOB = "checkpoint_*.h5"
CHECKPOINT_SET_GLOB = "checkpoint_*[0-9]"  # the folder of a multi-file set (runs over MPI ranks)
RUN_FILE_PATTERNS = ("snapshot_*.h5", CHECKPOINT_GLOB, "diagnostics.csv")
RUN_SET_PATTERNS = ("snapshot_*[0-9]", CHECKPOINT_SET_GLOB)


@dataclass
class Timings:
    """Wall time of the run so far, split as in the GRAPE time model (seed 000, eqs. 5-14).

    host: predict, correct, schedule, bookkeeping (T_host); transfer: pipeline j/i writes
    and result reads including format conversion (T_comm); compute: the force kernels
    (T_grape); comm: between MPI ranks (the reduction of partial forces; 0 in one process).
    Seconds; ``steps`` are blocks (Hermite) or shared steps (leapfrog).
    """

    host: float = 0.0
    transfer: float = 0.0
    compute: float = 0.0
    total: float = 0.0
    steps: int = 0
    particle_steps: int = 0
    interactions: int = 0
    comm: float = 0.0

    @property
    def host_transfer_share(self) -> float:
        denom = self.host + self.transfer + self.compute + self.comm
        return (self.host + self.transfer) / denom if denom > 0 else 0.0

    @property
    def particle_steps_per_second(self) -> float:
        return self.particle_steps / self.total if self.total > 0 else 0.0

    def __str__(self) -> str:
        return (f"steps {self.steps:,}, particle steps {self.particle_steps:,} "
                f"({self.particle_steps_per_second:.3g}/s); host {self.host:.3f} s, transfer {self.transfer:.3f} s, "
                f"compute {self.compute:.3f} s, " + (f"comm {self.comm:.3f} s, " if self.comm else "") +
                f"total {self.total:.3f} s; host+transfer "
                f"{100 * self.host_transfer_share:.1f}% of the step time")


@dataclass
class RunConfig:
    """Everything needed to rebuild a Simulation (stored in each checkpoint)."""

    gravity: str
    integrator: str
    params: dict[str, float]
    eps: float
    G: float
    backend: str
    precision: str
    threads: int | None
    t0: float
    energy0: float  # total energy at t0
    evolve: dict[str, Any] = field(default_factory=dict)  # t_end, cadences, out of the last evolve
    theta: float | None = None  # opening angle of gravity="tree"
    outputs: dict[str, int] = field(default_factory=dict)  # files written so far: snapshot, checkpoint
    # K and W at t0, the scale of the energy error when energy0 == 0 (None in checkpoints
    # written before they were stored, which all have energy0 != 0: such runs could not start)
    kinetic0: float | None = None
    potential0: float | None = None
    # an out-of-core run's store settings (memory_budget and page_bytes in bytes, scratch,
    # n_leaf, n_crit); None in core
    out_of_core: dict[str, Any] | None = None
    # whether diagnostics rows take their potential from a precise evaluation of their own
    # (float64 direct sum or fine tree) instead of the run's last force evaluation; True in
    # checkpoints written before the choice existed, whose rows were all precise
    precise_energy: bool = True
    # the particles were spread over MPI ranks, each holding its share (residence "domains")
    distributed: bool = False

    def initial_energy(self) -> diagnostics.Energy:
        """The energy at t0 (K and W are NaN for checkpoints that did not store them)."""
        nan = float("nan")
        return diagnostics.Energy(kinetic=nan if self.kinetic0 is None else self.kinetic0,
                                  potential=nan if self.potential0 is None else self.potential0,
                                  total=self.energy0)



def run_files(d: str | Path) -> list[Path]:
    """The files of a run in directory ``d`` (snapshots, checkpoints, diagnostics.csv)."""
    d = Path(d)
    if not d.is_dir():
        return []
    files = [f for pattern in RUN_FILE_PATTERNS for f in d.glob(pattern) if f.is_file()]
    sets = [f for pattern in RUN_SET_PATTERNS for f in d.glob(pattern) if f.is_dir()]
    return sorted(files + sets)


def _finite_time(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number, got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name}: must be finite, got {value!r}")
    return v


def _after(now: float, origin: float, every: float, quantum: float) -> float:
    """The first origin + k * every after ``now`` (one within rounding of now is now)."""
    k = math.floor((now - origin) / every + 1e-9 * quantum / every) + 1
    return origin + k * every


def check_run_dir(out: str | Path, overwrite: bool) -> list[Path]:
    """The files of another run in ``out`` that a new run there would replace (empty when
    there are none). Raises ValueError when ``out`` is a file and FileExistsError when it
    holds a run and ``overwrite`` is false: callers check before costly work, too."""
    d = Path(out)
    if d.exists() and not d.is_dir():
        raise ValueError(f"out: {d} is a file, not a run directory")
    old = run_files(d)
    if old and not overwrite:
        raise FileExistsError(
            f"{d}: holds another run ({len(old)} files, e.g. {old[0].name}); continue it with "
            f"--resume {d} (Simulation.resume), choose a new directory, or replace it with "
            "--overwrite (overwrite=True)")
    return old


def latest_checkpoint(out: str | Path) -> Path:
    """The newest checkpoint in a run directory (by its index) that can be opened: one that
    cannot (truncated by a full disk or a copy cut short, not HDF5, no /Integrator) is
    skipped with a :class:`~gravpipe.errors.CheckpointSkippedWarning` naming it and why, and
    the one before it is taken. ValueError naming the newest's fault when none can be."""
    d = Path(out)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such run directory")
    # single files (serial runs) and set folders (MPI runs) share one numbering
    found = sorted([f for f in d.glob(CHECKPOINT_GLOB) if f.is_file()] +
                   [f for f in d.glob(CHECKPOINT_SET_GLOB) if f.is_dir()], key=_output_index)
    if not found:
        raise FileNotFoundError(f"{d}: no checkpoint_*.h5 (or checkpoint_* set) to resume from")
    faults = []
    for path in reversed(found):
        fault = _checkpoint_fault(path)
        if fault is None:
            for skipped, why in faults:
                warnings.warn(f"{skipped}: skipped ({why}); resuming from {path.name}", CheckpointSkippedWarning,
                              stacklevel=2)
            return path
        faults.append((path, fault))
    newest, why = faults[0]
    raise ValueError(f"{newest}: {why}, and no older checkpoint in {d} can be opened either")


def _checkpoint_fault(path: Path) -> str | None:
    """Why a checkpoint (a file, or a set folder's members) cannot be opened, or None.
    HDF5 finds a truncated file on opening it (its superblock records the end of file)."""
    import h5py

    from gravpipe.io.fields import INTEGRATOR_GROUP

    # a set's members: NAME.RANK.hdf5 (GADGET-4's multi-file naming)
    files = sorted(f for f in path.iterdir() if f.suffix in (".hdf5", ".h5") and not f.name.startswith(".")) \
        if path.is_dir() else [path]
    if not files:
        return "a set folder without member files"
    for f in files:
        member = "" if f == path else f"{f.name} "
        try:
            with h5py.File(f, "r") as h5:
                if f == path and INTEGRATOR_GROUP not in h5:
                    return f"not a gravpipe checkpoint (no /{INTEGRATOR_GROUP} group)"
        except OSError as exc:
            return f"{member}cannot be opened as HDF5: {exc}"
    return None


def _output_index(path: Path) -> int:
    return int(path.name.split(".")[0].split("_")[-1])


class _progress_bar:
    """A rich progress bar when ``enabled`` and stdout is a terminal; otherwise nothing."""

    def __init__(self, enabled: bool, t_start: float, t_end: float):
        import sys

        self.enabled = enabled and sys.stdout.isatty()
        self.t_start, self.t_end = t_start, t_end

    def __enter__(self):
        if not self.enabled:
            return lambda *a: None
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self._p = Progress(TextColumn("t = {task.fields[t]:.4g}"), BarColumn(),
                           TextColumn("steps {task.fields[steps]:,}  dE/E {task.fields[de]:.2e}"),
                           TimeRemainingColumn())
        self._p.start()
        task = self._p.add_task("evolve", total=max(self.t_end - self.t_start, 1e-300), t=self.t_start,
                                steps=0, de=0.0)
        return lambda t, steps, de: self._p.update(task, completed=t - self.t_start, t=t, steps=steps, de=de)

    def __exit__(self, *exc):
        if self.enabled:
            self._p.stop()
        return False


class RunLoop:
    """The evolve loop and run directory of a run class (see the module docstring)."""

    comm = None  # an mpi4py communicator where the run class has one
    _run_dir: Path | None = None

    # ---- evolution -------------------------------------------------------------------
    # ---- the time breakdown, for runs that count it as their core does (``_raw_timings()``,
    # and ``_startup``: the counts at the end of the start-up evaluation) ------------------
    @property
    def timings(self) -> Timings:
        """The time breakdown of the steps taken by this process (start-up excluded)."""
        now, base = self._raw_timings(), self._startup
        return Timings(*(getattr(now, f) - getattr(base, f) for f in Timings.__dataclass_fields__))

    @property
    def startup_seconds(self) -> float:
        """Wall time of the start-up (the first force evaluation on all particles)."""
        return self._startup.total

    def evolve(self, t_end: float, snapshot_every: float | None = None, checkpoint_every: float | None = None,
               out: str | Path | None = None, progress: bool = True, overwrite: bool = False) -> None:
        """Advance to ``t_end`` (any time not before ``time``; it is reached exactly).

        Snapshots and checkpoints go to the run directory ``out`` at t0 + k * interval and,
        when their interval is given, at ``t_end`` too, so a run always ends with its final
        state on disk. Files are numbered in the order written (``snapshot_0001.h5``, ...).
        Stops on the integrator's grid (``grid_origin`` + k * ``quantum``) cost nothing
        extra; any other stop synchronizes all particles there with one extra force
        evaluation on all of them (Hermite: a shortened last step for each particle; leapfrog:
        one shortened step), and later steps count from it.

        ``out`` may not hold another run's files (snapshots, checkpoints, diagnostics.csv)
        unless this run was resumed from it or wrote them itself: continue such a run
        with :meth:`resume`, choose a new directory, or pass ``overwrite=True`` to delete
        that run's files first.
        """
        t_end = _finite_time("t_end", t_end)
        if t_end < self.time and not self._same_time(t_end, self.time):
            raise ValueError(f"t_end: {t_end} is before the current time {self.time}")
        integrators.check_reach(self.config.integrator, t_end, self.grid_origin, self.quantum)
        cadences: dict[str, float | None] = {}
        for name, every in (("snapshot", snapshot_every), ("checkpoint", checkpoint_every)):
            cadences[name] = None if every is None else check_positive_scalar(f"{name}_every", every, allow_zero=False)
        if out is None and any(v is not None for v in cadences.values()):
            raise ValueError("out: snapshot_every / checkpoint_every need an output directory")
        if self.comm is not None:  # one run: the same end, cadences and folder on every rank
            consistency.check_same_on_all_ranks(self.comm, {
                "t_end": repr(t_end), "snapshot_every": repr(cadences["snapshot"]),
                "checkpoint_every": repr(cadences["checkpoint"]),
                "run folder (out)": "none" if out is None else os.path.abspath(out)})
        out_dir = self._claim_run_dir(out, overwrite) if out is not None else None
        self.config.evolve = {"t_end": t_end, "snapshot_every": cadences["snapshot"],
                              "checkpoint_every": cadences["checkpoint"], "out": str(out_dir) if out_dir else None}
        with _progress_bar(progress and parallel.is_root(self.comm), self.time, t_end) as bar:
            while (stop := self._next_stop(t_end, cadences)) is not None:
                t_stop, what = stop
                self._advance_to(t_stop)
                if what or self._same_time(t_stop, t_end) or self._row_due():
                    self._record()
                    self._write_outputs(out_dir, what)
                    bar(self.time, self.timings.steps, self.history[-1]["energy_error"])

    def _row_due(self) -> bool:
        """Whether a diagnostics row is due at a stop that writes no file: once the steps
        since the last row did enough force evaluations' worth of particle steps that rows
        take at most a few % of a run. A precise row (``precise_energy``) costs force
        evaluations on all N (the float64 potential): the gravity kind's ``row_work``
        evaluations apart. A row from the run's own forces costs O(N log N) (the Lagrangian
        radii's sort): OWN_ROW_WORK apart. Particle steps are deterministic, so a resumed
        run records the same rows."""
        last = self.history[-1]["particle_steps"] if self.history else 0
        done = self._steps_before[1] + self.timings.particle_steps
        work = self._kind.row_work if self.config.precise_energy else OWN_ROW_WORK
        return done - last >= work * self.n

    def _append_row(self, e: diagnostics.Energy, radii) -> None:
        """Append a diagnostics row at ``time``: energies ``e``, Lagrangian radii ``radii``
        (of LAGRANGIAN_FRACTIONS), the step counts and this process's time breakdown."""
        t = self.timings
        row = {"time": self.time, "kinetic": e.kinetic, "potential": e.potential, "total": e.total,
               "energy_error": diagnostics.relative_energy_error(e, self.config.initial_energy()),
               "virial_ratio": 2 * e.kinetic / abs(e.potential) if e.potential else float("nan")}
        row.update({f"r_lagr_{int(100 * f)}": float(r) for f, r in zip(LAGRANGIAN_FRACTIONS, radii)})
        steps0, psteps0 = self._steps_before
        row.update({"steps": steps0 + t.steps, "particle_steps": psteps0 + t.particle_steps,
                    "seconds_host": t.host, "seconds_transfer": t.transfer, "seconds_compute": t.compute})
        self.history.append(row)

    def _restore_wall_clock(self, run_dir: Path) -> None:
        """Fill the wall-clock columns (``seconds_*``) of diagnostics rows restored from a
        checkpoint from the run's own diagnostics.csv, row by row (same time and steps).
        Checkpoints leave those columns out (they differ from run to run, and a checkpoint
        is the same bit for bit however often its run was interrupted), so a resumed run's
        diagnostics.csv had them empty before the stop, and its time-breakdown plot no bars."""
        missing = [row for row in self.history if "seconds_host" not in row]
        path = run_dir / "diagnostics.csv"
        if not missing or not path.is_file():
            return
        try:
            with open(path, newline="") as fh:
                written = {(float(r["time"]), int(r["steps"])): r for r in csv.DictReader(fh)}
        except (OSError, ValueError, KeyError, csv.Error):
            return  # a file of another shape: the columns stay empty, nothing else depends on them
        for row in missing:
            old = written.get((float(row["time"]), int(row["steps"])))
            if old is None:
                continue
            for key, text in old.items():
                if key and key.startswith("seconds_") and key not in row and text not in ("", None):
                    try:
                        row[key] = float(text)
                    except ValueError:
                        pass

    def _same_time(self, a: float, b: float) -> bool:
        """Two times closer than rounding of the step grid: the same stop."""
        return abs(a - b) <= 1e-9 * self.quantum

    def _next_stop(self, t_end: float, cadences: dict[str, float | None]) -> tuple[float, set[str]] | None:
        """The next stop after now, up to ``t_end``, and the files due there; None at t_end.

        Output times are t0 + k * interval. Every point of the integrator's grid (the grid
        origin plus multiples of the quantum) is a candidate for a diagnostics row, so rows
        never cost a synchronization, and a candidate becomes a row when :meth:`_row_due`
        says the work since the last one calls for it: the rows depend on neither the
        ``t_end`` of an evolve call nor where a run was resumed. Found one stop at a time,
        because an off-grid stop moves the grid origin.
        """
        now = self.time
        if t_end <= now or self._same_time(t_end, now):
            return None
        due = {name: _after(now, self.config.t0, every, self.quantum) for name, every in cadences.items() if every}
        origin = self.grid_origin
        row = _after(now, origin, self.quantum, self.quantum)
        t_stop = min([t_end, row, *due.values()])
        if self._same_time(t_stop, t_end):  # the end: every file kind that is on
            return t_end, {name for name in due}
        return t_stop, {name for name, t in due.items() if self._same_time(t, t_stop)}

    def _write_outputs(self, out_dir: Path | None, what: set[str]) -> None:
        """Write the files due at this stop, numbered in the order written (the counts are
        part of the run config, so a resumed run continues the numbering)."""
        counts = self.config.outputs
        for name in what:  # count first: a checkpoint records the snapshot written beside it
            counts[name] = counts.get(name, 0) + 1
        # several ranks write a multi-file set: a folder of one file per rank (io.sets)
        ext = ".h5" if self.comm is None else ""
        if "snapshot" in what:
            self.write_snapshot(out_dir / f"snapshot_{counts['snapshot']:04d}{ext}")
        if "checkpoint" in what:
            self.write_checkpoint(out_dir / f"checkpoint_{counts['checkpoint']:04d}{ext}")
        if out_dir is not None and parallel.is_root(self.comm):
            self._write_diagnostics(out_dir / "diagnostics.csv")
            # the folder's manifest.json (sizes, chunk checksums) records each file once it is whole
            from gravpipe.reservoir import manifest

            manifest.record(out_dir, ["diagnostics.csv"] + [f"{name}_{counts[name]:04d}{ext}" for name in
                                                            ("snapshot", "checkpoint") if name in what])

    def _claim_run_dir(self, out: str | Path, overwrite: bool) -> Path:
        """``out`` as this run's directory, created if missing; refuses one that holds another
        run unless ``overwrite`` (then that run's files are deleted first). With several
        ranks, rank 0 decides and acts, and the others raise the same error if it fails."""
        if self.comm is None:
            return self._claim_run_dir_here(out, overwrite)
        error = None
        if parallel.is_root(self.comm):
            try:
                self._claim_run_dir_here(out, overwrite)
            except (OSError, ValueError) as exc:
                error = exc
        error = self.comm.bcast(error, root=0)  # a small control message: pickling is fine
        if error is not None:
            raise error
        self._run_dir = Path(out).resolve()
        return Path(out)

    def _claim_run_dir_here(self, out: str | Path, overwrite: bool) -> Path:
        d = Path(out)
        if d.is_dir():  # partial files of writers killed outright (a resumed run's folder)
            for f in stale_temporaries(d):
                f.unlink(missing_ok=True)
        if self._run_dir is not None and d.is_dir() and d.resolve() == self._run_dir:
            self._restore_wall_clock(d)  # a resumed run's rows before the stop
            return d
        old = check_run_dir(d, overwrite)
        for f in old:
            shutil.rmtree(f) if f.is_dir() else f.unlink()
        d.mkdir(parents=True, exist_ok=True)
        self._run_dir = d.resolve()
        return d

    def _write_diagnostics(self, path: Path) -> None:
        buf = _stdio.StringIO()
        # rows restored from a checkpoint have no wall-clock columns: left empty
        writer = csv.DictWriter(buf, fieldnames=list(self.history[-1]), restval="")
        writer.writeheader()
        writer.writerows(self.history)
        with atomic_open(path, "w", newline="") as fh:
            fh.write(buf.getvalue())

    def energy_error(self) -> float:
        """Relative energy error against the start of the run: (E - E0) / |E0|, or
        (E - E0) / (|K0| + |W0|) when E0 == 0 (``diagnostics.relative_energy_error``), both
        measured the run's way (``precise_energy``, see :meth:`energy`).
        With several MPI ranks this (like :meth:`energy`) is collective: call it on every rank."""
        return diagnostics.relative_energy_error(self.energy(), self.config.initial_energy())
