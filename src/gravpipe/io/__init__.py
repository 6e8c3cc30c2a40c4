"""Snapshots and checkpoints: HDF5 files in the GADGET-4 layout, written atomically.

    from gravpipe import io
    io.write_snapshot("snap_0001.h5", particles, time=1.0, parameters={"eps": 1/256})
    particles, time = io.read("snap_0001.h5")
    snap = io.read_snapshot("ckpt.h5")            # .particles .time .potential .acceleration
                                                  # .parameters .integrator_state
    print(io.describe("snap_0001.h5"))

yt (``yt.load``) and pynbody open the files directly; files from GADGET, AREPO and similar
codes in the same layout are read with ``read_snapshot(path, part_type=k)``.
"""

from gravpipe.io.atomic import atomic_open, atomic_path
from gravpipe.io.fields import FORMAT_VERSION, HEADER_ATTRS, PARTICLE_FIELDS, HeaderAttr, SnapshotField
from gravpipe.io.snapshot import Snapshot, SnapshotError, describe, read, read_snapshot, write_snapshot

__all__ = [
    "FORMAT_VERSION",
    "HEADER_ATTRS",
    "PARTICLE_FIELDS",
    "HeaderAttr",
    "Snapshot",
    "SnapshotError",
    "SnapshotField",
    "atomic_open",
    "atomic_path",
    "describe",
    "read",
    "read_snapshot",
    "write_snapshot",
]
