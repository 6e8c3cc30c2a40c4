"""manifest.json: written by a run as each file is completed, checked by ``gravpipe verify``."""

from __future__ import annotations

import json
import re

import pytest

from gravpipe.cli import main
from gravpipe.reservoir import manifest


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("res") / "run"
    assert main(["run", "-n", "64", "--t-end", "1/4", "--snap-every", "1/8", "--out", str(out), "--no-progress",
                 "--threads", "1", "--backend", "cpu"]) == 0
    return out


def test_a_run_records_every_file_it_writes(run_dir):
    m = manifest.load(run_dir)
    on_disk = sorted(p.name for p in run_dir.iterdir() if p.name != manifest.MANIFEST_NAME)
    assert sorted(m.files) == on_disk and "diagnostics.csv" in on_disk
    for name, e in m.files.items():
        assert manifest.hash_file(run_dir / name) == e  # the last version of each file
    assert len(m.run["id"]) == 32 and manifest.verify(run_dir) == (len(on_disk), m.total_bytes)


def test_chunks_cover_the_file(tmp_path):
    (tmp_path / "f.bin").write_bytes(b"a" * 10000)
    (tmp_path / "empty").write_bytes(b"")
    m = manifest.new_manifest()
    m.chunk_size = 4096
    (tmp_path / "manifest.json").write_text(m.to_json())
    m = manifest.record(tmp_path, ["f.bin", "empty"])
    assert len(m.files["f.bin"].chunks) == 3 and m.files["empty"].chunks == []
    assert m.chunk_span("f.bin", 2) == (8192, 10000)
    (tmp_path / "f.bin").unlink()
    assert sorted(manifest.record(tmp_path, []).files) == ["empty"]  # entries of removed files go


@pytest.mark.parametrize("fault, words", [
    (lambda p: p.write_bytes(p.read_bytes()[:-1]), "bytes, the manifest says"),
    (lambda p: p.write_bytes(p.read_bytes()[:100] + bytes([p.read_bytes()[100] ^ 1]) + p.read_bytes()[101:]),
     "chunk 0 (bytes 0-"),
    (lambda p: p.unlink(), "missing"),
])
def test_verify_names_the_first_bad_file_and_chunk(run_dir, tmp_path, capsys, fault, words):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    fault(copy / "snapshot_0001.h5")
    with pytest.raises(manifest.ManifestError, match=re.escape(words)):
        manifest.verify(copy)
    assert main(["verify", str(copy)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "snapshot_0001.h5" in err and words in err


@pytest.mark.parametrize("edit, words", [
    (lambda d: d.update(format="x"), "not a gravpipe manifest"),
    (lambda d: d["files"].update({"../etc/passwd": d["files"]["diagnostics.csv"]}), "not a plain path"),
    (lambda d: d["files"].update({"/abs": d["files"]["diagnostics.csv"]}), "not a plain path"),
    (lambda d: d["files"]["diagnostics.csv"].update(size=10 ** 9), "chunk digests for"),
    (lambda d: d["files"]["diagnostics.csv"].update(sha256="zz"), "not a SHA-256"),
])
def test_a_malformed_manifest_is_refused(run_dir, edit, words):
    doc = json.loads((run_dir / "manifest.json").read_text())
    edit(doc)
    with pytest.raises(manifest.ManifestError, match=words):
        manifest.parse(json.dumps(doc))


def test_verify_without_a_manifest(tmp_path, capsys):
    assert main(["verify", str(tmp_path)]) == 2
    assert "no manifest" in capsys.readouterr().err
