"""What machine a benchmark ran on: CPU model, cores, SIMD set, threads, library versions."""

from __future__ import annotations

import os
import platform
from datetime import datetime, timezone

import numpy as np


def cpu_model() -> str:
    """The CPU model string (from /proc/cpuinfo on Linux, platform.processor() elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> dict[str, object]:
    """A JSON-ready description of this machine and build."""
    from gravpipe import __version__, _core
    from gravpipe.backends import resolve_isa

    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "openmp_threads": _core.max_threads(),
        "isa": resolve_isa("auto"),  # what the CPU kernels run (GRAVPIPE_ISA or the best)
        "python": platform.python_version(),
        "numpy": np.__version__,
        "gravpipe": __version__,
        "gpu": gpu_name(),
    }


def gpu_name() -> str | None:
    """CUDA device 0 as the runtime names it, or None when the CUDA backend is unavailable."""
    from gravpipe.backends import available_backends

    cuda = available_backends()["cuda"]
    return cuda.detail.split(": ", 1)[-1] if cuda.available else None
