"""The GRAPE-6 library interface (libgravpipe_g6), driven as legacy codes drive it.

A C and a Fortran host program (tests/grape6/) are compiled against the installed library
with the flags of `gravpipe config`, run a Plummer model through g6_set_j_particle /
g6calc_firsthalf / g6calc_lasthalf(2) / neighbour lists, and their output is compared with
independent references: a float64 numpy direct sum (forces on j-particles predicted to ti),
brute-force neighbour search, and gravpipe's own Hermite integrator (energy error and
final state of the same block-step scheme).

Both drivers trap FE_INVALID, FE_DIVBYZERO and FE_OVERFLOW (the C one with feenableexcept,
the Fortran one built with -ffpe-trap): the library raises no floating-point exception on
valid input, without softening (eps2 = 0, the self pair at r = 0) included, in every ISA.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gravpipe as gp
from reference import direct_sum_f64, rel_rms

HERE = Path(__file__).parent / "grape6"
EPS = 1 / 64
BOUND = {"double": {"acc": 1e-12, "pot": 1e-12, "jerk": 1e-12},
         "mixed": {"acc": 1e-6, "pot": 1e-6, "jerk": 1e-5}}
N = 512
T_END = 0.25
TI = 0.01          # the forces run evaluates j-particles predicted from t = 0 to TI
H2 = 0.2 ** 2      # neighbour radius squared


def gravpipe_config(*flags: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "gravpipe.cli", "config", *flags], check=True,
                         capture_output=True, text=True).stdout
    return out.split()


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return tmp_path_factory.mktemp("grape6")


@pytest.fixture(scope="module")
def c_driver(build):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler (cc or gcc) on PATH")
    exe = build / "hermite_g6"
    subprocess.run([cc, "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", str(HERE / "hermite_g6.c"),
                    *gravpipe_config("--cflags", "--libs"), "-lm", "-o", str(exe)], check=True)
    return exe


@pytest.fixture(scope="module")
def f_driver(build):
    fc = shutil.which("gfortran")
    if fc is None:
        pytest.skip("gfortran is not installed (CI installs it: apt-get install gfortran)")
    exe = build / "hermite_g6_f"
    subprocess.run([fc, "-O2", "-std=f2008", "-Wall", "-Werror", "-ffpe-trap=invalid,zero,overflow",
                    str(HERE / "hermite_g6.f90"),
                    *gravpipe_config("--libs"), "-o", str(exe)], check=True)
    return exe


@pytest.fixture(scope="module")
def plummer():
    return gp.ic.plummer(N, seed=1)


def write_ic(path, p, eps, t_end=T_END):
    with open(path, "w") as f:
        f.write(f"{len(p.mass)} {eps * eps!r} 0.02 0.01 0.125 {t_end!r} {TI!r} {H2!r}\n")
        for m, x, v in zip(p.mass, p.pos, p.vel):
            f.write(" ".join(repr(float(a)) for a in (m, *x, *v)) + "\n")
    return path


@pytest.fixture(scope="module")
def ic_file(build, plummer):
    return write_ic(build / "ic.txt", plummer, EPS)


@pytest.fixture(scope="module")
def unsoftened(plummer):
    """The Plummer model with particle 0 moved to the origin (where a central star sits, and
    where the pipeline's padding lanes once sat), for eps2 = 0."""
    pos = plummer.pos.copy()
    pos[0] = 0.0
    return gp.Particles(pos, plummer.vel, plummer.mass, plummer.id)


@pytest.fixture(scope="module")
def ic_file_unsoftened(build, unsoftened):
    return write_ic(build / "ic_eps0.txt", unsoftened, 0.0, t_end=0.0625)


def run(exe, *args, **env):
    full_env = {**os.environ, **{k: str(v) for k, v in env.items()}}
    r = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=full_env, timeout=120)
    assert r.returncode == 0, f"{exe.name} {args} exited {r.returncode}: {r.stderr}"
    return r


def parse_hermite(out: str):
    scalars = {line.split()[0]: float(line.split()[1]) for line in out.splitlines() if not line.startswith("X")}
    state = np.array([[float(v) for v in line.split()[2:]] for line in out.splitlines() if line.startswith("X")])
    return scalars, state[:, :3], state[:, 3:]


