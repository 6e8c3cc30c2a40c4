"""No force kernel raises a floating-point exception on valid input.

A host that traps floating-point exceptions (gfortran -ffpe-trap=invalid, feenableexcept in
C) dies with SIGFPE at the first one, even where the lane that raised it is masked and its
NaN never reaches a result: with eps = 0 the excluded self pair has r = 0. Each check runs
the kernels in a fresh interpreter that arms the traps (feenableexcept through ctypes)
before the first OpenMP region, so that the worker threads inherit them; a trap kills that
interpreter with SIGFPE. The GRAPE-6 drivers run trapped in tests/test_grape6.py.

The particle set has N = 1000 (not a whole number of SIMD blocks: padding lanes) and one
particle exactly at the origin (where padding lanes used to sit).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from gravpipe import _core

ISAS = list(_core.available_isas())

# FE_INVALID | FE_DIVBYZERO | FE_OVERFLOW of <fenv.h>, which differ between architectures
TRAPS = {"x86_64": 0x01 | 0x04 | 0x08, "aarch64": 0x01 | 0x02 | 0x04}

SCRIPT = textwrap.dedent("""
    import ctypes, sys
    import numpy as np
    import gravpipe as gp
    from reference import direct_sum_f64, rel_rms

    rng = np.random.default_rng(7)
    n = 1000
    pos = rng.normal(size=(n, 3))
    pos[17] = 0.0
    vel = rng.normal(size=(n, 3)) * 0.3
    mass = np.full(n, 1.0 / n)
    libm = ctypes.CDLL("libm.so.6")
    if libm.feenableexcept(int(sys.argv[1])) == -1:
        print("SKIP feenableexcept refused")
        sys.exit(0)
    results = []
    for isa in sys.argv[2:]:
        for precision in ("mixed", "double"):
            pipe = gp.Pipeline("cpu", precision, eps=0.0, isa=isa, threads=2)
            pipe.set_j(pos, mass, vel)
            acc, jerk, pot = pipe.forces(pos, vel, exclude=np.arange(n))
            acc2, pot2 = pipe.forces(pos[:5], exclude=np.arange(5))  # one block, mostly padding
            results.append(("pipeline", isa, precision, acc, pot, jerk))
            for quadrupole in (True, False):
                tree = gp.Tree(pos, mass, eps=0.0, theta=0.6, quadrupole=quadrupole, precision=precision,
                               isa=isa, threads=2, n_crit=24)
                acc, pot = tree.forces()
                results.append((f"tree quadrupole={quadrupole}", isa, precision, acc, pot, None))
    libm.fedisableexcept(int(sys.argv[1]))
    ra, rp, rj = direct_sum_f64(pos, mass, pos, eps=0.0, vel_j=vel, vel_i=vel, exclude=np.arange(n))
    for what, isa, precision, acc, pot, jerk in results:
        bound = 1e-5 if what == "pipeline" else 1e-2  # the tree: theta = 0.6
        errs = [rel_rms(acc, ra), rel_rms(pot, rp)] + ([rel_rms(jerk, rj)] if jerk is not None else [])
        assert max(errs) < bound, (what, isa, precision, errs)
        print("OK", what, isa, precision, " ".join(f"{e:.1e}" for e in errs))
""")


def test_kernels_raise_no_fp_exception_with_eps_zero(tmp_path):
    traps = TRAPS.get(platform.machine())
    if traps is None:
        pytest.skip(f"no trap flags known for {platform.machine()}")
    path = os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(traps), *ISAS], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "2"})
    if r.stdout.startswith("SKIP"):
        pytest.skip(r.stdout.strip())
    assert r.returncode == 0, f"exit {r.returncode} (-8: SIGFPE, a trapped exception)\n{r.stdout}\n{r.stderr}"
    assert r.stdout.count("OK") == 6 * len(ISAS), r.stdout
