"""The out-of-core particle store (gravpipe.store, cpp/src/store): data round trips bit for
bit through a cache of a few pages (so eviction, write-back and CRC checks really happen),
CRC32C against published vectors and a bitwise reference, corrupt pages, a full disk, the
scratch file's removal, the memory budget, and the PagedParticles accessor under threads."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gravpipe as gp
from gravpipe import _core
from gravpipe.ooc import OutOfCore
from gravpipe.errors import ChecksumError, MemoryBudgetError, StoreError
from gravpipe.store import ParticleStore, from_particles, parse_byte_size

PAGE = 4096  # 512 particles per page: many pages from small sets


def crc32c_bitwise(data: bytes) -> int:
    """CRC32C one bit at a time from the polynomial's definition (independent of both the
    core's table and its SSE4.2 instruction)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


IMPLS = ["portable"] + (["sse4.2"] if _core.crc32c_implementation() == "sse4.2" else [])


def _flip_bits(path: str, offset: int, mask: int) -> None:
    """XOR the byte at ``offset`` of ``path`` with ``mask``, on disk (a corrupted page)."""
    fd = os.open(path, os.O_RDWR)
    try:
        byte = os.pread(fd, 1, offset)
        os.pwrite(fd, bytes([byte[0] ^ mask]), offset)
        os.fsync(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("impl", IMPLS)
def test_crc32c_known_vectors(impl):
    def crc(b: bytes) -> int:
        return _core.crc32c(np.frombuffer(b, np.uint8) if b else np.zeros(0, np.uint8), impl)

    assert crc(b"123456789") == 0xE3069283  # the check value of CRC-32C
    assert crc(b"") == 0
    # RFC 3720 (iSCSI) B.4 test vectors
    assert crc(bytes(32)) == 0x8A9136AA
    assert crc(b"\xff" * 32) == 0x62A8AB43
    assert crc(bytes(range(32))) == 0x46DD794E
    assert crc(bytes(range(31, -1, -1))) == 0x113FDB5C


@pytest.mark.parametrize("impl", IMPLS)
def test_crc32c_matches_bitwise_reference_on_odd_lengths_and_offsets(impl):
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 300, dtype=np.uint8)
    for start, length in [(0, 1), (1, 7), (3, 8), (5, 9), (0, 64), (7, 200), (11, 289)]:
        chunk = np.ascontiguousarray(data[start:start + length])
        assert _core.crc32c(chunk, impl) == crc32c_bitwise(chunk.tobytes())


@pytest.mark.parametrize("impl", IMPLS)
def test_crc32c_of_pages_matches_the_bitwise_reference(impl):
    """Inputs long enough for the SSE4.2 version's three interleaved streams (3 KiB blocks
    joined by the zero-update tables), with a tail and an odd start."""
    rng = np.random.default_rng(11)
    data = rng.integers(0, 256, 3 * 1024 * 2 + 200, dtype=np.uint8)
    for start, length in [(0, 3 * 1024), (1, 3 * 1024 + 5), (3, 4096), (0, 3 * 1024 * 2 + 200), (7, 6000)]:
        chunk = np.ascontiguousarray(data[start:start + length])
        assert _core.crc32c(chunk, impl) == crc32c_bitwise(chunk.tobytes())
    page = rng.integers(0, 256, 1 << 20, dtype=np.uint8)  # a 1 MiB page: the two versions agree
    assert _core.crc32c(page, impl) == _core.crc32c(page, "portable")


def test_page_size_follows_the_budget():
    """~1024 frames in the budget, a power of two between 4 KiB and 1 MiB: 64 KiB at a budget
    of 1/10 of N = 1e7 (the size measured 10x faster than 1 MiB there), 1 MiB at 4 GiB."""
    from gravpipe.store import page_bytes_for_budget
    assert page_bytes_for_budget(96_000_000) == 64 * 1024
    assert page_bytes_for_budget("4GiB") == 1 << 20
    assert page_bytes_for_budget("64GiB") == 1 << 20
    assert page_bytes_for_budget("1MiB") == 4096
    assert page_bytes_for_budget("48MiB") == 32 * 1024


def test_parse_byte_size():
    assert parse_byte_size("4GiB") == 4 * 2 ** 30
    assert parse_byte_size("512 MiB") == 512 * 2 ** 20
    assert parse_byte_size("1.5GB") == 1_500_000_000
    assert parse_byte_size("64k") == 65536
    assert parse_byte_size("2gib") == 2 * 2 ** 30
    assert parse_byte_size(4096) == 4096
    assert parse_byte_size("4096") == 4096
    for bad in ["4 parsecs", "", "GiB", "-1", "1.2.3MiB"]:
        with pytest.raises(ValueError, match="byte size"):
            parse_byte_size(bad)


def small_store(tmp_path, n, **kw) -> ParticleStore:
    """A store whose cache is the fewest frames that work (a handful of pages)."""
    kw.setdefault("threads", 2)
    kw.setdefault("read_ahead", 2)
    budget = ParticleStore.least_budget(n, PAGE, read_ahead=kw["read_ahead"], threads=kw["threads"])
    return ParticleStore(tmp_path, n, memory_budget=budget + 3 * PAGE, page_bytes=PAGE, **kw)