def parse_forces(out: str):
    """F1 lines: i, xp(3), vp(3), acc(3), jerk(3), pot, nn, nn_r2, status, len, list..."""
    rows = [line.split()[1:] for line in out.splitlines() if line.startswith("F1")]
    rows.sort(key=lambda r: int(r[0]))
    num = np.array([[float(v) for v in r[1:14]] for r in rows])
    return {"x": num[:, 0:3], "v": num[:, 3:6], "acc": num[:, 6:9], "jerk": num[:, 9:12], "pot": num[:, 12],
            "nn": np.array([int(r[14]) for r in rows]), "nn_r2": np.array([float(r[15]) for r in rows]),
            "status": np.array([int(r[16]) for r in rows]), "len": np.array([int(r[17]) for r in rows]),
            "lists": [sorted(int(v) for v in r[18:]) for r in rows]}


def check_forces(f, mass, precision, eps=EPS):
    """Forces on the driver's predicted positions against a float64 direct sum, self excluded."""
    ra, rp, rj = direct_sum_f64(f["x"], mass, f["x"], eps=eps, vel_j=f["v"], vel_i=f["v"], exclude=np.arange(N))
    b = BOUND[precision]
    assert rel_rms(f["acc"], ra) <= b["acc"]
    assert rel_rms(f["pot"], rp) <= b["pot"]
    assert rel_rms(f["jerk"], rj) <= b["jerk"]
    assert np.all(f["pot"] < 0)  # GRAPE-6 sign convention


def check_neighbours(f):
    """Nearest neighbour and lists within H2 against a brute-force search (unsoftened, self
    excluded); pairs within 1e-12 of the radius may fall either way."""
    d = f["x"][None, :, :] - f["x"][:, None, :]
    r2 = np.einsum("ijk,ijk->ij", d, d)
    np.fill_diagonal(r2, np.inf)
    nearest = np.argmin(r2, axis=1)
    assert np.array_equal(f["nn"], nearest)
    np.testing.assert_allclose(f["nn_r2"], r2[np.arange(N), nearest], rtol=1e-13)
    total = 0
    for i in range(N):
        sure = set(np.flatnonzero(r2[i] < H2 * (1 - 1e-12)))
        maybe = set(np.flatnonzero(r2[i] < H2 * (1 + 1e-12)))
        got = set(f["lists"][i])
        assert sure <= got <= maybe, f"particle {i}"
        assert f["len"][i] == len(got)
        total += len(got)
    assert total > N  # the radius really finds neighbours
    assert not f["status"].any()


@pytest.mark.parametrize("precision", ["mixed", "double"])
def test_c_forces_on_predicted_j_particles_match_float64(c_driver, ic_file, plummer, precision):
    r = run(c_driver, "forces", ic_file, GRAVPIPE_G6_PRECISION=precision)
    # t = 0: j-particles as given
    f0 = np.array([[float(v) for v in line.split()[1:]] for line in r.stdout.splitlines() if line.startswith("F0")])
    ra, rp, rj = direct_sum_f64(plummer.pos, plummer.mass, plummer.pos, eps=EPS, vel_j=plummer.vel,
                                vel_i=plummer.vel, exclude=np.arange(N))
    assert rel_rms(f0[:, 1:4], ra) <= BOUND[precision]["acc"]
    assert rel_rms(f0[:, 4:7], rj) <= BOUND[precision]["jerk"]
    assert rel_rms(f0[:, 7], rp) <= BOUND[precision]["pot"]
    # t = TI: the library predicts the j-particles from their coefficients at t = 0
    f1 = parse_forces(r.stdout)
    assert np.abs(f1["x"] - plummer.pos).max() > 1e-4  # they moved
    check_forces(f1, plummer.mass, precision)


def test_c_neighbours_match_brute_force(c_driver, ic_file):
    check_neighbours(parse_forces(run(c_driver, "forces", ic_file).stdout))


def test_neighbour_list_overflow_is_reported(c_driver, ic_file):
    f = parse_forces(run(c_driver, "forces", ic_file, GRAVPIPE_G6_NB_MAX=2).stdout)
    full = parse_forces(run(c_driver, "forces", ic_file).stdout)
    over = full["len"] > 2
    assert over.any() and (~over).any()
    assert np.all(f["status"][over] == 1)   # read_neighbour_list / get_neighbour_list say overflow
    assert np.all(f["len"] == np.minimum(full["len"], 2))  # nblen never exceeds what was kept
    assert all(set(a) <= set(b) for a, b in zip(f["lists"], full["lists"]))


def test_results_do_not_depend_on_thread_count(c_driver, ic_file):
    one = run(c_driver, "forces", ic_file, OMP_NUM_THREADS=1).stdout
    two = run(c_driver, "forces", ic_file, OMP_NUM_THREADS=2).stdout
    assert one == two


def _gravpipe_hermite(plummer, precision="mixed"):
    sim = gp.Simulation(plummer, integrator="hermite", eps=EPS, eta=0.02, eta_s=0.01, dt_max=0.125,
                        precision=precision)
    sim.evolve(T_END)
    return sim


