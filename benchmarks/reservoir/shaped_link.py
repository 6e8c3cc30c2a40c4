"""Throughput of gravpipe fetch, curl and aria2c over a tc-shaped veth link between two network
namespaces (seed 003's setting on one machine). Needs root, iproute2, curl, aria2c.

    python benchmarks/reservoir/shaped_link.py --mbytes 1024 --rate-mbit 400 --streams 1 4 16 \
        --repeat 3 --time-limit 90 --json benchmarks/results/reservoir_shaped_link.json

Each configuration runs ``--repeat`` times in interleaved rounds (the median is reported,
with every run in the JSON); each client run has a hard time limit (``--time-limit``):
a run stopped there is recorded as a timeout with the rate it reached, from the bytes the
client's interface received (``rx_bytes``: payload plus TCP/IP headers).

Namespaces gpres_a (server, 10.47.0.1) and gpres_b (client, 10.47.0.2) joined by a veth pair;
the server side's egress is shaped with TBF (rate, burst, limit = the shaper's buffer).
netem is not in this kernel, so no delay can be added: the RTT is the veth's (~0.05 ms)
plus the queue, and BW x RTT / 4 is below one packet; the "buffer below" case is a limit
of 2 packets (GSO off on the shaped side, so that they are 2 wire packets), the "above"
case a limit of 1 MiB. Everything is removed at exit.
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
import statistics
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


def setup(rate_mbit: float, limit: int, burst: int, wire_packets: bool = False) -> None:
    teardown()
    sh("ip", "netns", "add", A)
    sh("ip", "netns", "add", B)
    sh("ip", "link", "add", "gpres0", "netns", A, "type", "veth", "peer", "name", "gpres1", "netns", B)
    sh("ip", "addr", "add", f"{IP_A}/24", "dev", "gpres0", ns=A)
    sh("ip", "addr", "add", f"{IP_B}/24", "dev", "gpres1", ns=B)
    for ns, dev in ((A, "gpres0"), (B, "gpres1")):
        sh("ip", "link", "set", dev, "up", ns=ns)
        sh("ip", "link", "set", "lo", "up", ns=ns)
    if wire_packets:  # the stack hands TBF one wire packet at a time, not 64 kB GSO packets
        sh("ip", "link", "set", "dev", "gpres0", "gso_max_segs", "1", "gso_max_size", "1500", ns=A)
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


def rx_bytes() -> int:
    """Bytes received so far on the client's side of the veth (payload and headers)."""
    return int(sh("cat", "/sys/class/net/gpres1/statistics/rx_bytes", ns=B).stdout)


