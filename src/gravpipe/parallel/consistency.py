"""Every rank of a run must run the same code on the same inputs: a check at start-up.

Ranks started from different installs (a stale environment on one node) or given different
initial conditions (a random model drawn without a seed, a file that differs between
nodes) would otherwise run side by side and produce forces from mismatched pieces. Before
the first step every rank computes a fingerprint — gravpipe's version, the C++ core's
build, the run configuration and a hash of the particles — and one small collective
compares them; any difference raises the same ValueError on every rank, naming what
differs and on which ranks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np

from gravpipe.particles import Particles


def particles_digest(p: Particles) -> str:
    """A BLAKE2b digest (hex) of the particles' positions, velocities, masses and ids."""
    h = hashlib.blake2b(digest_size=16)
    for a in (p.pos, p.vel, p.mass, p.id):
        h.update(np.ascontiguousarray(a).view(np.uint8))
    return h.hexdigest()


def check_same_on_all_ranks(comm: Any, facts: Mapping[str, str]) -> None:
    """Raise ValueError on every rank unless every rank passed the same ``facts``
    (name -> short text, e.g. {"gravpipe version": "0.1.0", "initial conditions": digest}).
    Collective: one allgather of the small mapping (pickled: a control message)."""
    everyone: list[dict[str, str]] = comm.allgather(dict(facts))
    problems = []
    for name in everyone[0]:
        values = [f.get(name, "<missing>") for f in everyone]
        if len(set(values)) > 1:
            groups: dict[str, list[int]] = {}
            for rank, v in enumerate(values):
                groups.setdefault(v, []).append(rank)
            parts = [f"ranks {_ranks(r)} have {_short(v)}" for v, r in groups.items()]
            problems.append(f"{name} differs: " + "; ".join(parts))
    if problems:
        error = ValueError("the MPI ranks of this run disagree, so they cannot run one simulation: " +
                           " | ".join(problems))
        error.on_every_rank = True  # raised alike on every rank: said once (gravpipe run)
        raise error


def agreed(comm: Any, work: Callable[[], Any]) -> Any:
    """``work()`` on every rank; when it raised on any, an error on every rank (the rank's
    own, or a ValueError naming the ranks that refused), so that no rank goes on to a
    collective that another never enters. The errors are marked ``known_to_every_rank``;
    one that every rank raised alike (a bad option, a missing file) ``on_every_rank``, the
    refusal on the ranks that did not fail ``said_by_another_rank``. Collective: one small
    allgather."""
    try:
        result, problem = work(), None
    except Exception as exc:  # noqa: BLE001 - re-raised below, on this rank and the others
        result, problem = exc, f"{type(exc).__name__}: {exc}"
    problems = comm.allgather(problem)
    if problem is not None:
        # every rank knows of it (gravpipe run ends them without an abort): said once by
        # rank 0 when every rank raises it alike, else by each rank that raised it
        result.known_to_every_rank = True
        result.on_every_rank = all(p == problem for p in problems)
        raise result
    failed = [f"rank {r}: {p}" for r, p in enumerate(problems) if p is not None]
    if failed:
        error = ValueError("another rank refused its share: " + "; ".join(failed))
        error.known_to_every_rank = error.said_by_another_rank = True
        raise error
    return result


def _ranks(ranks: list[int]) -> str:
    return ",".join(str(r) for r in ranks)


def _short(value: str) -> str:
    """At most 40 characters: its start and its end (where paths differ), "..." between."""
    return value if len(value) <= 40 else value[:15] + "..." + value[-22:]
