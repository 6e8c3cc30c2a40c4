"""Run under ``mpiexec -n 2`` by ``gravpipe bench model``: the ping-pong fit and one
j-parallel direct evaluation and one treecode evaluation over two ranks (one thread each),
through the functions of ``gravpipe.bench.pingpong`` and ``benchmarks/mpi_scaling.py``.
Rank 0 writes the JSON to the path given."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from mpi4py import MPI

import gravpipe
from gravpipe.bench import pingpong


def _scaling():
    path = Path(gravpipe.__file__).resolve().parents[2] / "benchmarks" / "mpi_scaling.py"
    spec = importlib.util.spec_from_file_location("gravpipe_mpi_scaling", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    comm = MPI.COMM_WORLD
    rows = pingpong.run(comm, sizes=[1, 1024, 16384, 262144, 1 << 20, 4 << 20], repeats=10)
    sc = _scaling()
    direct = sc.direct(comm, 8192, 1, 3)
    tree = sc.tree(comm, 60000, 1, 3)
    if comm.Get_rank() == 0:
        f = pingpong.fits(rows)["all"]
        with open(sys.argv[1], "w") as fh:
            json.dump({"pingpong": {"latency_s": f.latency_s, "seconds_per_byte": f.seconds_per_byte, "rows": rows},
                       "direct": direct, "tree": tree}, fh)


if __name__ == "__main__":
    main()
