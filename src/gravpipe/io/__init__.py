"""Snapshots and checkpoints: HDF5 files in the GADGET-4 layout, written atomically.

    from gravpipe import io
    io.write_snapshot("snap_0001.h5", particles, time=1.0, parameters={"eps": 1/256})
    particles, time = io.read("snap_0001.h5")
    snap = io.read_snapshot("ckpt.h5")            # .particles .time .potential .acceleration
                                                  # .parameters .integrator_state
    print(io.describe("snap_0001.h5"))

    with io.streamed_snapshot("big.h5", n, time=0.0) as out:   # any N, block by block
        for block in gp.ic.plummer_blocks(n, seed=1):
            out.write(block)
    with io.open_blocks("big.h5") as snap:
        for block in snap.blocks(1 << 20): ...

yt (``yt.load``) and pynbody open the files directly; files from GADGET, AREPO and similar
codes in the same layout are read with ``read_snapshot(path, part_type=k)``.
"""

from gravpipe.io.atomic import atomic_open, atomic_path
from gravpipe.io.fields import FORMAT_VERSION, HEADER_ATTRS, PARTICLE_FIELDS, HeaderAttr, SnapshotField
from gravpipe.io.snapshot import Snapshot, SnapshotError, describe, read, read_snapshot, write_snapshot
from gravpipe.io.stream import BlockReader, BlockWriter, open_blocks, streamed_snapshot

__all__ = [
    "BlockReader",
    "BlockWriter",
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
    "open_blocks",
    "read",
    "read_snapshot",
    "streamed_snapshot",
    "write_snapshot",
]
