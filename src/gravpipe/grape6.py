"""Where the GRAPE-6 library interface (libgravpipe_g6) is installed, and how to link it.

Legacy N-body codes written for the GRAPE-6 host library (g6_open, g6_set_j_particle,
g6calc_firsthalf, g6calc_lasthalf, ...) link against ``libgravpipe_g6.so`` instead of the
GRAPE-6 or Sapporo library and run on gravpipe's force pipeline, unchanged. The library, its
C header ``gravpipe/g6.h`` and a relocatable pkg-config file ship inside the package;
``gravpipe config`` prints the flags::

    cc  mycode.c   $(gravpipe config --cflags --libs) -o mycode
    gfortran mycode.f $(gravpipe config --libs) -o mycode
"""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path

LIBRARY = "libgravpipe_g6.so"


def _built_dir() -> Path:
    """The folder the build installed its compiled files into: the extension module's. A
    regular install puts them next to this file; an editable one leaves this file in the
    source tree and the built files in site-packages."""
    spec = importlib.util.find_spec("gravpipe._core")
    if spec is not None and spec.origin:
        return Path(spec.origin).resolve().parent
    return Path(__file__).resolve().parent


def libdir() -> Path:
    """Folder holding libgravpipe_g6.so (and pkgconfig/gravpipe_g6.pc)."""
    return _built_dir() / "lib"


def includedir() -> Path:
    """Folder to put on the include path for ``#include "gravpipe/g6.h"``."""
    return _built_dir() / "include"


def pkgconfig_dir() -> Path:
    """Folder to put on PKG_CONFIG_PATH for ``pkg-config gravpipe_g6``."""
    return libdir() / "pkgconfig"


def check_installed() -> None:
    """Raise FileNotFoundError when this installation has no libgravpipe_g6."""
    if not (libdir() / LIBRARY).is_file():
        raise FileNotFoundError(f"{libdir() / LIBRARY} is missing: this gravpipe was installed without the "
                                "GRAPE-6 library (reinstall with 'pip install .')")


def cflags() -> str:
    """Compiler flags: the include path of gravpipe/g6.h."""
    return "-I" + shlex.quote(str(includedir()))


def libs() -> str:
    """Linker flags, with an rpath so that the program finds the library without
    LD_LIBRARY_PATH."""
    d = shlex.quote(str(libdir()))
    return f"-L{d} -Wl,-rpath,{d} -lgravpipe_g6"
