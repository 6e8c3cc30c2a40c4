"""The command-line parsers and commands of the reservoir: verify, serve, fetch
(``gravpipe.cli`` adds them with one call and maps their errors to exit codes)."""

from __future__ import annotations

import argparse
import json
import sys


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _rate(text: str) -> float:
    """A rate in bytes/s: '125M', '1.5G', '10Mbit' (SI prefixes; 'bit' divides by 8)."""
    t = text.strip()
    scale = 1.0
    if t.lower().endswith("bit"):
        t, scale = t[:-3], 1 / 8
    elif t.endswith("B"):
        t = t[:-1]
    mult = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
    if t and t[-1] in mult:
        scale *= mult[t[-1]]
        t = t[:-1]
    try:
        v = float(t) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a rate such as 100M (bytes/s) or 800Mbit, got {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive rate, got {text!r}")
    return v


def add_parsers(sub: argparse._SubParsersAction) -> dict:
    """Add verify, serve and fetch to ``sub``; returns {name: command function}."""
    v = sub.add_parser("verify", help="check a run folder against its manifest.json (sizes, chunk checksums)")
    v.add_argument("dir", help="run folder")

    s = sub.add_parser("serve", help="serve run folders read-only over HTTP(S) with range requests and a bearer token")
    s.add_argument("dir", help="folder to serve (nothing outside it is reachable)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8470, help="port (default 8470; 0: any free port, printed)")
    s.add_argument("--token-file", required=True, help="file whose first line is the bearer token clients must send")
    s.add_argument("--tls-cert", help="PEM certificate: serve HTTPS")
    s.add_argument("--tls-key", help="PEM private key for --tls-cert")
    s.add_argument("--max-connections", type=_positive_int, default=64,
                   help="requests served at once (more wait; default 64)")

    f = sub.add_parser("fetch", help="pull a run folder from an HTTP(S) range server, verified chunk by chunk, "
                                     "with parallel streams, pacing and resume")
    f.add_argument("url", help="the folder's URL (its manifest is URL/manifest.json)")
    f.add_argument("dest", help="destination folder (files appear only when whole and verified)")
    f.add_argument("--streams", type=_positive_int, default=None,
                   help="parallel range streams (default: from the measured bandwidth-delay product, 1-16)")
    f.add_argument("--rate", type=_rate, default=None, help="pace all streams to this total rate, e.g. 100M or 800Mbit")
    f.add_argument("--token-file", help="file whose first line is the bearer token")
    f.add_argument("--only", action="append", default=None, metavar="NAME",
                   help="fetch only these files of the manifest (or a set's folder); repeatable")
    f.add_argument("--json", metavar="FILE", help="write bytes, seconds, rate per stream and retries ('-': stdout)")
    f.add_argument("--no-progress", action="store_true")
    return {"verify": cmd_verify, "serve": cmd_serve, "fetch": cmd_fetch}


def cmd_verify(args: argparse.Namespace) -> int:
    from gravpipe.reservoir import manifest

    files, nbytes = manifest.verify(args.dir)
    print(f"{args.dir}: {files} files, {nbytes} bytes match {manifest.MANIFEST_NAME}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from gravpipe.reservoir import serve

    serve.main(args.dir, host=args.host, port=args.port, token_file=args.token_file, tls_cert=args.tls_cert,
               tls_key=args.tls_key, max_connections=args.max_connections)
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from gravpipe.reservoir import fetch

    report = fetch.fetch(args.url, args.dest, streams=args.streams, rate=args.rate, token_file=args.token_file,
                         only=args.only, progress=not args.no_progress)
    print(f"{args.dest}: {report['files']} files, {report['bytes']} bytes verified in {report['seconds']:.2f} s "
          f"({report['rate_bytes_per_s'] / 1e6:.1f} MB/s, {report['streams']} streams, {report['retries']} retries, "
          f"{report['bytes_reused']} bytes already verified)")
    if args.json:
        text = json.dumps(report, indent=1)
        if args.json == "-":
            print(text)
        else:
            from gravpipe.io.atomic import atomic_open

            with atomic_open(args.json, "w") as fh:
                fh.write(text + "\n")
    sys.stdout.flush()
    return 0
