"""Runs over many processes with MPI (mpi4py): finding the communicator, the j-parallel
direct summation and the reductions it needs, curve domains balanced by cost
(:mod:`~gravpipe.parallel.domain`), the treecode with locally essential trees
(:mod:`~gravpipe.parallel.essential_forces`), its leapfrog with distributed state
(:mod:`~gravpipe.parallel.domain_leapfrog`: each rank holds its domain) and diagnostics
by reductions (:mod:`~gravpipe.parallel.domain_diagnostics`). Serial runs never import mpi4py.

    mpiexec -n 2 gravpipe run -n 8192 --t-end 1
    mpiexec -n 2 gravpipe run -n 65536 --gravity tree --t-end 1
    mpiexec -n 2 python script.py     # gp.Simulation(..., comm=MPI.COMM_WORLD), or detected
"""

from gravpipe.parallel.comm import is_root, launched_under_mpi, resolve_comm, threads_per_rank
from gravpipe.parallel.j_parallel import JParallelGravity, ordered_sum

__all__ = ["JParallelGravity", "is_root", "launched_under_mpi", "ordered_sum", "resolve_comm", "threads_per_rank"]