def check_hermite(out, plummer):
    s, x, v = parse_hermite(out)
    de = abs((s["E1"] - s["E0"]) / s["E0"])
    sim = _gravpipe_hermite(plummer)
    de_gp = abs(sim.energy_error())
    assert 0 < de < 1e-6
    assert de_gp / 2 <= de <= 2 * de_gp, (de, de_gp)
    # the same scheme through the same pipeline: the final states agree closely
    assert np.sqrt(np.mean(np.sum((x - sim.particles.pos) ** 2, axis=1))) < 1e-6
    assert np.sqrt(np.mean(np.sum((v - sim.particles.vel) ** 2, axis=1))) < 1e-6


def test_c_hermite_matches_gravpipe_hermite(c_driver, ic_file, plummer):
    check_hermite(run(c_driver, "hermite", ic_file).stdout, plummer)


def test_fortran_hermite_matches_gravpipe_hermite(f_driver, ic_file, plummer):
    check_hermite(run(f_driver, "hermite", ic_file).stdout, plummer)


def test_fortran_forces_and_neighbours(f_driver, ic_file, plummer):
    f = parse_forces(run(f_driver, "forces", ic_file).stdout)
    check_forces(f, plummer.mass, "mixed")
    check_neighbours(f)


@pytest.mark.parametrize("isa", list(gp._core.available_isas()))
@pytest.mark.parametrize("precision", ["mixed", "double"])
def test_c_driver_without_softening_raises_no_fp_exception(c_driver, ic_file_unsoftened, unsoftened, isa,
                                                           precision):
    """eps2 = 0 under trapped FP exceptions (SIGFPE otherwise): forces and neighbours on
    predicted particles, and a Hermite run, whose blocks leave padding lanes."""
    env = {"GRAVPIPE_ISA": isa, "GRAVPIPE_G6_PRECISION": precision, "OMP_NUM_THREADS": 2}
    f = parse_forces(run(c_driver, "forces", ic_file_unsoftened, **env).stdout)
    check_forces(f, unsoftened.mass, precision, eps=0.0)
    check_neighbours(f)
    s, x, _ = parse_hermite(run(c_driver, "hermite", ic_file_unsoftened, **env).stdout)
    assert s["blocks"] > 100 and np.isfinite(x).all()
    assert abs((s["E1"] - s["E0"]) / s["E0"]) < 1e-5


def test_fortran_driver_without_softening_raises_no_fp_exception(f_driver, ic_file_unsoftened, unsoftened):
    """The Fortran host built with -ffpe-trap=invalid,zero,overflow, eps2 = 0 (it died of
    SIGFPE in g6calc_lasthalf_ on its first force call)."""
    f = parse_forces(run(f_driver, "forces", ic_file_unsoftened, OMP_NUM_THREADS=2).stdout)
    check_forces(f, unsoftened.mass, "mixed", eps=0.0)
    s, x, _ = parse_hermite(run(f_driver, "hermite", ic_file_unsoftened, OMP_NUM_THREADS=2).stdout)
    assert np.isfinite(x).all() and abs((s["E1"] - s["E0"]) / s["E0"]) < 1e-5


def _libgomp_spincount(exe, *args, **env):
    """libgomp's spin count as it initialized in the host (OMP_DISPLAY_ENV=verbose makes it
    print its settings), with OMP_WAIT_POLICY and GOMP_SPINCOUNT unset unless given."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    full_env.update({"OMP_DISPLAY_ENV": "verbose", **{k: str(v) for k, v in env.items()}})
    r = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=full_env, timeout=120)
    assert r.returncode == 0, r.stderr
    found = [line.split("=")[1].strip().strip("'") for line in r.stderr.splitlines() if "GOMP_SPINCOUNT" in line]
    if not found:
        pytest.skip("the OpenMP runtime does not print GOMP_SPINCOUNT (not libgomp)")
    return int(found[0])


def test_openmp_threads_wait_passively_unless_the_user_chose(c_driver, ic_file):
    """libgomp's default spinning (~300000 iterations after each region) made 2 threads 4-10x
    slower than 1 on a loaded machine: the library's default is OMP_WAIT_POLICY=passive, set
    before libgomp initializes (g6_env.cpp); the user's OMP_WAIT_POLICY or GOMP_SPINCOUNT wins."""
    assert _libgomp_spincount(c_driver, "forces", ic_file) == 0
    assert _libgomp_spincount(c_driver, "forces", ic_file, OMP_WAIT_POLICY="active") > 1000
    assert _libgomp_spincount(c_driver, "forces", ic_file, GOMP_SPINCOUNT=12345) == 12345


