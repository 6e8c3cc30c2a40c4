"""A benchmark's JSON document, to a file (atomically) or to stdout."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable


def emit_json(target: str | None, make_doc: Callable[[], Any], console: Any) -> None:
    """Write ``make_doc()`` as JSON to ``target``: a path (written atomically, then said on
    ``console``), '-' for stdout, or None for nothing (``make_doc`` is not called)."""
    if not target:
        return
    doc = make_doc()
    if target == "-":
        json.dump(doc, sys.stdout, indent=1)
        print()
        return
    from gravpipe.io.atomic import atomic_open

    with atomic_open(target, "w") as fh:
        fh.write(json.dumps(doc, indent=1))
    console.print(f"wrote {target}")
