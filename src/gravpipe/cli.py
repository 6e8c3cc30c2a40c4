"""The ``gravpipe`` command. User mistakes print one line and exit with status 2."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

import numpy as np

EXIT_USER_ERROR = 2


class UserError(Exception):
    """A mistake in the command line or the input files: one line, no traceback."""


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _fraction_or_float(text: str) -> float:
    """Accept '0.015625' or '1/64'."""
    try:
        if "/" in text:
            a, b = text.split("/", 1)
            return float(a) / float(b)
        return float(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"expected a number such as 0.0156 or 1/64, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gravpipe", description="Gravitational N-body engine in the GRAPE tradition.")
    sub = parser.add_subparsers(dest="command", required=True)

    f = sub.add_parser("forces", help="forces on a particle set (default: an embedded Plummer sphere) with an accuracy check")
    f.add_argument("file", nargs="?", help="snapshot (GADGET-4 layout HDF5); default: Plummer N=16384, seed 1")
    f.add_argument("-n", type=_positive_int, default=16384, help="particles in the embedded default (default 16384)")
    f.add_argument("--eps", type=_fraction_or_float, default=1 / 64, help="Plummer softening (default 1/64)")
    f.add_argument("--precision", choices=["mixed", "double"], default="mixed")
    f.add_argument("--backend", default="auto", help="auto, cpu or cuda")
    f.add_argument("--threads", type=_positive_int, default=None)
    f.add_argument("--check", type=int, default=256, help="particles checked against a float64 reference (0: none)")
    f.add_argument("-o", "--output", help="write a snapshot with Acceleration and Potential")

    ic = sub.add_parser("ic", help="generate initial conditions")
    ic.add_argument("model", choices=["plummer", "uniform-sphere", "uniform-cube"])
    ic.add_argument("-n", type=_positive_int, required=True)
    ic.add_argument("--seed", type=int, default=None)
    ic.add_argument("-o", "--output", required=True, help="output snapshot (HDF5)")

    info = sub.add_parser("info", help="describe a snapshot")
    info.add_argument("file")

    bench = sub.add_parser("bench", help="benchmarks (interactions per second, machine, ratio to a reference)")
    bsub = bench.add_subparsers(dest="bench", required=True)
    bd = bsub.add_parser("direct", help="direct-summation force pipeline")
    bd.add_argument("--sizes", type=_positive_int, nargs="+", default=[1024, 2048, 4096, 8192, 16384, 32768, 65536])
    bd.add_argument("--precision", nargs="+", choices=["mixed", "double"], default=["mixed", "double"])
    bd.add_argument("--mode", nargs="+", choices=["acc+pot", "acc+jerk+pot"], default=["acc+pot", "acc+jerk+pot"])
    bd.add_argument("--backend", default="cpu")
    bd.add_argument("--threads", type=_positive_int, default=None)
    bd.add_argument("--quick", action="store_true", help="N = 1k, 4k, 16k only")
    bd.add_argument("--json", metavar="FILE", help="also write machine-readable results ('-' for stdout only)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from gravpipe.backends import BackendUnavailableError

    try:
        return COMMANDS[args.command](args)
    except (UserError, ValueError, FileNotFoundError, IsADirectoryError, PermissionError,
            BackendUnavailableError) as exc:
        print(f"gravpipe {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(f"gravpipe {args.command}: interrupted", file=sys.stderr)
        return 130


def _load_particles(path: str):
    from gravpipe import io

    particles, _time = io.read(path)
    return particles


def cmd_forces(args: argparse.Namespace) -> int:
    import gravpipe as gp
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if args.file:
        p = _load_particles(args.file)
        source = args.file
    else:
        p = gp.ic.plummer(args.n, seed=1)
        source = f"embedded default: Plummer sphere, N = {args.n}, seed 1 (Henon units)"
    pipe = gp.Pipeline(backend=args.backend, precision=args.precision, eps=args.eps, threads=args.threads)
    console.print(f"[bold]gravpipe forces[/bold]  {source}")
    console.print(f"backend {pipe.backend} ({pipe.backend_detail}), precision {pipe.precision}, eps {pipe.eps:.6g}")
    pipe.set_j(p.pos, p.mass)
    acc, pot = pipe.forces(p.pos, exclude=np.arange(p.n))
    s = pipe.stats

    table = Table(title="pipeline stages (one all-pairs evaluation)")
    for col in ("stage", "seconds", "bytes"):
        table.add_column(col, justify="right")
    table.add_row("j-particle write", f"{s.seconds_j_write:.4f}", f"{s.bytes_j_write:,}")
    table.add_row("i-particle write", f"{s.seconds_i_write:.4f}", f"{s.bytes_i_write:,}")
    table.add_row("compute", f"{s.seconds_compute:.4f}", "")
    table.add_row("result read", f"{s.seconds_result_read:.4f}", f"{s.bytes_result_read:,}")
    console.print(table)
    console.print(f"interactions {s.interactions:,}  ->  {s.interactions_per_second:.3e} interactions/s "
                  f"({s.interactions_per_second * 38 / 1e9:.1f} Gflop/s at 38 flops per interaction)")

    if args.check > 0:
        err_a, err_p, k = _check_sample(p.pos, p.mass, acc, pot, pipe.eps, pipe.G, args.check)
        console.print(f"accuracy vs float64 numpy on {k} particles: relative RMS acc {err_a:.2e}, pot {err_p:.2e}")
    w = 0.5 * float(np.dot(p.mass, pot))
    console.print(f"potential energy W = {w:.8f}")
    if args.output:
        from gravpipe import io

        io.write_snapshot(args.output, p, 0.0, potential=pot, acceleration=acc,
                          parameters={"eps": pipe.eps, "G": pipe.G, "precision": pipe.precision})
        console.print(f"wrote {args.output}")
    return 0


def _check_sample(pos, mass, acc, pot, eps, G, k):
    """Relative RMS error of acc and pot on k random particles against a float64 direct sum."""
    rng = np.random.default_rng(12345)
    k = min(k, len(mass))
    idx = np.sort(rng.choice(len(mass), size=k, replace=False))
    d = pos[None, :, :] - pos[idx, None, :]
    r2 = np.einsum("ijk,ijk->ij", d, d) + eps * eps
    with np.errstate(divide="ignore"):
        rinv = 1.0 / np.sqrt(r2)
    rinv[np.arange(k), idx] = 0.0
    ref_acc = G * np.einsum("ij,ijk->ik", mass * rinv ** 3, d)
    ref_pot = -G * (mass * rinv).sum(axis=1)
    ea = np.sqrt(np.mean(np.sum((acc[idx] - ref_acc) ** 2, 1) / np.sum(ref_acc ** 2, 1)))
    ep = np.sqrt(np.mean(((pot[idx] - ref_pot) / ref_pot) ** 2))
    return float(ea), float(ep), k


def cmd_ic(args: argparse.Namespace) -> int:
    import gravpipe as gp
    from gravpipe import io

    make = {"plummer": gp.ic.plummer, "uniform-sphere": gp.ic.uniform_sphere, "uniform-cube": gp.ic.uniform_cube}
    p = make[args.model](args.n, seed=args.seed)
    io.write_snapshot(args.output, p, 0.0, parameters={"ic": args.model, "seed": -1 if args.seed is None else args.seed})
    print(f"wrote {args.output}: {args.model}, N = {p.n}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from gravpipe import io

    print(io.describe(args.file))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    if args.bench == "direct":
        return _bench_direct(args)
    raise UserError(f"unknown benchmark {args.bench!r}")


def _bench_direct(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from gravpipe.bench import direct, machine

    sizes = [1024, 4096, 16384] if args.quick else args.sizes
    console = Console(stderr=args.json == "-")
    info = machine.describe()
    console.print(f"[bold]gravpipe bench direct[/bold]  {info['cpu']}, {info['openmp_threads']} threads, "
                  f"isa {info['isa']}, eps {direct.EPS}, Plummer, self excluded")
    results, numpy_rate = direct.run(sizes, args.precision, args.mode, args.backend, args.threads)
    table = Table()
    for col in ("N", "mode", "precision", "threads", "interactions/s", "Gflop/s", "x numpy f64"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(str(r.n), r.mode, r.precision, str(r.threads), f"{r.interactions_per_second:.3e}",
                      f"{r.gflops:.1f}", f"{r.ratio_to_numpy:.1f}")
    console.print(table)
    console.print("flops: 38 per interaction for acc+pot, 60 with jerk (GRAPE convention); "
                  "'x numpy f64' is the ratio to the numpy float64 all-pairs rate measured in this run")
    if args.json:
        doc = direct.as_json(results, info)
        if args.json == "-":
            json.dump(doc, sys.stdout, indent=1)
            print()
        else:
            from pathlib import Path

            Path(args.json).write_text(json.dumps(doc, indent=1))
            console.print(f"wrote {args.json}")
    return 0


COMMANDS = {"forces": cmd_forces, "ic": cmd_ic, "info": cmd_info, "bench": cmd_bench}

if __name__ == "__main__":
    sys.exit(main())
