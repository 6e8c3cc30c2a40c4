"""Settings of ``gravpipe run``: one table of keys shared by the command line and run.toml.

A run.toml file holds the same keys as the options of ``gravpipe run`` but ``--resume`` and
``--config`` (dashes written as underscores or dashes), for example::

    integrator = "hermite"
    n = 4096              # generated initial conditions: ic, n, seed (or file = "ic.h5")
    eps = "1/64"          # numbers may be written as expressions in a string: "2*pi/1000"
    t_end = 10.0
    snap_every = 1.0
    checkpoint_every = 0.5
    out = "run1"          # relative paths are relative to the directory of run.toml

``gravity = "tree"`` (with ``theta = 0.7``; the default is the core's) runs the Barnes-Hut
treecode, which gives no jerks and so needs the leapfrog integrator: ``gravpipe run`` uses
the gravity kind's default integrator when ``integrator`` is not given and rejects one
that needs jerks (gravpipe.gravity.GRAVITY says which kind delivers them).

Precedence: built-in defaults < run.toml < command line. An unknown key, or a value of
the wrong type, raises ``ValueError`` naming the file and the key. Physical validity
(eps >= 0, t_end not before t0, ...) is checked by ``Simulation``, and how keys combine
(gravity with integrator and theta) by ``gravpipe run``, not here.
"""

from __future__ import annotations

import ast
import math
import operator
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, packaged as tomli
    import tomli as tomllib

from gravpipe.gravity import GRAVITY
from gravpipe.integrators import INTEGRATORS

IC_MODELS = ("plummer", "uniform-sphere", "uniform-cube")
INTEGRATOR_NAMES = tuple(INTEGRATORS)
GRAVITY_NAMES = tuple(GRAVITY)
PRECISIONS = ("mixed", "double")

# The embedded default run (``gravpipe run`` with no arguments): a Plummer sphere with
# Hermite block steps for about 1.4 crossing times. Measured on 2 cores (AVX2, mixed
# precision): ~1.3 M particle steps, ~2.5 s of integration, ~3.5 s with start-up.
DEFAULT_N = 2048
DEFAULT_SEED = 1
DEFAULT_T_END = 4.0
DEFAULT_EPS = 1 / 64


@dataclass
class RunSettings:
    """Everything ``gravpipe run`` needs to start a run (None: not given, use the
    integrator's default or, for the cadences, the documented CLI default)."""

    file: str | None = None
    ic: str = "plummer"
    n: int = DEFAULT_N
    seed: int = DEFAULT_SEED
    integrator: str | None = None  # None: the gravity kind's default integrator
    gravity: str = "direct"
    theta: float | None = None  # tree opening angle (None: the core's default)
    t_end: float = DEFAULT_T_END
    snap_every: float | None = None
    checkpoint_every: float | None = None
    out: str | None = None
    eps: float = DEFAULT_EPS
    eta: float | None = None
    eta_s: float | None = None
    dt_max: float | None = None
    dt: float | None = None
    precision: str = "mixed"
    backend: str = "auto"
    threads: int | None = None
    no_progress: bool = False
    overwrite: bool = False
    force: bool = False  # write more output files than gravpipe run allows without asking
    precise_energy: bool | None = None  # None: the gravity kind's default (gravity.GravityKind.precise_rows)
    # where the particles live (gravpipe.residence): in pages of a scratch file when given
    memory_budget: str | int | None = None
    scratch: str | None = None
    page_bytes: str | int | None = None


KEYS: tuple[str, ...] = tuple(f.name for f in fields(RunSettings))
#: keys that choose the initial conditions when no file is given
IC_KEYS = ("ic", "n", "seed")
#: keys whose value is a path (resolved against the config file's directory)
PATH_KEYS = ("file", "out", "scratch")


#: what parse_number accepts, for option help and error messages
NUMBER_SYNTAX = ("a number or an arithmetic expression: + - * / ** ( ) and pi, "
                 "e.g. 0.0078125, 1/128, -1/128, 2*pi/1000, 2**-7")
# Longer text is refused before parsing: deep nesting would exhaust Python's parser stack.
_MAX_EXPRESSION = 200
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def parse_number(text: str) -> float:
    """A number written as text -> float: '0.015625', '1/64', '-1/128', '2*pi/1000', '2**-7'.

    A plain number is read by ``float`` as before, 'nan' and 'inf' included: the option's
    own check then says what is wrong with it in context ("--theta nan: the opening angle
    must be finite"). Anything else may use numbers, + - * / ** and parentheses, unary
    minus and the name ``pi``, evaluated in float64 by walking Python's syntax tree
    (``ast``; nothing is executed). Raises ValueError naming the text for anything else,
    a division by zero or an expression whose value is not finite.
    """
    try:
        return float(text)
    except ValueError:
        pass
    try:
        if len(text) > _MAX_EXPRESSION:
            raise ValueError("too long")
        value = _evaluate(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError):
        raise ValueError(f"expected {NUMBER_SYNTAX}; got {text!r}") from None
    except ZeroDivisionError:
        raise ValueError(f"{text!r}: division by zero") from None
    except OverflowError:
        value = math.inf
    if not math.isfinite(value):  # 2**1024, 1e308*10
        raise ValueError(f"{text!r}: not a finite number")
    return value