def cold_body_store(tmp_path, pos, mass, threads: int, read_ahead: int) -> ParticleStore:
    """A store of 8 cached pages holding ``pos`` and ``mass``, every page evicted to the file
    and the counters reset: the next reads all come from the file."""
    s = ParticleStore(tmp_path, len(mass), memory_budget="64MiB", cache_bytes=8 * PAGE, page_bytes=PAGE,
                      threads=threads, read_ahead=read_ahead)
    s.write("pos", 0, pos)
    s.write("mass", 0, mass)
    s.evict_all()
    s.reset_stats()
    return s


@pytest.mark.parametrize("eviction", ["clock", "lru"])
def test_round_trip_bit_for_bit_through_a_few_pages(tmp_path, eviction):
    n = 20_000
    rng = np.random.default_rng(1)
    pos, vel, mass = rng.normal(size=(n, 3)), rng.normal(size=(n, 3)), rng.random(n)
    ids = rng.permutation(n).astype(np.int64) * 7 - 3
    with small_store(tmp_path, n, eviction=eviction, extra_fields={"jerk": 3, "t": (1, "f64")}) as s:
        assert s.frames <= 10 < s.pages  # the data cannot stay in memory
        # writes in uneven chunks that straddle pages (read-modify-write of partial pages)
        cuts = np.unique(np.concatenate([[0, n], rng.integers(0, n, 40)]))
        for b, e in zip(cuts[:-1], cuts[1:]):
            s.write("pos", b, pos[b:e])
            s.write("mass", b, mass[b:e])
            s.write("id", b, ids[b:e])
        s.write("vel", 0, vel)
        s.write("jerk", 0, -vel)
        for b, e in [(0, n), (0, 1), (n - 1, n), (511, 513), (4000, 13_000), (n - 700, n)]:
            assert np.array_equal(s.read("pos", b, e), pos[b:e])
            assert np.array_equal(s.read("mass", b, e), mass[b:e])
            assert np.array_equal(s.read("id", b, e), ids[b:e])
            assert np.array_equal(s.read("jerk", b, e), -vel[b:e])
        assert s.read("id", 0, n).dtype == np.int64
        s.evict_all()
        s.reset_stats()
        assert np.array_equal(s.read("vel", 0, n), vel)  # every page from the file
        st = s.stats()
    pages_vel = 3 * -(-n // (PAGE // 8))
    assert st["pages_read"] == pages_vel and st["bytes_read"] == pages_vel * PAGE
    assert st["checksum_checks"] == st["pages_read"]
    assert st["misses"] > 0 and st["evictions"] > 0
    assert st["bytes_swapped"] == st["bytes_read"] + st["bytes_written"]
    assert st["eviction"] == eviction


def test_counters_show_write_back_and_misses(tmp_path):
    n = 10_000
    x = np.arange(n, dtype=np.float64)
    with small_store(tmp_path, n) as s:
        s.write("pot", 0, x)
        st = s.stats()
        per_column = -(-n // (PAGE // 8))
        assert st["misses"] == per_column  # every page pinned once, none there before
        assert st["pages_written"] == per_column - s.frames  # the evicted ones, written back
        assert st["pages_read"] == 0  # whole-page overwrites are never read first
        s.flush()
        assert s.stats()["pages_written"] == per_column  # every page on disk once
        assert np.array_equal(s.read("pot", 0, n), x)


def test_discarded_field_is_refilled_by_partial_writes_without_reading(tmp_path):
    """A tree evaluation writes its results run by run, many runs a page: after discard the
    pages are filled in zeroed frames, never read back from the file first (pages_read stays
    0), and what was written reads back bit for bit; without discard the same partial writes
    read every page first. A page evicted half-filled (a cache of a handful of frames) is
    written back, checksummed, and read back to be completed: still bit for bit."""
    n, run = 10_000, 300  # runs straddle pages (512 particles a page)
    x = np.random.default_rng(1).normal(size=n)
    with small_store(tmp_path, n) as s:
        s.write("pot", 0, np.ones(n))
        s.evict_all()  # every page of pot in the file, none in memory
        s.reset_stats()
        for b in range(0, n, run):
            s.write("pot", b, x[b:b + run])
        assert s.stats()["pages_read"] > 0  # partial writes of stored pages read them first
        s.evict_all()
        s.reset_stats()
        s._core.discard("pot")
        for b in range(0, n, run):  # each page filled over two or three writes
            s.write("pot", b, 2 * x[b:b + run])
        st = s.stats()
        assert st["pages_read"] == 0 and st["bytes_read"] == 0 and st["checksum_checks"] == 0
        assert st["pages_written"] > 0  # the cache is a handful of pages: filled pages went out
        assert np.array_equal(s.read("pot", 0, n), 2 * x)  # read back through the checksums
        assert s.stats()["checksum_checks"] > 0
        # three columns in turn, backwards: pages are evicted half-filled and completed later
        v = np.random.default_rng(2).normal(size=(n, 3))
        s._core.discard("acc")
        for b in reversed(range(0, n, run)):
            s.write("acc", b, v[b:b + run])
        s.evict_all()
        assert np.array_equal(s.read("acc", 0, n), v)


def test_discard_leaves_other_fields_and_their_checksums_alone(tmp_path):
    """Discarding one field drops none of another's pages: a flipped bit in another field's
    page is still caught on its next read."""
    n = 8192
    pos = np.random.default_rng(4).normal(size=(n, 3))
    with small_store(tmp_path, n) as s:
        s.write("pos", 0, pos)
        s.write("pot", 0, np.arange(n, dtype=np.float64))
        s.evict_all()
        page = s.page_of("pos", 0, 100)
        _flip_bits(s.path, page * PAGE + 7, 0x01)
        s._core.discard("pot")
        s.write("pot", 0, np.zeros(n))
        with pytest.raises(ChecksumError):
            s.read("pos", 0, n)
        assert np.array_equal(s.read("pot", 0, n), np.zeros(n))


def test_flipped_bit_on_disk_names_the_page_and_no_data_is_returned(tmp_path):
    n = 8192
    pos = np.random.default_rng(3).normal(size=(n, 3))
    vel = np.random.default_rng(4).normal(size=(n, 3))
    with small_store(tmp_path, n) as s:
        s.write("pos", 0, pos)
        s.write("vel", 0, vel)
        s.evict_all()  # flushed and out of memory: the next read is from the file
        # a column's page: 512 particles of vel's y
        page = s.page_of("vel", 1, 5000)
        _flip_bits(s.path, page * PAGE + 123, 0x10)
        with pytest.raises(ChecksumError, match=rf"page {page} \(field 'vel' component 1, particles 4608\.\.5119\)") as e:
            s.read("vel", 0, n)
        assert e.value.page == page and e.value.path == s.path
        assert isinstance(e.value, StoreError)
        # the other pages are intact and still read; the bad one fails every time
        assert np.array_equal(s.read("vel", 0, 4608), vel[:4608])
        with pytest.raises(ChecksumError):
            s.read("vel", 5000, 5001)
        # a page of the group "body": x, y, z and m of 128 particles, named for both fields
        page = s.page_of("pos", 1, 5000)
        assert page == s.page_of("mass", 0, 5000)
        _flip_bits(s.path, page * PAGE + 123, 0x10)
        with pytest.raises(ChecksumError, match=rf"page {page} \(fields 'pos', 'mass' \(one page\), particles 4992\.\.5119\)"):
            s.read("mass", 0, n)
        assert np.array_equal(s.read("pos", 0, 4992), pos[:4992])


@pytest.mark.parametrize("io_mode", ["auto", "buffered"])
def test_pages_prefetched_together_hold_their_bytes_and_a_corrupt_one_is_left_to_the_reader(tmp_path, io_mode):
    """ParticleStore.prefetch loads many pages with their reads in flight together (runs of
    neighbouring pages joined into one request): each lands in its own frame with its own
    bytes, the loads count as read and prefetched, and a page that fails its checksum is
    left out, so that the read which wants it raises ChecksumError naming it."""
    n = 16384
    rng = np.random.default_rng(11)
    vel = rng.normal(size=(n, 3))
    with ParticleStore(tmp_path, n, memory_budget="64MiB", cache_bytes=256 * PAGE, page_bytes=PAGE,
                       threads=2, read_ahead=0, io=io_mode) as s:
        s.write("vel", 0, vel)
        s.evict_all()
        s.reset_stats()
        if s.io_mode == "direct":
            assert s.batched_reads.startswith(("Linux AIO, 16 deep", "one page at a time (io_setup refused"))
        else:
            assert s.batched_reads.startswith("one page at a time (the file is buffered")
        # vel's x and y of particles 0..4095 (runs of 8 neighbouring pages), and scattered z pages
        pages = [s.page_of("vel", c, 512 * k) for c in (0, 1) for k in range(8)]
        pages += [s.page_of("vel", 2, 512 * k) for k in (1, 5, 9, 30)]
        bad = s.page_of("vel", 1, 512 * 3)
        _flip_bits(s.path, bad * PAGE + 77, 0x01)
        assert s.prefetch(pages[::-1]) == 1  # any order; the corrupt page fails alone
        st = s.stats()
        assert st["prefetched"] == len(pages) - 1 and st["pages_read"] == len(pages) - 1
        assert st["checksum_checks"] == len(pages) - 1 and st["bytes_read"] == (len(pages) - 1) * PAGE
        assert s.prefetch(pages) == 1  # resident ones are skipped; the bad one is read again
        for wrong in (-1, s.pages):
            with pytest.raises(ValueError, match=rf"prefetch of page {wrong} outside the scratch file's pages"):
                s.prefetch([pages[0], wrong])
        assert s.stats()["prefetched"] == len(pages) - 1
        # pages 0-2 and 4-7 of x and y came from the prefetched frames, and z's pages 1 and 5
        assert np.array_equal(s.read("vel", 0, 1536), vel[:1536])
        assert np.array_equal(s.read("vel", 2048, 4096), vel[2048:4096])
        assert s.stats()["prefetch_hits"] == 2 * 7 + 2
        with pytest.raises(ChecksumError, match=rf"page {bad} \(field 'vel' component 1, particles 1536\.\.2047\)"):
            s.read("vel", 1536, 1537)
        assert np.array_equal(s.read("vel", 4608, 5120), vel[4608:5120])
        assert np.array_equal(s.read("vel", 15360, 15872), vel[15360:15872])
        # a page the file no longer reaches (truncated by someone else): a short read, left out
        s.evict_all()
        last = s.page_of("vel", 2, n - 1)
        os.truncate(s.path, last * PAGE + PAGE // 2)
        assert s.prefetch([last - 1, last]) == 1
        with pytest.raises(StoreError, match=rf"reading page {last} failed: the file ends early"):
            s.read("vel", n - 1, n)


@pytest.mark.parametrize("io_mode", ["auto", "buffered"])
def test_columns_written_through_fill_whole_pages_from_staging_and_leave_the_rest_to_the_cache(tmp_path, io_mode):
    """ParticleStore.write_through (the sort's permute output): the pages a range covers whole
    go straight to the file, a few at a time through the staging pages, when the columns
    given fill them (vel's, each its own page; pos with mass, the page group "body"); the
    partial pages at the ends, and pos given without mass (whose pages it shares), go
    through the cache. Every value reads back, from the cache and from the file."""
    n = 5000  # not a multiple of any page's particles: the last page is partial
    rng = np.random.default_rng(17)
    vel, pos, mass = rng.normal(size=(n, 3)), rng.normal(size=(n, 3)), rng.uniform(size=n)
    ids = rng.integers(-2**62, 2**62, size=n)
    body_per, col_per = PAGE // 32, PAGE // 8  # 128 and 512 particles a page
    begin, end = 300, 4700
    with ParticleStore(tmp_path, n, memory_budget="64MiB", cache_bytes=64 * PAGE, page_bytes=PAGE,
                       threads=2, read_ahead=0, io=io_mode) as s:
        s.reset_stats()
        s.write_through(begin, {"vel": vel[begin:end], "id": ids[begin:end]}, staging_pages=3)
        whole_col = end // col_per - (begin + col_per - 1) // col_per  # 8 whole pages a column
        assert s.stats()["written_through"] == 4 * whole_col
        s.write_through(begin, {"pos": pos[begin:end], "mass": mass[begin:end]}, staging_pages=2)
        whole_body = end // body_per - (begin + body_per - 1) // body_per
        assert s.stats()["written_through"] == 4 * whole_col + whole_body
        assert np.array_equal(s.read("vel", begin, end), vel[begin:end])
        assert np.array_equal(s.read("id", begin, end), ids[begin:end])
        assert np.array_equal(s.read("pos", begin, end), pos[begin:end])
        assert np.array_equal(s.read("mass", begin, end), mass[begin:end])
        # pos alone leaves the mass slots of its pages to mass: all through the cache
        pos2 = pos[::-1].copy()
        s.write_through(0, {"pos": pos2}, staging_pages=4)
        assert s.stats()["written_through"] == 4 * whole_col + whole_body
        # the whole file, cold: every page checked against its CRC32C
        s.evict_all()
        assert np.array_equal(s.read("pos", 0, n), pos2)
        assert np.array_equal(s.read("mass", begin, end), mass[begin:end])
        assert np.array_equal(s.read("vel", begin, end), vel[begin:end])
        assert np.array_equal(s.read("id", begin, end), ids[begin:end])
        for bad, match in [({"vel": vel[:10], "id": ids[:11]}, "with the count of the other fields"),
                           ({"vel": vel[:10, :2]}, r"takes shape \(count, 3\)")]:
            with pytest.raises(ValueError, match=match):
                s.write_through(0, bad)
        with pytest.raises(ValueError, match="particles"):
            s.write_through(n - 5, {"vel": vel[:10]})


def test_an_eviction_writes_its_dirty_victim_back_with_other_cold_dirty_pages_in_one_batch(tmp_path):
    """On a direct-I/O file, a pin that must evict a dirty page writes it back together with
    up to 15 other dirty pages that are about to give way (cooled ones), their writes in
    flight at once: those stay resident and clean, so the evictions that follow write
    nothing, and every value reads back from the frames and, cold, from the file."""
    per = PAGE // 8  # ids a page
    n = 32 * per
    ids = np.random.default_rng(23).integers(-2**62, 2**62, size=n)
    with ParticleStore(tmp_path, n, memory_budget="64MiB", cache_bytes=32 * PAGE, page_bytes=PAGE,
                       threads=2, read_ahead=0, io="auto") as s:
        if s.io_mode != "direct":
            pytest.skip(f"no O_DIRECT here ({s.stats()['io_detail']}): dirty victims go one at a time")
        assert s.frames == 32
        s.write("id", 0, ids)  # 32 dirty pages fill the cache
        s.cool("id", 0, n)
        s.reset_stats()
        s.read("vel", 0, 1)  # a page of vel's x must come in: one victim, 15 neighbours cleaned with it
        st = s.stats()
        assert st["pages_written"] == 16 and st["pages_read"] == 0  # vel was never written: zeros
        s.read("vel", per, per + 1)  # the next victim was cleaned already: nothing to write
        assert s.stats()["pages_written"] == 16
        s.flush()  # the 16 left dirty
        assert s.stats()["pages_written"] == 32
        assert np.array_equal(s.read("id", 0, n), ids)
        s.evict_all()
        assert np.array_equal(s.read("id", 0, n), ids)  # every page checked against its CRC32C


@pytest.mark.parametrize("io_mode", ["auto", "buffered"])
def test_clean_cold_writes_the_dirty_pages_next_in_line_ahead_of_their_eviction(tmp_path, io_mode):
    """clean_cold (the walk's prefetch thread, when idle) writes back a batch of 16 cold dirty
    pages on a direct-I/O file: they stay resident and clean, so the evictions and the flush
    that follow write nothing more, and every value reads back from the frames and, cold,
    from the file. Pages in use (not cooled) are left alone; a buffered file is left to the
    kernel's write-behind."""
    per = PAGE // 8  # ids a page
    n = 32 * per
    ids = np.random.default_rng(29).integers(-2**62, 2**62, size=n)
    with ParticleStore(tmp_path, n, memory_budget="64MiB", cache_bytes=32 * PAGE, page_bytes=PAGE,
                       threads=2, read_ahead=0, io=io_mode) as s:
        assert s.frames == 32
        s.write("id", 0, ids)  # 32 dirty pages fill the cache, just used: none cold
        s.reset_stats()
        if s.io_mode != "direct":
            assert s.clean_cold() == 0 and s.stats()["pages_written"] == 0
            return
        assert s.clean_cold() == 0 and s.stats()["pages_written"] == 0
        s.cool("id", 0, n)
        assert s.clean_cold() == 16 and s.clean_cold() == 16 and s.clean_cold() == 0
        st = s.stats()
        assert st["pages_written"] == 32 and st["pages_read"] == 0 and st["evictions"] == 0
        s.read("vel", 0, 1)  # a victim: clean already, nothing to write
        s.flush()
        assert s.stats()["pages_written"] == 32
        assert np.array_equal(s.read("id", 0, n), ids)
        s.evict_all()
        assert np.array_equal(s.read("id", 0, n), ids)  # every page checked against its CRC32C


def test_pos_and_mass_share_pages_column_after_column(tmp_path):
    """The page group "body": one page holds x, y, z, m of the same particles, each a
    contiguous column of page_bytes / 32 values, and its bytes on disk are those values."""
    n = 1000
    pos = np.random.default_rng(5).normal(size=(n, 3))
    mass = np.random.default_rng(6).uniform(size=n)
    with small_store(tmp_path, n) as s:
        per = PAGE // 32
        assert s.particles_per_page("pos") == s.particles_per_page("mass") == per
        assert s.particles_per_page("vel") == PAGE // 8
        s.write("pos", 0, pos)
        s.write("mass", 0, mass)
        s.evict_all()
        k = 3 * per + 5  # the 6th particle of the group's 4th page
        page = s.page_of("pos", 0, k)
        assert page == s.page_of("pos", 2, k) == s.page_of("mass", 0, k) == s.page_of("pos", 0, 0) + 3
        raw = np.fromfile(s.path, dtype=np.float64, count=PAGE // 8, offset=page * PAGE)
        want = np.concatenate([pos[3 * per:4 * per, 0], pos[3 * per:4 * per, 1], pos[3 * per:4 * per, 2],
                               mass[3 * per:4 * per]])
        assert np.array_equal(raw, want)
        assert np.array_equal(s.read("pos", 0, n), pos) and np.array_equal(s.read("mass", 0, n), mass)


def test_a_page_group_larger_than_the_cache_moves_each_page_once(tmp_path):
    """Reading or writing pos (three of the four columns of each page of the group) over a
    range of 64 pages with a cache of 8 goes page by page, every component: each page is
    read once (and, for a write, written back once, its masses kept), not once a column."""
    per = PAGE // 32
    n = 64 * per
    rng = np.random.default_rng(9)
    pos, pos2, mass = rng.normal(size=(n, 3)), rng.normal(size=(n, 3)), rng.uniform(size=n)
    with cold_body_store(tmp_path, pos, mass, threads=1, read_ahead=0) as s:
        assert np.array_equal(s.read("pos", 0, n), pos)
        assert s.stats()["pages_read"] == 64
        s.reset_stats()
        s.write("pos", 0, pos2)
        s.evict_all()
        assert s.stats()["pages_read"] == 64 and s.stats()["pages_written"] == 64
        assert np.array_equal(s.read("pos", 0, n), pos2) and np.array_equal(s.read("mass", 0, n), mass)


def test_discarding_one_field_of_a_page_group_keeps_the_others(tmp_path):
    """pos and mass share pages: discarding pos alone must not drop mass (the pages stay);
    discarding both lets the pages go."""
    n = 2000
    pos = np.random.default_rng(7).normal(size=(n, 3))
    mass = np.random.default_rng(8).uniform(size=n)
    with small_store(tmp_path, n) as s:
        s.write("pos", 0, pos)
        s.write("mass", 0, mass)
        s.evict_all()
        s._core.discard("pos")
        assert np.array_equal(s.read("mass", 0, n), mass)
        assert np.array_equal(s.read("pos", 0, n), pos)  # a hint only: the values stayed
        s.evict_all()
        s._core.discard_fields(["pos", "mass"])
        before = s.stats()["bytes_read"]
        s.write("mass", 0, mass)  # partial pages of the group now start from zeroed frames
        assert s.stats()["bytes_read"] == before  # nothing was read back to be overwritten
        assert np.array_equal(s.read("mass", 0, n), mass)
        assert np.array_equal(s.read("pos", 0, n), np.zeros((n, 3)))  # dead values read as zeros here


DISK_FULL_SCRIPT = textwrap.dedent("""
    import os, resource, signal, sys
    import numpy as np
    from gravpipe.store import ParticleStore
    from gravpipe.errors import StoreError
    scratch, checkpoint = sys.argv[1], sys.argv[2]
    before = open(checkpoint, "rb").read()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG instead of a signal
    n = 100_000
    x = np.arange(n, dtype=np.float64)
    try:
        with ParticleStore(scratch, n, memory_budget="1MiB", page_bytes=4096, threads=1, read_ahead=0) as s:
            path = s.path
            limit = (s.page_of("pot", 0, 0) + 64) * 4096  # the 'disk' holds 64 pages of pot
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
            s.write("pot", 0, x[:20_000])           # 40 pages: fits
            s.flush()
            assert (s.read("pot", 0, 20_000) == x[:20_000]).all()
            try:
                s.write("pot", 20_000, x[20_000:])  # does not
                s.flush()
                print("NO ERROR")
            except StoreError as e:
                print("ERROR", e.page, e)
                try:  # the right values or an error, never other values
                    ok = (s.read("pot", 0, 20_000) == x[:20_000]).all()
                    print("EARLIER DATA INTACT" if ok else "EARLIER DATA CHANGED")
                except StoreError as again:  # no clean frame left: the dirty pages cannot go
                    print("EARLIER DATA REFUSED", "EFBIG" in str(again))
                raise
    except StoreError:
        pass
    print("SCRATCH GONE", not os.path.exists(path), os.listdir(scratch))
    print("CHECKPOINT INTACT", open(checkpoint, "rb").read() == before)
""")


def test_disk_full_gives_a_clear_error_and_keeps_checkpoints(tmp_path):
    """What this proves: a write that the file system refuses (here EFBIG from the file size
    limit, RLIMIT_FSIZE, the portable stand-in for a full disk without root; ENOSPC takes the
    same path) raises StoreError naming the file, the page and the reason; data stored before
    still reads back; the scratch file is removed; another file (a checkpoint) is untouched."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    checkpoint = tmp_path / "checkpoint.h5"
    checkpoint.write_bytes(os.urandom(10_000))
    out = subprocess.run([sys.executable, "-c", DISK_FULL_SCRIPT, str(scratch), str(checkpoint)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ERROR" in out.stdout and "NO ERROR" not in out.stdout, out.stdout
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("ERROR"))
    assert "gravpipe-scratch-" in line and "EFBIG" in line and "writing page" in line, line
    assert "EARLIER DATA INTACT" in out.stdout or "EARLIER DATA REFUSED True" in out.stdout, out.stdout
    assert "SCRATCH GONE True []" in out.stdout
    assert "CHECKPOINT INTACT True" in out.stdout


def test_scratch_file_removed_on_exit_on_error_and_on_collection(tmp_path):
    with ParticleStore(tmp_path, 1000, memory_budget="1MiB", page_bytes=PAGE) as s:
        s.write("mass", 0, np.ones(1000))
        assert os.path.exists(s.path) and os.path.dirname(s.path) == str(tmp_path)
    assert os.listdir(tmp_path) == []
    with pytest.raises(RuntimeError, match="boom"):
        with ParticleStore(tmp_path, 1000, memory_budget="1MiB", page_bytes=PAGE) as s:
            s.write("mass", 0, np.ones(1000))
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    s = ParticleStore(tmp_path, 1000, memory_budget="1MiB", page_bytes=PAGE)
    assert len(os.listdir(tmp_path)) == 1
    del s
    gc.collect()
    assert os.listdir(tmp_path) == []
    s = ParticleStore(tmp_path, 1000, memory_budget="1MiB", page_bytes=PAGE)
    s.close()
    assert os.listdir(tmp_path) == [] and s.closed
    with pytest.raises(ValueError, match="closed"):
        s.read("mass", 0, 1)


def test_budget_too_small_names_the_least_budget_that_works(tmp_path):
    n = 100_000
    least = ParticleStore.least_budget(n, PAGE, threads=2)
    with pytest.raises(MemoryBudgetError, match=f"least budget that works is .*{least} bytes") as e:
        ParticleStore(tmp_path, n, memory_budget=least - 1, page_bytes=PAGE, threads=2)
    assert e.value.least_budget == least and e.value.requested == least - 1
    assert isinstance(e.value, ValueError)
    assert os.listdir(tmp_path) == []  # nothing left behind by the failed construction
    with ParticleStore(tmp_path, n, memory_budget=least, page_bytes=PAGE, threads=2) as s:  # exactly enough
        x = np.random.default_rng(0).random(n)
        s.write("mass", 0, x)
        assert np.array_equal(s.read("mass", 0, n), x)
        assert s.stats()["budget_used_bytes"] <= least
    with pytest.raises(MemoryBudgetError, match="least cache that works"):
        ParticleStore(tmp_path, n, memory_budget="1GiB", cache_bytes=PAGE, page_bytes=PAGE, threads=2)


def test_paged_particles_blocks_equal_in_core_blocks_under_threads(tmp_path):
    """Many OpenMP threads read random blocks through PagedParticles (the accessor the tree
    will use) from a cache of a few pages with read-ahead running: every block equals the
    same range of the in-core arrays, which is what InCoreParticles::block returns."""
    n = 30_000
    rng = np.random.default_rng(5)
    pos, mass = rng.normal(size=(n, 3)), rng.random(n)
    with cold_body_store(tmp_path, pos, mass, threads=4, read_ahead=3) as s:
        begins = rng.integers(0, n, 600)
        ends = np.minimum(begins + rng.integers(0, 1500, 600), n)
        x, y, z, m = s.read_blocks(begins, ends, threads=4)
        idx = np.concatenate([np.arange(b, e) for b, e in zip(begins, ends)])
        assert np.array_equal(x, pos[idx, 0]) and np.array_equal(y, pos[idx, 1])
        assert np.array_equal(z, pos[idx, 2]) and np.array_equal(m, mass[idx])
        st = s.stats()
        assert st["misses"] > 0 and st["evictions"] > 0 and st["prefetched"] > 0
        # sequential blocks along the curve: read-ahead finds work and its pages get used
        s.evict_all()
        s.reset_stats()
        b = np.arange(0, n, 256)
        x, _, _, m = s.read_blocks(b, np.minimum(b + 256, n), threads=1)
        assert np.array_equal(x, pos[:, 0]) and np.array_equal(m, mass)
        assert s.stats()["prefetch_hits"] > 0


def test_read_ahead_workers_at_the_fewest_frames_never_deadlock_or_mix_pages(tmp_path):
    """The read-ahead's several workers load hinted pages side by side. In a cache of the
    fewest frames that work (loads in flight count against the prefetch's share, so the
    workers together take at most one frame there), four threads reading random blocks and
    whole sweeps with hints running still get every value right, and the loads finish."""
    per = PAGE // 32
    n = 40 * per + 7
    rng = np.random.default_rng(21)
    pos, mass = rng.normal(size=(n, 3)), rng.uniform(size=n)
    fewest = (4 + 2 + 1) * PAGE  # a frame a thread, two spare, one for the read-ahead
    with ParticleStore(tmp_path, n, memory_budget="4MiB", cache_bytes=fewest, page_bytes=PAGE, threads=4,
                       read_ahead=4) as s:
        s.write("pos", 0, pos)
        s.write("mass", 0, mass)
        for _ in range(3):
            s.evict_all()
            assert np.array_equal(s.read("pos", 0, n), pos)  # a sweep: hints ahead of it
            begins = rng.integers(0, n, 400)
            ends = np.minimum(begins + rng.integers(1, 3 * per, 400), n)
            x, y, z, m = s.read_blocks(begins, ends, threads=4)
            idx = np.concatenate([np.arange(b, e) for b, e in zip(begins, ends)])
            assert np.array_equal(np.stack([x, y, z], axis=1), pos[idx]) and np.array_equal(m, mass[idx])
        st = s.stats()
        assert st["prefetched"] > 0 and st["misses"] > 0


def test_paged_particles_blocks_are_charged_to_the_budget(tmp_path):
    n = 50_000
    with ParticleStore(tmp_path, n, memory_budget="1MiB", page_bytes=PAGE, threads=2) as s:
        with pytest.raises(MemoryBudgetError, match="particle block of 50000 particles"):
            s.read_blocks([0], [n])  # 1.6 MB of copies in a 1 MiB budget


def _mount_type(path) -> str:
    """The file system type of the mount that holds ``path``, from /proc/self/mounts."""
    real, best, kind = os.path.realpath(path), "", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            mount, fstype = line.split()[1:3]
            mount = mount.replace("\\040", " ")
            if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
                best, kind = mount, fstype
    return kind


@pytest.mark.skipif(not os.path.exists("/proc/self/mounts"), reason="needs Linux's /proc/self/mounts")
def test_scratch_in_memory_is_told_apart_and_turns_the_walk_prefetch_off(tmp_path):
    """A scratch directory on tmpfs (/dev/shm) is in memory, one on a device is not (as the
    mount table says); the out-of-core tree's walk prefetch is on by default only for the
    latter, and can still be set by hand."""
    dirs = [tmp_path] + ([d] if os.path.isdir(d := "/dev/shm") and os.access(d, os.W_OK) else [])
    p = gp.ic.plummer(5000, seed=1)
    for d in dirs:
        with OutOfCore.from_particles(p, d, "24MiB", eps=1e-2, threads=1, page_bytes=PAGE) as o:
            in_memory = _mount_type(d) in ("tmpfs", "ramfs")
            assert o.store.in_memory == in_memory
            o.sort()
            o.store.materialize("key")  # the tree below reads the keys' pages, which the sort left out
            q = o.params
            tree = _core.PagedTree(o.store._core, q["eps"], q["G"], q["theta"], q["quadrupole"], q["quad_tol"],
                                   q["n_leaf"], q["n_crit"], q["threads"], q["precision"], q["local_expansion"],
                                   q["isa"])
            assert tree.prefetch_runs == (0 if in_memory else 4)
            tree.prefetch_runs = 2
            assert tree.prefetch_runs == 2
            del tree


def test_io_mode_is_reported(tmp_path):
    with ParticleStore(tmp_path, 1000, memory_budget="1MiB", page_bytes=PAGE, io="buffered") as s:
        assert s.io_mode == "buffered" and "as requested" in s.io_detail
        s.write("mass", 0, np.arange(1000.0))
        s.evict_all()
        assert np.array_equal(s.read("mass", 0, 1000), np.arange(1000.0))
    with ParticleStore(tmp_path, 1000, memory_budget="1MiB", page_bytes=PAGE) as s:
        assert s.io_mode in ("direct", "buffered") and s.io_detail
        assert s.stats()["io_mode"] == s.io_mode
        if s.io_mode == "buffered":  # a refusal is explained, never silent
            assert "O_DIRECT refused" in s.io_detail


@pytest.mark.parametrize("offset", [10**12, -5, 2**63 - 1])  # the last wraps past 2^63, as int64 does
def test_a_derived_field_reads_its_source_plus_the_offset_until_either_is_written(tmp_path, offset):
    """What this proves: a field derived from another (derive_from) reads as that field plus
    the offset, wrapping mod 2^64 as numpy's int64 does, without its own pages being read or
    written (they keep what they held); a write to it, or to its source, first writes the
    derived values into its pages, so nothing the derivation stood for is lost."""
    n = 3000  # six pages a column
    index = np.random.default_rng(3).permutation(n).astype(np.int64)
    with np.errstate(over="ignore"):
        ids = index + np.int64(offset)
    with ParticleStore(tmp_path, n, memory_budget="1MiB", page_bytes=PAGE, extra_fields={"index": (1, "i64")}) as s:
        stale = np.full(n, -1, np.int64)
        s.write("id", 0, stale)  # what the id pages hold: never the derived values
        s.write("index", 0, index)
        s.derive_from("id", "index", offset)
        assert s.derived == {"id": f"index + {offset}"}
        assert np.array_equal(s.read("id", 0, n), ids) and np.array_equal(s.read("id", 700, 1900), ids[700:1900])
        assert np.array_equal(s._core.read("id", 0, n), stale)  # its pages untouched
        s.write("index", 0, index[::-1].copy())  # the source rewritten: the ids were kept first
        assert s.derived == {} and np.array_equal(s.read("id", 0, n), ids)
        s.derive_from("id", "index", offset)
        s.write("id", 100, np.arange(5, dtype=np.int64))  # a part of it rewritten: the rest derived
        want = ids[::-1].copy()
        want[100:105] = np.arange(5)
        assert s.derived == {} and np.array_equal(s.read("id", 0, n), want)
        with pytest.raises(ValueError, match="must be an int64 scalar field, 'mass' is not"):
            s.derive_from("mass", "index", 1)
        with pytest.raises(ValueError, match="'id' cannot be derived from 'pos', which is not i64"):
            s.derive_from("id", "pos", 1)
        with pytest.raises(ValueError, match="'id' cannot be derived from 'id'"):
            s.derive_from("id", "id", 1)


def test_bad_input_gets_clear_errors(tmp_path):
    with ParticleStore(tmp_path, 100, memory_budget="1MiB", page_bytes=PAGE) as s:
        with pytest.raises(ValueError, match="no field 'rho'"):
            s.read("rho", 0, 1)
        with pytest.raises(ValueError, match=r"outside \[0, 100\)"):
            s.write("mass", 90, np.ones(20))
        with pytest.raises(ValueError, match="shape"):
            s.write("pos", 0, np.ones(30))
    with pytest.raises(ValueError, match="multiple of 4096"):
        ParticleStore(tmp_path, 100, memory_budget="1MiB", page_bytes=5000)
    with pytest.raises(ValueError, match=f"directory {tmp_path / 'missing'} does not exist"):
        ParticleStore(tmp_path / "missing", 100, memory_budget="1MiB", page_bytes=PAGE)
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ValueError, match="a_file is not a directory"):
        ParticleStore(tmp_path / "a_file", 100, memory_budget="1MiB", page_bytes=PAGE)
    assert not (tmp_path / "missing").exists()  # never made up from the path
    # the core's own refusal, for what only opening the file finds out
    with pytest.raises(StoreError, match="cannot create a page file") as e:
        _core.ParticleStore(str(tmp_path / "missing"), 100, [("pos", 3, "f64", "")], PAGE, 1 << 20, 0, "clock",
                            "auto", 4, 0)
    assert e.value.path == str(tmp_path / "missing")
    with pytest.raises(ValueError, match="eviction"):
        ParticleStore(tmp_path, 100, memory_budget="1MiB", page_bytes=PAGE, eviction="fifo")


def test_from_particles_stores_curve_order(tmp_path):
    p = gp.ic.plummer(5000, seed=2)
    store, order = from_particles(p, tmp_path, chunk=1234, memory_budget="4MiB", page_bytes=PAGE)
    with store:
        assert np.array_equal(np.sort(order), np.arange(5000))
        assert np.array_equal(order, _core.curve_order(p.pos))
        assert np.array_equal(store.read("pos", 0, 5000), p.pos[order])
        assert np.array_equal(store.read("id", 0, 5000), p.id[order])


@pytest.mark.parametrize("eviction", ["clock", "lru"])
@pytest.mark.parametrize("cooled", [True, False])
def test_cooled_pages_give_way_first(tmp_path, cooled, eviction):
    """Pages a sweep has cooled are evicted before pages in use that were loaded earlier (a
    hint: no value changes). Control: without the hint, the earlier pages go. (A field "u" of
    its own: pos and mass share pages.)"""
    per = PAGE // 8
    n = 4 * per
    with ParticleStore(tmp_path, n, memory_budget="64MiB", cache_bytes=8 * PAGE, page_bytes=PAGE, threads=1,
                       read_ahead=0, eviction=eviction, extra_fields={"u": 1}) as s:
        rng = np.random.default_rng(2)
        mass, pot, ids = rng.random(n), rng.random(n), np.arange(n)
        s.write("u", 0, mass), s.write("pot", 0, pot), s.write("id", 0, ids)
        s.evict_all()
        for _ in range(2):  # in use: CLOCK sets their reference bits, LRU stamps them
            assert np.array_equal(s.read("u", 0, n), mass)  # 4 frames
            assert np.array_equal(s.read("pot", 0, n), pot)    # the other 4: the cache is full
        if cooled:
            s.cool("pot", 0, n)
        assert np.array_equal(s.read("id", 0, n), ids)         # four evictions
        s.reset_stats()
        assert np.array_equal(s.read("u", 0, n), mass)
        assert s.stats()["misses"] == (0 if cooled else 4)
        assert np.array_equal(s.read("pot", 0, n), pot)         # the values are untouched
        with pytest.raises(ValueError, match="pot"):
            s.cool("pot", 0, n + 1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names are read from /proc")
def test_helper_threads_are_named(tmp_path):
    """The store's read-ahead workers name themselves (top -H, perf and /proc show which
    helper took the CPU), and the names go with the store."""
    def names() -> list[str]:
        out = []
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    out.append(f.read().strip())
            except OSError:  # the thread ended meanwhile
                pass
        return out

    with ParticleStore(tmp_path, 1000, memory_budget="64MiB", page_bytes=PAGE, read_ahead=2) as s:
        s.write("mass", 0, np.ones(1000))
        assert names().count("gp-read-ahead") >= 1
    assert "gp-read-ahead" not in names()
