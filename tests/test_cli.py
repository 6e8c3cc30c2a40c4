"""The gravpipe command as a user runs it: exit codes, one-line errors, JSON output."""

import errno
import json
import math
import os
import subprocess
import sys

import pytest

import gravpipe as gp
from gravpipe import cli
from gravpipe.cli import main
from gravpipe.runconfig import parse_number


def gravpipe(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "gravpipe.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_forces_on_embedded_default_reports_accuracy():
    r = gravpipe("forces", "-n", "600", "--check", "100")
    assert r.returncode == 0, r.stderr
    assert "interactions/s" in r.stdout and "accuracy vs float64" in r.stdout
    err = float(r.stdout.split("relative RMS acc")[1].split(",")[0])
    assert err < 1e-6


@pytest.mark.parametrize("bench", [["ooc", "ratio", "-n", "1000"], ["storage", "--sizes", "4096"]])
def test_bench_on_a_missing_scratch_directory_says_so_in_one_line(tmp_path, bench):
    missing = tmp_path / "no_such_dir"
    r = gravpipe("bench", *bench, "--scratch", missing)
    assert r.returncode == cli.EXIT_USER_ERROR, r.stderr
    assert r.stderr.strip() == f"gravpipe bench: error: --scratch: directory {missing} does not exist " \
        "(create it, or name another)", r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not missing.exists()


def test_bench_ooc_swap_and_demo_from_the_command_line(tmp_path):
    """What this proves: `bench ooc swap` (Salmon & Warren's Fig. 5 analogue) and `bench ooc
    demo` (one step of an IC file, forces checked against a float64 direct sum) run from the
    command line on small sets: ten times the cache swaps fewer bytes, the demo's tree forces
    meet the in-core median bound (3e-4) on its sample, and both carry the scratch disk's own
    counters (or say there is none)."""
    out = tmp_path / "swap.json"
    r = gravpipe("bench", "ooc", "swap", "-n", "30000", "--pages", "4096", "--fractions", "0.05", "0.5",
                 "--scratch", tmp_path, "--json", out, timeout=300)
    assert r.returncode == 0, r.stderr
    small, large = json.loads(out.read_text())["swap"]
    assert large["cache_bytes"] > 5 * small["cache_bytes"] and large["bytes_swapped"] < small["bytes_swapped"]
    for row in (small, large):
        assert bool(row["stage_device"]) == bool(row["device"])
        assert not row["device"] or {"sort", "walk_forces"} <= set(row["stage_device"])
    ic = tmp_path / "ic.h5"
    assert gravpipe("ic", "plummer", "-n", "20000", "--seed", "2", "-o", ic).returncode == 0
    out = tmp_path / "demo.json"
    r = gravpipe("bench", "ooc", "demo", "--file", ic, "--memory-budget", "6MiB", "--sample", "50",
                 "--scratch", tmp_path, "--json", out, timeout=300)
    assert r.returncode == 0, r.stderr
    demo = json.loads(out.read_text())["demo"]
    assert demo["n"] == 20000 and demo["errors"]["sample"] == 50 and demo["bytes_read"] > 0
    assert demo["errors"]["median"] <= 3e-4 and demo["errors"]["p99"] <= 1e-2, demo["errors"]
    assert isinstance(demo["device"], str) and (bool(demo["stage_device"]) == bool(demo["device"]))


def test_bench_direct_json():
    r = gravpipe("bench", "direct", "--sizes", "256", "--precision", "double", "--mode", "acc+pot",
                 "--json", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rows = {(x["precision"], x["n"]) for x in doc["results"]}
    assert ("double", 256) in rows and any(p == "numpy-f64" for p, _ in rows)
    assert doc["flop_convention"] == {"acc+pot": 38, "acc+jerk+pot": 60}
    assert doc["machine"]["cpu"]


def test_bench_ooc_ratio_prints_and_saves_each_stages_bytes_and_cpu(tmp_path):
    """What this proves: `gravpipe bench ooc ratio` runs from the command line on a small set
    (a budget above the data: small N's least budget is mostly fixed allowances), checks the
    out-of-core steps bitwise against the in-core ones, and reports each stage's traffic and
    CPU seconds (every thread of the process) against its wall seconds, in print and JSON;
    with repeats, each repeat's in-core and out-of-core steps (back to back) and their
    ratios, the bests being the least of those. The header names the runs' threads (3 here,
    whatever the machine has)."""
    out = tmp_path / "r.json"
    r = gravpipe("bench", "ooc", "ratio", "-n", "30000", "--budget-fraction", "10", "--scratch", tmp_path,
                 "--threads", "3", "--repeat", "2", "--json", out, timeout=300)
    assert r.returncode == 0, r.stderr
    assert ", 3 threads, isa " in r.stdout.splitlines()[0], r.stdout
    assert "bitwise equal: True" in r.stdout and "CPU (all threads): sort " in r.stdout, r.stdout
    row = json.loads(out.read_text())["ratio"][0]
    assert row["identical_to_in_core"]
    assert set(row["stage_cpu_seconds"]) == set(row["stage_bytes"]) == {"sort", "build_moments", "walk_forces"}
    assert set(row["stage_context_switches"]) == set(row["stage_bytes"]) and " context switches)" in r.stdout
    walk_wall = row["stages"]["walk_forces"]
    assert 0 < row["stage_cpu_seconds"]["walk_forces"] <= walk_wall * (os.cpu_count() + 2) + 0.05
    pairs = row["seconds_per_repeat"]
    assert len(pairs) == 2 and "median ratio" in r.stdout
    assert row["seconds_in_core"] == min(a for a, _ in pairs) and row["seconds_out_of_core"] == min(b for _, b in pairs)
    assert row["ratios_per_repeat"] == [b / a for a, b in pairs]
    # each pair is printed as it comes, so a run cut short by a time limit leaves its figures
    each = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("  in core ")]
    assert len(each) == 2 and all(f"out of core {b:.2f} s: ratio {b / a:.3f}" in ln for ln, (a, b) in zip(each, pairs))
    assert row["ratio_median"] == pytest.approx(sum(b / a for a, b in pairs) / 2, rel=1e-12)
    # the disk's own counters beside the store's, or a line saying there is none to measure
    if row["device"]:
        assert set(row["stage_device"]) == set(row["stage_bytes"]) and f"  device {row['device']} (its own" in r.stdout
        assert sum(d["read_bytes"] for d in row["stage_device"].values()) >= row["bytes_read"] or \
            row["io_mode"] != "direct"
    else:
        assert row["stage_device"] == {} and "  device: none to measure" in r.stdout
    # the scratch is named for what it is, and the walk prefetches only from a device
    assert row["io_mode"] in ("direct", "buffered") and isinstance(row["scratch_in_memory"], bool)
    assert row["walk_prefetch_runs"] == (0 if row["scratch_in_memory"] else 4)
    assert row["walk_prefetch_reads"].startswith(("Linux AIO, 16 deep", "one page at a time ("))
    assert ("in memory (tmpfs)" if row["scratch_in_memory"] else "the prefetch 4 runs a thread ahead") in r.stdout
    # where the tree was built is said (one run here, sorted in place: after the sort)
    assert ("tree: built as the sort wrote" in r.stdout) == bool(row["sort"]["tree_in_sort"])


@pytest.mark.parametrize("args, message", [
    (["forces", "--eps", "-1"], "eps"),
    (["forces", "no/such/file.h5"], "no/such/file.h5"),
    pytest.param(["forces", "--backend", "cuda"], "cuda", marks=pytest.mark.skipif(
        gp.available_backends()["cuda"].available, reason="CUDA is available here")),
    pytest.param(["bench", "transfer"], "cuda", marks=pytest.mark.skipif(
        gp.available_backends()["cuda"].available, reason="CUDA is available here")),
    (["info", "missing.h5"], "missing.h5"),
])
def test_user_errors_are_one_line(args, message):
    r = gravpipe(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_bad_option_value_is_rejected_by_the_parser():
    r = gravpipe("forces", "-n", "zero")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "-n" in r.stderr


# ---- OS errors and closed pipes ---------------------------------------------------------

def run_main(capsys, *args):
    """cli.main in this process: (exit code, stdout, stderr)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, *words):
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], err


def test_out_naming_an_existing_file_is_one_line(capsys, tmp_path):
    # evolve makes the run directory; a file of that name is the user's mistake
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    code, _, err = run_main(capsys, "run", "-n", "64", "--t-end", "1/8", "--out", taken, "--no-progress")
    assert_one_line_error(code, err, "gravpipe run: error:", str(taken))
    assert taken.read_text() == "not a folder"


def test_out_below_a_file_is_one_line(capsys, tmp_path):
    (tmp_path / "plain").write_text("")
    out = tmp_path / "plain" / "run1"
    code, _, err = run_main(capsys, "run", "-n", "64", "--t-end", "1/8", "--out", out, "--no-progress")
    assert_one_line_error(code, err, "gravpipe run: error:", str(tmp_path / "plain"))


@pytest.mark.parametrize("exc, words", [
    (OSError(errno.ENOSPC, "No space left on device", "/data/run1/snapshot_0001.h5"),
     ["/data/run1/snapshot_0001.h5: No space left on device"]),
    (OSError(errno.EROFS, "Read-only file system", "/mnt/ro/x.h5"), ["/mnt/ro/x.h5", "Read-only"]),
    (FileExistsError(errno.EEXIST, "File exists", "run1"), ["run1: File exists"]),
    (NotADirectoryError(errno.ENOTDIR, "Not a directory", "a/b"), ["a/b: Not a directory"]),
    (PermissionError(errno.EACCES, "Permission denied", "/root/x"), ["/root/x: Permission denied"]),
    (FileNotFoundError("config file not found: run.toml"), ["config file not found: run.toml"]),
])
def test_user_os_errors_are_one_line_without_errno(capsys, monkeypatch, exc, words):
    def failing(args):
        raise exc
    monkeypatch.setitem(cli.COMMANDS, "info", failing)
    code, _, err = run_main(capsys, "info", "x.h5")
    assert_one_line_error(code, err, "gravpipe info: error:", *words)
    assert "[Errno" not in err


def test_machine_io_faults_keep_their_traceback(monkeypatch):
    # EIO is a failing disk, not a mistake the user can fix: main must not hide it
    def failing(args):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setitem(cli.COMMANDS, "info", failing)
    with pytest.raises(OSError, match="Input/output"):
        main(["info", "x.h5"])


def test_closed_pipe_ends_quietly():
    # `gravpipe run | head -1`: the reader leaves after the first line while the run goes on
    proc = subprocess.Popen([sys.executable, "-m", "gravpipe.cli", "run", "-n", "512", "--t-end", "1",
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert first.startswith(b"gravpipe run:")
    assert proc.returncode == cli.EXIT_BROKEN_PIPE
    assert err == b"", err.decode()


def test_write_error_names_the_users_path(capsys, tmp_path):
    path = tmp_path / "nodir" / "ic.h5"
    code, _, err = run_main(capsys, "ic", "plummer", "-n", "16", "-o", path)
    assert_one_line_error(code, err, f"gravpipe ic: error: {path}: cannot write: folder", "does not exist")
    assert ".tmp" not in err


def test_info_on_a_checkpoint_is_narrow_and_shows_the_run_config(capsys, tmp_path):
    from gravpipe.simulation import Simulation

    sim = Simulation(gp.ic.plummer(32, seed=2), integrator="hermite", backend="cpu", threads=1)
    sim.evolve(1 / 8, checkpoint_every=1 / 8, out=tmp_path / "run", progress=False)
    code, out, _ = run_main(capsys, "info", tmp_path / "run" / "checkpoint_0001.h5")
    assert code == 0
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= 120, max(lines, key=len)
    assert all(ln == ln.rstrip() for ln in lines)
    entries = {ln.split("=")[0].strip(): ln.split("=", 1)[1].strip() for ln in lines if " = " in ln}
    assert entries["integrator"] == "'hermite'" and entries["params.dt_max"] == "0.125"
    assert entries["energy0"] == repr(sim.config.energy0)


# ---- numbers on the command line: expressions, values that start with '-' -------------

@pytest.mark.parametrize("text, value", [
    ("0.015625", 1 / 64), ("1/64", 1 / 64), ("-1/128", -1 / 128), ("2*pi/1000", 2 * math.pi / 1000),
    ("2**-7", 2.0 ** -7), ("(1 + 3) / 2**3", 0.5), ("-(-2)", 2.0), ("+pi", math.pi), ("1e-3", 1e-3), (" 3 ", 3.0),
])
def test_parse_number_accepts_arithmetic_with_pi(text, value):
    assert parse_number(text) == value


def test_plain_numbers_are_read_as_float_reads_them():
    # nan and inf get through, so that the option's own check names the problem in context
    assert math.isnan(parse_number("nan")) and parse_number("-inf") == -math.inf and parse_number("1e400") == math.inf


@pytest.mark.parametrize("text, message", [
    ("__import__('os')", "arithmetic expression"), ("e", "arithmetic expression"), ("math.pi", "arithmetic"),
    ("2^3", "arithmetic"), ("True", "arithmetic"), ("1j", "arithmetic"), ("'1'", "arithmetic"), ("", "arithmetic"),
    ("-pi/0", "division by zero"), ("10**10**10", "not a finite"), ("1e308*10", "not a finite"),
    ("(-8)**(1/3)", "arithmetic"), ("-" * 300 + "1", "arithmetic"),
])
def test_parse_number_rejects_anything_else(text, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_number(text)
    assert repr(text)[:20] in str(info.value)


def test_negative_value_reaches_the_simulations_check(capsys):
    # argparse alone says "--dt: expected one argument" for '-1/128'
    code, _, err = run_main(capsys, "run", "--integrator", "leapfrog", "--dt", "-1/128", "-n", "16")
    assert_one_line_error(code, err, "gravpipe run: error: dt:", "-0.0078125")


def test_expression_options_run(capsys):
    code, out, err = run_main(capsys, "run", "--integrator", "leapfrog", "--dt", "2*pi/1000", "--t-end", "2*pi/100",
                              "-n", "32", "--eps=-1/64*-1", "--no-progress", "--backend", "cpu")
    assert code == 0, err
    assert "dt 0.00628319" in out and "eps 0.015625" in out and "t = 0 -> 0.0628319" in out


def test_signed_values_only_join_number_options():
    options = {"--dt", "--eps"}
    assert cli._attach_signed_values(["run", "--dt", "-1/128", "--eps", "-pi"], options) == \
        ["run", "--dt=-1/128", "--eps=-pi"]
    # not a number, another option, an option that takes no number, after '--': untouched
    for argv in (["run", "--dt", "-x"], ["run", "--dt", "--eps", "1"], ["run", "--out", "-1"],
                 ["run", "--", "--dt", "-1"]):
        assert cli._attach_signed_values(argv, options) == argv


def test_help_documents_the_number_syntax():
    r = gravpipe("run", "--help")
    assert r.returncode == 0
    help_text = " ".join(r.stdout.split())
    assert "2*pi/1000" in help_text and "--dt" in help_text.split("Numbers (")[1]
    r = gravpipe("bench", "tree", "--help")  # --theta takes several numbers
    assert "--theta" in " ".join(r.stdout.split()).split("Numbers (")[1]


# ---- --version, --threads beyond the cores ---------------------------------------------

def test_version_is_the_installed_distributions():
    import importlib.metadata

    r = gravpipe("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"gravpipe {gp.__version__}" == f"gravpipe {importlib.metadata.version('gravpipe')}"


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def test_threads_beyond_the_cores_warn_once(capsys):
    # --backend cpu: threads are a CPU option, refused where "auto" would run on a GPU
    code, out, err = run_main(capsys, "forces", "-n", "64", "--check", "0", "--backend", "cpu", "--threads",
                              _cores() + 1)
    assert code == 0
    warnings = [ln for ln in err.splitlines() if "warning" in ln]
    assert len(warnings) == 1 and f"--threads {_cores() + 1}" in warnings[0] and f"{_cores()} cores" in warnings[0]
    code, out, err = run_main(capsys, "forces", "-n", "64", "--check", "0", "--backend", "cpu", "--threads",
                              _cores())
    assert code == 0 and err == ""