def _evaluate(node: ast.AST) -> float:
    """The float64 value of an expression tree of numbers, pi and + - * / ** (ValueError
    for any other node)."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):  # not bool, not complex
        return float(node.value)  # floats throughout: 10**10**10 overflows instead of running for ever
    if isinstance(node, ast.Name) and node.id == "pi":
        return math.pi
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        value = _BINARY[type(node.op)](_evaluate(node.left), _evaluate(node.right))
        if isinstance(value, complex):  # (-8)**(1/3)
            raise ValueError("complex result")
        return value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    raise ValueError(f"not allowed: {type(node).__name__}")


# ---- converters for values read from TOML: (value) -> value, ValueError on a bad type ----

def _number(value: Any) -> float:
    if isinstance(value, bool):  # TOML true is not a number
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        v = float(value)
    elif isinstance(value, str):
        v = parse_number(value)
    else:
        raise ValueError(f"expected a number, got {value!r}")
    if not math.isfinite(v):
        raise ValueError(f"expected a finite number, got {value!r}")
    return v


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _positive_int(value: Any) -> int:
    v = _int(value)
    if v < 1:
        raise ValueError(f"expected a positive integer, got {value!r}")
    return v


def _size(value: Any) -> str | int:
    """A byte size: a whole number of bytes or a string such as "4GiB" (checked where it is
    used: gravpipe.store.parse_byte_size)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected a byte size such as 4096 or \"4GiB\", got {value!r}")
    return value


def _string(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {value!r}")
        return value
    return convert


CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "file": _string, "ic": _choice(IC_MODELS), "n": _positive_int, "seed": _int,
    "integrator": _choice(INTEGRATOR_NAMES), "gravity": _choice(GRAVITY_NAMES), "theta": _number,
    "t_end": _number, "snap_every": _number, "checkpoint_every": _number, "out": _string, "eps": _number,
    "eta": _number, "eta_s": _number, "dt_max": _number, "dt": _number, "precision": _choice(PRECISIONS),
    "backend": _string, "threads": _positive_int, "no_progress": _bool, "overwrite": _bool, "force": _bool,
    "precise_energy": _bool, "memory_budget": _size, "scratch": _string, "page_bytes": _size,
}
assert set(CONVERTERS) == set(KEYS), "every RunSettings field needs a converter"


#: options of gravpipe run that a run.toml does not take (every other option is a key), and why
COMMAND_LINE_ONLY = {
    "resume": "continue a run with gravpipe run --resume DIR (its checkpoint holds the run's settings; "
              "--t-end, the cadences, --threads, --memory-budget, --scratch, --force may change)",
    "config": "a run.toml does not name another one",
}


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a run.toml: {key: value} for the keys it sets, converted and checked.

    Raises FileNotFoundError for a missing file and ValueError (naming the file and the
    key) for TOML syntax errors, unknown keys, tables and values of the wrong type.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"config file not found: {p}")
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{p}: not valid TOML ({exc})") from None
    values: dict[str, Any] = {}
    for raw_key, raw_value in raw.items():
        key = raw_key.replace("-", "_")
        if key in COMMAND_LINE_ONLY:
            raise ValueError(f"{p}: {raw_key!r} is not a run.toml key: {COMMAND_LINE_ONLY[key]}")
        if key not in CONVERTERS:
            raise ValueError(f"{p}: unknown key {raw_key!r} (known keys: {', '.join(KEYS)})")
        if key in values:
            raise ValueError(f"{p}: key {raw_key!r} is given twice (with '-' and '_')")
        try:
            value = CONVERTERS[key](raw_value)
        except ValueError as exc:
            raise ValueError(f"{p}: {raw_key}: {exc}") from None
        if key in PATH_KEYS:
            # relative to the file, so that a run.toml works from any working directory
            value = str(p.parent / value)
        values[key] = value
    return values


def merge(from_file: dict[str, Any], from_cli: dict[str, Any]) -> tuple[RunSettings, set[str]]:
    """Defaults < file < command line. Returns the settings and the keys that were given
    (by either source), which the caller needs to tell "default" from "asked for"."""
    given = {**from_file, **{k: v for k, v in from_cli.items() if v is not None}}
    unknown = set(given) - set(KEYS)
    if unknown:  # a programming error in the caller, not a user mistake
        raise KeyError(f"merge: unknown keys {sorted(unknown)}")
    return RunSettings(**given), set(given)
