"""One line for an out-of-core step in the A/B scripts beside this one (imported by them:
they run as ``python benchmarks/ooc/NAME.py``, which puts this folder on the path)."""
import resource

from gravpipe.bench.ooc import DATA_BYTES_PER_PARTICLE


def budget(n: int, fraction: float = 0.1) -> int:
    """Bytes of a budget that is ``fraction`` of n particles' data, as the ratio bench sizes it."""
    return int(fraction * DATA_BYTES_PER_PARTICLE * n)


def usage() -> tuple[float, int]:
    """CPU seconds (user + system) and context switches of the process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_nvcsw + r.ru_nivcsw


def step_line(label: str, st, stats_before: dict, stats_after: dict, usage_before: tuple[float, int],
              usage_after: tuple[float, int]) -> str:
    """The step's time, walk and sort, the CPU and context switches between the two usages,
    and the store's stalls and bytes read between the two stats."""
    cpu, switches = usage_after[0] - usage_before[0], usage_after[1] - usage_before[1]
    stalls = stats_after["stall_seconds"] - stats_before["stall_seconds"]
    read = (stats_after["bytes_read"] - stats_before["bytes_read"]) / 2**30
    return (f"{label}: step {st.total:.2f} s, walk {st.walk_forces:.2f} s, sort {st.sort:.2f} s, cpu {cpu:.2f} s, "
            f"context switches {switches}, stalls {stalls:.2f} thread-s, read {read:.2f} GiB, "
            f"cell cache {st.cell_cache_bytes / 2**20:.1f} MiB")
