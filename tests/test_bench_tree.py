"""``gravpipe bench tree``: its figures checked against facts that do not come from the benchmark
(error ordering in theta and multipole order, an independent numpy reference, work bounds),
its JSON, and the command line. Timings are never asserted beyond being positive."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from gravpipe.bench import tree as bt
from gravpipe.bench.direct import numpy_all_pairs
from gravpipe.cli import main

N = 3000


def gravpipe(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "gravpipe.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def measured():
    return bt.run(sizes=[N], models=["plummer", "cube"], thetas=[SW, 0.8], quadrupoles=[True, False],
                  repeat=1, sample=1000)


SW = bt.SW_THETA  # the default opening angle, which the Salmon & Warren line reports


def row(results, model, quad, theta):
    (r,) = [r for r in results if r.model == model and r.quadrupole == quad and r.theta == theta]
    return r


def test_one_row_per_combination_and_one_reference_per_model_and_n(measured):
    results, refs = measured
    assert len(results) == 2 * 2 * 2
    assert [(d.model, d.n) for d in refs] == [("plummer", N), ("cube", N)]
    for d in refs:
        assert d.interactions == 1000 * N and d.precision == "mixed" and d.seconds_error_reference > 0
        assert d.seconds > 0 and d.interactions_per_second == pytest.approx(d.interactions / d.seconds)
        assert d.seconds_all_pairs == pytest.approx(N * N / d.interactions_per_second)


@pytest.mark.parametrize("model", ["plummer", "cube"])
@pytest.mark.parametrize("quad", [True, False])
def test_errors_fall_as_theta_falls(measured, model, quad):
    small, large = row(measured[0], model, quad, SW), row(measured[0], model, quad, 0.8)
    assert small.error_median < large.error_median
    assert small.error_p99 < large.error_p99


@pytest.mark.parametrize("model", ["plummer", "cube"])
@pytest.mark.parametrize("theta", [SW, 0.8])
def test_quadrupole_beats_monopole(measured, model, theta):
    q, m = row(measured[0], model, True, theta), row(measured[0], model, False, theta)
    assert q.error_median < m.error_median and q.error_p99 < m.error_p99
    # the opening criterion does not depend on the multipole order: same lists
    assert (q.pp_interactions, q.pc_interactions, q.mac_tests) == (m.pp_interactions, m.pc_interactions, m.mac_tests)


def test_work_and_times_are_consistent(measured):
    for r in measured[0]:
        assert 1 <= r.interactions_per_body <= r.n
        assert r.interactions_per_body == pytest.approx((r.pp_interactions + r.pc_interactions) / r.n)
        assert r.mac_per_body == pytest.approx(r.mac_tests / r.n) and r.mac_tests > 0
        assert r.seconds > 0 and r.seconds_forces > 0 and r.seconds >= r.seconds_forces
        assert min(r.seconds_sort, r.seconds_build, r.seconds_moments, r.seconds_walk, r.seconds_evaluate) >= 0
        assert r.interactions_per_second == pytest.approx((r.pp_interactions + r.pc_interactions) / r.seconds_forces)
        assert r.speedup_vs_direct == pytest.approx(r.n ** 2 / r.direct_interactions_per_second / r.seconds)
        assert r.eps == pytest.approx(1 / 64 * (N / 1e4) ** (-1 / 3)) and r.sample == 1000
        assert 0 < r.error_median < r.error_p99 < 0.1
    # fewer interactions at the larger opening angle
    for model in ("plummer", "cube"):
        wide, narrow = row(measured[0], model, True, 0.8), row(measured[0], model, True, SW)
        assert wide.interactions_per_body < narrow.interactions_per_body


def test_error_agrees_with_an_independent_numpy_reference(measured):
    """The sample's median against a float64 numpy all-pairs sum over every particle."""
    import gravpipe as gp

    r = row(measured[0], "plummer", True, SW)
    pos, mass = bt.make_model("plummer", N)
    acc, _ = gp.Tree(pos, mass, r.eps, theta=SW, quadrupole=True).forces()
    ref, _ = numpy_all_pairs(pos, mass, r.eps)
    err = np.linalg.norm(acc - ref, axis=1) / np.linalg.norm(ref, axis=1)
    assert r.error_median == pytest.approx(np.median(err), rel=0.25)


def test_models():
    pos, mass = bt.make_model("cube", 5000, seed=3)
    assert np.all(np.abs(pos) <= 1.0 + 1e-12) and pos.min() < -0.99 and pos.max() > 0.99
    assert np.allclose(mass, 1 / 5000) and math.isclose(mass.sum(), 1.0)
    _, pm = bt.make_model("plummer", 100)
    assert math.isclose(pm.sum(), 1.0)
    with pytest.raises(ValueError, match="model"):
        bt.make_model("disc", 10)