def timed(cmd: list[str], limit: float) -> tuple[float, float, int, subprocess.CompletedProcess | None]:
    """Wall seconds, CPU seconds (user + sys of the child), bytes received on the link and
    the result of ``cmd`` in B (None: stopped at ``limit`` seconds)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    x0 = rx_bytes()
    t0 = time.perf_counter()
    try:
        r = sh(*cmd, ns=B, check=False, timeout=limit)
    except subprocess.TimeoutExpired:
        r = None  # subprocess.run killed and reaped it (ip netns exec execs the client itself)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), rx_bytes() - x0, r


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mbytes", type=int, default=256, help="size of the file moved (MiB)")
    ap.add_argument("--rate-mbit", type=float, default=400.0, help="TBF rate (Mbit/s)")
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--buffers", nargs="+", default=["above", "below"], choices=["above", "below"])
    ap.add_argument("--repeat", type=int, default=3, help="rounds (interleaved) of each configuration, buffer above")
    ap.add_argument("--repeat-below", type=int, default=1, help="rounds with the shaper buffer below BW x RTT / 4")
    ap.add_argument("--time-limit", type=float, default=90.0, help="hard limit of each client run (s)")
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
               "manifest_cpu_s_per_gb": manifest_cpu / (size / 1e9), "time_limit_s": args.time_limit,
               "loadavg_start": os.getloadavg(), "runs": [], "median": []}
    server = None
    try:
        for label, limit in [(f"buffer {b}", {"above": 1 << 20, "below": 3000}[b]) for b in args.buffers]:
            # a 2-packet queue must hold 2 wire packets: with GSO on (veth's default) the server's
            # 64 kB segments are each larger than the 3000-byte limit and TBF drops them all
            setup(args.rate_mbit, limit, burst, wire_packets=label == "buffer below")
            server = subprocess.Popen(["ip", "netns", "exec", A, sys.executable, "-m", "gravpipe.cli", "serve",
                                       str(src), "--host", IP_A, "--port", str(PORT), "--token-file",
                                       str(work / "token")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
            server.stdout.readline()
            results.setdefault("rtt_ms_idle", rtt_ms())
            url = f"http://{IP_A}:{PORT}"
            plan = [("gravpipe fetch", k, pace) for k in args.streams for pace in (False, True)]
            if label == "buffer below":
                plan = ([("gravpipe fetch", k, False) for k in args.streams] + [("curl", 1, False)]
                        + [("aria2c", k, False) for k in args.streams])
                rounds = args.repeat_below
            else:
                plan += [("curl", 1, False)] + [("aria2c", k, False) for k in args.streams]
                rounds = args.repeat
            for rnd, (tool, k, pace) in [(r, c) for r in range(rounds) for c in plan]:
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
                load = os.getloadavg()[0]
                wall, cpu, wire, r = timed(cmd, args.time_limit)
                ok = (r is not None and r.returncode == 0 and (dest / "data.bin").is_file()
                      and (dest / "data.bin").stat().st_size == size)
                row = {"tool": tool, "streams": k, "paced": pace, "shaper": label, "tbf_limit": limit, "round": rnd,
                       "ok": ok, "timed_out": r is None, "seconds": wall, "rx_bytes": wire,
                       "rx_rate_bytes_per_s": wire / wall, "rate_bytes_per_s": size / wall if ok else wire / wall,
                       "cpu_s": cpu, "loadavg_1min": load}
                row["share_of_shaper"] = row["rate_bytes_per_s"] / results["shaper_rate_bytes_per_s"]
                if ok:
                    row["cpu_s_per_gb"] = cpu / (size / 1e9)
                if tool == "gravpipe fetch" and ok:
                    rep = json.loads((work / "r.json").read_text())
                    row.update(fetch_seconds=rep["seconds"], retries=rep["retries"],
                               rate_bytes_per_s=size / rep["seconds"],
                               share_of_shaper=size / rep["seconds"] / results["shaper_rate_bytes_per_s"],
                               cpu_s_per_gb=cpu / (size / 1e9))
                if not ok:
                    row["error"] = (f"stopped at the {args.time_limit:g} s limit" if r is None
                                    else (r.stderr or r.stdout)[-300:])
                results["runs"].append(row)
                print(f"{label:13s} r{rnd} {tool:15s} K={k:2d} paced={pace!s:5s} {row['rate_bytes_per_s'] / 1e6:7.1f} "
                      f"MB/s {100 * row['share_of_shaper']:5.1f}% cpu {cpu:5.2f} s ok={ok} timeout={r is None} "
                      f"load {load:.2f}", flush=True)
            for tool, k, pace in plan:
                rows = [x for x in results["runs"] if (x["tool"], x["streams"], x["paced"], x["shaper"])
                        == (tool, k, pace, label)]
                results["median"].append({
                    "tool": tool, "streams": k, "paced": pace, "shaper": label, "runs": len(rows),
                    "ok": sum(x["ok"] for x in rows), "timed_out": sum(x["timed_out"] for x in rows),
                    "rate_bytes_per_s": statistics.median(x["rate_bytes_per_s"] for x in rows),
                    "share_of_shaper": statistics.median(x["share_of_shaper"] for x in rows),
                    "cpu_s_per_gb": (statistics.median(x["cpu_s_per_gb"] for x in rows if x["ok"])
                                     if any(x["ok"] for x in rows) else None),
                    "spread": max(x["rate_bytes_per_s"] for x in rows) / min(x["rate_bytes_per_s"] for x in rows)})
            server.terminate()
            server.wait(10)
            server = None
    finally:
        if server is not None:
            server.kill()
        teardown()
        shutil.rmtree(work, ignore_errors=True)
    results["loadavg_end"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
