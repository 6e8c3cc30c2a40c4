"""The block device's own counters (/proc/diskstats) and the out-of-core step's use of them:
what the store says it moved must have reached the disk."""

import os
import warnings

import numpy as np
import pytest

import gravpipe as gp
from gravpipe.block_device import SECTOR_BYTES, BlockDevice, DeviceCounters, parse_diskstats
from gravpipe.errors import MemoryBudgetError, MemoryBudgetWarning
from gravpipe.ooc import OutOfCore, plan_budget

# two lines as a 5.x / 6.x kernel writes them: the old 14 fields and the newer 20
SAMPLE = """\
   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0
 254       0 vda 10324616 103762 1158559250 2551115 2519030 413650 802993552 923334 3 843224 3503145 77110 0 229232160 27952 21244 742
 254       1 vda1 1000 2 8000 40 500 6 4000 30 0 60 70
"""


def test_parse_diskstats_reads_the_named_devices_fields():
    c = parse_diskstats(SAMPLE, 254, 0)
    assert c == DeviceCounters(reads=10324616, read_bytes=1158559250 * SECTOR_BYTES, read_seconds=2551.115,
                               writes=2519030, write_bytes=802993552 * SECTOR_BYTES, write_seconds=923.334,
                               busy_seconds=843.224)
    part = parse_diskstats(SAMPLE, 254, 1)  # a partition has a line of its own
    assert (part.reads, part.read_bytes, part.writes, part.write_bytes, part.busy_seconds) == \
        (1000, 8000 * 512, 500, 4000 * 512, 0.06)
    with pytest.raises(ValueError, match="no line for block device 8:0"):
        parse_diskstats(SAMPLE, 8, 0)


def test_counters_subtract_field_by_field():
    a = DeviceCounters(10, 4096, 1.0, 5, 8192, 0.5, 2.0)
    b = DeviceCounters(4, 1024, 0.25, 1, 4096, 0.25, 0.5)
    assert a - b == DeviceCounters(6, 3072, 0.75, 4, 4096, 0.25, 1.5)
    assert (a - b).as_dict()["write_bytes"] == 4096


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_a_folder_in_ram_has_no_device_to_measure():
    if os.major(os.stat("/dev/shm").st_dev) != 0:
        pytest.skip("/dev/shm is not an anonymous (tmpfs) mount here")
    assert BlockDevice.of_path("/dev/shm") is None


def test_the_step_reports_what_reached_the_disk(tmp_path):
    """An out-of-core step at the least budget, so that it pages (N = 30000): each stage that moved
    pages has the device's counters beside its bytes, and the device saw at least every byte
    the store says it read and wrote (the device's counters are the whole disk's, so others'
    I/O can only add): with direct I/O no buffer cache absorbs the traffic."""
    dev = BlockDevice.of_path(tmp_path)
    if dev is None:
        pytest.skip(f"{tmp_path} has no block device to measure (tmpfs, overlay, ...)")
    n, page = 30000, 4096
    p = gp.ic.plummer(n, seed=3)
    with pytest.raises(MemoryBudgetError) as e:
        plan_budget(n, 1 << 16, page, 2, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MemoryBudgetWarning)  # the least budget: the walk's cache is thin
        o = OutOfCore.from_particles(p, tmp_path, int(e.value.least_budget), eps=1e-2, threads=2, page_bytes=page)
    with o:
        if o.store.io_mode != "direct":
            pytest.skip(f"the scratch is buffered here ({o.store.io_detail}): its reads may be the kernel's cache")
        assert o.scratch_device == dev
        o.forces()
        st = o.step(1 / 256)
        assert st.bytes_read > 0 and st.bytes_written > 0  # the budget made it page
    assert st.device == dev.name and set(st.stage_device) == set(st.stage_bytes)
    device_read = sum(d["read_bytes"] for d in st.stage_device.values())
    device_written = sum(d["write_bytes"] for d in st.stage_device.values())
    assert device_read >= st.bytes_read and device_written >= st.bytes_written
    for d in st.stage_device.values():
        assert d["busy_seconds"] >= 0 and d["reads"] >= 0
    assert np.isfinite(st.total)


def test_a_scratch_in_ram_reports_no_device(tmp_path):
    if not os.path.isdir("/dev/shm") or os.major(os.stat("/dev/shm").st_dev) != 0:
        pytest.skip("no tmpfs /dev/shm here")
    with OutOfCore.from_particles(gp.ic.plummer(5000, seed=1), "/dev/shm", "16MiB", eps=1e-2, threads=1) as o:
        assert o.scratch_device is None
        st = o.forces()
    assert st.device == "" and st.stage_device == {}
