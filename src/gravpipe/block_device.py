"""The operating system's own counters of the block device behind a folder (Linux
``/proc/diskstats``): requests, bytes and busy time as the device saw them.

The out-of-core store counts the pages it moves; these counters say what reached the disk,
the check Salmon & Warren ask for (seed 004: traffic that the kernel's buffer cache absorbs
is not out-of-core traffic), and how busy the device was in each stage of a step (a stage
whose device is busy ~100% of its wall time is bound by the disk, not by the code).

The counters are the whole device's: another process's I/O to the same disk counts too.
A folder with no block device behind it (tmpfs such as /dev/shm, overlay and other
anonymous devices, a system without /proc/diskstats) has none: :meth:`BlockDevice.of_path`
returns None and says nothing is measured rather than guessing.

    dev = BlockDevice.of_path("/scratch")
    before = dev.counters()
    ...                                    # the I/O to measure
    used = dev.counters() - before         # DeviceCounters: reads, read_bytes, busy_seconds, ...
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

#: /proc/diskstats counts sectors of 512 bytes, whatever the device's own block size
#: (Documentation/admin-guide/iostats.rst)
SECTOR_BYTES = 512
DISKSTATS = "/proc/diskstats"


@dataclass(frozen=True)
class DeviceCounters:
    """Cumulative counters of one block device (or their difference over a span)."""
    reads: int              # read requests completed (after the block layer's merges)
    read_bytes: int
    read_seconds: float     # summed over requests: overlapping requests add up
    writes: int             # write requests completed
    write_bytes: int
    write_seconds: float
    busy_seconds: float     # wall time with at least one request in flight (io_ticks)

    def __sub__(self, other: DeviceCounters) -> DeviceCounters:
        return DeviceCounters(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def as_dict(self) -> dict[str, int | float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _line_of(text: str, major: int, minor: int) -> list[str] | None:
    """The fields of device ``major:minor``'s line in the text of /proc/diskstats, or None."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 14 and int(parts[0]) == major and int(parts[1]) == minor:
            return parts
    return None


def parse_diskstats(text: str, major: int, minor: int) -> DeviceCounters:
    """The counters of device ``major:minor`` in the text of /proc/diskstats; ValueError if it
    has no line for that device."""
    parts = _line_of(text, major, minor)
    if parts is None:
        raise ValueError(f"{DISKSTATS}: no line for block device {major}:{minor}")
    # after major, minor, name: reads, merged, sectors, ms; writes, merged, sectors, ms;
    # in flight, io_ticks ms, weighted ms; (newer kernels add discards and flushes)
    v = [int(x) for x in parts[3:14]]
    return DeviceCounters(reads=v[0], read_bytes=v[2] * SECTOR_BYTES, read_seconds=v[3] / 1e3,
                          writes=v[4], write_bytes=v[6] * SECTOR_BYTES, write_seconds=v[7] / 1e3,
                          busy_seconds=v[9] / 1e3)


@dataclass(frozen=True)
class BlockDevice:
    """A block device as /proc/diskstats names it (``vda``, ``nvme0n1p2``, ``dm-0``)."""
    name: str
    major: int
    minor: int

    @classmethod
    def of_path(cls, path: str | os.PathLike) -> BlockDevice | None:
        """The block device that holds ``path`` (a folder or a file), or None where there is
        none to measure: an anonymous device (major 0: tmpfs, overlay, btrfs subvolumes, NFS)
        or no /proc/diskstats line for it (not Linux, a container that hides it)."""
        st = os.stat(path)
        major, minor = os.major(st.st_dev), os.minor(st.st_dev)
        if major == 0:
            return None
        try:
            with open(DISKSTATS) as f:
                text = f.read()
        except OSError:
            return None
        parts = _line_of(text, major, minor)
        return None if parts is None else cls(parts[2], major, minor)

    def counters(self) -> DeviceCounters:
        """The device's counters now (cumulative since boot)."""
        with open(DISKSTATS) as f:
            return parse_diskstats(f.read(), self.major, self.minor)
