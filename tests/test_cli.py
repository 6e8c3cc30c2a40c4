"""The gravpipe command as a user runs it: exit codes, one-line errors, JSON output."""

import json
import subprocess
import sys

import pytest

import gravpipe as gp


def gravpipe(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "gravpipe.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_forces_on_embedded_default_reports_accuracy():
    r = gravpipe("forces", "-n", "600", "--check", "100")
    assert r.returncode == 0, r.stderr
    assert "interactions/s" in r.stdout and "accuracy vs float64" in r.stdout
    err = float(r.stdout.split("relative RMS acc")[1].split(",")[0])
    assert err < 1e-6


def test_bench_direct_json():
    r = gravpipe("bench", "direct", "--sizes", "256", "--precision", "double", "--mode", "acc+pot",
                 "--json", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rows = {(x["precision"], x["n"]) for x in doc["results"]}
    assert ("double", 256) in rows and any(p == "numpy-f64" for p, _ in rows)
    assert doc["flop_convention"] == {"acc+pot": 38, "acc+jerk+pot": 60}
    assert doc["machine"]["cpu"]


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
