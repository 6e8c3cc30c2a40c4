"""Space-filling-curve domains over MPI ranks, balanced by measured cost (Salmon & Warren;
PARNASS, seed 001).

Each rank owns a contiguous range of the Peano-Hilbert curve of one global frame. The ranges are
cut so that the summed cost (a per-particle work measure: the treecode's interactions in
the previous step) is as equal as possible, by a parallel bisection on the key: every
rank counts the cost below candidate keys, one integer vector Allreduce per bisection
step sums them, so the cut is exact to key granularity and the same for any order of the
ranks' sums (integers). Particles then move to their owners with one Alltoallv per dtype
on numpy buffers (no pickled objects).

    lo, hi = global_frame(comm, pos)                 # (3,), (3,) float64
    keys = curve_keys(pos, lo, hi)                   # uint64 (n,)
    splitters = balanced_splitters(comm, keys, cost) # uint64 (P-1,)
    owner = owners(keys, splitters)                  # int64 (n,), rank of each particle
    f64, i64, nbytes = migrate(comm, owner, f64, i64)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gravpipe import _core

#: Curve keys have 21 bits per axis (curve_order.hpp): every key is below 2**KEY_BITS
KEY_BITS = 63


def global_frame(comm: Any, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bounding box (lo (3,), hi (3,), float64) of every rank's positions pos (n,3);
    a rank may hold none. Raises ValueError when no rank holds any."""
    from mpi4py import MPI

    local = np.empty(6)
    if len(pos):
        lo, hi = bounds(pos)
        local[:3], local[3:] = -lo, hi
    else:
        local[:] = -np.inf
    box = np.empty(6)
    comm.Allreduce(local, box, op=MPI.MAX)  # max of -lo: one call for both corners
    if not np.isfinite(box).all():
        raise ValueError("domains: no rank holds a particle (or a position is not finite)")
    return -box[:3], box[3:]


