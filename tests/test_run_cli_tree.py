"""``gravpipe run --gravity tree``: treecode runs from the command line and from run.toml,
resumed bit for bit, and the mistakes of combining the tree with other options."""

import csv
import json

import numpy as np
import pytest

from gravpipe import io
from gravpipe.cli import main

# the tree's list kernels give identical results for any thread count; one thread anyway,
# as in the other resume tests
TREE_RUN = ["-n", "1000", "--gravity", "tree", "--integrator", "leapfrog", "--dt", "0.0078125",
            "--threads", "1"]


def run_main(capsys, *args):
    """main() in this process: (exit code, stdout, stderr)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def run_config(path) -> dict:
    return json.loads(io.read_snapshot(path).parameters["run_config"])


def final_state(path) -> tuple[bytes, bytes]:
    p, _ = io.read(path)
    return p.pos.tobytes(), p.vel.tobytes()


def test_tree_run_writes_snapshot_diagnostics_and_checkpoint(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, stdout, err = run_main(capsys, "run", *TREE_RUN, "--theta", "0.6", "--t-end", "0.25", "--out", "tmp")
    assert code == 0, err
    assert "gravity tree (theta 0.6), leapfrog (dt 0.0078125)" in stdout
    assert "chosen for gravity tree" not in stdout  # the integrator was given
    out = tmp_path / "tmp"
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint_0001.h5", "diagnostics.csv", "manifest.json", "snapshot_0001.h5"]
    snap = io.read_snapshot(out / "snapshot_0001.h5")
    assert snap.time == 0.25 and snap.particles.n == 1000
    assert snap.parameters["gravity"] == "tree" and snap.parameters["integrator"] == "leapfrog"
    rows = list(csv.DictReader((out / "diagnostics.csv").open()))
    assert float(rows[-1]["time"]) == 0.25 and len(rows) >= 2  # t0, t_end (rows: <= ~5% of the work)
    assert max(abs(float(r["energy_error"])) for r in rows) < 1e-4
    config = run_config(out / "checkpoint_0001.h5")
    assert config["gravity"] == "tree" and config["theta"] == 0.6 and config["integrator"] == "leapfrog"
    assert config["params"] == {"dt": 0.0078125}


def test_tree_without_integrator_uses_leapfrog_and_says_so(capsys):
    code, stdout, err = run_main(capsys, "run", "-n", "200", "--gravity", "tree", "--t-end", "1/64")
    assert code == 0, err
    assert "gravity tree (theta 0.6), leapfrog (dt 0.0078125)" in stdout  # both defaults
    assert "leapfrog chosen for gravity tree" in stdout


def test_direct_run_names_its_gravity(capsys):
    code, stdout, err = run_main(capsys, "run", "-n", "64", "--t-end", "1/8")
    assert code == 0, err
    assert "gravity direct, hermite (" in stdout and "theta" not in stdout


@pytest.mark.parametrize("interruption", ["lost checkpoints", "shorter first run"])
def test_resumed_tree_run_matches_the_uninterrupted_run_bit_for_bit(capsys, tmp_path, interruption):
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert run_main(capsys, "run", *TREE_RUN, "--theta", "0.6", "--t-end", "1/4", "--out", ref)[0] == 0
    if interruption == "lost checkpoints":
        # a run killed after its second checkpoint (t = 1/8) of four
        assert run_main(capsys, "run", *TREE_RUN, "--theta", "0.6", "--t-end", "1/4", "--checkpoint-every", "1/16",
                        "--out", run)[0] == 0
        for name in ("checkpoint_0003.h5", "checkpoint_0004.h5", "snapshot_0001.h5"):
            (run / name).unlink()
        code, stdout, err = run_main(capsys, "run", "--resume", run)
        assert "resumed from " in stdout and "checkpoint_0002.h5\n" in stdout and "t = 0.125 -> 0.25" in stdout
        final = run / "snapshot_0001.h5"
    else:
        # a run to t = 1/8, extended to 1/4
        assert run_main(capsys, "run", *TREE_RUN, "--theta", "0.6", "--t-end", "1/8", "--out", run)[0] == 0
        code, stdout, err = run_main(capsys, "run", "--resume", run, "--t-end", "1/4")
        final = run / "snapshot_0002.h5"
    assert code == 0, err
    assert "resumed from" in stdout and "gravity tree (theta 0.6), leapfrog" in stdout
    assert io.read_snapshot(final).time == 0.25
    assert final_state(final) == final_state(ref / "snapshot_0001.h5")
    config = run_config(sorted(run.glob("checkpoint_*.h5"))[-1])
    assert config["gravity"] == "tree" and config["theta"] == 0.6


def test_config_file_runs_the_tree(capsys, tmp_path):
    (tmp_path / "run.toml").write_text(
        'gravity = "tree"\n'
        'theta = 0.7\n'            # no integrator: leapfrog, chosen for the tree
        'n = 500\nseed = 2\n'
        'dt = "1/128"\n'
        't_end = 0.125\n'
        'out = "out"\n'
        'threads = 1\n')
    code, stdout, err = run_main(capsys, "run", "--config", tmp_path / "run.toml")
    assert code == 0, err
    assert "gravity tree (theta 0.7), leapfrog" in stdout and "leapfrog chosen for gravity tree" in stdout
    config = run_config(tmp_path / "out" / "checkpoint_0001.h5")
    assert (config["gravity"], config["theta"], config["integrator"]) == ("tree", 0.7, "leapfrog")
    snap = io.read_snapshot(tmp_path / "out" / "snapshot_0001.h5")
    assert snap.time == 0.125 and snap.particles.n == 500
    assert np.isfinite(snap.particles.pos).all()


# ---- user mistakes: one line on stderr naming the option, exit status 2 -------------------

@pytest.fixture
def workdir(tmp_path, capsys, monkeypatch):
    (tmp_path / "tree_hermite.toml").write_text('gravity = "tree"\nintegrator = "hermite"\n')
    (tmp_path / "theta_only.toml").write_text("theta = 0.7\n")
    (tmp_path / "tree.toml").write_text('gravity = "tree"\ntheta = 0.7\nn = 64\nt_end = "1/128"\n')
    (tmp_path / "bad_gravity.toml").write_text('gravity = "barnes-hut"\n')
    (tmp_path / "bad_theta.toml").write_text('gravity = "tree"\ntheta = "wide"\n')
    monkeypatch.chdir(tmp_path)
    assert run_main(capsys, "run", "-n", "64", "--gravity", "tree", "--t-end", "1/64", "--out", "done")[0] == 0
    return tmp_path


@pytest.mark.parametrize("args, message", [
    (["--gravity", "tree", "--integrator", "hermite"],
     "--gravity tree needs --integrator leapfrog, got --integrator hermite"),
    (["--config", "tree_hermite.toml"], 'needs --integrator leapfrog, got integrator = "hermite" in tree_hermite.toml'),
    (["--theta", "0.7"], "--theta 0.7: the opening angle is only for --gravity tree"),
    (["--gravity", "direct", "--theta", "0.7"], "--theta 0.7: the opening angle is only for --gravity tree"),
    (["--config", "theta_only.toml"], "theta = 0.7 in theta_only.toml: the opening angle is only for --gravity tree"),
    (["--config", "tree.toml", "--gravity", "direct"], "theta = 0.7 in tree.toml: the opening angle is only for"),
    (["--gravity", "tree", "--theta", "0"], "--theta 0: the opening angle must be finite and > 0"),
    (["--gravity", "tree", "--theta", "-0.5"], "--theta -0.5: the opening angle must be finite and > 0"),
    (["--gravity", "tree", "--theta", "nan"], "--theta nan: the opening angle must be finite and > 0"),
    (["--gravity", "tree", "--theta", "inf"], "--theta inf: the opening angle must be finite and > 0"),
    (["-n", "64", "--gravity", "tree", "--backend", "cuda"], "backend"),
    (["--gravity", "tree", "--eta", "0.01"], "--eta 0.01: a Hermite parameter, but --gravity tree runs leapfrog"),
    (["--gravity", "tree", "--dt-max", "1/8"], "--dt-max 0.125: a Hermite parameter"),
    (["--gravity", "tree", "--integrator", "leapfrog", "--eta", "0.01"], "eta: not a parameter of the leapfrog"),
    (["-n", "64", "--gravity", "tree", "--backend", "abacus"], "abacus"),
    (["--config", "bad_gravity.toml"], "gravity: expected one of direct, tree"),
    (["--config", "bad_theta.toml"], "theta: expected a number"),
    (["--resume", "done", "--gravity", "direct"], "--gravity cannot be given with it"),
    (["--resume", "done", "--gravity", "tree"], "--gravity cannot be given with it"),
    (["--resume", "done", "--theta", "0.3"], "--theta cannot be given with it"),
])
def test_tree_mistakes_are_one_line_naming_the_option(workdir, capsys, args, message):
    code, out, err = run_main(capsys, "run", *args)
    assert code == 2, out
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], err
    assert lines[0].startswith("gravpipe run: error:")


def test_resume_of_a_tree_run_keeps_gravity_and_theta(workdir, capsys):
    code, stdout, err = run_main(capsys, "run", "--resume", "done", "--t-end", "1/32")
    assert code == 0, err
    assert "gravity tree (theta 0.6), leapfrog" in stdout


def test_unknown_gravity_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--gravity", "barnes-hut"])
    assert exc.value.code == 2
    assert "--gravity" in capsys.readouterr().err


def test_tree_runs_in_double_precision_as_the_help_says(capsys):
    # the help once said "mixed only" for the tree; the tree's list kernels take double too
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "mixed only" not in help_text and "tree's list kernels" in help_text
    code, stdout, err = run_main(capsys, "run", "-n", "200", "--gravity", "tree", "--precision", "double",
                                 "--t-end", "1/64", "--no-progress")
    assert code == 0, err
    assert "precision double" in stdout


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 6 MiB tmpfs: a disk that fills up for real (ENOSPC). Skipped where mounting is not
    allowed (not root, a container without CAP_SYS_ADMIN)."""
    import subprocess

    where = tmp_path / "disk"
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(where)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def test_an_out_of_core_run_on_a_full_disk_ends_in_one_line_and_keeps_its_checkpoints(tmp_path, small_tmpfs):
    """The run's folder on a disk that fills up: the checkpoint that does not fit ends the run
    with one line (it ended in ~100 lines of h5py tracebacks and SIGSEGV); those before it
    are whole and the run resumes from them."""
    import shutil
    import subprocess
    import sys

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = small_tmpfs / "run"
    args = ["run", "--gravity", "tree", "-n", "20000", "--memory-budget", "16MiB", "--page-bytes", "4KiB",
            "--scratch", str(scratch), "--threads", "1", "--t-end", "1/4", "--checkpoint-every", "1/64",
            "--out", str(out), "--no-progress"]
    r = subprocess.run([sys.executable, "-m", "gravpipe.cli", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.count("\n") == 1 and "cannot write: disk full" in r.stderr, r.stderr[-3000:]
    assert list(scratch.iterdir()) == []
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary file left
    kept = tmp_path / "kept"
    shutil.copytree(out, kept)
    r = subprocess.run([sys.executable, "-m", "gravpipe.cli", "run", "--resume", str(kept), "--t-end", "1/16",
                        "--scratch", str(scratch), "--no-progress"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_a_full_scratch_disk_at_the_start_is_one_line(tmp_path):
    """The scratch file refused its pages (ulimit -f here, ENOSPC on a full disk): the
    StoreError's line (file, page, reason), exit 2, not a 25-30-line traceback."""
    import resource
    import signal
    import subprocess
    import sys

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, as ENOSPC on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (100 * 1024, 100 * 1024))

    r = subprocess.run([sys.executable, "-m", "gravpipe.cli", "run", "--gravity", "tree", "-n", "20000",
                        "--memory-budget", "16MiB", "--scratch", str(tmp_path), "--t-end", "1/64", "--no-progress"],
                       capture_output=True, text=True, timeout=120, preexec_fn=small_files)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr[-3000:]
    assert r.stderr.startswith("gravpipe run: error: scratch file ") and "File too large (EFBIG)" in r.stderr
    assert list(tmp_path.iterdir()) == []  # the scratch file removed


def test_a_corrupt_page_ends_the_run_in_one_line(capsys, monkeypatch):
    """A page whose checksum does not match (a flipped bit on the scratch disk): the
    ChecksumError's line, exit 2."""
    from gravpipe.errors import ChecksumError
    from gravpipe.simulation import Simulation

    def flipped(self, *args, **kwargs):
        raise ChecksumError("scratch file /scratch/gravpipe-scratch-1-x: page 7 read back with CRC32C 0x1 "
                            "instead of 0x2 (corrupt on disk; not used)", "/scratch/gravpipe-scratch-1-x", 7)

    monkeypatch.setattr(Simulation, "evolve", flipped)
    code, _, err = run_main(capsys, "run", *TREE_RUN, "--t-end", "1/64", "--no-progress")
    assert code == 2 and err.count("\n") == 1 and "page 7 read back" in err, err


def test_theta_where_the_mac_means_nothing_is_refused_and_the_help_says_so(capsys):
    code, _, err = run_main(capsys, "run", *TREE_RUN, "--theta", "5", "--t-end", "1/64")
    assert code == 2 and err.count("\n") == 1 and "theta: 5.0 is beyond 1.1547 (2/sqrt(3))" in err, err
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "at most 2/sqrt(3) = 1.1547" in " ".join(capsys.readouterr().out.split())
