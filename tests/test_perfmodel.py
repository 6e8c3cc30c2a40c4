"""The performance model against independent facts: the PCI-HIB paper's equations and
constants reproduce its own figures; predictions scale with N, P and t_end as the terms
say; machine files round-trip and bad ones are refused by name. No timings."""

from __future__ import annotations

import json
import math

import pytest

from gravpipe.perfmodel import MachineFileError, Model, cache_path, load, predict, save
from gravpipe.perfmodel import pcihib
from gravpipe.perfmodel.machinefile import MACHINES_DIR


# ---- seed 000: the paper's figures from its constants ----------------------------------------

def test_j_write_speed_is_the_papers_library_figure():
    # eq. 2's C2 over 19 words of 4 bytes: ~30 MB/s, the write speed section 4.2 measures for
    # data fetched from scattered main memory (and well below Table 2's raw 68 MB/s)
    mb_s = pcihib.J_WORDS * pcihib.WORD / pcihib.C2_J / 1e6
    assert 27 < mb_s < 33
    # i-write and result read per word (eqs. 3-4 over blocks of 94 x 10 words) stay below the raw
    # Table 2 speeds (68 MB/s write, 28 MB/s read)
    assert pcihib.WORD / pcihib.T_IP / 1e6 < 68
    assert pcihib.WORD / pcihib.T_RES / 1e6 < 28


def test_g_factor_pads_to_whole_blocks_of_virtual_pipelines():
    assert pcihib.g_factor(94) == 1.0
    assert pcihib.g_factor(95) == pytest.approx(2 * 94 / 95)
    assert pcihib.g_factor(1) == 94


def test_equal_timestep_host_share_small_and_phib_about_5_percent_faster():
    # section 4.3: host time small, PHIB only ~5% faster than THIB (the difference is the host)
    for n in (1024, 4096, 16384, 65536, 262144):
        a, b = pcihib.equal_timestep(n, "AS500"), pcihib.equal_timestep(n, "AA3000")
        assert a.host / a.total < 0.10
        assert 0 < 1 - a.total / b.total <= 0.065
    assert 1 - pcihib.equal_timestep(1024).total / pcihib.equal_timestep(1024, "AA3000").total > 0.04
    # the pipeline term grows as N^2: it dominates at large N
    big = pcihib.equal_timestep(262144)
    assert big.pipeline / big.total > 0.9


def test_individual_timestep_phib_10_to_30_percent_faster():
    # section 4.4 / Fig. 8: 10-30% faster over N = 1024 .. 32768, most at small N
    gains = [1 - pcihib.individual_timestep(n).total / pcihib.individual_timestep(n, "AA3000").total
             for n in (1024, 2048, 4096, 8192, 16384, 32768)]
    assert all(0.08 <= g <= 0.32 for g in gains)
    assert gains[0] > gains[-1]


def test_treecode_phib_about_40_percent_faster_at_a_million():
    # section 4.5: "on average, the PHIB system is about 40% faster", Fig. 9c at N = 1048576
    n = 1048576
    a, b = pcihib.treecode(n), pcihib.treecode(n, host="AA3000")
    assert 0.33 < 1 - a.total / b.total < 0.47
    assert pcihib.n_terms(n, 0.75, 4000) == pytest.approx(4250, rel=0.05)


# ---- the model --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def h100():
    return load("gpu-h100")


@pytest.fixture(scope="module")
def node():
    return load("cluster-node")


def test_shipped_machine_files_load():
    names = sorted(p.stem for p in MACHINES_DIR.glob("*.json"))
    assert {"gpu-h100", "cluster-node"} <= set(names)
    for name in names:
        assert load(name)["constants"]


def test_h100_file_reproduces_the_hermite_figure_it_was_built_from(h100):
    # BENCHMARKS.md: Hermite N = 262144, t = 0 -> 0.125 on the H100: 260 blocks, 4,968,535 particle
    # steps, total 2.589 s (host 0.431 s); the blocks and steps come from the block-size model
    m = Model(h100)
    ps, blocks = m.hermite_work(262144, 0.125, 0.02)
    assert ps == pytest.approx(4968535, rel=0.01) and blocks == pytest.approx(260, rel=0.01)
    b = m.hermite_steps(262144, ps, blocks, "mixed", "cuda", None)
    assert b.total == pytest.approx(2.589, rel=0.15)


def test_direct_scales_as_n_squared_and_one_over_p(h100):
    m = Model(h100)
    t1 = m.direct_evaluation(1 << 20, "acc+pot", "mixed", "cuda", None).pipeline
    t2 = m.direct_evaluation(1 << 21, "acc+pot", "mixed", "cuda", None).pipeline
    assert t2 / t1 == pytest.approx(4, rel=0.01)
    tp = m.direct_evaluation(1 << 21, "acc+pot", "mixed", "cuda", None, ranks=8)
    assert tp.pipeline == pytest.approx(t2 / 8, rel=0.01)
    assert tp.communication > 0


