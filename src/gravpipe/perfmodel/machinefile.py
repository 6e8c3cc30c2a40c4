"""Machine files: the measured constants of one machine (JSON), where they are kept, and
their check.

A machine file is ``{"schema": SCHEMA, "machine": {...}, "gravpipe": version, "created":
date, "source": how the constants were obtained, "constants": {...}}``. ``bench model`` writes
one per host to the user cache (``$XDG_CACHE_HOME/gravpipe/model-<hostname>.json``, default
``~/.cache``); the files for machines gravpipe does not run on are in ``machines/``.
A file that is not one, lacks a constant or holds a value that is not a positive finite
number raises :class:`MachineFileError` naming the file and the key.
"""

from __future__ import annotations

import json
import math
import os
import socket
from pathlib import Path
from typing import Any

SCHEMA = "gravpipe-perfmodel/1"
MACHINES_DIR = Path(__file__).parent / "machines"
MODES = ("acc+pot", "acc+jerk+pot")
PRECISIONS = ("mixed", "double")

# every constant the model reads: dotted path -> whether it may be zero
REQUIRED: dict[str, bool] = {
    "cpu.cores": False, "cpu.threads": False,
    "cpu.small_i_half": True, "cpu.call_s": True,
    "transfer.cpu.latency_s": True, "transfer.cpu.seconds_per_byte": True,
    "host.hermite_particle_step_s": True, "host.hermite_block_j_s": True, "host.leapfrog_particle_step_s": True,
    "hermite.n_ref": False, "hermite.eta_ref": False, "hermite.steps_per_particle_per_time": False,
    "hermite.steps_n_exponent": True, "hermite.blocks_per_time": False, "hermite.blocks_n_exponent": True,
    "tree.threads": False, "tree.sort_per_body_s": True, "tree.build_per_body_s": True,
    "tree.moments_per_body_s": True, "tree.mac_s": True, "tree.pp_s": False, "tree.pc_s": True,
    "tree.pp_a": False, "tree.pp_theta_exp": True, "tree.pc_b": True, "tree.pc_c": True,
    "tree.pc_theta_exp": True, "tree.mac_a": False, "tree.n_crit_ref": False,
    "ooc.read_passes": True, "ooc.write_passes": True,
    "storage.latency_s": True, "storage.seconds_per_byte": True,
    "network.latency_s": True, "network.seconds_per_byte": True,
    "let.bytes_coeff": True,
}
for _m in MODES:
    for _p in PRECISIONS:
        REQUIRED[f"cpu.kernel.{_m}.{_p}"] = False
# fitted shapes that may have either sign (exponents, the fit of pc per body against log10 N)
SIGNED = {"hermite.steps_n_exponent", "hermite.blocks_n_exponent", "tree.pp_theta_exp", "tree.pc_theta_exp",
          "tree.pc_b", "tree.pc_c", "cpu.parallel_efficiency", "tree.parallel_efficiency"}
# optional: a GPU ("cuda": kernel rates, small_i_half, call_s; "transfer.cuda"; "tree.cuda_list_speedup")


class MachineFileError(ValueError):
    """A machine file that cannot be used, with the file and the key at fault."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gravpipe"


def cache_path(hostname: str | None = None) -> Path:
    """Where ``bench model`` keeps this host's calibration."""
    host = hostname or socket.gethostname() or "localhost"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in host)
    return cache_dir() / f"model-{safe}.json"


def get(constants: dict, key: str) -> Any:
    node: Any = constants
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def validate(doc: Any, where: str = "machine file") -> dict:
    """Check a machine document; returns it. Raises MachineFileError naming ``where`` and
    the key."""
    if not isinstance(doc, dict):
        raise MachineFileError(f"{where}: not a JSON object")
    if doc.get("schema") != SCHEMA:
        raise MachineFileError(f"{where}: schema {doc.get('schema')!r}, expected {SCHEMA!r}")
    consts = doc.get("constants")
    if not isinstance(consts, dict):
        raise MachineFileError(f"{where}: no 'constants' object")
    for key, zero_ok in REQUIRED.items():
        try:
            v = get(consts, key)
        except KeyError:
            raise MachineFileError(f"{where}: constants.{key} is missing") from None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise MachineFileError(f"{where}: constants.{key} = {v!r}, expected a finite number")
        if key not in SIGNED and (v < 0 or (v == 0 and not zero_ok)):
            raise MachineFileError(f"{where}: constants.{key} = {v!r}, expected a finite number "
                                   f"{'>= 0' if zero_ok else '> 0'}")
    for part in ("cpu", "tree"):
        e = consts.get(part, {}).get("parallel_efficiency", 0.0)
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not -1 < e <= 1:
            raise MachineFileError(f"{where}: constants.{part}.parallel_efficiency = {e!r}, expected in (-1, 1]")
    if "cuda" in consts:
        for m in MODES:
            for p in PRECISIONS:
                v = consts["cuda"].get("kernel", {}).get(m, {}).get(p)
                if not isinstance(v, (int, float)) or not v > 0 or not math.isfinite(v):
                    raise MachineFileError(f"{where}: constants.cuda.kernel.{m}.{p} = {v!r}, expected > 0")
    return doc


def load(path: str | os.PathLike) -> dict:
    """Read and check a machine file (a path, or the name of one in ``machines/``)."""
    p = Path(path)
    if not p.exists() and (MACHINES_DIR / f"{path}.json").exists():
        p = MACHINES_DIR / f"{path}.json"
    try:
        text = p.read_text()
    except FileNotFoundError:
        known = ", ".join(sorted(f.stem for f in MACHINES_DIR.glob("*.json")))
        raise MachineFileError(f"{path}: no such machine file (shipped: {known})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MachineFileError(f"{p}: not JSON ({exc.msg}, line {exc.lineno})") from None
    return validate(doc, str(p))


def save(doc: dict, path: str | os.PathLike) -> Path:
    """Check and write a machine file atomically; returns its path."""
    validate(doc, str(path))
    from gravpipe.io.atomic import atomic_open

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(str(p), "w") as fh:
        fh.write(json.dumps(doc, indent=1))
    return p


def load_calibration() -> dict | None:
    """This host's calibration from the user cache, or None when there is none (a broken
    file raises)."""
    p = cache_path()
    return load(p) if p.exists() else None
