"""``gravpipe bench storage``: write and read time of one block against its size, 4 KiB ..
64 MiB, to a directory on disk and to one in RAM (/dev/shm, our "bulk memory"), and the fit
T = C1 + C2 * bytes (latency C1, inverse bandwidth C2) per device and direction: the Yale
bulk-memory Fig. 1 analogue (seed 002, us/byte against block size), whose constants feed the
performance model of the out-of-core store.

Blocks go through the store's own PageFile (``gravpipe._core.time_block_io``): O_DIRECT where
the file system accepts it, so the kernel's buffer cache does not stand in for the device
(the effect seed 004 warns about); where it is refused the file is buffered and every block
is synced and dropped after its I/O. The mode used is in every row. Each point is the median
over ``repeats`` blocks at successive offsets of a file whose blocks were written once before
(the timed writes overwrite allocated blocks, as the store's write-backs do). A reference is
measured in the same run: memcpy bandwidth of 64 MiB in memory.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from gravpipe import _core
from gravpipe.bench.costfit import fit_cost
from gravpipe.store import check_scratch_dir

DEFAULT_SIZES = [4096 * 2 ** k for k in range(0, 15)]  # 4 KiB .. 64 MiB
BYTES_PER_SIZE = 64 << 20  # data moved per size and direction (repeats = this / size, within bounds)
MIN_REPEATS, MAX_REPEATS = 5, 256
SHM = "/dev/shm"


@dataclass(frozen=True)
class StorageFit:
    device: str              # "disk" or "shm"
    direction: str           # "write" or "read"
    latency_s: float         # C1
    seconds_per_byte: float  # C2
    bandwidth_gb_s: float    # 1 / C2, 1e9 bytes per second
    max_rel_residual: float  # worst |T_fit / T - 1| over the sizes


def repeats_for(size: int) -> int:
    return int(min(MAX_REPEATS, max(MIN_REPEATS, BYTES_PER_SIZE // size)))


def filesystem(path: str) -> dict[str, str]:
    """The mount that holds ``path``: mount point, file system type and device (from
    /proc/mounts, the longest mount point that is a prefix of the real path)."""
    real = os.path.realpath(path)
    best = {"mount": "?", "fstype": "?", "device": "?"}
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype = line.split()[:3]
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best["mount"].strip("?")):
                    best = {"mount": mnt, "fstype": fstype, "device": dev}
    except OSError:
        pass
    return best


def memcpy_gb_s(nbytes: int = 64 << 20, repeats: int = 5) -> float:
    """In-memory copy bandwidth (bytes copied / s, 1e9), the run's reference."""
    a = np.ones(nbytes, np.uint8)
    b = np.empty_like(a)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        np.copyto(b, a)
        times.append(time.perf_counter() - t0)
    return nbytes / float(np.median(times[1:])) / 1e9


def run(disk_dir: str | None = None, shm_dir: str = SHM, sizes: list[int] | None = None, io: str = "auto",
        progress=None) -> tuple[list[dict], dict]:
    """Rows (one per device x direction x size: bytes, seconds (median), gb_s, io_mode, ...)
    and a description of the devices. ``disk_dir`` defaults to a folder
    ./gravpipe-bench-scratch, created and removed here."""
    sizes = sorted(DEFAULT_SIZES if sizes is None else sizes)
    if not sizes or any(s < 4096 or s % 4096 for s in sizes):
        raise ValueError("sizes: need multiples of 4096 bytes (direct I/O alignment)")
    made = None
    if disk_dir is None:
        made = disk_dir = os.path.abspath("gravpipe-bench-scratch")
        os.makedirs(made, exist_ok=False)
    else:
        check_scratch_dir(disk_dir, "--scratch")
    try:
        devices = {"disk": disk_dir}
        if os.path.isdir(shm_dir):
            devices["shm"] = shm_dir
        rows = []
        for device, directory in devices.items():
            for size in sizes:
                if progress:
                    progress(f"{device}: {size} bytes")
                t = _core.time_block_io(directory, size, repeats_for(size), io)
                for direction in ("write", "read"):
                    sec = float(np.median(t[f"{direction}_seconds"]))
                    rows.append({"device": device, "direction": direction, "bytes": size, "seconds": sec,
                                 "gb_s": size / sec / 1e9, "us_per_byte": 1e6 * sec / size,
                                 "repeats": len(t[f"{direction}_seconds"]), "io_mode": t["io_mode"],
                                 "io_detail": t["io_detail"]})
        info = {name: {"directory": d, **filesystem(d),
                       "io_modes": sorted({r["io_detail"] for r in rows if r["device"] == name})}
                for name, d in devices.items()}
        info["memcpy_gb_s"] = memcpy_gb_s()
        info["page_checksum"] = dict(_core.time_page_checksum(), page_bytes=65536)
        return rows, info
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)


def fits(rows: list[dict]) -> list[StorageFit]:
    """T = C1 + C2 * bytes per device and direction (see costfit.fit_cost)."""
    out = []
    for device in dict.fromkeys(r["device"] for r in rows):
        for direction in ("write", "read"):
            sel = [r for r in rows if r["device"] == device and r["direction"] == direction]
            f = fit_cost(np.array([r["bytes"] for r in sel]), np.array([r["seconds"] for r in sel]))
            out.append(StorageFit(device, direction, f.latency_s, f.seconds_per_byte, f.bandwidth_gb_s,
                                  f.max_rel_residual))
    return out


def plot(rows: list[dict], fitted: list[StorageFit], info: dict, path: str) -> None:
    """Left: us per byte against block size (Yale Fig. 1) with the fits; right: GB/s."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4.4))
    for f in fitted:
        sel = [r for r in rows if r["device"] == f.device and r["direction"] == f.direction]
        b = np.array([r["bytes"] for r in sel], float)
        t = np.array([r["seconds"] for r in sel], float)
        fs = info[f.device]["fstype"]
        label = f"{f.device} ({fs}, {sel[0]['io_mode']}) {f.direction}"
        line, = ax[0].loglog(b, 1e6 * t / b, "o", ms=4, label=label)
        ax[0].loglog(b, 1e6 * (f.latency_s + f.seconds_per_byte * b) / b, "-", color=line.get_color(), lw=1,
                     label=f"  fit C1 {1e6 * f.latency_s:.3g} us, {f.bandwidth_gb_s:.3g} GB/s")
        ax[1].semilogx(b, b / t / 1e9, "o-", ms=4, color=line.get_color(), label=label)
    ax[1].axhline(info["memcpy_gb_s"], color="gray", ls=":", label=f"memcpy {info['memcpy_gb_s']:.3g} GB/s")
    ax[0].set(xlabel="bytes per block", ylabel="us / byte", title="block I/O cost (Yale Fig. 1 analogue)")
    ax[1].set(xlabel="bytes per block", ylabel="GB/s", title="achieved bandwidth")
    for a in ax:
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def as_json(rows: list[dict], fitted: list[StorageFit], info: dict, machine: dict) -> dict:
    return {"benchmark": "storage", "machine": machine, "devices": info, "timings": rows,
            "fits": [asdict(f) for f in fitted]}


def default_name(cpu: str, suffix: str, date: str) -> str:
    """benchmarks/results/storage_<cpu>_<date>.<suffix>, cpu a short slug of the model."""
    slug = "".join(c if c.isalnum() else "_" for c in cpu.lower()).strip("_")
    while "__" in slug:
        slug = slug.replace("__", "_")
    return str(Path("benchmarks") / "results" / f"storage_{slug[:40]}_{date}.{suffix}")