def test_fortran_host_threads_wait_passively(f_driver, ic_file):
    assert _libgomp_spincount(f_driver, "forces", ic_file) == 0


def test_the_hosts_environment_stays_its_own(build):
    """The wait policy set for libgomp is taken out of the environment again once libgomp has
    read it: the host and its child processes see their own OMP_WAIT_POLICY."""
    cc = shutil.which("cc") or shutil.which("gcc")
    exe = build / "environ_g6"
    subprocess.run([cc, "-O2", "-std=c11", "-Wall", "-Werror", str(HERE / "environ_g6.c"),
                    *gravpipe_config("--cflags", "--libs"), "-o", str(exe)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    assert out.split() == ["(unset)", "1"]
    out = subprocess.run([str(exe)], capture_output=True, text=True, env={**env, "OMP_WAIT_POLICY": "active"},
                         timeout=60, check=True).stdout
    assert out.split() == ["active", "1"]


def test_errors_give_messages_and_error_returns(c_driver):
    r = run(c_driver, "errors")
    codes = [int(line.split(" = ")[1]) for line in r.stdout.splitlines() if " = " in line]
    # g6_open, the valid j write, the valid lasthalf2, read list, first close; then (issue 49)
    # g6_open again, a j write, set_ti(0), set_ti(0), the last lasthalf, the last close
    ok = [1, 8, 13, 15, 18, 21, 22, 25, 29, 30, 31]
    assert codes == [0 if k in ok else -1 for k in range(32)], codes
    assert "nan_after_error 1" in r.stdout     # a failed lasthalf leaves NaN, never a stale force
    assert "acc_ok 1 nn 0 pot -1.000000" in r.stdout
    for why in ("is not open", "already open", "no g6calc_firsthalf is pending", "outside the j-memory",
                "NaN or infinite", "was never written", "eps2 must be finite", "exceeds g6_npipes()",
                "call g6_read_neighbour_list", "ipipe = 5 is outside",
                # a failed g6_set_ti fails the calculations after it, and a second firsthalf
                # before its lasthalf fails both (each silently used the old ti / the second)
                "g6_set_ti: ti = nan is not finite", "the last g6_set_ti failed (ti = nan is not finite)",
                "a g6calc_firsthalf is already pending"):
        assert why in r.stderr, why
    assert all(line.startswith("gravpipe g6: ") for line in r.stderr.splitlines())


def test_config_flags_and_pkg_config(plummer):
    libs = gravpipe_config("--libs")
    assert "-lgravpipe_g6" in libs
    libdir = Path(gravpipe_config("--g6-libdir")[0])
    assert (libdir / "libgravpipe_g6.so").is_file()
    assert (Path(gravpipe_config("--includedir")[0]) / "gravpipe" / "g6.h").is_file()
    pkg = shutil.which("pkg-config")
    if pkg:
        env = {**os.environ, "PKG_CONFIG_PATH": gravpipe_config("--pkgconfigdir")[0]}
        out = subprocess.run([pkg, "--libs", "gravpipe_g6"], capture_output=True, text=True, env=env, check=True)
        assert "-lgravpipe_g6" in out.stdout
        found = Path(out.stdout.split()[0][2:]).resolve()
        assert found == libdir.resolve()


def test_library_exports_only_the_g6_interface():
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) not installed")
    lib = Path(gravpipe_config("--g6-libdir")[0]) / "libgravpipe_g6.so"
    out = subprocess.run([nm, "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.split()[1] in "TDBW"]
    assert "g6calc_firsthalf" in names and "g6calc_firsthalf_" in names
    assert all(n.startswith(("g6_", "g6calc_", "gravpipe_g6_")) for n in names), names


def test_host_code_with_its_own_c_wrappers(build):
    """Sapporo-era codes define the C calls themselves around the Fortran symbols (ph4 does)
    and compute on a cluster id other than the one they opened."""
    cc = shutil.which("cc") or shutil.which("gcc")
    exe = build / "wrapper_g6"
    subprocess.run([cc, "-O2", "-std=c11", "-Wall", "-Werror", str(HERE / "wrapper_g6.c"),
                    *gravpipe_config("--libs"), "-o", str(exe)], check=True)
    r = run(exe)
    assert [float(v) for v in r.stdout.split()] == pytest.approx([1.0, -1.0, -1.0, -1.0], rel=1e-6)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "GRAVPIPE_G6_CLUSTERS": "separate"})
    assert r.returncode == 2 and "cluster 0 is not open" in r.stderr
