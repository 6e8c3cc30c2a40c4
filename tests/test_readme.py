"""README's Python examples run as written, in order, in one session (as a reader would
paste them), so that a renamed argument or an undefined name in them fails here."""

import re
from pathlib import Path

import pytest

import gravpipe as gp

README = Path(__file__).resolve().parent.parent / "README.md"

# The first example evolves N = 4096 to t = 10 (about a minute on 2 cores); here it runs
# with N = 256, every call, time and cadence unchanged.
SHRINK = ("gp.ic.plummer(4096, seed=1)", "gp.ic.plummer(256, seed=1)")


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.S | re.M)


def needs_cuda(block: str) -> bool:
    return 'backend="cuda"' in block


def test_readme_has_the_examples_this_test_expects():
    blocks = python_blocks()
    assert len(blocks) >= 4
    assert sum(SHRINK[0] in b for b in blocks) == 1, "README's first example changed: revisit SHRINK"
    assert any("tree.forces(points)" in b for b in blocks)


def test_readme_python_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the first example writes run1/
    cuda = gp.available_backends()["cuda"].available
    session: dict = {}
    ran = 0
    for block in python_blocks():
        if needs_cuda(block) and not cuda:
            continue
        if "import cupy" in block:
            pytest.importorskip("cupy")
        exec(compile(block.replace(*SHRINK), str(README), "exec"), session)
        ran += 1
    assert ran >= 3
    assert (tmp_path / "run1" / "checkpoint_0010.h5").is_file()
    assert session["acc"].shape == (16384, 3) and "points" in session
