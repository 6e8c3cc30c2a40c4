"""``gravpipe bench storage``: the rows, fits, plot and JSON are produced from real block I/O
(small sizes here; timings are never asserted, only their shape and consistency)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gravpipe import _core
from gravpipe.bench import storage
from gravpipe.cli import main


def test_storage_rows_fits_and_plot(tmp_path):
    disk, shm = tmp_path / "disk", tmp_path / "shm"
    disk.mkdir()
    shm.mkdir()
    rows, info = storage.run(str(disk), str(shm), sizes=[4096, 65536, 262144])
    assert len(rows) == 2 * 2 * 3
    for r in rows:
        assert r["seconds"] > 0 and np.isclose(r["gb_s"], r["bytes"] / r["seconds"] / 1e9)
        assert r["io_mode"] in ("direct", "buffered") and r["io_detail"]
    fitted = storage.fits(rows)
    assert {(f.device, f.direction) for f in fitted} == {(d, k) for d in ("disk", "shm") for k in ("write", "read")}
    assert all(np.isfinite(f.seconds_per_byte) for f in fitted)
    assert info["disk"]["fstype"] != "?" and info["memcpy_gb_s"] > 0
    crc = info["page_checksum"]
    assert crc["implementation"] == _core.crc32c_implementation() and crc["page_bytes"] == 65536
    assert crc["cold_gb_s"] > 0 and crc["hot_gb_s"] > 0
    assert list(disk.iterdir()) == [] and list(shm.iterdir()) == []  # scratch files removed
    png = tmp_path / "s.png"
    storage.plot(rows, fitted, info, str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_bench_storage_writes_json(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["bench", "storage", "--scratch", str(tmp_path), "--sizes", "4096", "8192", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "storage" and len(doc["fits"]) in (2, 4)
    printed = capsys.readouterr().out
    assert "fit disk write" in printed and "page checksum (CRC32C" in printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


def test_page_checksum_timing_refuses_empty_sizes():
    for bad in ((0, 4, 1), (4096, 0, 1), (4096, 4, 0)):
        with pytest.raises(ValueError, match="time_page_checksum"):
            _core.time_page_checksum(*bad)
