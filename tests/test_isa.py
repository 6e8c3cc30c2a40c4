"""Choosing the CPU kernels' instruction set: the isa argument, GRAVPIPE_ISA, and errors.

The core reads GRAVPIPE_ISA each time it resolves "auto" (nothing is cached), so
monkeypatch.setenv reaches it in this process; the command-line tests run a subprocess.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import gravpipe as gp
from gravpipe import _core

ISAS = _core.available_isas()
MISSING = [isa for isa in ("avx512", "avx2") if isa not in ISAS]


@pytest.fixture(autouse=True)
def _no_inherited_isa(monkeypatch):
    monkeypatch.delenv("GRAVPIPE_ISA", raising=False)


def small_tree(**kw):
    pos = np.random.default_rng(0).normal(size=(50, 3))
    return gp.Tree(pos, np.ones(50), 0.01, **kw)


def test_available_isas_best_first():
    order = ["avx512", "avx2", "generic"]
    assert ISAS[-1] == "generic"
    assert ISAS == sorted(ISAS, key=order.index)
    assert _core.resolve_isa("auto") == ISAS[0]
    assert gp.Pipeline("cpu").isa == ISAS[0] and small_tree().isa == ISAS[0]


@pytest.mark.parametrize("isa", ISAS)
def test_environment_selects_auto(monkeypatch, isa):
    monkeypatch.setenv("GRAVPIPE_ISA", isa)
    pipe = gp.Pipeline("cpu")
    assert pipe.isa == isa and f"isa={isa}" in pipe.backend_detail
    assert small_tree().isa == isa
    assert gp.tree.TreeGravity(0.01, 1.0).isa == isa


def test_explicit_isa_wins_over_environment(monkeypatch):
    monkeypatch.setenv("GRAVPIPE_ISA", "generic")
    assert gp.Pipeline("cpu", isa=ISAS[0]).isa == ISAS[0]
    assert small_tree(isa=ISAS[0]).isa == ISAS[0]


@pytest.mark.parametrize("value", ["", "auto"])
def test_empty_or_auto_environment_is_the_best(monkeypatch, value):
    monkeypatch.setenv("GRAVPIPE_ISA", value)
    assert gp.Pipeline("cpu").isa == ISAS[0]


def test_unknown_environment_value_is_an_error(monkeypatch):
    monkeypatch.setenv("GRAVPIPE_ISA", "bogus")
    for make in (lambda: gp.Pipeline("cpu"), small_tree, lambda: gp.tree.TreeGravity(0.01, 1.0)):
        with pytest.raises(ValueError, match="GRAVPIPE_ISA.*'bogus'"):
            make()


@pytest.mark.skipif(not MISSING, reason="every instruction set is available here")
def test_unavailable_isa_is_an_error(monkeypatch):
    isa = MISSING[0]
    with pytest.raises(gp.BackendUnavailableError, match=f"isa '{isa}' is not available"):
        gp.Pipeline("cpu", isa=isa)
    with pytest.raises(gp.BackendUnavailableError, match=f"isa '{isa}' is not available"):
        small_tree(isa=isa)
    monkeypatch.setenv("GRAVPIPE_ISA", isa)
    with pytest.raises(gp.BackendUnavailableError, match=f"GRAVPIPE_ISA '{isa}' is not available"):
        gp.Pipeline("cpu")


def test_unknown_isa_argument():
    with pytest.raises(ValueError, match="isa: unknown instruction set 'sse9'"):
        small_tree(isa="sse9")


def gravpipe_cli(*args, env_isa=None):
    env = {k: v for k, v in os.environ.items() if k != "GRAVPIPE_ISA"}
    if env_isa is not None:
        env["GRAVPIPE_ISA"] = env_isa
    return subprocess.run([sys.executable, "-m", "gravpipe.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env)


BENCH = ("bench", "direct", "--sizes", "256", "--precision", "mixed", "--mode", "acc+pot", "--json", "-")


def test_bench_direct_compares_isas():
    r = gravpipe_cli(*BENCH, "--isa", *ISAS)
    assert r.returncode == 0, r.stderr
    rows = [x for x in json.loads(r.stdout)["results"] if x["precision"] == "mixed"]
    assert [x["isa"] for x in rows] == ISAS


def test_bench_direct_follows_environment():
    r = gravpipe_cli(*BENCH, env_isa="generic")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["machine"]["isa"] == "generic"
    assert {x["isa"] for x in doc["results"] if x["precision"] == "mixed"} == {"generic"}


@pytest.mark.parametrize("args, env_isa, message", [
    ((), "bogus", "GRAVPIPE_ISA: unknown instruction set 'bogus'"),
    pytest.param(("--isa", MISSING[0] if MISSING else ""), None, "is not available",
                 marks=pytest.mark.skipif(not MISSING, reason="every instruction set is available here")),
])
def test_bench_direct_isa_errors(args, env_isa, message):
    r = gravpipe_cli(*BENCH, *args, env_isa=env_isa)
    assert r.returncode != 0 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
