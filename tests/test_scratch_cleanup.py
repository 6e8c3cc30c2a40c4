"""Scratch files left by killed runs are removed by the next store in their folder; the files
of live runs sharing that folder are never touched.

A run killed by SIGKILL cannot remove its scratch files (the store's page file and the
tree's cell file). Each live page file holds an flock, which the kernel drops with its
process; a new store removes the files of its folder whose lock it can take and warns
(StaleScratchWarning) naming them and the pid that made them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

import gravpipe as gp
from gravpipe.errors import MemoryBudgetError, StaleScratchWarning
from gravpipe.ooc import plan_budget
from gravpipe.store import ParticleStore

PAGE = 4096
NAME = re.compile(r"^gravpipe-scratch-(\d+)-[A-Za-z0-9]{6}$")


def files_of(scratch: Path, pid: int) -> set[str]:
    return {p.name for p in scratch.iterdir() if (m := NAME.match(p.name)) and int(m.group(1)) == pid}


def wait_for(proc: subprocess.Popen, path: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, f"no {path} after {timeout} s"
        time.sleep(0.01)


HOLDER = textwrap.dedent("""
    import os, signal, sys
    from gravpipe.store import ParticleStore
    s = ParticleStore(sys.argv[1], 5000, memory_budget="4MiB", page_bytes=4096)
    s.flush()
    print(s.path, flush=True)
    if sys.argv[2] == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    sys.stdin.readline()  # live until told
    s.close()
""")


def test_a_store_removes_the_files_of_dead_processes_only(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    live = subprocess.Popen([sys.executable, "-c", HOLDER, str(scratch), "live"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    live_path = live.stdout.readline().strip()
    dead = subprocess.run([sys.executable, "-c", HOLDER, str(scratch), "die"], capture_output=True, text=True)
    assert dead.returncode == -signal.SIGKILL
    dead_path = dead.stdout.strip()
    others = ["gravpipe-scratch-1-abc", "gravpipe-scratch-x-abcdef", "notes.txt"]  # not page files: kept
    for name in others:
        (scratch / name).write_text("keep")
    assert os.path.exists(dead_path) and os.path.exists(live_path)
    with pytest.warns(StaleScratchWarning) as record:
        store = ParticleStore(scratch, 1000, memory_budget="4MiB", page_bytes=PAGE)
    (message,) = [str(w.message) for w in record]
    dead_pid = int(NAME.match(os.path.basename(dead_path)).group(1))
    assert f"removed 1 stale scratch file of process {dead_pid}, which no longer runs: {dead_path}" in message
    assert not os.path.exists(dead_path)
    assert os.path.exists(live_path) and all((scratch / name).exists() for name in others)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing stale now: no warning
        ParticleStore(scratch, 1000, memory_budget="4MiB", page_bytes=PAGE).close()
    live.communicate("\n", timeout=60)
    assert live.returncode == 0 and not os.path.exists(live_path)
    store.close()
    assert sorted(os.listdir(scratch)) == sorted(others)


def _run_args(scratch: Path, out: Path, t_end: str) -> list[str]:
    """`gravpipe run` of a small out-of-core tree run (one thread), checkpoints every step."""
    with pytest.raises(MemoryBudgetError) as e:
        plan_budget(2000, 1 << 16, PAGE, 1, 16)
    budget = int(e.value.least_budget) + 64 * PAGE
    return [sys.executable, "-m", "gravpipe.cli", "run", "--no-progress", "--gravity", "tree", "-n", "2000",
            "--dt", "0.015625", "--threads", "1", "--memory-budget", str(budget), "--scratch", str(scratch),
            "--page-bytes", str(PAGE), "--t-end", t_end, "--checkpoint-every", "0.015625", "--out", str(out)]


def test_killed_runs_files_go_with_the_next_run_and_a_live_runs_stay(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    a = subprocess.Popen(_run_args(scratch, tmp_path / "a", "8"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    wait_for(a, tmp_path / "a" / "checkpoint_0002.h5")
    b = subprocess.Popen(_run_args(scratch, tmp_path / "b", "8"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    wait_for(b, tmp_path / "b" / "checkpoint_0002.h5")
    left, live = files_of(scratch, a.pid), files_of(scratch, b.pid)
    assert len(left) == 2 and len(live) == 2  # the store's pages and the tree's cells
    a.send_signal(signal.SIGKILL)
    a.wait()
    assert files_of(scratch, a.pid) == left  # a kill removes nothing

    # the next run in the folder: the killed run resumed (its checkpoint names the same scratch)
    newest = sorted((tmp_path / "a").glob("checkpoint_*.h5"))[-1]
    t_end = repr(gp.io.read_snapshot(newest).time + 0.03125)
    r = subprocess.run([sys.executable, "-m", "gravpipe.cli", "run", "--no-progress", "--resume", str(tmp_path / "a"),
                        "--t-end", t_end], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (line,) = [line for line in r.stderr.splitlines() if "StaleScratchWarning" in line]
    assert f"removed 2 stale scratch files of process {a.pid}, which no longer runs" in line
    assert all(str(scratch / name) in line for name in left)
    assert files_of(scratch, a.pid) == set()

    # the live run lost nothing and goes on: two more checkpoints, then SIGTERM ends it cleanly
    assert b.poll() is None and files_of(scratch, b.pid) == live
    done = len(list((tmp_path / "b").glob("checkpoint_*.h5")))
    wait_for(b, tmp_path / "b" / f"checkpoint_{done + 2:04d}.h5")
    b.send_signal(signal.SIGTERM)
    assert b.wait(timeout=120) != 0 and "scratch files removed" in b.stderr.read()
    assert os.listdir(scratch) == []
