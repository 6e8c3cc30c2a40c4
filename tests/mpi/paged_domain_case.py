"""Run under ``mpiexec -n P python -m mpi4py paged_domain_case.py OUT SCRATCH``: the same
treecode run over P ranks twice, once in core (DomainLeapfrog) and once with each rank out
of core under a small budget (PagedDomainLeapfrog); rank 0 saves both end states in id
order (gathered for the comparison only) to OUT (.npz) for tests/test_paged_domain_mpi.py."""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import gravpipe as gp
from gravpipe.parallel.domain import global_frame
from gravpipe.parallel.domain_leapfrog import DomainLeapfrog
from gravpipe.parallel.essential_forces import EssentialTreeForces
from gravpipe.parallel import paged_domain_leapfrog
from gravpipe.parallel.paged_domain_leapfrog import PagedDomainLeapfrog

N, DT, STOPS = 20000, 1 / 64, (3 / 64, 0.06, 0.09)
#: blocks of the passes over a store: several per rank, so that the migration takes rounds
paged_domain_leapfrog.BLOCK = 2999


def by_id(comm, ids, *arrays):
    """Every rank's rows in id order on rank 0 (None elsewhere)."""
    parts = comm.gather((ids, *arrays))
    if comm.rank != 0:
        return None
    ids = np.concatenate([q[0] for q in parts])
    order = np.argsort(ids, kind="stable")
    assert np.array_equal(ids[order], np.arange(N)), "particles lost or duplicated"
    return [np.concatenate([q[k] for q in parts])[order] for k in range(1, len(arrays) + 1)]


def main(out: str, scratch: str) -> None:
    comm = MPI.COMM_WORLD
    p = gp.ic.plummer(N, seed=4)
    b, e = gp.io.file_share(N, comm.rank, comm.size)
    share = {"pos": p.pos[b:e], "vel": p.vel[b:e], "mass": p.mass[b:e], "id": p.id[b:e]}
    src = EssentialTreeForces(comm, eps=1 / 64, G=1.0, threads=1)
    core = DomainLeapfrog(comm, share["pos"], share["vel"], share["mass"], share["id"], forces=src, dt=DT, t0=0.0)
    paged_src = EssentialTreeForces(comm, eps=1 / 64, G=1.0, threads=1)
    paged = PagedDomainLeapfrog(comm, lambda: iter([share]), e - b, forces=paged_src, dt=DT, t0=0.0,
                                memory_budget=(5 << 20) // 2, scratch=scratch, outside_store=512 << 10)
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # the pieces do not fit the 512 KiB kept outside the store: the start-up's are made
        # before their size is known (said); later ones get room from the cell cache
        paged.start()
    transit_warned = any("essential pieces in transit" in str(w.message) for w in caught)
    results, transit = {}, []
    for k, t in enumerate(STOPS):
        core.evolve_to(t)
        paged.evolve_to(t)
        transit.append((paged.last_import.get("transit_bytes", 0), paged.last_import.get("transit_over", 0)))
        got = by_id(comm, core.ids(), core.positions(), core.velocities(), core.accelerations(), core.potentials())
        fields = ["id", "pos", "vel", "acc", "pot"]
        rows = {f: np.concatenate([blk[f] for blk in paged.blocks(fields)]) if paged.n else
                np.empty((0, 3) if f in ("pos", "vel", "acc") else (0,), np.int64 if f == "id" else np.float64)
                for f in fields}
        mine = by_id(comm, rows["id"], rows["pos"], rows["vel"], rows["acc"], rows["pot"])
        if comm.rank == 0:
            for name, a, c in zip(("pos", "vel", "acc", "pot"), got, mine):
                results[f"core_{name}{k}"], results[f"paged_{name}{k}"] = a, c
        assert paged.time == core.time
    # the rows' precise potential: a float64 tree at theta 0.25 over the ranks, against the
    # in-core one (its own frame: within the fine tree's error, not bits)
    paged.diagnostic_potential(0.25)
    fine = EssentialTreeForces(comm, eps=1 / 64, G=1.0, threads=1, theta=0.25, precision="double")
    core_fine = fine.evaluate(core.positions(), core.masses(), global_frame(comm, core.positions())).pot
    rows = {f: np.concatenate([blk[f] for blk in paged.blocks(["id", "pot_check"])]) for f in ("id", "pot_check")}
    got = by_id(comm, core.ids(), core_fine)
    mine = by_id(comm, rows["id"], rows["pot_check"])
    if comm.rank == 0:
        results["core_fine"], results["paged_fine"] = got[0], mine[0]
    counters = comm.gather(paged.io_bytes | {"read_now": paged._store._core.counters()["misses"]
                                             if paged.n else 0})
    transit = comm.gather(transit)
    if comm.rank == 0:
        np.savez(out, **results, transit_warned=transit_warned, transit=np.array(transit), misses=sum(c["read_now"] for c in counters),
                 cuts=paged.cuts, core_cuts=core.cuts, summary=paged.stage_summary())
    paged.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
