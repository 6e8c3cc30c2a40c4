"""``gravpipe run`` and ``gravpipe plot`` as a user drives them: output, files, config, errors."""

import csv
import math
import os
import re
import subprocess
import sys

import h5py
import numpy as np
import pytest

import gravpipe as gp
from gravpipe import io
from gravpipe.cli import main
from gravpipe.runconfig import DEFAULT_N


def gravpipe(*args, cwd=None, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "gravpipe.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def run_main(capsys, *args):
    """main() in this process (much faster than a subprocess): (exit code, stdout, stderr)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def energy_error(stdout: str) -> float:
    m = re.search(r"energy error (\S+) at t = ", stdout)
    assert m, stdout
    return float(m.group(1))


@pytest.fixture
def ic_file(tmp_path):
    path = tmp_path / "ic.h5"
    io.write_snapshot(path, gp.ic.plummer(128, seed=5), 0.0)
    return path


# ---- the embedded default --------------------------------------------------------------

def test_default_run_prints_energy_error_and_breakdown(tmp_path):
    # the embedded default (Plummer, N = DEFAULT_N, Hermite) cut short to keep the test quick
    r = gravpipe("run", "--t-end", "1/8", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"N = {DEFAULT_N}" in r.stdout and "hermite" in r.stdout
    assert abs(energy_error(r.stdout)) < 1e-5
    for label in ("host", "transfer", "compute", "total", "host+transfer share", "particle steps/s"):
        assert label in r.stdout, r.stdout
    assert "nothing is written" in r.stdout
    assert list(tmp_path.iterdir()) == []  # no --out: no files


def test_run_with_out_writes_snapshots_checkpoint_and_diagnostics(capsys, ic_file, tmp_path):
    out = tmp_path / "run1"
    code, stdout, _ = run_main(capsys, "run", ic_file, "--t-end", "1/2", "--snap-every", "1/4", "--out", out,
                               "--threads", "1", "--backend", "cpu")
    assert code == 0
    assert str(out) in stdout and "snapshot_0002.h5" in stdout
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoint_0001.h5", "diagnostics.csv", "manifest.json", "snapshot_0001.h5", "snapshot_0002.h5"]
    snap = io.read_snapshot(out / "snapshot_0002.h5")
    assert snap.time == 0.5 and snap.parameters["integrator"] == "hermite"
    # without --checkpoint-every: one checkpoint at t_end, so the run can be extended
    assert io.read_snapshot(out / "checkpoint_0001.h5").integrator_state is not None
    header = (out / "diagnostics.csv").read_text().splitlines()[0]
    assert "energy_error" in header and "seconds_compute" in header


def test_resume_extends_a_finished_run(capsys, ic_file, tmp_path):
    out = tmp_path / "run"
    assert run_main(capsys, "run", ic_file, "--t-end", "1/4", "--out", out, "--threads", "1", "--backend", "cpu")[0] == 0
    code, stdout, _ = run_main(capsys, "run", "--resume", out)
    assert code == 0 and "nothing to do" in stdout
    code, stdout, _ = run_main(capsys, "run", "--resume", out, "--t-end", "1/2")
    assert code == 0 and "resumed from" in stdout
    # the stored cadence (the whole first run, 1/4) goes on: a second snapshot at t = 1/2
    assert io.read_snapshot(out / "snapshot_0002.h5").time == 0.5
    ref = tmp_path / "ref"
    assert run_main(capsys, "run", ic_file, "--t-end", "1/2", "--snap-every", "1/4", "--out", ref,
                    "--threads", "1", "--backend", "cpu")[0] == 0
    a, b = io.read(out / "snapshot_0002.h5")[0], io.read(ref / "snapshot_0002.h5")[0]
    assert a.pos.tobytes() == b.pos.tobytes()


# ---- run.toml -----------------------------------------------------------------------------

def test_config_file_sets_options_and_command_line_overrides(capsys, tmp_path):
    cfg_dir = tmp_path / "cfg"
    cfg_dir.mkdir()
    (cfg_dir / "run.toml").write_text(
        'integrator = "leapfrog"\n'
        'n = 96\nseed = 3\n'
        'dt = "1/64"\n'
        'eps = "1/32"\n'
        't_end = 0.25\n'
        'snap-every = 0.125\n'       # dashes work as in the option names
        'out = "out"\n'              # relative to the config file
        'threads = 1\n'
        'backend = "cpu"\n'
        'precision = "double"\n')
    code, stdout, err = run_main(capsys, "run", "--config", cfg_dir / "run.toml", "--t-end", "1/2",
                                 "--precision", "mixed")
    assert code == 0, err
    out = cfg_dir / "out"
    snaps = sorted(out.glob("snapshot_*.h5"))
    assert len(snaps) == 4  # every 1/8 up to the overriding t_end = 1/2
    last = io.read_snapshot(snaps[-1])
    assert last.time == 0.5 and last.particles.n == 96
    assert last.parameters["integrator"] == "leapfrog" and last.parameters["eps"] == 1 / 32
    assert last.parameters["precision"] == "mixed"  # command line over file
    np.testing.assert_array_equal(io.read(snaps[0])[0].mass, gp.ic.plummer(96, seed=3).mass)


# ---- user mistakes: one line on stderr, exit status 2 -------------------------------------

@pytest.fixture
def workdir(tmp_path, ic_file, capsys):
    (tmp_path / "unknown.toml").write_text("t_end = 1.0\nsoftening = 0.1\n")
    (tmp_path / "badtype.toml").write_text('n = "many"\n')
    (tmp_path / "badsyntax.toml").write_text("t_end = = 1\n")
    (tmp_path / "corrupt.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
    (tmp_path / "empty").mkdir()
    assert run_main(capsys, "run", ic_file, "--t-end", "1/4", "--out", tmp_path / "done", "--threads", "1", "--backend", "cpu")[0] == 0
    return tmp_path


@pytest.mark.parametrize("args, message", [
    (["--config", "unknown.toml"], "softening"),
    (["--config", "badtype.toml"], "n: expected an integer"),
    (["--config", "badsyntax.toml"], "not valid TOML"),
    (["--config", "missing.toml"], "missing.toml"),
    (["-n", "64", "--snap-every", "1"], "output directory"),
    (["-n", "64", "--eps", "-1"], "eps"),
    (["-n", "64", "--dt", "0.01"], "dt: not a parameter of the hermite integrator"),
    (["-n", "64", "--backend", "abacus"], "abacus"),
    (["nosuch.h5"], "nosuch.h5"),
    (["corrupt.h5"], "corrupt.h5"),
    (["ic.h5", "-n", "64"], "FILE"),
    (["--resume", "nowhere"], "nowhere"),
    (["--resume", "empty"], "no checkpoint"),
    (["--resume", "done", "--eps", "0.1"], "--eps"),
    (["--resume", "done", "--t-end", "1/8"], "before the current time"),
])
def test_user_errors_are_one_line(workdir, capsys, monkeypatch, args, message):
    monkeypatch.chdir(workdir)
    code, out, err = run_main(capsys, "run", *args)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], err
    assert lines[0].startswith("gravpipe run: error:")


def test_user_error_in_a_subprocess_has_no_traceback(tmp_path):
    r = gravpipe("run", "-n", "64", "--t-end", "-1", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "t_end" in r.stderr


@pytest.mark.parametrize("args, words", [
    (["--t-end", "1e300"], "t_end: 1e+300 is a time the hermite timeline cannot hold: 8e+300 steps of dt_max = 0.125"),
    (["--t-end", "1e300", "--integrator", "leapfrog"], "t_end: 1e+300 is a time the leapfrog timeline cannot hold"),
    (["--t-end", "1e7"], "t_end up to 524288; a larger dt_max reaches further"),
    (["--dt", "1e-300", "--integrator", "leapfrog", "--t-end", "1/32"],
     "dt: a step of 1e-300 is below the timeline's resolution: t_end = 0.03125 is 3.12e+298 such steps"),
    (["--dt-max", "1e-300", "--t-end", "1/32"], "dt_max: a step of 1e-300 is below the timeline's resolution"),
    (["--t-end", "1e300", "--gravity", "tree", "--memory-budget", "16MiB", "--scratch", "."],
     "t_end: 1e+300 is a time the leapfrog timeline cannot hold")])
def test_a_time_or_step_the_timeline_cannot_hold_is_one_line(tmp_path, args, words):
    """--t-end 1e300 ran for minutes without a word (Hermite) or said "t = 2000...(300 digits)
    is before the current time"; --dt 1e-300 said "t = 0.000625 is before the current time"."""
    r = gravpipe("run", "-n", "64", *args, "--no-progress", cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr


def test_steps_below_the_resolution_of_float64_time_are_refused():
    from gravpipe import integrators

    with pytest.raises(ValueError, match=r"dt: a step of 1e-11 is below the resolution of float64 time at t = "
                                         r"1000000.0 \(t \+ dt == t; the smallest step there is 1.16e-10\)"):
        integrators.check_reach("leapfrog", 1e6 + 1.0, 1e6, 1e-11)
    integrators.check_reach("leapfrog", 1e6 + 1.0, 1e6, 1e-9)


@pytest.mark.parametrize("threads", ["100000", "50000"])
def test_more_threads_than_the_machine_can_start_are_refused_in_one_line(tmp_path, threads):
    """--threads 100000 died of SIGSEGV after the cores warning, 50000 of "libgomp: Thread
    creation failed" (exit 1): beyond what the kernel lets the process create."""
    from gravpipe._validate import thread_limit

    if int(threads) <= thread_limit()[0]:
        pytest.skip(f"this machine starts {thread_limit()[0]} threads")
    r = gravpipe("run", "-n", "64", "--threads", threads, "--t-end", "1/64", "--no-progress", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"argument --threads: {threads} is more than this machine can start for one process" in r.stderr


@pytest.mark.parametrize("precision", ["mixed", "double"])
def test_a_tree_runs_range_is_its_list_kernels(capsys, tmp_path, precision):
    """The tree's mixed-precision list kernels carry |x| <= 1e18 (float32 squares): an IC at
    1e20 is refused in one line (it ended in a non-finite force blamed on eps = 0); in double
    precision it runs."""
    p = gp.ic.plummer(64, seed=2)
    pos = np.array(p.pos)
    pos[7, 1] = 1e20
    io.write_snapshot(tmp_path / "ic.h5", gp.Particles(pos, p.vel, p.mass), 0.0)
    code, _, err = run_main(capsys, "run", tmp_path / "ic.h5", "--gravity", "tree", "--precision", precision,
                            "--t-end", "1/64", "--no-progress")
    if precision == "double":
        assert code == 0, err
    else:
        assert code == 2 and err.count("\n") == 1 and "pos: value 1e+20 at index 7 exceeds 1e+18" in err, err


def test_the_python_api_refuses_them_too():
    from gravpipe._validate import thread_limit

    most, why = thread_limit()
    assert most >= 1 and ("allowed by" in why or "no kernel limit" in why)
    for make in (lambda t: gp.Pipeline(threads=t), lambda t: gp.Tree([[0.0, 0, 0], [1, 0, 0]], [1.0, 1.0], threads=t),
                 lambda t: gp.Simulation(gp.ic.plummer(64, seed=1), threads=t)):
        with pytest.raises(ValueError, match=rf"threads: {most + 1} is more than this machine can start .*at most {most}"):
            make(most + 1)
    assert gp.Pipeline(threads=most).threads == most  # the bound itself is taken (no thread starts here)


def test_a_cadence_that_would_write_an_absurd_number_of_files_is_refused_saying_how_many(tmp_path):
    """--snap-every 1e-9 started writing ~3e7 snapshots (940 files in 40 s before it was stopped)."""
    r = gravpipe("run", "-n", "64", "--t-end", "1/32", "--snap-every", "1e-9", "--out", "run", "--no-progress",
                 cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "would write 31,250,000 snapshots (every 1e-09) and 1 checkpoint" in r.stderr
    assert "more than 10,000 files" in r.stderr and "--force" in r.stderr
    assert not (tmp_path / "run").exists()


def test_force_lets_a_run_write_many_files():
    from gravpipe.cli import MAX_OUTPUT_FILES, UserError, _check_output_count

    _check_output_count(0.0, 1.0, 1 / MAX_OUTPUT_FILES, None, force=False)  # exactly the most
    with pytest.raises(UserError, match=f"{MAX_OUTPUT_FILES + 1:,} checkpoints"):
        _check_output_count(0.0, 1.0, None, 1 / (MAX_OUTPUT_FILES + 1), force=False)
    _check_output_count(0.0, 1.0, 1e-9, 1e-9, force=True)


def test_resume_removes_the_temporaries_of_killed_writers(capsys, ic_file, tmp_path):
    """A writer killed outright leaves .NAME.tmp-PID-TOKEN behind (8 of 12 after resumes and
    a clean finish): the run that takes the folder removes those of processes that are gone,
    never a live writer's or another file."""
    out = tmp_path / "run"
    assert run_main(capsys, "run", ic_file, "--t-end", "1/8", "--out", out, "--threads", "1")[0] == 0
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    (out / "set_0001").mkdir()
    stale = [out / f".checkpoint_0002.h5.tmp-{gone}-0a1b2c3d", out / "set_0001" / f".member.h5.tmp-{gone}-deadbeef"]
    kept = [out / f".snapshot_0002.h5.tmp-{os.getpid()}-0a1b2c3d", out / ".notes.tmp-x", out / "notes.txt"]
    for f in stale + kept:
        f.write_bytes(b"partial")
    assert run_main(capsys, "run", "--resume", out, "--t-end", "1/4")[0] == 0
    assert not any(f.exists() for f in stale) and all(f.exists() for f in kept)


def test_resume_passes_over_a_truncated_newest_checkpoint_saying_which_and_why(capsys, ic_file, tmp_path):
    """A newest checkpoint cut short (a full disk, a copy stopped) blocked --resume: the run
    resumes from the newest one that opens, and lands where an uninterrupted run lands."""
    out, whole = tmp_path / "run", tmp_path / "whole"
    for d in (out, whole):
        assert run_main(capsys, "run", ic_file, "--t-end", "1/8", "--checkpoint-every", "1/32", "--out", d,
                        "--threads", "1")[0] == 0
    newest = out / "checkpoint_0004.h5"
    os.truncate(newest, newest.stat().st_size // 3)
    (out / "checkpoint_0003.h5").write_bytes(b"not HDF5 at all")
    code, stdout, err = run_main(capsys, "run", "--resume", out, "--t-end", "1/4")
    assert code == 0, err
    warned = err.strip().splitlines()
    assert len(warned) == 2 and all(line.startswith("gravpipe run: warning: ") for line in warned), err
    assert f"{newest}: skipped (cannot be opened as HDF5" in warned[0] and "truncated file" in warned[0]
    assert warned[1].endswith("resuming from checkpoint_0002.h5")
    assert f"resumed from {out / 'checkpoint_0002.h5'}" in stdout
    assert run_main(capsys, "run", "--resume", whole, "--t-end", "1/4")[0] == 0
    a, b = (io.read_snapshot(d / "snapshot_0002.h5").particles for d in (out, whole))
    assert np.array_equal(a.pos, b.pos) and np.array_equal(a.vel, b.vel)


def test_resume_with_no_checkpoint_that_opens_is_one_line(capsys, ic_file, tmp_path):
    out = tmp_path / "run"
    assert run_main(capsys, "run", ic_file, "--t-end", "1/8", "--out", out, "--threads", "1")[0] == 0
    os.truncate(out / "checkpoint_0001.h5", 1000)
    code, _, err = run_main(capsys, "run", "--resume", out, "--t-end", "1/4")
    assert code == 2 and err.count("\n") == 1, err
    assert "checkpoint_0001.h5: cannot be opened as HDF5" in err and "no older checkpoint" in err


@pytest.mark.parametrize("gravity", [[], ["--gravity", "tree", "--memory-budget", "16MiB", "--scratch", "."]])
def test_a_resumed_runs_diagnostics_keep_the_time_columns_before_the_stop(capsys, ic_file, tmp_path, monkeypatch,
                                                                         gravity):
    """The rows restored from a checkpoint had empty seconds_* columns in diagnostics.csv, so
    the time-breakdown plot drew no bars before the stop."""
    monkeypatch.chdir(tmp_path)
    args = ["run", ic_file, *gravity, "--t-end", "1/8", "--checkpoint-every", "1/16", "--out", "run", "--threads", "1"]
    assert run_main(capsys, *args)[0] == 0
    assert run_main(capsys, "run", "--resume", "run", "--t-end", "1/4")[0] == 0
    rows = list(csv.DictReader(open(tmp_path / "run" / "diagnostics.csv", newline="")))
    assert float(rows[-1]["time"]) == 0.25 and any(float(r["time"]) == 0.125 for r in rows)
    for r in rows:
        for column in ("seconds_host", "seconds_transfer", "seconds_compute"):
            assert r[column] != "" and math.isfinite(float(r[column])), (r["time"], column)
    assert any(float(r["seconds_compute"]) > 0 for r in rows if 0 < float(r["time"]) <= 0.125)


def test_a_history_holding_nan_resumes(capsys, ic_file, tmp_path):
    """The history is a record (a virial ratio of a system with no potential is NaN): the
    checks of a checkpoint's state leave it alone."""
    out = tmp_path / "run"
    assert run_main(capsys, "run", ic_file, "--t-end", "1/8", "--out", out, "--threads", "1")[0] == 0
    with h5py.File(out / "checkpoint_0001.h5", "r+") as f:
        f["Integrator/history_virial_ratio"][0] = np.nan
    assert run_main(capsys, "run", "--resume", out, "--t-end", "1/4")[0] == 0


def test_run_toml_takes_every_option_but_resume_and_config(capsys, tmp_path, monkeypatch):
    """run.toml refused memory_budget, scratch, page_bytes and resume although the README said
    it takes the same keys as the options: each option is a key (the parser's own list), but
    --resume and --config, which say why."""
    from gravpipe.cli import build_parser
    from gravpipe.runconfig import COMMAND_LINE_ONLY, KEYS

    run = next(a for a in build_parser()._actions if a.dest == "command").choices["run"]
    options = {a.dest for a in run._actions if a.dest not in ("help",)}
    assert options == set(KEYS) | set(COMMAND_LINE_ONLY)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scratch").mkdir()
    (tmp_path / "ooc.toml").write_text('gravity = "tree"\nn = 500\nt_end = "1/64"\nmemory_budget = "32MiB"\n'
                                       'scratch = "scratch"\npage_bytes = "4KiB"\nforce = true\n')
    code, stdout, err = run_main(capsys, "run", "--config", "ooc.toml", "--no-progress")
    assert code == 0 and "out of core" in stdout, err
    (tmp_path / "res.toml").write_text('resume = "run1"\n')
    code, _, err = run_main(capsys, "run", "--config", "res.toml")
    assert code == 2 and "'resume' is not a run.toml key: continue a run with gravpipe run --resume DIR" in err


def _garble_integrator(path, how: str) -> None:
    """Change a checkpoint's /Integrator as a corrupt or foreign file would."""
    with h5py.File(path, "r+") as f:
        g = f["Integrator"]
        if how == "unknown attribute":
            g.attrs["bogus"] = 1.5
        elif how == "nan":
            for ds in g.values():
                if ds.dtype.kind == "f":
                    ds[...] = np.nan
        elif how == "missing":
            del g["jerk"]
        elif how == "short":
            del g["pot"]
            g["pot"] = np.zeros(7)
        elif how == "float ticks":
            ticks = g["t_ticks"][...]
            del g["t_ticks"]
            g["t_ticks"] = ticks.astype(np.float64)
        elif how == "attribute for a dataset":
            del g["now_ticks"]
            g.attrs["now_ticks"] = 3


@pytest.mark.parametrize("how, words", [
    ("unknown attribute", None),  # not the integrator's: left alone, the run goes on
    ("nan", "/Integrator/acc: non-finite value nan at index 0"),
    ("missing", "/Integrator/jerk: missing (a hermite checkpoint holds t_ticks"),
    ("short", "/Integrator/pot: shape (7,), expected (128,)"),
    ("float ticks", "/Integrator/t_ticks: dtype float64, expected integers"),
    ("attribute for a dataset", "/Integrator/now_ticks: an attribute (int 3), expected a dataset")])
def test_resume_from_a_garbled_checkpoint_names_file_field_and_fault(capsys, ic_file, tmp_path, how, words):
    """A checkpoint is an input: an unknown attribute ended in AttributeError ('float' object
    has no attribute 'dtype'), NaN in "cannot convert float NaN to integer" naming neither
    file nor field."""
    out = tmp_path / "run"
    assert run_main(capsys, "run", ic_file, "--t-end", "1/8", "--out", out, "--threads", "1")[0] == 0
    _garble_integrator(out / "checkpoint_0001.h5", how)
    code, _, err = run_main(capsys, "run", "--resume", out, "--t-end", "1/4")
    if words is None:
        assert code == 0, err
        return
    assert code == 2 and err.count("\n") == 1, err
    assert f"{out / 'checkpoint_0001.h5'}: {words}" in err, err


@pytest.mark.parametrize("value, precision, words", [
    (1e300, "mixed", "value 1e+300 at index 7 (particle id 7) exceeds 1e+150"),
    (1e300, "double", "value 1e+300 at index 7 (particle id 7) exceeds 1e+150"),
    (1e20, "mixed", "value 1e+20 at index 7 exceeds 1e+18"),
    (1e20, "double", None)])
@pytest.mark.parametrize("integrator", ["hermite", "leapfrog"])
def test_an_ic_beyond_the_arithmetics_range_is_one_line_naming_the_particle(capsys, tmp_path, value, precision,
                                                                            words, integrator):
    """A coordinate whose square overflows the kernels' arithmetic (float64's, or float32's in
    mixed precision) is refused when it comes in, not found as a non-finite force blamed on
    eps = 0 (25 lines of traceback); within range, the run goes."""
    path = tmp_path / "ic.h5"
    p = gp.ic.plummer(64, seed=2)
    pos = np.array(p.pos)
    pos[7, 1] = value
    if value < 1e150:
        io.write_snapshot(path, gp.Particles(pos, p.vel, p.mass), 0.0)
    else:  # the file's bytes garbled after writing
        io.write_snapshot(path, p, 0.0)
        with h5py.File(path, "r+") as f:
            f["PartType1/Coordinates"][7, 1] = value
    code, _, err = run_main(capsys, "run", path, "--t-end", "1/64", "--precision", precision,
                            "--integrator", integrator, "--no-progress")
    if words is None:
        assert code == 0, err
        return
    assert code == 2 and err.count("\n") == 1 and "pos: " + words in err, err


@pytest.mark.parametrize("args", [["run", "-n", "0"], ["run", "--t-end", "soon"], ["run", "--integrator", "euler"],
                                  ["run", "--threads", "0"], ["run", "--dt", "1/0"], ["run", "--no-such-option"],
                                  ["ic", "plummer", "-n", "-5", "-o", "x.h5"], ["frobnicate"]])
def test_bad_option_values_are_rejected_by_the_parser_in_one_line(capsys, args):
    """One line naming the option, as every other error, not argparse's usage first (11 lines)."""
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gravpipe") and "error" in err and "--help" in err, err


# ---- gravpipe plot -------------------------------------------------------------------------

def test_plot_writes_three_pngs(capsys, ic_file, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    assert run_main(capsys, "run", ic_file, "--t-end", "1/2", "--checkpoint-every", "1/8", "--out", out,
                    "--threads", "1", "--backend", "cpu")[0] == 0
    # a resumed run restarts its wall-clock counters; the breakdown plot must cope
    (out / "checkpoint_0004.h5").unlink()
    assert run_main(capsys, "run", "--resume", out)[0] == 0
    code, stdout, err = run_main(capsys, "plot", out)
    assert code == 0, err
    for name in ("energy_error.png", "lagrangian_radii.png", "time_breakdown.png"):
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000
        assert name in stdout


def test_plot_of_a_directory_without_diagnostics_is_a_user_error(capsys, tmp_path):
    code, _, err = run_main(capsys, "plot", tmp_path)
    assert code == 2 and "diagnostics.csv" in err and err.count("\n") == 1


def test_plot_without_matplotlib_says_what_to_install(tmp_path):
    # a matplotlib that cannot be imported shadows the real one
    fake = tmp_path / "fake" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "diagnostics.csv").write_text("time,energy_error\n0.0,0.0\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")]))
    r = gravpipe("plot", str(tmp_path / "run"), env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and "no matplotlib here" in r.stderr and "pip install matplotlib" in r.stderr
