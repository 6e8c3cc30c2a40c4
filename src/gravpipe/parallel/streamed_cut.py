"""Cost-balanced curve splitters for particles that do not fit in memory (out of core).

:func:`gravpipe.parallel.domain.balanced_splitters` sorts every key of a rank at once.
:func:`streamed_splitters` returns the same splitters (bit for bit, on every rank) while
holding one block of a rank's particles at a time: it refines a histogram over the key's
bits. Round one sums each rank's cost into bins of the keys' top ``bits`` bits; one integer
Allreduce gives the global histogram, and each target's cut lies in the first bin whose
cumulative cost reaches it. The next round bins the next ``bits`` bits inside each chosen
bin only, and so on down to single keys: 64 bits / 16 bits a round = 4 passes over the
blocks and 4 Allreduces. Costs are summed in int64 (np.add.at), never in float64, so
the histograms are exact at any cost (np.bincount's float64 weights lose integers above
2**53), and integer sums are the same in any order: every rank picks the same bins.

    def blocks():                                      # a fresh iterator each call
        for path in shard_files:
            with np.load(path) as f:
                yield f["keys"], f["cost"]             # uint64 (m,), int64 (m,)
    splitters = streamed_splitters(comm, blocks)       # uint64 (P-1,)

Memory is O(block + bins), never O(particles): a round holds at most MAX_BINS int64 bins
(32 MiB; below 2**21 ranks). Beyond 65 ranks the cuts fall in more windows than 16 bits a
window leaves room for, so a round resolves fewer bits and there are more rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gravpipe.parallel.domain import KEY_BITS

#: The most int64 bins one round may hold (and Allreduce): 32 MiB
MAX_BINS = 1 << 22
#: Bits the histogram refines a round by default: 64 / 16 = 4 passes
DEFAULT_BITS = 16
#: The search covers every uint64 key (curve keys are below 2**KEY_BITS, but a larger key
#: counts in balanced_splitters' total, so it is binned here too and the results agree)
SEARCH_BITS = 64
#: balanced_splitters' upper end: a cut never lies above 2**KEY_BITS
KEY_END = 1 << KEY_BITS

Blocks = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]


@dataclass
class Windows:
    """The key windows one round bins: window w covers keys [starts[w], starts[w] +
    2**shift), split into 2**bits bins of 2**(shift - bits) keys each."""

    starts: np.ndarray  # uint64 (W,), ascending, each a multiple of 2**shift
    shift: int          # log2 of a window's width in keys, 1..64
    bits: int           # log2 of the bins a window, 1..shift

    @property
    def bin_shift(self) -> int:
        """log2 of a bin's width in keys."""
        return self.shift - self.bits