def test_salmon_warren_line(measured):
    line = bt.sw_comparison(measured[0])
    r = row(measured[0], "cube", True, SW)
    assert line.startswith("Salmon & Warren") and f"{r.interactions_per_body:.0f} interactions/body" in line
    assert f"{r.mac_per_body:.1f} MAC tests/body" in line
    assert bt.sw_comparison([x for x in measured[0] if x.model == "plummer"]) is None
    assert bt.sw_comparison([x for x in measured[0] if x.theta != SW]) is None
    assert bt.sw_comparison([x for x in measured[0] if not x.quadrupole]) is None


@pytest.mark.parametrize("kwargs, name", [
    ({"sample": 10}, "sample"), ({"sample": 5000}, "sample"), ({"thetas": [-1.0]}, "thetas"),
    ({"repeat": 0}, "repeat"), ({"models": ["disc"]}, "models"), ({"eps": -1.0}, "eps"),
])
def test_run_rejects_bad_arguments(kwargs, name):
    args = {"sizes": [N], "thetas": [0.5], "repeat": 1} | kwargs
    with pytest.raises(ValueError, match=f"^{name}"):
        bt.run(**args)


def test_cli_quick_with_small_sizes_and_json(tmp_path):
    out = tmp_path / "tree.json"
    r = gravpipe("bench", "tree", "--quick", "--sizes", "2000", "3000", "--json", out)
    assert r.returncode == 0, r.stderr
    for text in ("gravpipe bench tree", "x direct", "interactions/s", "err p99", "direct reference",
                 "Salmon & Warren (1994) comparison", f"wrote {out}"):
        assert text in r.stdout, text
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "tree" and doc["machine"]["cpu"] and doc["machine"]["openmp_threads"] >= 1
    rows = {(x["model"], x["n"], x["quadrupole"], x["theta"]) for x in doc["results"]}
    assert rows == {(m, n, q, t) for m in ("plummer", "cube") for n in (2000, 3000) for q in (True, False)
                    for t in bt.QUICK_THETAS}
    assert all(x["repeat"] == bt.QUICK_REPEAT and x["speedup_vs_direct"] > 0 for x in doc["results"])
    assert {(d["model"], d["n"]) for d in doc["references"]} == {(m, n) for m in ("plummer", "cube")
                                                                  for n in (2000, 3000)}


def test_cli_json_to_stdout_and_options(capsys):
    code = main(["bench", "tree", "--sizes", "1500", "--models", "cube", "--theta", "0.6", "--quad", "no",
                 "--repeat", "1", "--eps", "1/100", "--precision", "double", "--threads", "1", "--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    (r,) = doc["results"]
    assert (r["model"], r["n"], r["theta"], r["quadrupole"], r["precision"], r["threads"], r["eps"]) == \
        ("cube", 1500, 0.6, False, "double", 1, 0.01)
    assert "x direct" in err  # the tables go to stderr when the JSON takes stdout
    assert "Salmon" not in err  # the default theta with quadrupoles is not in the run


@pytest.mark.parametrize("args, message", [
    (["--sample", "10"], "--sample"),
    (["--sizes", "2000", "--sample", "3000"], "--sample"),
    (["--theta", "-1"], "--theta"),
    (["--theta", "0.5", "0"], "--theta"),
    (["--eps", "-0.1"], "--eps"),
])
def test_cli_bad_option_is_one_line_naming_it(capsys, args, message):
    code = main(["bench", "tree", *args])
    _, err = capsys.readouterr()
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in err, err


def test_cli_bad_option_through_the_entry_point():
    r = gravpipe("bench", "tree", "--quick", "--sample", "10")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--sample" in r.stderr and ">= 1000" in r.stderr
    r = gravpipe("bench", "tree", "--quad", "maybe")
    assert r.returncode == 2 and "--quad" in r.stderr


def test_backend_comparison_times_the_providers_steady_state():
    """What this proves: `bench tree --backend cuda`'s comparison times each backend's force
    provider after one unmeasured evaluation (its buffers warm, as in a run), counts the
    interactions the tree itself reports for the same set, and refuses a list that does not
    start with its CPU reference. Runs with the CPU alone here (CI has no GPU)."""
    import gravpipe as gp

    rows = bt.compare_backends([20000], theta=0.6, repeat=2, threads=2, backends=("cpu",))
    assert len(rows) == 1 and rows[0].backend == "cpu" and rows[0].rel_rms_vs_cpu == 0.0
    pos, mass = bt.make_model("plummer", 20000)
    t = gp.Tree(pos, mass, bt.default_eps(20000), theta=0.6, threads=2)
    t.forces()
    assert rows[0].interactions == t.stats.pp_interactions + t.stats.pc_interactions
    assert 0 < rows[0].seconds_forces <= rows[0].seconds
    with pytest.raises(ValueError, match="CPU comes first"):
        bt.compare_backends([1000], backends=("cuda",))
