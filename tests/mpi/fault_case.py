"""Run under ``mpiexec -n P python -m mpi4py fault_case.py RANK LIMIT_MB -- RUN ARGS``:
``gravpipe run`` with RUN ARGS on every rank, rank RANK limited to LIMIT_MB MiB of address
space beyond what it holds at start-up, so that it runs out of memory for real."""

from __future__ import annotations

import resource
import sys

from mpi4py import MPI

from gravpipe import cli


def address_space_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


if __name__ == "__main__":
    rank, limit_mb = int(sys.argv[1]), int(sys.argv[2])
    run_args = sys.argv[sys.argv.index("--") + 1:]
    if MPI.COMM_WORLD.Get_rank() == rank:
        limit = address_space_bytes() + limit_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.exit(cli.main(run_args))
