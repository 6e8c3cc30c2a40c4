"""The command-line side of the model: ``gravpipe bench model``, ``gravpipe model predict``,
``gravpipe model plot`` and the forecast lines of ``gravpipe run`` (kept here so that
``gravpipe.cli`` only wires them in)."""

from __future__ import annotations

import argparse
import json
import sys

from gravpipe.perfmodel import machinefile
from gravpipe.perfmodel.model import TERMS, predict


def add_bench_parser(bsub) -> None:
    b = bsub.add_parser("model", help="calibrate the performance model on this machine and compare its "
                        "predictions with measurements (>= 8 configurations)")
    b.add_argument("--quick", action="store_true", help="small sizes, 3 repeats (within ~10 minutes on 2 cores)")
    b.add_argument("--json", metavar="FILE", help="write the result as JSON ('-': stdout)")
    b.add_argument("--machine-file", metavar="FILE", default=None,
                   help=f"where to keep the constants (default {machinefile.cache_path()})")


def add_model_parser(sub) -> None:
    m = sub.add_parser("model", help="the performance model: predicted time of a run on this or another machine")
    msub = m.add_subparsers(dest="model_command", required=True)
    p = msub.add_parser("predict", help="predicted time of a run and its breakdown (host / transfer / pipeline / "
                        "communication / I/O)")
    p.add_argument("--gravity", choices=("direct", "tree"), default="direct")
    p.add_argument("--integrator", choices=("hermite", "leapfrog"), default=None)
    p.add_argument("-n", type=float, default=2048, help="particles (1e9 allowed)")
    p.add_argument("--theta", type=float, default=0.6)
    p.add_argument("--t-end", type=float, default=4.0)
    p.add_argument("--dt", type=float, default=1 / 128, help="leapfrog step")
    p.add_argument("--eta", type=float, default=0.02)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--memory-budget", default=None, help="out of core per rank ('4GiB')")
    p.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--precision", default="mixed", choices=("mixed", "double"))
    p.add_argument("--machine", metavar="FILE", default=None,
                   help="machine file (a path or a shipped name: " +
                        ", ".join(sorted(f.stem for f in machinefile.MACHINES_DIR.glob("*.json"))) +
                        "); default: this host's calibration")
    p.add_argument("--json", metavar="FILE", default=None, help="'-' for stdout")
    pl = msub.add_parser("plot", help="predicted tree step time against N and ranks, where communication or I/O "
                         "takes over (PNG)")
    pl.add_argument("--machine", metavar="FILE", default="cluster-node")
    pl.add_argument("--theta", type=float, default=0.6)
    pl.add_argument("-o", "--out", default="model_tree_scaling.png")


def _machine(path: str | None) -> dict:
    if path:
        return machinefile.load(path)
    doc = machinefile.load_calibration()
    if doc is None:
        raise ValueError(f"no calibration of this host ({machinefile.cache_path()}): run `gravpipe bench model "
                         "--quick` or give --machine FILE")
    return doc