def test_tree_scales_as_n_log_n_and_with_theta(node):
    m = Model(node)
    w6, w7 = m.tree_work(1e6, 0.6), m.tree_work(1e7, 0.6)
    assert w7["pp"] == w6["pp"] and w7["pc"] > w6["pc"]             # the far field grows as log N
    assert m.tree_work(1e6, 0.4)["pc"] > w6["pc"]                     # smaller theta, more work
    t6 = m.tree_evaluation(int(1e6), 0.6).total
    t8 = m.tree_evaluation(int(1e8), 0.6).total
    assert 100 < t8 / t6 < 200


def test_let_volume_is_surface_scaling(node):
    m = Model(node)
    c = node["constants"]["network"]
    for n, p in ((1e9, 64), (8e9, 64), (1e9, 512)):
        comm = m.tree_evaluation(int(n), 0.6, ranks=p).communication
        let_bytes = node["constants"]["let"]["bytes_coeff"] * (n / p) ** (2 / 3)
        assert comm >= let_bytes * c["seconds_per_byte"]
    # the essential trees' part (less the domain cut's collectives, the same at both N)
    a, b = ((m.tree_evaluation(int(n), 0.6, ranks=64).communication - m.tree_domain(n, 64).communication)
            for n in (1e9, 8e9))
    assert 3.5 < b / a < 4.05  # (8)^(2/3) = 4 on the bandwidth term


def test_a_distributed_run_moves_no_n_sized_message(node):
    # gravpipe run over ranks keeps each rank's domain only: no step gathers N results onto
    # every rank (48 bytes a particle over 1e8 particles would be ~0.6 s at the node's
    # bandwidth); the step's communication is the essential trees and the domain cut's
    m = Model(node)
    c = node["constants"]["network"]
    dist = m.tree_evaluation(int(1e8), 0.6, ranks=64)
    assert dist.communication < 0.1 * c["seconds_per_byte"] * 48 * 1e8
    assert m.tree_domain(1e8, 1).total == 0.0
    # with the two-rank calibration's constants: log2 P collectives, N/P per-body work
    doc = {"constants": {**node["constants"], "let": {**node["constants"]["let"], "domain_fixed_s": 1e-3,
                                                      "domain_per_body_s": 2e-7}}}
    d = Model(doc).tree_domain(1e6, 8)
    assert d.communication == pytest.approx(3e-3) and d.host == pytest.approx(2e-7 * 1e6 / 8)


def test_whole_run_grows_with_t_end_and_breakdown_adds_up(h100):
    p1 = predict(h100, n=65536, t_end=1.0, backend="cuda")
    p2 = predict(h100, n=65536, t_end=2.0, backend="cuda")
    assert p2.seconds > 1.8 * (p1.seconds - p1.seconds_per_force_evaluation)
    assert sum(p1.breakdown.as_dict().values()) == pytest.approx(p1.seconds)
    q = predict(h100, gravity="tree", n=10**8, t_end=1 / 128, memory_budget=4 << 30, backend="cpu")
    assert q.breakdown.io > 0 and q.steps == 1


def test_bad_settings_are_refused(h100):
    with pytest.raises(ValueError, match="gravity"):
        predict(h100, gravity="pm")
    with pytest.raises(ValueError, match="jerk"):
        predict(h100, gravity="tree", integrator="hermite")
    cpu_only = json.loads(json.dumps(h100))
    del cpu_only["constants"]["cuda"]
    with pytest.raises(MachineFileError, match="GPU"):
        predict(cpu_only, n=1000, backend="cuda")


# ---- machine files ------------------------------------------------------------------------------

def test_machine_file_round_trips(tmp_path, h100):
    p = save(h100, tmp_path / "m.json")
    assert load(p) == h100


def test_bad_machine_files_name_file_and_key(tmp_path, h100):
    doc = json.loads(json.dumps(h100))
    del doc["constants"]["tree"]["pp_s"]
    f = tmp_path / "missing.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(MachineFileError, match=r"missing.json: constants.tree.pp_s is missing"):
        load(f)
    doc = json.loads(json.dumps(h100))
    doc["constants"]["cpu"]["kernel"]["acc+pot"]["mixed"] = -1
    f.write_text(json.dumps(doc))
    with pytest.raises(MachineFileError, match=r"constants.cpu.kernel.acc\+pot.mixed = -1"):
        load(f)
    f.write_text("{not json")
    with pytest.raises(MachineFileError, match="not JSON"):
        load(f)
    with pytest.raises(MachineFileError, match="no such machine file"):
        load(tmp_path / "absent.json")
    with pytest.raises(MachineFileError, match="schema"):
        save({"schema": "x"}, tmp_path / "x.json")