def bounds(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(min (3,), max (3,)) of positions (n >= 1, 3): the same values as pos.min(axis=0) and
    pos.max(axis=0), ~10x faster: numpy reduces an (n, 3) array along axis 0 three numbers
    at a time, so the rows are taken 16 at a time (48 numbers) and folded at the end."""
    flat = np.ascontiguousarray(pos).reshape(-1)
    whole = (len(flat) // 48) * 48
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    if whole:
        wide = flat[:whole].reshape(-1, 48)
        lo, hi = wide.min(axis=0).reshape(16, 3).min(axis=0), wide.max(axis=0).reshape(16, 3).max(axis=0)
    rest = flat[whole:].reshape(-1, 3)
    if len(rest):
        lo, hi = np.minimum(lo, rest.min(axis=0)), np.maximum(hi, rest.max(axis=0))
    return lo, hi


def curve_keys(pos: np.ndarray, lo: np.ndarray, hi: np.ndarray, threads: int = 0) -> np.ndarray:
    """Peano-Hilbert keys (uint64 (n,)) of positions (n,3) in the cube over the global box [lo, hi]."""
    if len(pos) == 0:
        return np.empty(0, np.uint64)
    return _core.curve_keys(np.ascontiguousarray(pos, np.float64), np.ascontiguousarray(lo),
                            np.ascontiguousarray(hi), threads)


def balanced_splitters(comm: Any, keys: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Keys s_1 <= ... <= s_(P-1) (uint64 (P-1,)) that cut the curve into P ranges
    [s_r, s_(r+1)) (s_0 = 0, s_P = 2**63) of nearly equal summed cost.

    keys (n,) uint64 and cost (n,) int64 >= 0 are this rank's particles (any order). s_r is
    the smallest key whose prefix cost (of all ranks' particles with smaller keys) reaches
    r/P of the total: exact to key granularity (particles with one key stay together),
    deterministic and identical on every rank. Collective.
    """
    from mpi4py import MPI

    ranks = comm.Get_size()
    cost = np.asarray(cost, np.int64)
    if len(cost) != len(keys):
        raise ValueError(f"cost: {len(cost)} entries for {len(keys)} keys")
    if (cost < 0).any():
        raise ValueError("cost: must be >= 0")
    # the core's parallel radix sort: stable, as np.argsort(kind="stable"), but O(n)
    order, sorted_keys = _core.sort_keys(np.ascontiguousarray(keys, np.uint64))
    prefix = np.concatenate(([0], np.cumsum(cost[order], dtype=np.int64)))
    total = np.array(prefix[-1], np.int64)
    comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
    targets = (int(total) * np.arange(1, ranks, dtype=object) // ranks).astype(np.int64)
    # invariant: cost below lo < target <= cost below hi (cost below 2**63: the total)
    lo = np.zeros(ranks - 1, np.uint64)
    hi = np.full(ranks - 1, np.uint64(1) << np.uint64(KEY_BITS))
    done = targets <= 0
    hi[done] = 0
    below = np.empty(ranks - 1, np.int64)
    for _ in range(KEY_BITS):
        mid = lo + (hi - lo) // np.uint64(2)
        below[:] = prefix[np.searchsorted(sorted_keys, mid, side="left")]
        comm.Allreduce(MPI.IN_PLACE, below, op=MPI.SUM)
        reached = below >= targets
        hi = np.where(reached & ~done, mid, hi)
        lo = np.where(~reached & ~done, mid, lo)
        if ((hi - lo) <= 1).all():
            break
    return hi


def owners(keys: np.ndarray, splitters: np.ndarray) -> np.ndarray:
    """The rank (int64 (n,)) whose curve range [s_r, s_(r+1)) holds each key."""
    return np.searchsorted(splitters, keys, side="right").astype(np.int64)


def migrate(comm: Any, owner: np.ndarray, f64: np.ndarray, i64: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, int]:
    """Send each row of f64 (n, a) float64 and i64 (n, b) int64 to rank owner[row].

    Returns (f64 (m, a), i64 (m, b), bytes this rank sent to other ranks): the rows this
    rank owns, from rank 0's first, each sender's in its own order. Collective
    (Alltoall of counts, one Alltoallv per dtype).
    """
    recv_f, recv_i, _, sent = exchange_rows(comm, owner, f64, i64)
    return recv_f, recv_i, sent


def exchange_rows(comm: Any, owner: np.ndarray, f64: np.ndarray, i64: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """:func:`migrate`, also returning how many rows each rank sent here: (f64 (m, a),
    i64 (m, b), rows from each rank (ranks,) int64, bytes this rank sent to other ranks)."""
    ranks, me = comm.Get_size(), comm.Get_rank()
    owner = np.asarray(owner, np.int64)
    if len(owner) and (owner.min() < 0 or owner.max() >= ranks):
        raise ValueError(f"owner: ranks must lie in [0, {ranks})")
    # stable, so each destination gets its rows in this rank's order; 16-bit ranks make
    # numpy's stable sort a radix sort (O(n)) instead of a merge sort
    order = np.argsort(owner.astype(np.int16) if ranks < 2**15 else owner, kind="stable")
    send_f, send_i = np.ascontiguousarray(f64[order]), np.ascontiguousarray(i64[order])
    send_counts = np.bincount(owner, minlength=ranks).astype(np.int64)
    recv_counts = np.empty(ranks, np.int64)
    comm.Alltoall(send_counts, recv_counts)
    recv_f = alltoallv(comm, send_f, send_counts, recv_counts)
    recv_i = alltoallv(comm, send_i, send_counts, recv_counts)
    row_bytes = send_f.itemsize * send_f.shape[1] + send_i.itemsize * send_i.shape[1]
    sent = int(send_counts.sum() - send_counts[me]) * row_bytes
    return recv_f, recv_i, recv_counts, sent


def alltoallv(comm: Any, send: np.ndarray, send_rows: np.ndarray, recv_rows: np.ndarray) -> np.ndarray:
    """Alltoallv of the rows of a 2-D array (float64 or int64): send_rows[r] consecutive
    rows go to rank r; returns the rows received, rank 0's first."""
    from mpi4py import MPI

    width = send.shape[1]
    mpi_type = MPI.DOUBLE if send.dtype == np.float64 else MPI.INT64_T
    recv = np.empty((int(recv_rows.sum()), width), send.dtype)
    sc, rc = send_rows * width, recv_rows * width
    sd = np.concatenate(([0], np.cumsum(sc)[:-1])).astype(np.int64)
    rd = np.concatenate(([0], np.cumsum(rc)[:-1])).astype(np.int64)
    comm.Alltoallv([send, (sc, sd), mpi_type], [recv, (rc, rd), mpi_type])
    return recv