def cmd_model(args: argparse.Namespace) -> int:
    if args.model_command == "plot":
        from gravpipe.perfmodel.plot import plot_tree_scaling
        plot_tree_scaling(machinefile.load(args.machine), args.out, theta=args.theta)
        print(f"wrote {args.out}")
        return 0
    from gravpipe.store import parse_byte_size
    doc = _machine(args.machine)
    budget = parse_byte_size(args.memory_budget) if args.memory_budget else None
    p = predict(doc, gravity=args.gravity, integrator=args.integrator, n=int(args.n), theta=args.theta,
                t_end=args.t_end, threads=args.threads, ranks=args.ranks, memory_budget=budget,
                backend=args.backend, precision=args.precision, eta=args.eta, dt=args.dt)
    if args.json == "-":
        json.dump(p.as_dict(), sys.stdout, indent=1)
        print()
        return 0
    s = p.settings
    print(f"machine {s['machine']} (constants of {doc.get('created', '?')}): {s['gravity']} + "
          f"{s['integrator']}, N = {s['n']:.4g}, {s['threads']} threads x {s['ranks']} ranks, backend {s['backend']}"
          + (f", theta {s['theta']:g}" if s["theta"] else "") + (", out of core" if budget else ""))
    print(f"  one force evaluation {_fmt(p.seconds_per_force_evaluation)}, one step {_fmt(p.seconds_per_step)}, "
          f"whole run to t = {args.t_end:g}: {_fmt(p.seconds)}")
    for t in TERMS:
        v = getattr(p.breakdown, t)
        print(f"  {t:<14}{_fmt(v):>12}  {100 * v / p.seconds if p.seconds else 0:5.1f}%")
    for note in p.notes:
        print(f"  {note}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(p.as_dict(), fh, indent=1)
    return 0


def _fmt(s: float) -> str:
    if s >= 86400 * 2:
        return f"{s / 86400:.3g} d"
    if s >= 7200:
        return f"{s / 3600:.3g} h"
    return f"{s:.3g} s"


def bench_model(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from gravpipe.perfmodel import calibrate
    console = Console()
    doc = calibrate.run(quick=args.quick, progress=lambda m: console.print(f"  {m}"), cache=args.machine_file)
    t = Table(title=f"predicted vs measured ({doc['calibration_file']})")
    for col in ("configuration", "calibrated", "predicted s", "measured s", "pred/meas", "goal", "spread"):
        t.add_column(col, justify="right" if col != "configuration" else "left")
    for c in doc["configs"]:
        if "skipped" in c:
            t.add_row(c["name"], "-", "-", "-", "skipped", c["skipped"], "-")
            continue
        t.add_row(c["name"], "yes" if c["calibrated"] else "no", f"{c['predicted_s']:.4g}", f"{c['measured_s']:.4g}",
                  f"{c['ratio']:.2f}", ("met" if c["within_goal"] else "MISSED") + f" ({100 * c['goal']:.0f}%)",
                  f"{c['spread']:.2f}" if c.get("spread") else "-")
    if args.json != "-":
        console.print(t)
        met = [c["within_goal"] for c in doc["configs"] if "within_goal" in c]
        console.print(f"{sum(met)} of {len(met)} configurations within their goal; {doc['seconds']:.0f} s in all")
    from gravpipe.bench.emit import emit_json
    emit_json(args.json, lambda: doc, console)
    return 0


# ---- gravpipe run ---------------------------------------------------------------------------

def run_forecast(sim, t_end: float) -> float | None:
    """Print the forecast of a run about to evolve to t_end; returns the predicted seconds of
    the evolve (None without a calibration). Never calibrates; a broken file is said, not fatal."""
    try:
        doc = machinefile.load_calibration()
    except machinefile.MachineFileError as exc:
        print(f"  forecast: none ({exc})")
        return None
    if doc is None:
        print(f"  forecast: none (no calibration of this host; `gravpipe bench model --quick` makes one)")
        return None
    c = sim.config
    ranks = sim.comm.Get_size() if sim.comm is not None else 1
    ooc = c.out_of_core or {}
    if ranks > 1 and ooc:
        print("  forecast: none (the model has no terms for ranks out of core: their passes over the pages, "
              "the store made again after each migration)")
        return None
    try:
        p = predict(doc, gravity=c.gravity, integrator=c.integrator, n=sim.n, theta=c.theta or 0.6,
                    t_end=max(t_end - sim.time, 0.0), threads=c.threads, ranks=ranks,
                    memory_budget=ooc.get("memory_budget"), precise_energy=c.precise_energy,
                    backend=sim.backend if sim.backend in ("cpu", "cuda") else "cpu", precision=c.precision,
                    eta=c.params.get("eta", 0.02), dt_max=c.params.get("dt_max", 0.125), dt=c.params.get("dt", 1 / 128))
    except (ValueError, KeyError, TypeError) as exc:
        print(f"  forecast: none ({exc})")
        return None
    seconds = p.seconds - p.seconds_per_force_evaluation  # the start-up evaluation is already done
    print(f"  forecast: {_fmt(seconds)} to t = {t_end:g} ({p.steps:.3g} steps; calibration "
          f"{doc.get('created', '?')}; largest term {p.breakdown.largest()})", flush=True)
    return seconds


def run_report(predicted: float | None, wall: float) -> None:
    if predicted is not None and wall > 0:
        print(f"forecast {_fmt(predicted)}, measured {_fmt(wall)} (predicted / measured {predicted / wall:.2f})")