def test_cache_path_respects_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_path("host-1") == tmp_path / "gravpipe" / "model-host-1.json"


# ---- command line -------------------------------------------------------------------------------

def test_cli_predict_json(capsys):
    from gravpipe.cli import main
    assert main(["model", "predict", "--machine", "gpu-h100", "-n", "1e6", "--gravity", "tree", "--ranks", "4",
                 "--t-end", "0.0625", "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("seconds_per_force_evaluation", "seconds_per_step", "seconds", "breakdown"):
        assert key in out
    assert set(out["breakdown"]) == {"host", "transfer", "pipeline", "communication", "io"}
    assert math.isfinite(out["seconds"]) and out["seconds"] > out["seconds_per_step"]


def test_cli_bad_machine_file_is_a_clear_error(tmp_path, capsys):
    from gravpipe.cli import main
    f = tmp_path / "bad.json"
    f.write_text("[]")
    assert main(["model", "predict", "--machine", str(f)]) == 2
    assert "bad.json: not a JSON object" in capsys.readouterr().err


def test_run_prints_forecast_or_says_there_is_none(monkeypatch, tmp_path, capsys, h100):
    from gravpipe.cli import main
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(["run", "-n", "128", "--t-end", "0.125", "--no-progress"]) == 0
    assert "forecast: none (no calibration" in capsys.readouterr().out
    save(h100, cache_path())
    assert main(["run", "-n", "128", "--t-end", "0.125", "--no-progress", "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "forecast:" in out and "predicted / measured" in out


def test_plot_and_where_communication_or_io_grow(node, tmp_path):
    pytest.importorskip("matplotlib")
    from gravpipe.perfmodel.plot import dominant, plot_tree_scaling, tree_step
    assert dominant(tree_step(node, 1e6, 1)[0]) == "compute"
    # the communication share grows with P at fixed N: an essential tree is a surface of
    # (N/P)^(2/3) against a volume of N/P
    shares = [(lambda b: b.communication / b.total)(tree_step(node, 1e8, p)[0]) for p in (4, 64, 1024)]
    assert shares[0] < shares[1] < shares[2]
    # and takes over at ~1e3 particles a rank (N = 1e6 on 1024 ranks of a 64-core node)
    assert dominant(tree_step(node, 1e6, 1024)[0]) == "communication"
    assert dominant(tree_step(node, 1e8, 1024)[0]) == "compute"
    # out of core (I/O) once N/P no longer fits a node's memory
    assert tree_step(node, 1e10, 1)[1] and not tree_step(node, 1e10, 1024)[1]
    plot_tree_scaling(node, str(tmp_path / "p.png"))
    assert (tmp_path / "p.png").stat().st_size > 10000


def test_domain_fit_recovers_the_cut_constants_beyond_the_predicted_own_tree(node):
    """The two-rank probe's steps built from known constants: the fit gets them back (the
    domain cut's C1 and C2 a body, the essential trees' bytes coefficient), with each rank's
    own tree priced by the serial constants at one thread."""
    from gravpipe.perfmodel.calibrate import _domain_fit
    from gravpipe.tree import DEFAULT_THETA

    c = node["constants"]
    net, p, c1, c2, k = c["network"], 2, 4e-4, 9e-8, 1500.0
    zero = {"bytes_coeff": 0.0, "domain_fixed_s": 0.0, "domain_per_body_s": 0.0}
    serial = Model({"constants": {"tree": c["tree"], "cpu": c["cpu"], "network": net, "let": zero}})
    trees = []
    for n in (15000, 30000):
        b = serial.tree_evaluation(n, DEFAULT_THETA, "cpu", 1, p)
        sent = k * (n / p) ** (2 / 3) * p
        seconds = (b.host + b.pipeline + c1 + c2 * n / p + 2 * net["latency_s"]
                   + net["seconds_per_byte"] * sent / p)
        trees.append({"n": n, "calibration": True, "seconds": seconds, "bytes_essential": sent})
    fit = _domain_fit({"ranks": p, "trees": trees}, net, {"tree": c["tree"], "cpu": c["cpu"]})
    assert fit["domain_fixed_s"] == pytest.approx(c1, rel=1e-6)
    assert fit["domain_per_body_s"] == pytest.approx(c2, rel=1e-6)
    assert fit["bytes_coeff"] == pytest.approx(k, rel=1e-9)
