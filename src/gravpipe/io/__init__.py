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

A run over P MPI ranks writes multi-file sets (``io.sets``: a folder of P files, one per
rank, written at once and atomically; ``write_share`` when each rank writes the particles it
holds, ``write_share_blocks`` when it holds them block by block (out of core),
``read_share`` for each rank's share of a file or set read block-wise); ``read``,
``read_snapshot`` and ``describe`` take a set's folder or any member as one snapshot.
yt (``yt.load``) and pynbody open the files and the sets directly (the files carry GADGET-4's unit attributes, which pynbody reads; yt
takes them as ``yt.load(path, unit_base=io.unit_base(path))``); files from GADGET, AREPO and similar codes in the same layout are
read with ``read_snapshot(path, part_type=k)``.
"""

from gravpipe.io.atomic import atomic_open, atomic_path
from gravpipe.io.fields import FORMAT_VERSION, HEADER_ATTRS, PARTICLE_FIELDS, HeaderAttr, SnapshotField
from gravpipe.io.snapshot import Snapshot, SnapshotError, write_snapshot
# read_snapshot, read and describe take single files and multi-file sets alike
from gravpipe.io.sets import (Share, ShareHead, describe, file_share, is_set, read, read_share, read_share_blocks,
                              read_snapshot, set_members, unit_base, write_set, write_share, write_share_blocks)
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
    "Share",
    "atomic_open",
    "atomic_path",
    "describe",
    "file_share",
    "is_set",
    "open_blocks",
    "read",
    "read_share",
    "read_share_blocks",
    "ShareHead",
    "read_snapshot",
    "set_members",
    "streamed_snapshot",
    "unit_base",
    "write_set",
    "write_share",
    "write_share_blocks",
    "write_snapshot",
]