def streamed_splitters(comm: Any, blocks: Blocks, *, bits: int = DEFAULT_BITS) -> np.ndarray:
    """Keys s_1 <= ... <= s_(P-1) (uint64 (P-1,), P = comm.Get_size()) that cut the curve
    into P ranges of nearly equal summed cost: exactly what
    ``balanced_splitters(comm, keys, cost)`` returns for the concatenation of the blocks.

    blocks() returns a fresh iterator over this rank's particles, in blocks of (keys (m,)
    uint64, cost (m,) int64 >= 0, a work measure such as interactions), the same data on
    every call (a rank may have none). s_r is the smallest key m whose prefix cost (of all
    ranks' particles with keys < m) reaches total*r//P, 0 where that target is <= 0, at
    most 2**KEY_BITS. Reads the blocks once a round (4 rounds at bits = 16 with up to 64
    ranks), holding one block and at most MAX_BINS bins; ``bits`` (1..16) is the number
    of key bits a round resolves. Collective: one int64 Allreduce a round. Bad blocks on
    any rank raise ValueError on every rank.
    """
    if not 1 <= bits <= 16:
        raise ValueError(f"bits: {bits} is not in 1..16")
    ranks = comm.Get_size()
    windows = Windows(np.zeros(1, np.uint64), SEARCH_BITS, bits)
    hist = histogram(comm, blocks, windows)
    total = int(hist.sum())  # the root window holds every key: the global total
    targets = np.array([total * r // ranks for r in range(1, ranks)], np.int64)
    active = np.flatnonzero(targets > 0)  # a target <= 0 cuts at key 0 (balanced_splitters)
    start = np.zeros(ranks - 1, np.uint64)  # each target's window start
    below = np.zeros(ranks - 1, np.int64)   # global cost of the keys below it
    expected = np.full(ranks - 1, total, np.int64)  # the cost its window holds
    window_of = np.zeros(ranks - 1, np.int64)
    while True:
        check_window_totals(hist, window_of[active], expected[active])
        narrow(hist, windows, targets, active, window_of, start, below, expected)
        if windows.bin_shift == 0 or not len(active):
            break
        windows = next_windows(start[active], windows.bin_shift, bits)
        window_of[active] = np.searchsorted(windows.starts, start[active])
        hist = histogram(comm, blocks, windows)
    return cuts(start, active)


def histogram(comm: Any, blocks: Blocks, windows: Windows) -> np.ndarray:
    """The global cost (int64 (W, 2**bits)) of the keys in each bin of each window: one
    pass over blocks() and one Allreduce. A bad block on any rank raises ValueError here
    on every rank (a flag rides in the same Allreduce, so no rank is left waiting)."""
    from mpi4py import MPI

    n_bins = len(windows.starts) << windows.bits
    sums = np.zeros(n_bins + 1, np.int64)  # the last entry counts ranks with bad blocks
    problem = None
    try:
        for number, (keys, cost) in enumerate(blocks()):
            keys, cost = checked_block(keys, cost, number)
            add_block(sums[:n_bins], windows, keys, cost)
    except ValueError as exc:
        problem, sums[-1] = exc, 1
    comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
    if problem is not None:
        raise problem
    if sums[-1]:
        raise ValueError(f"streamed_splitters: {sums[-1]} other rank(s) gave bad blocks")
    return sums[:n_bins].reshape(len(windows.starts), 1 << windows.bits)


def checked_block(keys: Any, cost: Any, number: int) -> tuple[np.ndarray, np.ndarray]:
    """keys as uint64 (m,) and cost as int64 (m,), as balanced_splitters converts them;
    ValueError when their lengths differ or a cost is negative."""
    keys = np.ascontiguousarray(keys, np.uint64).reshape(-1)
    cost = np.asarray(cost, np.int64).reshape(-1)
    if len(cost) != len(keys):
        raise ValueError(f"cost: {len(cost)} entries for {len(keys)} keys (block {number})")
    if (cost < 0).any():
        raise ValueError(f"cost: must be >= 0 (block {number})")
    return keys, cost


def add_block(sums: np.ndarray, windows: Windows, keys: np.ndarray, cost: np.ndarray) -> None:
    """Add one block's cost to the flat bins sums (int64 (W * 2**bits,)) of the windows."""
    # the window at or below each key; a key below every window takes window 0, whose
    # offset then wraps around 2**64 to >= 2**shift and falls outside (no mask needed)
    w = np.maximum(np.searchsorted(windows.starts, keys, side="right") - 1, 0)
    offset = keys - windows.starts[w]
    index = offset >> np.uint64(windows.bin_shift)  # bin within the window
    inside = index < np.uint64(1 << windows.bits)
    flat = (w[inside] << windows.bits) + index[inside].astype(np.int64)
    np.add.at(sums, flat, cost[inside])  # exact int64 sums, unlike bincount's float64


def check_window_totals(hist: np.ndarray, window: np.ndarray, expected: np.ndarray) -> None:
    """ValueError unless each window's cost (summed over its bins) equals the cost its bin
    held in the previous round: blocks() must give the same data on every call."""
    got = hist[window].sum(axis=1)
    if not np.array_equal(got, expected):
        raise ValueError("blocks: a later call of blocks() gave different particles or costs "
                         "(it must give the same data each call)")


def narrow(hist: np.ndarray, windows: Windows, targets: np.ndarray, active: np.ndarray,
           window_of: np.ndarray, start: np.ndarray, below: np.ndarray, expected: np.ndarray) -> None:
    """Move each active target's window (start, below, expected; updated in place) to the
    first bin of its window whose cumulative cost reaches the target.

    Invariant: below < target <= below + the window's cost, so that bin exists; the cut
    then lies in it (the smallest key whose inclusive prefix cost reaches the target)."""
    cumulative = np.cumsum(hist, axis=1)  # int64, exact: no sum exceeds the total
    width = np.uint64(1) << np.uint64(windows.bin_shift)
    for t in active:
        row = cumulative[window_of[t]]
        b = int(np.searchsorted(row, targets[t] - below[t], side="left"))
        before = row[b - 1] if b else 0
        start[t] += np.uint64(b) * width
        below[t] += before
        expected[t] = row[b] - before


def next_windows(starts: np.ndarray, shift: int, bits: int) -> Windows:
    """The distinct windows (width 2**shift) of the active targets for the next round,
    with at most ``bits`` bits a round, fewer when MAX_BINS would be exceeded."""
    distinct = np.unique(starts)
    room = max(MAX_BINS // len(distinct), 2).bit_length() - 1  # floor(log2), >= 1
    return Windows(distinct, shift, min(bits, room, shift))


def cuts(start: np.ndarray, active: np.ndarray) -> np.ndarray:
    """The splitters: key k + 1 for each active target whose window shrank to key k
    (capped at 2**KEY_BITS, balanced_splitters' largest), 0 for the others."""
    out = np.zeros(len(start), np.uint64)
    for t in active:
        out[t] = min(int(start[t]) + 1, KEY_END)  # Python int: k + 1 may pass 2**64 - 1
    return out
