"""A remote snapshot read in place (fsspec ranged reads + h5py), each chunk touched verified."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from gravpipe import io
from gravpipe.cli import main
from gravpipe.reservoir import remote, serve
from reservoir_support import SMALL_CHUNK, TOKEN, ThreadServer, make_run, token_file


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("remote")
    run = make_run(base / "run", extra_bytes=0)
    s = ThreadServer(serve.make_app(run, TOKEN))
    yield s, run, token_file(base)
    s.close()


def test_read_and_describe_a_remote_snapshot(served, monkeypatch, capsys):
    s, run, tok = served
    monkeypatch.setenv("GRAVPIPE_TOKEN_FILE", str(tok))
    url = f"{s.url}/snapshot_0002.h5"
    local = io.read_snapshot(run / "snapshot_0002.h5")
    snap = io.read_snapshot(url)
    assert snap.time == local.time and np.array_equal(snap.particles.pos, local.particles.pos)
    with remote.open_h5(url) as f:
        assert f["PartType1/Coordinates"][3:5].shape == (2, 3)
    assert main(["info", url, "--token-file", str(tok)]) == 0
    assert "GADGET-layout HDF5 snapshot" in capsys.readouterr().out


def test_a_remote_chunk_that_differs_from_the_manifest_is_refused(served, tmp_path, monkeypatch):
    s, run, tok = served
    src = tmp_path / "src"
    shutil.copytree(run, src)
    data = bytearray((src / "snapshot_0001.h5").read_bytes())
    data[SMALL_CHUNK // 2] ^= 1  # in chunk 0 (16 KiB chunks)
    (src / "snapshot_0001.h5").write_bytes(bytes(data))
    bad = ThreadServer(serve.make_app(src, TOKEN))
    try:
        with pytest.raises(ValueError, match=r"chunk 0 .* does not match the manifest"):
            remote.read_snapshot(f"{bad.url}/snapshot_0001.h5", token_file=str(tok))
    finally:
        bad.close()
