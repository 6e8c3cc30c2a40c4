"""Throughput of gravpipe fetch, curl and aria2c over a tc-shaped veth link between two network
namespaces (seed 003's setting on one machine). Needs root, iproute2, curl, aria2c.

    python benchmarks/reservoir/shaped_link.py --mbytes 256 --rate-mbit 400 \
        --json benchmarks/results/reservoir_shaped_link.json

Namespaces gpres_a (server, 10.47.0.1) and gpres_b (client, 10.47.0.2) joined by a veth pair;
the server side's egress is shaped with TBF (rate, burst, limit = the shaper's buffer).
netem is not in this kernel, so no delay can be added: the RTT is the veth's (~0.05 ms)
plus the queue, and BW x RTT / 4 is below one packet; the "buffer below" case is a limit
of 2 packets, the "above" case a limit of 1 MiB. Everything is removed at exit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

A, B = "gpres_a", "gpres_b"
IP_A, IP_B = "10.47.0.1", "10.47.0.2"
PORT = 18470


def sh(*cmd: str, check: bool = True, ns: str | None = None, **kw) -> subprocess.CompletedProcess:
    full = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    return subprocess.run(full, check=check, capture_output=True, text=True, timeout=kw.pop("timeout", 300), **kw)


def setup(rate_mbit: float, limit: int, burst: int) -> None:
    teardown()
    sh("ip", "netns", "add", A)
    sh("ip", "netns", "add", B)
    sh("ip", "link", "add", "gpres0", "netns", A, "type", "veth", "peer", "name", "gpres1", "netns", B)
    sh("ip", "addr", "add", f"{IP_A}/24", "dev", "gpres0", ns=A)
    sh("ip", "addr", "add", f"{IP_B}/24", "dev", "gpres1", ns=B)
    for ns, dev in ((A, "gpres0"), (B, "gpres1")):
        sh("ip", "link", "set", dev, "up", ns=ns)
        sh("ip", "link", "set", "lo", "up", ns=ns)
    shape(rate_mbit, limit, burst)


def shape(rate_mbit: float, limit: int, burst: int) -> None:
    sh("tc", "qdisc", "replace", "dev", "gpres0", "root", "tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst),
       "limit", str(limit), ns=A)


def teardown() -> None:
    for ns in (A, B):
        sh("ip", "netns", "del", ns, check=False)


def rtt_ms() -> float:
    if shutil.which("ping") is None:
        return float("nan")
    out = sh("ping", "-c", "5", "-i", "0.2", "-q", IP_A, ns=B, check=False).stdout
    m = re.search(r"= [\d.]+/([\d.]+)/", out)
    return float(m.group(1)) if m else float("nan")


def timed(cmd: list[str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall seconds, CPU seconds (user + sys of the child) and the result of ``cmd`` in B."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = sh(*cmd, ns=B, check=False, timeout=600)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), r


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mbytes", type=int, default=256, help="size of the file moved (MiB)")
    ap.add_argument("--rate-mbit", type=float, default=400.0, help="TBF rate (Mbit/s)")
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--buffers", nargs="+", default=["above", "below"], choices=["above", "below"])
    args = ap.parse_args()
    for tool in ("ip", "tc", "curl", "aria2c"):
        if shutil.which(tool) is None:
            sys.exit(f"shaped_link: {tool} not found (apt-get install iproute2 curl aria2)")
    work = Path(tempfile.mkdtemp(prefix="gpres-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    src, dest = work / "src", work / "dest"
    src.mkdir()
    size = args.mbytes << 20
    with open(src / "data.bin", "wb") as fh:
        for _ in range(args.mbytes):
            fh.write(os.urandom(1 << 20))
    from gravpipe.reservoir import manifest

    t0 = time.process_time()
    manifest.record(src, ["data.bin"])
    manifest_cpu = time.process_time() - t0
    token = secrets.token_hex(16)
    (work / "token").write_text(token + "\n")
    auth = f"Authorization: Bearer {token}"
    burst = max(32 << 10, int(args.rate_mbit * 1e6 / 8 / 250))  # >= rate / HZ (250) or TBF caps below its rate
    results = {"machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, {platform.release()}",
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                        cwd=Path(__file__).parent).stdout.strip(),
               "bytes": size, "shaper_rate_bytes_per_s": args.rate_mbit * 1e6 / 8, "tbf_burst": burst,
               "manifest_cpu_s_per_gb": manifest_cpu / (size / 1e9), "runs": []}
    server = None
    try:
        for label, limit in [(f"buffer {b}", {"above": 1 << 20, "below": 3000}[b]) for b in args.buffers]:
            setup(args.rate_mbit, limit, burst)
            server = subprocess.Popen(["ip", "netns", "exec", A, sys.executable, "-m", "gravpipe.cli", "serve",
                                       str(src), "--host", IP_A, "--port", str(PORT), "--token-file",
                                       str(work / "token")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
            server.stdout.readline()
            results.setdefault("rtt_ms_idle", rtt_ms())
            url = f"http://{IP_A}:{PORT}"
            plan = [("gravpipe fetch", k, pace) for k in args.streams for pace in (False, True)]
            if label == "buffer below":
                plan = [("gravpipe fetch", k, False) for k in (1, 4, 16)] + [("aria2c", 4, False)]
            else:
                plan += [("curl", 1, False)] + [("aria2c", k, False) for k in args.streams]
            for tool, k, pace in plan:
                shutil.rmtree(dest, ignore_errors=True)
                dest.mkdir()
                if tool == "gravpipe fetch":
                    cmd = [sys.executable, "-m", "gravpipe.cli", "fetch", url, str(dest), "--streams", str(k),
                           "--token-file", str(work / "token"), "--no-progress", "--json", str(work / "r.json")]
                    if pace:
                        cmd += ["--rate", str(0.97 * args.rate_mbit * 1e6 / 8)]
                elif tool == "curl":
                    cmd = ["curl", "--noproxy", "*", "-sS", "-H", auth, "-o", str(dest / "data.bin"), f"{url}/data.bin"]
                else:
                    cmd = ["aria2c", "-q", "--no-conf", "--all-proxy=", "-x", str(k), "-s", str(k), "-k", "1M",
                           "--header", auth, "-d", str(dest), "-o", "data.bin", "--file-allocation=none",
                           f"{url}/data.bin"]
                wall, cpu, r = timed(cmd)
                ok = r.returncode == 0 and (dest / "data.bin").is_file() and (dest / "data.bin").stat().st_size == size
                row = {"tool": tool, "streams": k, "paced": pace, "shaper": label, "tbf_limit": limit, "ok": ok,
                       "seconds": wall, "rate_bytes_per_s": size / wall, "cpu_s": cpu,
                       "share_of_shaper": size / wall / results["shaper_rate_bytes_per_s"]}
                if tool == "gravpipe fetch" and ok:
                    rep = json.loads((work / "r.json").read_text())
                    row.update(fetch_seconds=rep["seconds"], retries=rep["retries"],
                               rate_bytes_per_s=size / rep["seconds"],
                               share_of_shaper=size / rep["seconds"] / results["shaper_rate_bytes_per_s"],
                               cpu_s_per_gb=cpu / (size / 1e9))
                if not ok:
                    row["error"] = (r.stderr or r.stdout)[-300:]
                results["runs"].append(row)
                print(f"{label:13s} {tool:15s} K={k:2d} paced={pace!s:5s} {row['rate_bytes_per_s'] / 1e6:7.1f} MB/s "
                      f"{100 * row['share_of_shaper']:5.1f}% cpu {cpu:5.2f} s ok={ok}", flush=True)
            server.terminate()
            server.wait(10)
            server = None
    finally:
        if server is not None:
            server.kill()
        teardown()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
