"""The ``gravpipe`` command. User mistakes print one line and exit with status 2."""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
import threading
from typing import Sequence

import numpy as np

from gravpipe.bench.emit import emit_json as _emit_json

EXIT_USER_ERROR = 2
#: exit status when the reader of stdout went away (128 + SIGPIPE, what a shell reports
#: for a process killed by SIGPIPE, the default fate of a C program in ``cmd | head``)
EXIT_BROKEN_PIPE = 128 + 13


class UserError(Exception):
    """A mistake in the command line or the input files: one line, no traceback."""


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but a mistake on the command line prints one line (as every other
    error of the command does) instead of the whole usage before it; subcommands' parsers
    are of this class too (argparse makes them of their parent's class)."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _thread_count(text: str) -> int:
    """The type of --threads: a positive integer the machine can start (``_validate.check_threads``)."""
    from gravpipe._validate import check_threads

    try:
        return check_threads(_positive_int(text), "")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).lstrip(": ")) from None


def _fraction_or_float(text: str) -> float:
    """The type of every numeric option: '0.015625', '1/64', '-1/128', '2*pi/1000', ...
    (``runconfig.parse_number``; ``_attach_signed_values`` lets values start with '-')."""
    from gravpipe.runconfig import parse_number

    try:
        return parse_number(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _number_options(parser: argparse.ArgumentParser, single: bool = False) -> dict[argparse.ArgumentParser, list[str]]:
    """{parser: its long options that take numbers} (``single``: exactly one number), for
    this parser and every subcommand's. argparse lists arguments only in ``_actions``."""
    found: dict[argparse.ArgumentParser, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                found.update(_number_options(sub, single))
        elif action.type is _fraction_or_float and (action.nargs is None or not single):
            found.setdefault(parser, []).extend(o for o in action.option_strings if o.startswith("--"))
    return found


def _document_numbers(parser: argparse.ArgumentParser) -> None:
    """Say in each command's help how its numbers may be written."""
    from gravpipe.runconfig import NUMBER_SYNTAX

    for sub, options in _number_options(parser).items():
        note = f"Numbers ({', '.join(options)}) may be written as {NUMBER_SYNTAX}."
        sub.epilog = f"{sub.epilog} {note}" if sub.epilog else note


def _attach_signed_values(argv: Sequence[str], options: set[str]) -> list[str]:
    """'--dt', '-1/128' -> '--dt=-1/128' for options that take a number.

    argparse reads a token that starts with '-' as an option unless it looks like a plain
    negative number, so '--dt -1/128' would fail with "expected one argument" and the user
    would never see what is wrong with the value. Joined with '=', the value reaches the
    option (and its check) whatever it looks like. Tokens after '--' are left alone.
    """
    from gravpipe.runconfig import parse_number

    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return out + list(argv[i:])
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if token in options and nxt is not None and nxt.startswith("-") and nxt not in options:
            try:
                parse_number(nxt)
            except ValueError:
                pass  # not a number: an option after all, argparse reports the missing value
            else:
                out.append(f"{token}={nxt}")
                i += 2
                continue
        out.append(token)
        i += 1
    return out


def build_parser() -> argparse.ArgumentParser:
    from gravpipe import __version__

    parser = _Parser(prog="gravpipe", description="Gravitational N-body engine in the GRAPE tradition.")
    parser.add_argument("--version", action="version", version=f"gravpipe {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    f = sub.add_parser("forces", help="forces on a particle set (default: an embedded Plummer sphere) with an accuracy check")
    f.add_argument("file", nargs="?", help="snapshot (GADGET-4 layout HDF5); default: Plummer N=16384, seed 1")
    f.add_argument("-n", type=_positive_int, default=16384, help="particles in the embedded default (default 16384)")
    f.add_argument("--eps", type=_fraction_or_float, default=1 / 64, help="Plummer softening (default 1/64)")
    f.add_argument("--precision", choices=["mixed", "double"], default="mixed")
    f.add_argument("--backend", default="auto", help="auto, cpu or cuda")
    f.add_argument("--threads", type=_thread_count, default=None)
    f.add_argument("--check", type=int, default=256, help="particles checked against a float64 reference (0: none)")
    f.add_argument("-o", "--output", help="write a snapshot with Acceleration and Potential")

    ic = sub.add_parser("ic", help="generate initial conditions")
    ic.add_argument("model", choices=["plummer", "uniform-sphere", "uniform-cube"])
    ic.add_argument("-n", type=_positive_int, required=True)
    ic.add_argument("--seed", type=int, default=None)
    ic.add_argument("-o", "--output", required=True, help="output snapshot (HDF5)")
    ic.add_argument("--memory-budget", default=None,
                    help="memory the generator may use, e.g. 2GiB: checked against what one block needs "
                         "(plummer and uniform-cube are drawn and written in blocks of 2^20 particles, ~310 MB, "
                         "so any N fits)")

    _add_run_parser(sub)
    _add_config_parser(sub)
    from gravpipe.perfmodel import cli as model_cli
    model_cli.add_model_parser(sub)
    from gravpipe.reservoir.commands import add_parsers as _add_reservoir_parsers

    COMMANDS.update(_add_reservoir_parsers(sub))  # verify, serve, fetch (gravpipe.reservoir)

    info = sub.add_parser("info", help="describe a snapshot (a file, or an http(s):// URL read in place)")
    info.add_argument("file")
    info.add_argument("--token-file", help="bearer token for a URL (else $GRAVPIPE_TOKEN_FILE)")

    plot = sub.add_parser("plot", help="PNG plots of a run directory (energy error, Lagrangian radii, time breakdown)")
    plot.add_argument("dir", help="run directory with diagnostics.csv (written by 'gravpipe run --out DIR')")

    bench = sub.add_parser("bench", help="benchmarks (interactions per second, machine, ratio to a reference)")
    bsub = bench.add_subparsers(dest="bench", required=True)
    from gravpipe.perfmodel.cli import add_bench_parser
    add_bench_parser(bsub)
    bd = bsub.add_parser("direct", help="direct-summation force pipeline")
    bd.add_argument("--sizes", type=_positive_int, nargs="+", default=None,
                    help="N values (default 1k .. 64k on the CPU, 16k .. 1M on CUDA)")
    bd.add_argument("--precision", nargs="+", choices=["mixed", "double"], default=["mixed", "double"])
    bd.add_argument("--mode", nargs="+", choices=["acc+pot", "acc+jerk+pot"], default=["acc+pot", "acc+jerk+pot"])
    bd.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    bd.add_argument("--threads", type=_thread_count, default=None)
    bd.add_argument("--isa", nargs="+", choices=["auto", "avx512", "avx2", "generic"], default=None,
                    help="CPU instruction sets to measure, side by side (default auto: GRAVPIPE_ISA "
                         "if set, else the best here)")
    bd.add_argument("--n-i", type=_positive_int, default=None,
                    help="i-particles per call (default: all N); e.g. 1024 for a small Hermite block")
    bd.add_argument("--quick", action="store_true", help="N = 1k, 4k, 16k only")
    bd.add_argument("--json", metavar="FILE", help="also write machine-readable results ('-' for stdout only)")
    bh = bsub.add_parser("hermite", help="Hermite block time steps: particle steps/s and the host+transfer share")
    bh.add_argument("-n", type=_positive_int, default=16384, help="Plummer particles (default 16384)")
    bh.add_argument("--t-end", type=_fraction_or_float, default=0.25, help="N-body time units (default 0.25)")
    bh.add_argument("--precision", nargs="+", choices=["mixed", "double"], default=["mixed"])
    bh.add_argument("--threads", type=_thread_count, default=None)
    bh.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    bh.add_argument("--eta", type=_fraction_or_float, default=0.02)
    bh.add_argument("--eps", type=_fraction_or_float, default=1 / 64)
    bh.add_argument("--json", metavar="FILE", help="also write machine-readable results ('-' for stdout only)")
    bx = bsub.add_parser("transfer", help="host <-> device copies vs size, pageable and pinned, T = C1 + C2*bytes")
    bx.add_argument("--sizes", type=_positive_int, nargs="+", default=None, help="bytes (default 4 B .. 256 MiB)")
    bx.add_argument("--repeats", type=_positive_int, default=20, help="copies per size; the median is kept")
    bx.add_argument("--plot", metavar="PNG", help="also draw time and bandwidth vs size")
    bx.add_argument("--json", metavar="FILE", help="also write machine-readable results ('-' for stdout only)")
    bp = bsub.add_parser("pingpong", help="MPI message time vs size between two ranks, T = C1 + C2*bytes "
                                          "(run as: mpiexec -n 2 gravpipe bench pingpong)")
    bp.add_argument("--sizes", type=_positive_int, nargs="+", default=None, help="bytes (default 1 B .. 64 MiB)")
    bp.add_argument("--repeats", type=_positive_int, default=20, help="round trips per size; the median is kept")
    bp.add_argument("--plot", metavar="PNG", help="also draw time and bandwidth vs size")
    bp.add_argument("--json", metavar="FILE", help="also write machine-readable results ('-' for stdout only)")
    bs = bsub.add_parser("storage", help="scratch-file block write/read time vs block size, disk and /dev/shm, "
                                         "T = C1 + C2*bytes (Yale bulk memory Fig. 1)")
    bs.add_argument("--scratch", metavar="DIR", default=None,
                    help="directory on the disk to measure (default: ./gravpipe-bench-scratch, removed after)")
    bs.add_argument("--sizes", type=_positive_int, nargs="+", default=None,
                    help="block bytes, multiples of 4096 (default 4 KiB .. 64 MiB)")
    bs.add_argument("--io", choices=["auto", "direct", "buffered"], default="auto",
                    help="auto: O_DIRECT where the file system accepts it, else buffered + fadvise (reported)")
    bs.add_argument("--plot", metavar="PNG", help="also draw us/byte and bandwidth vs block size")
    bs.add_argument("--json", metavar="FILE", help="also write machine-readable results ('-' for stdout only)")
    bo = bsub.add_parser("ooc", help="the treecode out of core: bytes swapped per step vs in-core bytes and page "
                                     "size (Salmon & Warren Fig. 5), a full step vs the same step in core, and a "
                                     "demonstration step from an IC file")
    bo.add_argument("what", nargs="+", choices=["swap", "ratio", "demo"])
    bo.add_argument("--scratch", metavar="DIR", required=True, help="directory for the scratch files")
    bo.add_argument("-n", type=_positive_int, nargs="+", default=[1_000_000], help="particles (swap, ratio)")
    bo.add_argument("--pages", type=_positive_int, nargs="+", default=None, help="page sizes in bytes (swap; ratio and demo: the first; default: from the budget, at most 1 MiB)")
    bo.add_argument("--fractions", type=_fraction_or_float, nargs="+", default=None,
                    help="cache sizes as fractions of the particle data (swap)")
    bo.add_argument("--budget-fraction", type=_fraction_or_float, default=0.1,
                    help="the whole memory budget (caches, cells, sort) as a fraction of the particle data "
                         "(ratio; default 1/10)")
    bo.add_argument("--model", choices=["plummer", "cube"], default="plummer")
    bo.add_argument("--repeat", type=_positive_int, default=1,
                    help="ratio: best of this many (in-core and out-of-core steps alternating; default 1)")
    bo.add_argument("--file", help="IC snapshot (demo)")
    bo.add_argument("--memory-budget", default="4GiB", help="budget of the demo (default 4GiB)")
    bo.add_argument("--n-leaf", type=_positive_int, default=16, help="leaf size of the demo's tree (default 16)")
    bo.add_argument("--theta", type=float, default=None, help="opening angle of the demo's tree (default: the core's)")
    bo.add_argument("--sample", type=int, default=1000, help="particles checked against a float64 direct sum (demo)")
    bo.add_argument("--threads", type=_thread_count, default=None)
    bo.add_argument("--plot", metavar="PNG", help="swap: bytes swapped vs in-core bytes")
    bo.add_argument("--json", metavar="FILE", help="also write machine-readable results ('-' for stdout only)")
    bt = bsub.add_parser("tree", help="Barnes-Hut treecode: time, breakdown, interactions/body, error vs direct")
    bt.add_argument("--sizes", type=_positive_int, nargs="+", default=None,
                    help="N values (default 100000 1000000 10000000; --quick: 20000 100000)")
    bt.add_argument("--models", nargs="+", choices=["plummer", "cube"], default=["plummer", "cube"],
                    help="Plummer sphere and/or uniform cube in [-1,1]^3 (default both)")
    bt.add_argument("--theta", type=_fraction_or_float, nargs="+", default=None,
                    help="opening angles (default 0.4 0.5 0.6 0.8; --quick: 0.5 0.8)")
    bt.add_argument("--quad", choices=["yes", "no", "both"], default="both", help="quadrupoles (default both)")
    bt.add_argument("--repeat", type=_positive_int, default=None, help="best of (default 2; --quick: 1)")
    bt.add_argument("--sample", type=int, default=1000,
                    help="particles checked against direct summation (>= 1000, default 1000)")
    bt.add_argument("--eps", type=_fraction_or_float, default=None,
                    help="softening (default (1/64) * (N/1e4)^(-1/3) for each N)")
    bt.add_argument("--threads", type=_thread_count, default=None)
    bt.add_argument("--precision", choices=["mixed", "double"], default="mixed",
                    help="tree kernels (default mixed; the direct reference is always double)")
    bt.add_argument("--backend", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: time the tree with its lists on the GPU next to the CPU lists, same run "
                         "(first model, first theta (default 0.6), --sizes default 1000000; --quick: 100000)")
    bt.add_argument("--quick", action="store_true",
                    help="N = 20000, 100000, theta 0.6 0.8, repeat 1 (options given explicitly still apply)")
    bt.add_argument("--json", metavar="FILE", help="also write machine-readable results ('-' for stdout only)")
    _document_numbers(parser)
    return parser


def _add_config_parser(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("config", help="flags to link legacy GRAPE-6 codes against libgravpipe_g6 (GRAPE-6 interface)")
    for flag, what in (("--cflags", "compiler flags (include path of gravpipe/g6.h)"),
                       ("--libs", "linker flags (-L, rpath, -lgravpipe_g6)"),
                       ("--g6-libdir", "folder of libgravpipe_g6.so"),
                       ("--includedir", "folder holding gravpipe/g6.h"),
                       ("--pkgconfigdir", "folder of gravpipe_g6.pc, for PKG_CONFIG_PATH")):
        c.add_argument(flag, action="store_true", help=what)


def _add_run_parser(sub: argparse._SubParsersAction) -> None:
    """``gravpipe run``. Every option defaults to None so that a value from --config can be
    told apart from one typed on the command line (which wins); the real defaults are in
    ``gravpipe.runconfig.RunSettings``."""
    from gravpipe.gravity import GRAVITY
    from gravpipe.integrators import INTEGRATORS
    from gravpipe.runconfig import DEFAULT_EPS, DEFAULT_N, DEFAULT_SEED, DEFAULT_T_END, IC_MODELS
    from gravpipe.tree_params import THETA_MAX

    defaults = {key: value for spec in INTEGRATORS.values() for key, value in spec.defaults.items()}
    gravity_help = "; ".join(f"{k.name}: {k.description}, default integrator {k.default_integrator}"
                             for k in GRAVITY.values())
    r = sub.add_parser(
        "run", help="evolve a particle set (default: an embedded Plummer sphere with Hermite block steps)",
        description="Evolve a particle set. Without FILE: an embedded Plummer sphere "
                    f"(N = {DEFAULT_N}, seed {DEFAULT_SEED}, Hermite, eps 1/64, t_end {DEFAULT_T_END:g}). "
                    "Without --out nothing is written. Times are absolute and may be any value: "
                    "stops on the integrator's grid (multiples of dt_max for Hermite, dt for leapfrog) "
                    "are free, any other stop costs one extra force evaluation on all particles. "
                    "--gravity tree runs the Barnes-Hut treecode (opening angle --theta) with leapfrog.")
    r.add_argument("file", nargs="?", default=None, help="initial snapshot (GADGET-4 layout HDF5); t0 is its time")
    r.add_argument("--ic", choices=IC_MODELS, default=None, help="generated initial conditions (default plummer)")
    r.add_argument("-n", type=_positive_int, default=None, help=f"particles of generated ICs (default {DEFAULT_N})")
    r.add_argument("--seed", type=int, default=None, help=f"seed of generated ICs (default {DEFAULT_SEED})")
    r.add_argument("--integrator", choices=tuple(INTEGRATORS), default=None,
                   help="default: the gravity kind's (" + ", ".join(
                       f"{k.default_integrator} for {k.name}" for k in GRAVITY.values()) + ")")
    r.add_argument("--gravity", choices=tuple(GRAVITY), default=None, help=f"force solver (default direct). {gravity_help}")
    r.add_argument("--theta", type=_fraction_or_float, default=None,
                   help=f"opening angle of --gravity tree (default {GRAVITY['tree'].params['theta']:g}; "
                        f"smaller: more accurate, slower; at most 2/sqrt(3) = {THETA_MAX:.4f}, beyond which a "
                        "particle inside a cell could take the cell's multipole expansion)")
    r.add_argument("--t-end", type=_fraction_or_float, default=None, help=f"end time (default {DEFAULT_T_END:g})")
    r.add_argument("--snap-every", type=_fraction_or_float, default=None,
                   help="snapshot interval (with --out; default: one snapshot at t_end)")
    r.add_argument("--checkpoint-every", type=_fraction_or_float, default=None,
                   help="checkpoint interval (with --out; default: one checkpoint at t_end)")
    r.add_argument("--out", metavar="DIR", default=None,
                   help="run directory: snapshot_NNNN.h5, checkpoint_NNNN.h5, diagnostics.csv (default: write nothing); "
                        "a directory holding another run is refused (see --resume, --overwrite)")
    r.add_argument("--overwrite", action="store_const", const=True, default=None,
                   help="delete the run files (snapshots, checkpoints, diagnostics.csv) already in --out first")
    r.add_argument("--force", action="store_const", const=True, default=None,
                   help=f"write the files --snap-every and --checkpoint-every ask for even when they are more "
                        f"than {MAX_OUTPUT_FILES:,} (refused without it, saying how many)")
    r.add_argument("--config", metavar="RUN.TOML", default=None,
                   help="TOML file with the same keys as these options (t_end, eps, memory_budget, ...) but "
                        "--resume and --config; the command line overrides it")
    r.add_argument("--resume", metavar="DIR", default=None,
                   help="continue the run in DIR from its newest checkpoint, to the stored t_end and cadences "
                        "(--t-end, --snap-every, --checkpoint-every, --threads may override them)")
    r.add_argument("--eps", type=_fraction_or_float, default=None, help=f"Plummer softening (default 1/{1 / DEFAULT_EPS:g})")
    r.add_argument("--eta", type=_fraction_or_float, default=None,
                   help=f"Hermite accuracy parameter (default {defaults['eta']:g})")
    r.add_argument("--eta-s", type=_fraction_or_float, default=None,
                   help=f"Hermite first-step parameter (default {defaults['eta_s']:g})")
    r.add_argument("--dt-max", type=_fraction_or_float, default=None,
                   help=f"Hermite largest step (default {defaults['dt_max']:g})")
    r.add_argument("--dt", type=_fraction_or_float, default=None, help=f"leapfrog step (default {defaults['dt']:g})")
    r.add_argument("--precision", choices=["mixed", "double"], default=None,
                   help="force arithmetic, default mixed (with --gravity tree: the tree's list kernels)")
    r.add_argument("--backend", default=None,
                   help="auto (default), cpu or cuda (--gravity tree: cuda evaluates its lists on the GPU, "
                        "in core; auto keeps the tree on the CPU)")
    r.add_argument("--threads", type=_thread_count, default=None, help="CPU threads (default: all)")
    r.add_argument("--no-progress", action="store_const", const=True, default=None, help="no progress bar")
    r.add_argument("--precise-energy", action=argparse.BooleanOptionalAction, default=None,
                   help="diagnostics rows with a precise potential of their own (a float64 direct sum: ~3-5 steps' "
                        "time; a float64 tree at theta 0.25, |dW/W| ~1e-6: 7-12 steps' time) instead of the run's "
                        "own last force evaluation (free, with the run's force error: |dW/W| ~1e-4 for the tree at "
                        "theta 0.6). Default: precise for --gravity direct, the run's own for tree")
    r.add_argument("--memory-budget", metavar="SIZE", default=None,
                   help="out of core (with --gravity tree, leapfrog, and --scratch): particles in the pages of a "
                        "scratch file, everything that grows with N within SIZE ('4GiB')")
    r.add_argument("--scratch", metavar="DIR", default=None, help="directory of the out-of-core scratch file")
    r.add_argument("--page-bytes", metavar="SIZE", default=None, help="out-of-core page size (default: from the budget, ~1024 frames, at most 1MiB)")


class _Terminated(BaseException):
    """SIGTERM arrived (a batch system's time limit, ``kill``): unwinds like Ctrl-C, so that
    ``with`` blocks close their stores and remove their scratch files; BaseException, so that
    no ``except Exception`` stops it on the way."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated(signum)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    # values of options taking several numbers (bench tree --theta 0.5 0.8) cannot be joined
    number_options = {o for options in _number_options(parser, single=True).values() for o in options}
    args = parser.parse_args(_attach_signed_values(argv, number_options))
    from gravpipe.backends import BackendUnavailableError
    from gravpipe.errors import StoreError

    _warn_threads(getattr(args, "threads", None))
    # Python's default for SIGTERM ends the process at once, leaving an out-of-core run's
    # scratch files (tens of GB) behind; the handler runs when the interpreter next regains
    # control (after the C++ stage in progress)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main else None
    try:
        code = COMMANDS[args.command](args)
        # flushed here, not at interpreter exit, so that a closed pipe surfaces below
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _stdout_closed()
    except (UserError, ValueError, BackendUnavailableError, StoreError) as exc:
        # a StoreError (ChecksumError too) names the scratch file, the page and the reason:
        # a full scratch disk or a corrupt page is the user's to see to, in one line
        print(f"gravpipe {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except OSError as exc:
        if not _is_user_mistake(exc):
            raise  # an I/O fault of the machine (EIO, ...), not a mistake: keep the traceback
        print(f"gravpipe {args.command}: error: {_os_error_text(exc)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(f"gravpipe {args.command}: interrupted", file=sys.stderr)
        return 130
    except _Terminated:
        print(f"gravpipe {args.command}: terminated (SIGTERM); scratch files removed, files already written kept",
              file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


# OSError numbers that a user can fix: a wrong or missing path, a file where a folder is
# expected (or the reverse), permissions, a full or read-only disk, a file size limit
# (ulimit -f).
_USER_ERRNOS = {errno.ENOENT, errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM,
                errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTEMPTY,
                errno.EFBIG}

_USER_OS_ERRORS = (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError)


def _is_user_mistake(exc: OSError) -> bool:
    # by type too: FileNotFoundError("message") raised by our own code carries no errno
    return isinstance(exc, _USER_OS_ERRORS) or exc.errno in _USER_ERRNOS


def _os_error_text(exc: OSError) -> str:
    """One line for an OSError: "PATH: reason" when it names a file (as the OS's own
    errors and gravpipe.io's write errors do), else its message without "[Errno N]"."""
    reason = exc.strerror or str(exc)
    if exc.filename is None:
        return reason
    if exc.filename2 is not None:  # rename, link: both paths matter
        return f"{exc.filename} -> {exc.filename2}: {reason}"
    return f"{exc.filename}: {reason}"


def _stdout_closed() -> int:
    """The reader of stdout went away (``gravpipe ... | head``). Python's documented way
    (library/signal, "Note on SIGPIPE"): point stdout at devnull so that the flush at
    interpreter exit cannot raise again, and end quietly."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def _warn_threads(threads: int | None) -> None:
    """One line on stderr when --threads asks for more threads than this process has cores:
    it is allowed (the result does not depend on it) but only makes the run slower."""
    if threads is None:
        return
    # the cores this process may run on (taskset, cpusets), not the machine's
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if cores is not None and threads > cores:
        print(f"gravpipe: warning: --threads {threads} exceeds the {cores} cores this process may use; "
              "threads beyond that share cores and make the run slower, not faster", file=sys.stderr)


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

    parameters = {"ic": args.model, "seed": -1 if args.seed is None else args.seed}
    if args.model in gp.ic.BLOCK_MODELS:  # block by block: any N, one block in memory
        from gravpipe.store import parse_byte_size

        if args.memory_budget is not None:
            gp.ic.check_ic_budget(parse_byte_size(args.memory_budget), args.n)
        with io.streamed_snapshot(args.output, args.n, 0.0, parameters=parameters) as out:
            for block in gp.ic.model_blocks(args.model, args.n, seed=args.seed):
                out.write(block)
    elif args.memory_budget is not None:
        raise ValueError(f"--memory-budget: the {args.model} model is drawn whole in memory; "
                         f"these stream block by block: {', '.join(gp.ic.BLOCK_MODELS)}")
    else:
        make = {"uniform-sphere": gp.ic.uniform_sphere}
        io.write_snapshot(args.output, make[args.model](args.n, seed=args.seed), 0.0, parameters=parameters)
    print(f"wrote {args.output}: {args.model}, N = {args.n}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from gravpipe import io

    if args.token_file:  # a remote snapshot's reads (gravpipe.reservoir.remote) take it from there
        os.environ["GRAVPIPE_TOKEN_FILE"] = args.token_file
    print(io.describe(args.file))
    return 0


def _bench_threads(args: argparse.Namespace, info: dict) -> int:
    """The CPU threads a bench runs with: ``--threads`` when given, else the machine's
    (what its header prints, so that a figure names the threads that made it)."""
    return args.threads or info["openmp_threads"]


def _bench_ooc(args: argparse.Namespace) -> int:
    from gravpipe.bench import machine
    from gravpipe.bench import ooc as bo
    from gravpipe.store import check_scratch_dir, format_bytes

    check_scratch_dir(args.scratch, "--scratch")  # before minutes of in-core steps, not after
    info = machine.describe()
    print(f"gravpipe bench ooc  {info['cpu']}, {_bench_threads(args, info)} threads, isa {info['isa']}")
    doc: dict = {"benchmark": "ooc", "machine": info}
    if "swap" in args.what:
        rows = []
        for n in args.n:
            rows += bo.swap(n, args.scratch, args.pages or bo.DEFAULT_PAGE_SIZES,
                            args.fractions or bo.DEFAULT_CACHE_FRACTIONS, model=args.model, threads=args.threads,
                            progress=lambda m: print(m, flush=True))
        print(f"{'N':>10} {'page':>9} {'cache/data':>10} {'cache':>11} {'read/step':>11} {'written/step':>12} "
              f"{'swapped/data':>12} {'step s':>7}")
        for r in rows:
            print(f"{r['n']:>10} {format_bytes(r['page_bytes']):>9} {r['cache_fraction']:>10.3g} "
                  f"{format_bytes(r['cache_bytes']):>11} {format_bytes(r['bytes_read']):>11} "
                  f"{format_bytes(r['bytes_written']):>12} {r['bytes_swapped'] / r['data_bytes']:>12.2f} "
                  f"{r['seconds_step']:>7.2f}")
        doc["swap"] = rows
        if args.plot:
            bo.plot_swap(rows, args.plot)
            print(f"wrote {args.plot}")
    if "ratio" in args.what:
        doc["ratio"] = []
        for n in args.n:
            page = {"page": args.pages[0]} if args.pages else {}
            r = bo.ratio(n, args.scratch, budget_fraction=args.budget_fraction, model=args.model, threads=args.threads,
                         repeat=args.repeat, progress=lambda m: print(m, flush=True), **page)
            doc["ratio"].append(r)
            st = r["stages"]
            print(f"N = {n}, second step: in core {r['seconds_in_core']:.2f} s, out of core "
                  f"{r['seconds_out_of_core']:.2f} s, ratio {r['ratio']:.3f} (first step: {r['seconds_in_core_first_step']:.2f} "
                  f"s, {r['seconds_out_of_core_first_step']:.2f} s, {r['ratio_first_step']:.3f}) (budget {format_bytes(r['budget_bytes'])} = {r['budget_fraction']:.3g} of "
                  f"the data: particle cache {format_bytes(r['cache_bytes'])}, cell cache "
                  f"{format_bytes(r['cell_cache_bytes'])} for {r['cells']} cells; peak charged "
                  f"{format_bytes(r['budget_peak_bytes'])}); bitwise equal: {r['identical_to_in_core']}")
            print("  stages: " + ", ".join(f"{k} {v:.2f} s" for k, v in st.items()) +
                  f"; read {format_bytes(r['bytes_read'])} (cells {format_bytes(r['cell_bytes_read'])}), written "
                  f"{format_bytes(r['bytes_written'])} (cells {format_bytes(r['cell_bytes_written'])}), stalls "
                  f"{r['stall_seconds']:.2f} thread-s; {r['interactions_per_s_out_of_core']:.3g} interactions/s; "
                  f"pp/body {r['pp_per_body']:.0f}, pc/body {r['pc_per_body']:.0f}, MAC/body {r['mac_per_body']:.0f}")
            print(f"  scratch: {r['io_mode']} I/O, " +
                  ("in memory (tmpfs): the walk loads pages as it needs them, no prefetch" if r["scratch_in_memory"]
                   else f"on a device: the threads walk the runs side by side, the prefetch "
                        f"{r['walk_prefetch_runs']} runs a thread ahead of them ({r['walk_prefetch_reads']})"))
            tree_in_sort = bool(r["sort"].get("tree_in_sort"))
            if tree_in_sort:
                print(f"  tree: built as the sort wrote the particles (count {r['sort']['seconds_tree_count']:.2f} s "
                      f"in the merge, records {r['sort']['seconds_tree_build']:.2f} s beside the permute)")
            elif r["sort"].get("tree_declined"):
                print(f"  tree: built after the sort ({r['sort']['tree_declined']})")
            print("  " + _stage_traffic(r["stage_bytes"], st, r["n"], tree_in_sort))
            print("  " + _stage_cpu(r["stage_cpu_seconds"], st, r["threads"], r["stage_context_switches"]))
            print("  " + _stage_device(r["device"], r["stage_device"], st, (r["bytes_read"], r["bytes_written"])))
            if len(r["seconds_per_repeat"]) > 1:
                print("  each repeat, in core and out of core back to back: " +
                      ", ".join(f"{a:.2f} / {b:.2f} s = {b / a:.3f}" for a, b in r["seconds_per_repeat"]) +
                      f"; median ratio {r['ratio_median']:.3f}")
    if "demo" in args.what:
        if not args.file:
            raise UserError("bench ooc demo: needs --file (an IC snapshot, e.g. from gravpipe ic)")
        page = {"page": args.pages[0]} if args.pages else {}
        r = bo.demo(args.file, args.scratch, args.memory_budget, n_leaf=args.n_leaf, theta=args.theta, sample=args.sample,
                    threads=args.threads, progress=lambda m: print(m, flush=True), **page)
        doc["demo"] = r
        print(json.dumps(r, indent=1))
    from rich.console import Console
    _emit_json(args.json, lambda: doc, Console())
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    if args.bench == "ooc":
        return _bench_ooc(args)
    if args.bench == "direct":
        return _bench_direct(args)
    if args.bench == "hermite":
        return _bench_hermite(args)
    if args.bench == "tree":
        return _bench_tree(args)
    if args.bench == "transfer":
        return _bench_transfer(args)
    if args.bench == "pingpong":
        return _bench_pingpong(args)
    if args.bench == "storage":
        return _bench_storage(args)
    if args.bench == "model":
        from gravpipe.perfmodel.cli import bench_model
        return bench_model(args)
    raise UserError(f"unknown benchmark {args.bench!r}")


def _bench_direct(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from gravpipe.bench import direct, machine

    default_sizes = direct.DEFAULT_SIZES[args.backend]
    sizes = [1024, 4096, 16384] if args.quick else (args.sizes or default_sizes)
    console = Console(stderr=args.json == "-")
    info = machine.describe()
    where = (f"GPU {info['gpu']}" if args.backend == "cuda"
             else f"{_bench_threads(args, info)} threads, isa {' '.join(args.isa or [info['isa']])}")
    console.print(f"[bold]gravpipe bench direct[/bold]  {info['cpu']}, {where}, eps {direct.EPS}, Plummer, "
                  f"self excluded, n_i = {args.n_i or 'N'}")
    results, numpy_rate = direct.run(sizes, args.precision, args.mode, args.backend, args.threads, n_i=args.n_i,
                                     isas=args.isa)
    table = Table()
    for col in ("N", "n_i", "mode", "precision", "backend", "isa", "threads", "interactions/s", "Gflop/s",
                "x numpy f64"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(str(r.n), str(r.n_i), r.mode, r.precision, r.backend, r.isa or "-", str(r.threads or "-"),
                      f"{r.interactions_per_second:.3e}", f"{r.gflops:.1f}", f"{r.ratio_to_numpy:.1f}")
    console.print(table)
    console.print("flops: 38 per interaction for acc+pot, 60 with jerk (GRAPE convention); "
                  "'x numpy f64' is the ratio to the numpy float64 all-pairs rate measured in this run")
    _emit_json(args.json, lambda: direct.as_json(results, info), console)
    return 0


def _bench_hermite(args: argparse.Namespace) -> int:
    from rich.console import Console

    from gravpipe.bench import hermite, machine

    console = Console(stderr=args.json == "-")
    info = machine.describe()
    console.print(f"[bold]gravpipe bench hermite[/bold]  {info['cpu']}, {_bench_threads(args, info)} threads, "
                  f"isa {info['isa']}")
    results = []
    for precision in args.precision:
        r = hermite.run(n=args.n, t_end=args.t_end, precision=precision, threads=args.threads,
                        eta=args.eta, eps=args.eps, backend=args.backend)
        console.print(hermite.summary(r), highlight=False)
        results.append(r)
    _emit_json(args.json, lambda: hermite.as_json(results, info), console)
    return 0


def _bench_transfer(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from gravpipe.bench import machine, transfer

    console = Console(stderr=args.json == "-")
    info = machine.describe()
    rows, fits = transfer.run(args.sizes, args.repeats)
    console.print(f"[bold]gravpipe bench transfer[/bold]  GPU {info['gpu']}, host {info['cpu']}, "
                  f"median of {args.repeats} cudaMemcpy per size")
    table = Table()
    for col in ("bytes", "h2d pageable GB/s", "h2d pinned GB/s", "d2h pageable GB/s", "d2h pinned GB/s"):
        table.add_column(col, justify="right")
    by = {(r["direction"], r["pinned"], r["bytes"]): r["seconds"] for r in rows}
    for b in sorted({r["bytes"] for r in rows}):
        table.add_row(str(b), *(f"{b / by[(d, p, b)] / 1e9:.3g}" for d in ("h2d", "d2h") for p in (False, True)))
    console.print(table)
    for f in fits:
        console.print(f"fit {f.direction} {'pinned  ' if f.pinned else 'pageable'}: C1 = {1e6 * f.latency_s:.2f} us, "
                      f"1/C2 = {f.bandwidth_gb_s:.1f} GB/s (worst point off the fit by {100 * f.max_rel_residual:.0f}%)",
                      highlight=False)
    if args.plot:
        transfer.plot(rows, fits, args.plot)
        console.print(f"wrote {args.plot}")
    _emit_json(args.json, lambda: transfer.as_json(rows, fits, info), console)
    return 0


def _bench_pingpong(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from gravpipe import parallel
    from gravpipe.bench import machine, pingpong

    comm = parallel.resolve_comm()
    rows = pingpong.run(comm, args.sizes, args.repeats)
    if rows is None:  # ranks other than 0 only take part
        return 0
    from mpi4py import MPI

    library = MPI.Get_library_version().splitlines()[0].strip()
    fitted = pingpong.fits(rows)
    console = Console(stderr=args.json == "-")
    info = machine.describe()
    console.print(f"[bold]gravpipe bench pingpong[/bold]  {info['cpu']}, {library}, ranks 0 <-> 1 of "
                  f"{comm.Get_size()}, median of {args.repeats} round trips / 2", highlight=False)
    table = Table()
    for col in ("bytes", "one-way us", "GB/s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["bytes"]), f"{1e6 * r['seconds']:.2f}", f"{r['gb_s']:.3g}")
    console.print(table)
    for name, f in fitted.items():
        console.print(f"fit {name:<5}: C1 = {1e6 * f.latency_s:.2f} us, 1/C2 = {f.bandwidth_gb_s:.2f} GB/s "
                      f"(worst point off the fit by {100 * f.max_rel_residual:.0f}%)", highlight=False)
    if args.plot:
        pingpong.plot(rows, fitted, args.plot)
        console.print(f"wrote {args.plot}")
    _emit_json(args.json, lambda: pingpong.as_json(rows, fitted, info, library), console)
    return 0


def _bench_storage(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from gravpipe.bench import machine, storage

    console = Console(stderr=args.json == "-")
    if not console.is_terminal:  # a file or a pipe: keep lines whole
        console.width = max(console.width, 150)
    info = machine.describe()
    with console.status("") as status:
        rows, devices = storage.run(args.scratch, sizes=args.sizes, io=args.io,
                                    progress=lambda msg: status.update(msg))
    fitted = storage.fits(rows)
    console.print(f"[bold]gravpipe bench storage[/bold]  {info['cpu']}, median of "
                  f"{storage.MIN_REPEATS}..{storage.MAX_REPEATS} blocks per size", highlight=False)
    for name in ("disk", "shm"):
        if name in devices:
            d = devices[name]
            console.print(f"  {name}: {d['directory']} on {d['device']} ({d['fstype']}, mounted at {d['mount']}), "
                          f"I/O {'; '.join(d['io_modes'])}", highlight=False)
    table = Table()
    names = [n for n in ("disk", "shm") if n in devices]
    cols = [(n, d) for n in names for d in ("write", "read")]
    table.add_column("bytes", justify="right")
    for n, d in cols:
        table.add_column(f"{n} {d} GB/s", justify="right")
    by = {(r["device"], r["direction"], r["bytes"]): r for r in rows}
    for b in sorted({r["bytes"] for r in rows}):
        table.add_row(str(b), *(f"{by[(n, d, b)]['gb_s']:.3g}" for n, d in cols))
    console.print(table)
    for f in fitted:
        console.print(f"fit {f.device} {f.direction:<5}: C1 = {1e6 * f.latency_s:7.2f} us, 1/C2 = "
                      f"{f.bandwidth_gb_s:6.2f} GB/s (worst point off the fit by {100 * f.max_rel_residual:.0f}%)",
                      highlight=False)
    fit = {(f.device, f.direction): f for f in fitted}
    console.print(f"reference: memcpy {devices['memcpy_gb_s']:.2f} GB/s", highlight=False)
    crc = devices["page_checksum"]
    console.print(f"page checksum (CRC32C, {crc['implementation']}, {crc['page_bytes'] // 1024} KiB pages): "
                  f"{crc['cold_gb_s']:.1f} GB/s on pages out of the caches (as read from disk), "
                  f"{crc['hot_gb_s']:.1f} GB/s in them", highlight=False)
    if "shm" in devices:  # the smallest block measured, not the fitted C1 (noise can push it <= 0)
        b0 = min(r["bytes"] for r in rows)
        for d in ("write", "read"):
            k, s = by[("disk", d, b0)], by[("shm", d, b0)]
            console.print(f"bulk memory (/dev/shm) vs disk, {d}: {b0} B block {1e6 * s['seconds']:.2f} us vs "
                          f"{1e6 * k['seconds']:.2f} us ({k['seconds'] / s['seconds']:.0f}x); bandwidth "
                          f"{fit[('shm', d)].bandwidth_gb_s / fit[('disk', d)].bandwidth_gb_s:.1f}x", highlight=False)
    if args.plot:
        storage.plot(rows, fitted, devices, args.plot)
        console.print(f"wrote {args.plot}")
    _emit_json(args.json, lambda: storage.as_json(rows, fitted, devices, info), console)
    return 0


def _tree_bench_settings(args: argparse.Namespace) -> dict:
    """The ``bench tree`` options resolved (--quick fills what was not given) and checked;
    a bad value raises UserError naming its option."""
    import math

    from gravpipe.bench import tree

    sizes = args.sizes or list(tree.QUICK_SIZES if args.quick else tree.DEFAULT_SIZES)
    thetas = args.theta or list(tree.QUICK_THETAS if args.quick else tree.DEFAULT_THETAS)
    repeat = args.repeat or (tree.QUICK_REPEAT if args.quick else tree.DEFAULT_REPEAT)
    for theta in thetas:
        if not (math.isfinite(theta) and theta > 0):
            raise UserError(f"--theta: opening angles must be finite and > 0, got {theta:g}")
    if args.sample < tree.MIN_SAMPLE:
        raise UserError(f"--sample: must be >= {tree.MIN_SAMPLE} (errors are medians and 99th percentiles "
                        f"over the sample), got {args.sample}")
    if args.sample > min(sizes):
        raise UserError(f"--sample: {args.sample} particles exceed the smallest N in --sizes ({min(sizes)})")
    if args.eps is not None and not (math.isfinite(args.eps) and args.eps >= 0):
        raise UserError(f"--eps: must be finite and >= 0, got {args.eps:g}")
    quads = {"yes": [True], "no": [False], "both": [True, False]}[args.quad]
    return dict(sizes=sizes, models=args.models, thetas=thetas, quadrupoles=quads, repeat=repeat,
                sample=args.sample, threads=args.threads, precision=args.precision, eps=args.eps)


def _bench_tree(args: argparse.Namespace) -> int:
    from rich.console import Console

    from gravpipe.bench import machine, tree

    if args.backend == "cuda":
        return _bench_tree_backends(args)
    settings = _tree_bench_settings(args)
    console = Console(stderr=args.json == "-")
    if not console.is_terminal:  # a file or a pipe: keep the tables' columns whole
        console.width = max(console.width, 150)
    info = machine.describe()
    eps = "(1/64) (N/1e4)^(-1/3)" if args.eps is None else f"{args.eps:g}"
    console.print(f"[bold]gravpipe bench tree[/bold]  {info['cpu']}, {_bench_threads(args, info)} threads, "
                  f"isa {info['isa']}, precision {args.precision}, eps {eps}, best of {settings['repeat']}, "
                  f"error sample {args.sample}", highlight=False)
    with console.status("") as status:
        results, references = tree.run(**settings, progress=lambda msg: status.update(msg))
    for table in tree.tables(results):
        console.print(table)
    console.print(tree.summary(results, references), highlight=False, soft_wrap=True)
    _emit_json(args.json, lambda: tree.as_json(results, references, info), console)
    return 0


def _bench_tree_backends(args: argparse.Namespace) -> int:
    """``gravpipe bench tree --backend cuda``: the GPU lists timed next to the CPU lists."""
    from dataclasses import asdict

    from rich.console import Console

    from gravpipe.backends import resolve_backend
    from gravpipe.bench import machine, tree

    resolve_backend("cuda")  # BackendUnavailableError (exit code) before any work
    sizes = args.sizes or ([100_000] if args.quick else [1_000_000])
    theta = args.theta[0] if args.theta else 0.6
    console = Console(stderr=args.json == "-")
    if not console.is_terminal:
        console.width = max(console.width, 150)
    info = machine.describe()
    console.print(f"[bold]gravpipe bench tree --backend cuda[/bold]  {info['cpu']}, {_bench_threads(args, info)} "
                  f"threads, GPU {machine.gpu_name()}, precision mixed, best of {args.repeat or 1}",
                  highlight=False)
    with console.status("") as status:
        rows = tree.compare_backends(sizes, args.models[0], theta, args.eps, args.repeat or 1, args.threads,
                                     progress=lambda msg: status.update(msg))
    console.print(tree.backend_table(rows))
    _emit_json(args.json, lambda: {"machine": info, "gpu": machine.gpu_name(), "rows": [asdict(r) for r in rows]},
               console)
    return 0


# ---- gravpipe run ---------------------------------------------------------------------

# what --resume may change; everything else is fixed by the checkpoint's run config
_RESUME_KEYS = {"t_end", "snap_every", "checkpoint_every", "threads", "no_progress", "force", "memory_budget",
                "scratch"}
# run.toml / command-line keys that are gravity parameters (gravpipe.gravity.GRAVITY)
_GRAVITY_PARAMS = ("theta",)


def _option_name(key: str) -> str:
    return {"file": "FILE", "n": "-n"}.get(key, "--" + key.replace("_", "-"))


def cmd_run(args: argparse.Namespace) -> int:
    """``gravpipe run``; under ``mpiexec -n P`` on every rank, rank 0 printing."""
    from gravpipe import parallel
    from gravpipe.errors import StoreError

    comm = parallel.resolve_comm() if parallel.launched_under_mpi() else None
    if comm is None:
        return _run(args)
    if _resumes_one_process_paged_run(args):  # every rank finds it: one line from rank 0, no abort
        if parallel.is_root(comm):
            print("gravpipe run: error: a run out of core in one process resumes in one process; mpiexec started "
                  f"{comm.Get_size()}: resume it without mpiexec (a run out of core over ranks starts under mpiexec "
                  "with --memory-budget and --scratch)", file=sys.stderr)
        return EXIT_USER_ERROR
    if not parallel.is_root(comm):
        sys.stdout = open(os.devnull, "w")  # rank 0 prints the header, progress and summary
    try:
        return _run(args)
    except _Terminated:
        raise  # every rank got the signal (mpiexec forwards it): each unwinds and exits itself
    except BaseException as exc:  # noqa: BLE001 - any failure on one rank must stop them all
        code = EXIT_USER_ERROR if isinstance(exc, (UserError, ValueError, OSError, StoreError)) else 1
        if getattr(exc, "on_every_rank", False):  # every rank raised it alike: each ends, rank 0 says it
            if parallel.is_root(comm):
                print(f"gravpipe run: error: {_rank_error_text(exc)}", file=sys.stderr, flush=True)
            return code
        if getattr(exc, "known_to_every_rank", False):  # each ends; the rank that failed says why
            if not getattr(exc, "said_by_another_rank", False):
                print(f"gravpipe run: error on rank {comm.Get_rank()} of {comm.Get_size()}: "
                      f"{_rank_error_text(exc)}", file=sys.stderr, flush=True)
            return code
        # the other ranks would otherwise wait forever in the next collective
        print(f"gravpipe run: error on rank {comm.Get_rank()} of {comm.Get_size()}: {_rank_error_text(exc)}",
              file=sys.stderr, flush=True)
        comm.Abort(code)
        os._exit(code)  # MPICH's Abort can return before the launcher ends this rank: no second line


def _rank_error_text(exc: BaseException) -> str:
    """The cause of a rank's failure in a few words: out of memory, the OS's reason with
    its path, or the message."""
    if isinstance(exc, MemoryError):
        return f"out of memory (MemoryError{': ' + str(exc) if str(exc) else ''})"
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return f"cannot write: disk full ({_os_error_text(exc)})"
    if isinstance(exc, OSError):
        return _os_error_text(exc)
    text = str(exc)
    return text if text and isinstance(exc, (UserError, ValueError)) else f"{type(exc).__name__}: {text}"


def _resumes_one_process_paged_run(args: argparse.Namespace) -> bool:
    """Whether ``gravpipe run`` resumes a run that was out of core in one process (residence
    "pages"). False where that cannot be told (a missing file): the run itself then says
    what is wrong."""
    import warnings

    from gravpipe import residence
    from gravpipe.run_loop import latest_checkpoint

    if args.resume is None:
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return residence.of_checkpoint(latest_checkpoint(args.resume)).name == "pages"
    except (OSError, ValueError):
        return False


def _run(args: argparse.Namespace) -> int:
    from gravpipe import runconfig
    from gravpipe.run_loop import check_run_dir

    cli_values = {key: getattr(args, key) for key in runconfig.KEYS}
    if args.resume is not None:
        return _resume_run(args, cli_values)
    file_values = runconfig.load_config(args.config) if args.config else {}
    settings, given = runconfig.merge(file_values, cli_values)
    if settings.file is not None and given & set(runconfig.IC_KEYS):
        names = ", ".join(_option_name(k) for k in runconfig.IC_KEYS if k in given)
        raise UserError(f"FILE ({settings.file}) gives the initial conditions; {names} (for generated ones) "
                        "cannot be combined with it")
    note = _resolve_gravity(settings, file_values, cli_values, args.config)
    if settings.out is not None:  # before the initial conditions and the first forces are paid for
        check_run_dir(settings.out, bool(settings.overwrite))
    print(f"gravpipe run: {_source_words(settings)}", flush=True)
    with _phase("initial conditions, first forces"):
        sim = _new_simulation(settings)
    with sim:  # a paged run's scratch file goes however the run ends
        snap_every, ckpt_every = _cadences(settings, sim.time)
        _print_start(sim, settings.t_end, settings.out, note)
        return _evolve_and_report(sim, settings.t_end, snap_every, ckpt_every, settings.out,
                                  not settings.no_progress, overwrite=bool(settings.overwrite),
                                  force=bool(settings.force))


def _given_as(key: str, value, cli_values: dict, config: str | None) -> str:
    """How the user wrote a setting: "--integrator hermite" or 'integrator = "hermite" in run.toml'."""
    if cli_values.get(key) is not None:
        return f"{_option_name(key)} {value:g}" if isinstance(value, float) else f"{_option_name(key)} {value}"
    return f"{key} = {json.dumps(value)} in {config}"


def _resolve_gravity(settings, file_values: dict, cli_values: dict, config: str | None) -> str | None:
    """Check how gravity combines with integrator and the gravity parameters (a mistake raises
    UserError naming the option as the user wrote it) and give a run that names no
    integrator the gravity kind's default. Returns a line for the run's header saying so
    when that default is not the usual one, or None."""
    import math

    from gravpipe.gravity import GRAVITY, PARAMETER_WORDS
    from gravpipe.integrators import INTEGRATORS

    def given(key):
        return cli_values.get(key) is not None or key in file_values

    def named(key):
        return _given_as(key, getattr(settings, key), cli_values, config)

    kind = GRAVITY[settings.gravity]
    for key in _GRAVITY_PARAMS:
        value = getattr(settings, key)
        if value is None:
            continue
        if key not in kind.params:
            raise UserError(f"{named(key)}: {PARAMETER_WORDS[key]} is only for --gravity " +
                            " or ".join(k.name for k in GRAVITY.values() if key in k.params) +
                            f" (this run has gravity {kind.name})")
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"{named(key)}: {PARAMETER_WORDS[key]} must be finite and > 0")
    if given("integrator"):
        if INTEGRATORS[settings.integrator].needs_jerk and not kind.delivers_jerk:
            raise UserError(f"{named('gravity')} needs --integrator {kind.default_integrator}, got "
                            f"{named('integrator')} ({settings.integrator} needs jerks, which the {kind.name} "
                            "solver does not compute)")
        return None
    settings.integrator = kind.default_integrator
    spec = INTEGRATORS[settings.integrator]
    foreign = [(k, other.name) for other in INTEGRATORS.values() if other is not spec for k in other.defaults
               if k not in spec.defaults and given(k)]
    if foreign and given("gravity"):  # else Simulation names the parameter and the integrator
        key, owner = foreign[0]
        raise UserError(f"{named(key)}: a {owner.capitalize()} parameter, but {named('gravity')} runs {spec.name} "
                        f"(it takes {', '.join('--' + k.replace('_', '-') for k in spec.defaults)})")
    if kind.name == "direct":
        return None
    return (f"{spec.name} chosen for gravity {kind.name} (no integrator given"
            + ("; hermite needs jerks, which the treecode does not compute)" if not kind.delivers_jerk else ")"))


def _new_simulation(settings):
    """The run the settings describe, its initial conditions from FILE or the ic/n/seed keys
    and its particles where memory_budget/scratch put them (gravpipe.residence)."""
    from gravpipe.simulation import Simulation

    kw = dict(gravity=settings.gravity, integrator=settings.integrator, eps=settings.eps, backend=settings.backend,
              precision=settings.precision, threads=settings.threads, eta=settings.eta, eta_s=settings.eta_s,
              dt_max=settings.dt_max, dt=settings.dt, theta=settings.theta, precise_energy=settings.precise_energy,
              memory_budget=settings.memory_budget, scratch=settings.scratch, page_bytes=settings.page_bytes)
    if settings.file is not None:
        return Simulation.from_snapshot(settings.file, **kw)
    return Simulation.from_model(settings.ic, settings.n, settings.seed, **kw)


def _cadences(settings, t0: float) -> tuple[float | None, float | None]:
    """Snapshot and checkpoint intervals. With --out, an interval not given means one file
    at t_end, so that a finished run keeps its final state and can be extended with
    ``--resume DIR --t-end LATER``. Without --out, evolve rejects any interval given."""
    whole_run = settings.t_end - t0
    if settings.out is None or whole_run <= 0:  # evolve reports a t_end before t0
        return settings.snap_every, settings.checkpoint_every
    return (settings.snap_every if settings.snap_every is not None else whole_run,
            settings.checkpoint_every if settings.checkpoint_every is not None else whole_run)


def _resume_run(args: argparse.Namespace, cli_values: dict) -> int:
    import warnings

    from gravpipe.errors import CheckpointSkippedWarning
    from gravpipe.simulation import Simulation, latest_checkpoint

    fixed = [k for k, v in cli_values.items() if v is not None and k not in _RESUME_KEYS]
    if args.config is not None:
        fixed.insert(0, "config")
    if fixed:
        names = ", ".join(_option_name(k) for k in fixed)
        allowed = ", ".join(_option_name(k) for k in sorted(_RESUME_KEYS))
        raise UserError(f"--resume continues the run stored in its checkpoint; {names} cannot be given "
                        f"with it (allowed: {allowed})")
    with warnings.catch_warnings(record=True) as skipped:
        warnings.simplefilter("always", CheckpointSkippedWarning)
        checkpoint = latest_checkpoint(args.resume)
    for w in skipped:
        print(f"gravpipe run: warning: {w.message}", file=sys.stderr, flush=True)
    # an out-of-core run's checkpoint resumes out of core (budget and scratch: the original
    # run's unless given)
    print(f"gravpipe run: resumed from {checkpoint}", flush=True)
    with _phase("read the checkpoint"), warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckpointSkippedWarning)  # said above
        sim = Simulation.resume(args.resume, threads=args.threads, memory_budget=args.memory_budget,
                                scratch=args.scratch)
    stored = sim.config.evolve
    t_end = args.t_end if args.t_end is not None else stored.get("t_end")
    if t_end is None:
        raise UserError(f"{checkpoint}: stores no t_end; give --t-end")
    snap_every = args.snap_every if args.snap_every is not None else stored.get("snapshot_every")
    ckpt_every = args.checkpoint_every if args.checkpoint_every is not None else stored.get("checkpoint_every")
    _print_start(sim, t_end, args.resume)
    if abs(t_end - sim.time) <= 1e-9 * sim.quantum:
        print(f"already at t_end = {t_end:g}: nothing to do (give --t-end to go further)")
        return 0
    with sim:  # a paged run's scratch file goes however the run ends
        return _evolve_and_report(sim, t_end, snap_every, ckpt_every, args.resume, not args.no_progress,
                                  force=bool(args.force))


def _phase(what: str):
    """A context that prints ``what`` a start-up phase does as it starts and its seconds when
    it ends, so that a run says what it is doing from its first second (the first forces at
    N = 1e6 take seconds)."""
    import contextlib
    import time

    @contextlib.contextmanager
    def phase():
        print(f"  {what} ...", end="", flush=True)
        start = time.perf_counter()
        try:
            yield
        except BaseException:
            print(flush=True)  # the error's line starts on a line of its own
            raise
        print(f" {time.perf_counter() - start:.1f} s", flush=True)
    return phase()


def _source_words(settings) -> str:
    """The initial conditions a run starts from, in words, before they are read or drawn."""
    if settings.file is not None:
        return settings.file
    return f"{settings.ic}, N = {settings.n}, seed {settings.seed} (generated; Henon units)"


def _print_start(sim, t_end: float, out: str | None, note: str | None = None) -> None:
    c = sim.config
    params = ", ".join(f"{k} {v:g}" for k, v in c.params.items())
    gravity = f"gravity tree (theta {c.theta:g})" if c.gravity == "tree" else f"gravity {c.gravity}"
    print(f"  {gravity}, {c.integrator} ({params}), eps {c.eps:g}, precision {c.precision}, "
          f"backend {sim.backend} ({sim.backend_detail})")
    if note:
        print(f"  {note}")
    where = f"output in {out}" if out is not None else "no --out: nothing is written"
    print(f"  N = {sim.n:,}, t = {sim.time:g} -> {t_end:g}, {where}", flush=True)


#: the most snapshots and checkpoints together that gravpipe run writes without --force
MAX_OUTPUT_FILES = 10_000


def _check_output_count(t_from: float, t_end: float, snap_every, ckpt_every, force: bool) -> None:
    """UserError when the cadences would write more than MAX_OUTPUT_FILES files after
    ``t_from`` up to ``t_end`` (one at each multiple of an interval, and one at t_end),
    saying how many, unless ``force``: --snap-every 1e-9 started writing 3e7 snapshots."""
    import math

    counts = {name: (math.ceil((t_end - t_from) / every * (1 - 1e-12)), every) for name, every in
              (("snapshot", snap_every), ("checkpoint", ckpt_every)) if every is not None and t_end > t_from}
    if force or sum(count for count, _ in counts.values()) <= MAX_OUTPUT_FILES:
        return
    parts = [f"{count:,} {name}{'s' if count != 1 else ''} (every {every:g})" for name, (count, every) in counts.items()]
    raise UserError(f"from t = {t_from:g} to {t_end:g} this run would write {' and '.join(parts)}: more than "
                    f"{MAX_OUTPUT_FILES:,} files; give a longer --snap-every or --checkpoint-every, or --force "
                    "to write them")


def _evolve_and_report(sim, t_end: float, snap_every, ckpt_every, out: str | None, progress: bool,
                       overwrite: bool = False, force: bool = False) -> int:
    import time

    if out is not None:
        _check_output_count(sim.time, t_end, snap_every, ckpt_every, force)
    from gravpipe.perfmodel.cli import run_forecast, run_report
    forecast = run_forecast(sim, t_end)  # from this host's calibration; never calibrates
    start = time.perf_counter()
    sim.evolve(t_end, snapshot_every=snap_every, checkpoint_every=ckpt_every, out=out, progress=progress,
               overwrite=overwrite)
    wall = time.perf_counter() - start
    print(f"energy error {sim.energy_error():.3e} at t = {sim.time:g} (relative: (E - E0) / |E0|, or / (|K0| + |W0|) when E0 = 0)")
    _print_breakdown(sim.timings, wall)
    run_report(forecast, wall)
    for line in sim.summary_lines():  # MPI domains' balance, a paged run's traffic
        print(f"  {line}")
    if out is not None:
        _print_files(out)
    return 0


def _print_breakdown(t, wall: float) -> None:
    """The GRAPE-style split of the step time (host / transfer / compute, and comm between
    MPI ranks when there are several)."""
    step_time = t.host + t.transfer + t.compute + t.comm
    print("time breakdown (this process):")
    stages = [("host", t.host), ("transfer", t.transfer), ("compute", t.compute)] + ([("comm", t.comm)] if t.comm else [])
    for name, seconds in stages:
        share = 100 * seconds / step_time if step_time > 0 else 0.0
        print(f"  {name:<9}{seconds:10.3f} s  {share:5.1f}%")
    print(f"  {'total':<9}{t.total:10.3f} s  (wall {wall:.3f} s with diagnostics and output)")
    print(f"  host+transfer share {100 * t.host_transfer_share:.1f}%; {t.steps:,} steps, "
          f"{t.particle_steps:,} particle steps, {t.particle_steps_per_second:.3e} particle steps/s, "
          f"{t.interactions:,} interactions")


def _stage_traffic(stage_bytes: dict, seconds: dict, n: int, tree_in_sort: bool = False) -> str:
    """'traffic: sort 3.1 GB (312 B/particle, 0.84 GB/s), ...': each paged stage's bytes read
    and written, per particle and per second of the stage (to set against the disk's rate,
    ``gravpipe bench storage``). With the tree built in the sort, build_moments's bytes are
    the cell records the sort wrote: no rate of its own."""
    parts = []
    for stage, (read, written) in stage_bytes.items():
        secs = _stage_seconds(stage, seconds)
        moved = read + written
        rate = f", {moved / secs / 1e9:.2f} GB/s" if secs > 0 else ""
        if stage == "build_moments" and tree_in_sort:
            rate, stage = ", written in the sort", "build_moments (cell records)"
        parts.append(f"{stage} {moved / 1e9:.2f} GB ({moved / n:.0f} B/particle{rate})")
    return "traffic (read + written): " + ", ".join(parts)


def _stage_cpu(stage_cpu: dict, seconds: dict, threads: int, switches: dict) -> str:
    """'CPU (all threads): sort 3.1 s (58% of 2 cores, 21k context switches), ...': each stage's
    process CPU seconds against its wall seconds times the threads (the rest the cores idled,
    on the disk, or ran something else), and the process's context switches over the stage."""
    parts = []
    for stage, cpu in stage_cpu.items():
        secs = _stage_seconds(stage, seconds)
        busy = f"{100 * cpu / (secs * threads):.0f}% of {threads} cores, " if secs > 0 else ""
        n = switches[stage]
        parts.append(f"{stage} {cpu:.2f} s ({busy}{_count(n)} context switches)")
    return "CPU (all threads): " + ", ".join(parts)


def _stage_device(device: str, stage_device: dict, seconds: dict, store_bytes: tuple[int, int]) -> str:
    """'device vda (its own counters, /proc/diskstats): sort 0.86 GB in 6.1k reads, 0.81 GB in
    5.0k writes, 1.5 GB/s, busy 64%; ...': what reached the disk in each stage, in how many
    requests, the bytes both ways over the stage's wall time (set it against what the disk
    can do, e.g. `gravpipe bench storage`), and the share of that time the device had a
    request in flight (a device that serves requests in parallel can be short of its
    bandwidth at 100%, so busy is not saturation); then the step's bytes as the store
    counted them (read, written) against the device's: no fewer reach the device unless a
    cache absorbed them."""
    if not device:
        return "device: none to measure (the scratch has no block device: in RAM or anonymous)"
    parts = []
    for stage, d in stage_device.items():
        secs = _stage_seconds(stage, seconds)
        rate = f", {(d['read_bytes'] + d['write_bytes']) / secs / 1e9:.2f} GB/s" if secs > 0 else ""
        busy = f", busy {100 * d['busy_seconds'] / secs:.0f}%" if secs > 0 else ""
        parts.append(f"{stage} {d['read_bytes'] / 1e9:.2f} GB in {_count(d['reads'])} reads, "
                     f"{d['write_bytes'] / 1e9:.2f} GB in {_count(d['writes'])} writes{rate}{busy}")
    read, written = (sum(d[k] for d in stage_device.values()) for k in ("read_bytes", "write_bytes"))
    return (f"device {device} (its own counters, the whole disk's): " + "; ".join(parts) +
            f"; the step: the store moved {store_bytes[0] / 1e9:.2f} GB read, {store_bytes[1] / 1e9:.2f} GB written, "
            f"the device {read / 1e9:.2f} GB, {written / 1e9:.2f} GB")


def _stage_seconds(stage: str, seconds: dict) -> float:
    """Wall seconds of a traffic stage: "build_moments" spans the build and the moments."""
    return seconds["build"] + seconds["moments"] if stage == "build_moments" else seconds[stage]


def _count(n: int) -> str:
    return f"{n / 1e3:.1f}k" if n >= 10_000 else str(n)


def _print_files(out: str) -> None:
    from pathlib import Path

    d = Path(out)
    index = lambda f: int(f.name.split(".")[0].split("_")[-1])  # noqa: E731
    parts, snaps = [], []
    for kind in ("snapshot", "checkpoint"):
        files = [f for f in d.glob(f"{kind}_*.h5") if f.is_file()]
        sets = [f for f in d.glob(f"{kind}_*[0-9]") if f.is_dir()]  # multi-file sets (MPI runs)
        parts.append(f"{len(files)} {kind}_*.h5" + (f" + {len(sets)} {kind}_* sets" if sets else ""))
        if kind == "snapshot":
            snaps = sorted(files + sets, key=index)
    if (d / "diagnostics.csv").is_file():
        parts.append("diagnostics.csv")
    last = f"; latest snapshot {snaps[-1].name}" if snaps else ""
    print(f"files in {d}: {', '.join(parts)}{last}")


# ---- gravpipe plot --------------------------------------------------------------------

def cmd_plot(args: argparse.Namespace) -> int:
    from gravpipe import plot

    try:
        paths = plot.plot_run(args.dir)
    except plot.MissingMatplotlib as exc:
        raise UserError(str(exc)) from None
    for path in paths:
        print(f"wrote {path}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """Print the requested flags on one line (all of --cflags --libs when none is asked)."""
    from gravpipe import grape6

    grape6.check_installed()
    parts = {"cflags": grape6.cflags, "libs": grape6.libs, "g6_libdir": lambda: str(grape6.libdir()),
             "includedir": lambda: str(grape6.includedir()), "pkgconfigdir": lambda: str(grape6.pkgconfig_dir())}
    wanted = [key for key in parts if getattr(args, key)] or ["cflags", "libs"]
    print(" ".join(parts[key]() for key in wanted))
    return 0


COMMANDS = {"forces": cmd_forces, "ic": cmd_ic, "run": cmd_run, "info": cmd_info, "plot": cmd_plot,
            "bench": cmd_bench, "config": cmd_config, "model": lambda a: _model_cli().cmd_model(a)}


def _model_cli():
    from gravpipe.perfmodel import cli
    return cli


if __name__ == "__main__":
    sys.exit(main())
