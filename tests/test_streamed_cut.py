"""streamed_splitters (gravpipe.parallel.streamed_cut) against balanced_splitters
(gravpipe.parallel.domain): the same uint64 splitters, bit for bit, from blocks streamed
one at a time.

- In one process: MPI.COMM_SELF (P = 1: no splitters), and a communicator of P ranks
  whose other ranks hold nothing (its Allreduce adds nothing), on random keys with many
  duplicates, zero costs, keys at both ends of the range and costs up to 2**40; the
  passes over the blocks (4 at 16 bits a round); bad blocks and blocks() that changes
  between calls raise ValueError.
- Under ``mpiexec -n 2`` and ``-n 3``: this file run as a script (``main``), every rank
  holding a share (the last none) in uneven blocks; equal to balanced_splitters on every
  rank, the same on every rank; a bad block on one rank raises on every rank.

The MPI part is skipped when mpi4py or mpiexec is missing (``pip install 'gravpipe[mpi]'``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

pytest.importorskip("mpi4py")
from mpi4py import MPI  # noqa: E402

from gravpipe.parallel.domain import KEY_BITS, balanced_splitters  # noqa: E402
from gravpipe.parallel.streamed_cut import streamed_splitters  # noqa: E402

TOP = (1 << KEY_BITS) - 1  # the largest curve key
SCENARIOS = ("spread", "duplicates", "small_costs", "edges", "zero_cost", "one_heavy", "beyond")


# ---- particles and blocks ------------------------------------------------------------------

def particles(scenario: str, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """keys uint64 (n,) and cost int64 (n,) of one rank for a scenario."""
    cost = rng.integers(0, 1 << 40, n, dtype=np.int64)
    cost[rng.random(n) < 0.3] = 0  # many particles that cost nothing
    if scenario == "spread":
        keys = rng.integers(0, TOP, n, dtype=np.uint64, endpoint=True)
        keys[: n // 3] = keys[rng.integers(0, max(n // 3, 1), n // 3)]  # repeated keys
    elif scenario == "duplicates":  # a few keys, the same on every rank: cuts fall on them
        keys = np.array([0, 5, 1 << 40, 1 << 62, TOP], np.uint64)[rng.integers(0, 5, n)]
    elif scenario == "small_costs":  # targets land exactly on prefix sums, zero costs after
        keys = rng.integers(0, 1 << 20, n, dtype=np.uint64) << np.uint64(40)
        cost = rng.integers(0, 3, n, dtype=np.int64)
    elif scenario == "edges":  # next to 0 and to 2**63 - 1
        near = rng.integers(0, 40, n).astype(np.uint64)
        keys = np.where(rng.random(n) < 0.5, near, np.uint64(TOP) - near)
    elif scenario == "zero_cost":
        keys, cost = rng.integers(0, TOP, n, dtype=np.uint64), np.zeros(n, np.int64)
    elif scenario == "one_heavy":  # one particle carries (nearly) all the cost
        keys, cost = rng.integers(0, TOP, n, dtype=np.uint64), rng.integers(0, 2, n)
        if n:
            cost[n // 2] = 1 << 40
    elif scenario == "beyond":  # keys above the curve's range still count in the total
        keys = rng.integers(0, np.iinfo(np.uint64).max, n, dtype=np.uint64, endpoint=True)
    else:
        raise ValueError(scenario)
    return keys, cost.astype(np.int64)


def uneven_blocks(keys: np.ndarray, cost: np.ndarray, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    """The particles cut at random places into blocks of uneven sizes, some empty."""
    cuts = np.sort(rng.integers(0, len(keys) + 1, rng.integers(0, 6)))
    edges = np.concatenate(([0], cuts, [len(keys)]))
    return [(keys[a:b], cost[a:b]) for a, b in zip(edges[:-1], edges[1:])]


class Stream:
    """blocks(): a fresh iterator over fixed blocks each call, counting the calls (passes)."""

    def __init__(self, blocks: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.blocks, self.passes = blocks, 0

    def __call__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        self.passes += 1
        return iter(self.blocks)


class LonelyComm:
    """P ranks of which only this one holds particles: an Allreduce sums nothing more."""

    def __init__(self, size: int) -> None:
        self.size = size

    def Get_size(self) -> int:  # noqa: N802 - mpi4py's name
        return self.size

    def Get_rank(self) -> int:  # noqa: N802
        return 0

    def Allreduce(self, send: Any, recv: Any, op: Any = None) -> None:  # noqa: N802
        if send is not MPI.IN_PLACE:
            np.copyto(recv, send)


def both(comm: Any, blocks: list[tuple[np.ndarray, np.ndarray]], bits: int = 16) -> tuple[np.ndarray, np.ndarray, int]:
    """(streamed_splitters, balanced_splitters on the concatenation, passes made)."""
    stream = Stream(blocks)
    got = streamed_splitters(comm, stream, bits=bits)
    keys = np.concatenate([k for k, _ in blocks]) if blocks else np.empty(0, np.uint64)
    cost = np.concatenate([c for _, c in blocks]) if blocks else np.empty(0, np.int64)
    return got, balanced_splitters(comm, keys, cost), stream.passes


# ---- in one process --------------------------------------------------------------------------

def test_one_rank_has_no_splitters():
    rng = np.random.default_rng(1)
    keys, cost = particles("spread", rng, 500)
    got, want, passes = both(MPI.COMM_SELF, uneven_blocks(keys, cost, rng))
    assert got.dtype == np.uint64 and got.shape == (0,) and np.array_equal(got, want)
    assert passes == 1  # the one pass that checks the blocks


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("ranks", [2, 3, 7, 64, 100])
def test_matches_balanced_splitters_bit_for_bit(scenario, ranks):
    rng = np.random.default_rng([ranks, SCENARIOS.index(scenario)])
    for n in (0, 1, 37, 4000):
        keys, cost = particles(scenario, rng, n)
        got, want, passes = both(LonelyComm(ranks), uneven_blocks(keys, cost, rng))
        assert got.dtype == np.uint64 and got.shape == (ranks - 1,)
        assert np.array_equal(got, want), (scenario, ranks, n, got, want)
        if cost.sum() >= ranks and ranks <= 64:  # some target > 0
            assert passes == 4  # 64 key bits, 16 a round


@pytest.mark.parametrize("bits", [1, 3, 7, 13])
def test_any_bits_a_round_give_the_same_cut(bits):
    rng = np.random.default_rng(bits)
    keys, cost = particles("spread", rng, 2000)
    got, want, passes = both(LonelyComm(5), uneven_blocks(keys, cost, rng), bits=bits)
    assert np.array_equal(got, want)
    assert passes == -(-64 // bits)


def test_costs_beyond_float64_integers_stay_exact():
    # key 10 costs 2**61 + 257, just under the median 2**61 + 258: the cut is after key 30.
    # In float64 (spacing 512 there) key 10 would cost 2**61 + 512 and the cut fall after it
    keys = np.array([10, 20, 30], np.uint64)
    cost = np.array([(1 << 61) + 257, 0, (1 << 61) + 260], np.int64)
    got, want, _ = both(LonelyComm(2), [(keys[:1], cost[:1]), (keys[1:], cost[1:])])
    assert np.array_equal(got, want) and got[0] == 31


def test_a_target_equal_to_a_prefix_sum_cuts_after_its_key():
    # cost 1 at keys 0..3, then nothing up to key 99: the median 2 is reached at key 1,
    # not at the zero-cost keys that follow
    keys = np.array([0, 1, 2, 3, 50, 99], np.uint64)
    cost = np.array([1, 1, 1, 1, 0, 0], np.int64)
    got, want, _ = both(LonelyComm(2), [(keys, cost)])
    assert np.array_equal(got, want) and got[0] == 2


def test_bad_blocks_raise():
    comm = LonelyComm(3)
    keys = np.arange(4, dtype=np.uint64)
    with pytest.raises(ValueError, match=r"cost: 3 entries for 4 keys \(block 1\)"):
        streamed_splitters(comm, Stream([(keys, np.ones(4)), (keys, np.ones(3))]))
    with pytest.raises(ValueError, match=r"cost: must be >= 0 \(block 0\)"):
        streamed_splitters(comm, Stream([(keys, np.array([1, -1, 1, 1]))]))
    with pytest.raises(ValueError, match="cost: must be >= 0"):
        streamed_splitters(MPI.COMM_SELF, Stream([(keys, -np.ones(4, np.int64))]))
    with pytest.raises(ValueError, match="bits"):
        streamed_splitters(comm, Stream([(keys, np.ones(4))]), bits=17)


def test_blocks_that_change_between_calls_raise():
    keys, calls = np.arange(100, dtype=np.uint64), []

    def changing() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        calls.append(1)
        yield keys, np.full(100, len(calls), np.int64)  # more cost each pass

    with pytest.raises(ValueError, match="different particles or costs"):
        streamed_splitters(LonelyComm(4), changing)


# ---- under mpiexec ---------------------------------------------------------------------------

@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_under_mpiexec_every_rank_gets_balanced_splitters(ranks):
    from mpi_launch import MPI_ENV, mpiexec

    r = subprocess.run([mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", __file__],
                       env={**MPI_ENV, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "streamed_splitters: all cases agree" in r.stdout, r.stdout + r.stderr


def main() -> None:
    """Under mpiexec: every scenario on every rank's share (the last rank holds none), in
    uneven blocks, at 16 and at 5 bits a round; then a bad block on rank 0 only."""
    comm = MPI.COMM_WORLD
    ranks, me = comm.Get_size(), comm.Get_rank()
    for s, scenario in enumerate(SCENARIOS):
        for n in (1, 3000):
            rng = np.random.default_rng([s, n, me])
            keys, cost = particles(scenario, rng, n if me < ranks - 1 else 0)
            blocks = uneven_blocks(keys, cost, rng)
            for bits in (16, 5):
                got, want, passes = both(comm, blocks, bits)
                check(np.array_equal(got, want), f"{scenario} n={n} bits={bits}: {got} != {want}")
                check(all(np.array_equal(got, g) for g in comm.allgather(got)), f"{scenario}: ranks differ")
                check(passes <= -(-64 // bits), f"{scenario}: {passes} passes")
    keys = np.arange(10, dtype=np.uint64)
    bad = np.full(10, -1 if me == 0 else 1, np.int64)
    try:
        streamed_splitters(comm, Stream([(keys, bad)]))
        check(False, "a bad block on rank 0 was accepted")
    except ValueError as exc:
        expected = "must be >= 0" if me == 0 else "other rank(s) gave bad blocks"
        check(expected in str(exc), f"rank {me}: {exc}")
    comm.Barrier()
    if me == 0:
        print("streamed_splitters: all cases agree", flush=True)


def check(ok: bool, what: str) -> None:
    """An AssertionError naming the case (python -m mpi4py then aborts every rank)."""
    if not ok:
        raise AssertionError(f"rank {MPI.COMM_WORLD.Get_rank()}: {what}")


if __name__ == "__main__":
    main()
