"""Initial conditions: equilibrium and cold star-cluster models as ``Particles``.

Every generator takes the particle number ``n`` and a ``seed`` for
``numpy.random.default_rng``: the same seed gives bitwise identical arrays (on the same
numpy version and machine), ``seed=None`` draws fresh entropy. All particles have equal
mass ``mass / n``; the centre of mass is at the origin and at rest.

Units are N-body (Henon) units by default, G = M = 1; ``plummer`` is further scaled so
that E = -1/4 (virial radius 1).

Models of any N, block by block: ``plummer_blocks`` and ``uniform_cube_blocks`` draw the
same models in blocks of at most ``block`` particles (default ``IC_BLOCK``), block k from
its own random stream (``SeedSequence(seed, spawn_key=(k,))``; block 0 from the seed
itself), so that a model of 1e8 particles goes to a file with one block in memory.
Centring needs sums over the whole model, so the blocks are drawn twice: a first pass adds
up what the centring needs, a second draws every block again and yields it centred (about
0.6 s per 1e6 Plummer particles per pass on one Zen 3 core). Both paths give the same bits:
``plummer(n, seed)`` with n > ``IC_BLOCK`` is the concatenation of its blocks, and with
n <= ``IC_BLOCK`` there is one block, drawn exactly as before.

References
----------
Aarseth, S. J., Henon, M. & Wielen, R. 1974, A&A 37, 183 (1974A&A....37..183A),
  appendix: generation of a Plummer model.
Henon, M. 1971, Ap&SS 14, 151; Heggie, D. C. & Mathieu, R. D. 1986, LNP 267, 233:
  standard N-body units.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator

import numpy as np

from gravpipe._validate import check_positive_scalar
from gravpipe.particles import Particles

__all__ = ["plummer", "uniform_sphere", "uniform_cube", "plummer_blocks", "uniform_cube_blocks", "model_blocks", "model_share",
           "model_share_blocks", "check_ic_budget", "BLOCK_MODELS", "IC_BLOCK", "PLUMMER_SCALE_LENGTH", "PLUMMER_MASS_CUTOFF",
           "CUBE_VIRIAL_MAX_N"]

#: Plummer scale length a in N-body units: E = -3 pi G M^2 / (64 a) = -1/4 for G = M = 1.
PLUMMER_SCALE_LENGTH = 3.0 * np.pi / 16.0

#: Radii are drawn only from the inner 99.9% of the Plummer mass (r < 22.8 N-body units).
PLUMMER_MASS_CUTOFF = 0.999

#: Largest n for which ``uniform_cube`` computes W by direct summation (O(n^2)).
CUBE_VIRIAL_MAX_N = 200_000  # O(n^2) potential: ~25 s at this n on 2 cores

# Von Neumann rejection for q = v / v_esc: g(q) = q^2 (1 - q^2)^(7/2) peaks at q^2 = 2/9
# with g = 0.0922 < 0.1, the bound used by Aarseth et al. (1974, eq. A5). The acceptance
# rate is int_0^1 g dq / 0.1 = B(3/2, 9/2) / 0.2 = 0.4295.
_G_BOUND = 0.1
_ACCEPTANCE = 0.4295


def plummer(n: int, seed: int | None = None, *, G: float = 1.0, mass: float = 1.0) -> Particles:
    """A Plummer sphere in virial equilibrium, sampled as in Aarseth, Henon & Wielen (1974).

    Radii come from inverting the cumulative mass profile m(r) = r^3 / (r^2 + a^2)^(3/2),
    with m drawn uniformly from [0, 0.999): the standard cut-off of Aarseth et al. (1974)
    (also the default of starlab/NEMO ``mkplummer``), which leaves out the outermost 0.1%
    of the mass, so no particle lies beyond r = 22.8 (N-body units). The distribution
    inside the cut is the exact Plummer profile renormalised by 1/0.999. Speeds are
    v = q v_esc(r), v_esc = sqrt(2 G M) (r^2 + a^2)^(-1/4), with q drawn by von Neumann
    rejection from g(q) = q^2 (1 - q^2)^(7/2); position and velocity directions are
    isotropic and independent.

    Scaling (Henon / N-body units): a = 3 pi / 16, so that for G = M = 1 the total energy
    of the continuous model is E = -3 pi G M^2 / (64 a) = -1/4 and the virial radius is 1.
    The model is scaled analytically, not by measuring K and W of the sample, so a
    realisation has E = -1/4 and 2K/|W| = 1 only up to sampling noise (a few percent at
    n ~ 4000, shrinking as n^(-1/2)). With other ``G`` or ``mass`` the length scale is kept
    and velocities scale as sqrt(G M): E = -G M^2 / 4, virial ratio still 1.

    Parameters
    ----------
    n : int
        Number of particles, >= 2.
    seed : int or None
        Seed for ``numpy.random.default_rng``; the same seed gives bitwise identical output.
    G : float
        Gravitational constant, > 0 (the velocity scale depends on it).
    mass : float
        Total mass M, > 0; each particle has mass M / n.

    Returns
    -------
    Particles
        pos (n, 3) and vel (n, 3) float64 in N-body units, mass (n,) float64 all equal to
        M / n, id ``0 .. n-1``. Centre of mass at the origin and at rest (to rounding).

    Raises
    ------
    ValueError
        Naming the argument: ``n`` not an integer >= 2; ``G`` or ``mass`` not finite and
        > 0; ``seed`` not accepted by ``numpy.random.default_rng``.
    """
    n = _check_n(n, minimum=2, why=" for a Plummer model")
    G = check_positive_scalar("G", G, allow_zero=False)
    mass = check_positive_scalar("mass", mass, allow_zero=False)
    if n <= IC_BLOCK:
        return _plummer_one_block(n, seed, G, mass)
    return _concatenate(plummer_blocks(n, seed, G=G, mass=mass, block=IC_BLOCK))


def _plummer_raw(rng: np.random.Generator, n: int, G: float, mass: float, n_total: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """pos (n, 3), vel (n, 3), mass (n,) of n particles of a Plummer model of n_total, not centred."""
    # Structural units G = M = a = 1 first, as in the paper; scale at the end.
    r = _plummer_radius(PLUMMER_MASS_CUTOFF * rng.random(n))
    pos = r[:, None] * _isotropic_directions(rng, n)
    speed = _plummer_speed_ratio(rng, n) * np.sqrt(2.0) * (1.0 + r * r) ** -0.25
    vel = speed[:, None] * _isotropic_directions(rng, n)
    a = PLUMMER_SCALE_LENGTH
    pos *= a
    vel *= np.sqrt(G * mass / a)
    return pos, vel, np.full(n, mass / n_total)


def _plummer_one_block(n: int, seed: int | None, G: float, mass: float) -> Particles:
    pos, vel, m = _plummer_raw(_make_rng(seed), n, G, mass, n)
    # A rigid shift is fine here: the Plummer sphere has no edge to push particles across.
    pos -= _mass_weighted_mean(pos, m)
    vel -= _mass_weighted_mean(vel, m)
    return Particles(pos, vel, m)


def _concatenate(blocks: Iterator[Particles]) -> Particles:
    parts = list(blocks)
    return Particles(np.concatenate([p.pos for p in parts]), np.concatenate([p.vel for p in parts]),
                     np.concatenate([p.mass for p in parts]), id=np.concatenate([p.id for p in parts]))


def uniform_sphere(n: int, seed: int | None = None, *, radius: float = 1.0, mass: float = 1.0,
                   virial_ratio: float = 0.0, G: float = 1.0) -> Particles:
    """A homogeneous sphere: cold (at rest) by default, or with virial ratio Q.

    Positions are drawn uniformly inside the ball of the given radius. The centre of mass
    is then removed by a displacement that vanishes at the surface rather than by a rigid
    shift (see ``_remove_mean_inside``), so every particle stays inside: |x| <= radius up
    to floating-point rounding (relative 1e-15). The displacement is of order
    radius * n^(-1/2), the size of the sample's own Poisson noise; it cancels the sample's
    dipole and leaves the radial distribution M(<r) = M (r / radius)^3 unchanged at first
    order. With n = 1 the particle sits at the origin.

    Velocities are zero for ``virial_ratio = 0`` (the cold-collapse problem). For Q > 0 they
    are isotropic Gaussian, centre-of-mass velocity removed, and scaled so that
    2K / |W| = Q exactly, with W the expected potential energy of n equal point masses
    drawn uniformly in a sphere: W = -(1 - 1/n) 3 G M^2 / (5 R). The potential energy of a
    particular realisation differs from this by sampling noise (~1% at n ~ 2000).

    Parameters
    ----------
    n : int
        Number of particles, >= 1 (>= 2 when ``virial_ratio > 0``).
    seed : int or None
        Seed for ``numpy.random.default_rng``; the same seed gives bitwise identical output.
    radius : float
        Sphere radius R, > 0, in length units.
    mass : float
        Total mass M, > 0; each particle has mass M / n.
    virial_ratio : float
        Q = 2K / |W| >= 0.
    G : float
        Gravitational constant, > 0 (used only for the virial scaling).

    Returns
    -------
    Particles
        pos (n, 3), vel (n, 3), mass (n,) float64; centre of mass at the origin and at rest.

    Raises
    ------
    ValueError
        Naming the argument: ``n`` not an integer >= 1 (>= 2 for Q > 0); ``radius``,
        ``mass`` or ``G`` not finite and > 0; ``virial_ratio`` not finite and >= 0; ``seed``
        not accepted by ``numpy.random.default_rng``.
    """
    n, mass, q, G = _check_common(n, mass, virial_ratio, G)
    radius = check_positive_scalar("radius", radius, allow_zero=False)
    rng = _make_rng(seed)
    pos = _centred_ball(rng, n, radius)
    m = np.full(n, mass / n)
    w_expected = -(1.0 - 1.0 / n) * 0.6 * G * mass * mass / radius
    vel = _virial_velocities(rng, m, q, w_expected)
    return Particles(pos, vel, m)


def uniform_cube(n: int, seed: int | None = None, *, side: float = 1.0, mass: float = 1.0,
                 virial_ratio: float = 0.0, G: float = 1.0) -> Particles:
    """A homogeneous cube centred on the origin: cold by default, or with virial ratio Q.

    Positions are drawn uniformly in [-side/2, side/2]^3. The centre of mass is removed
    along each axis by a displacement that vanishes on the faces (see
    ``_remove_mean_inside``), so every coordinate stays within [-side/2, side/2] (to
    rounding); the displacement is of order side * n^(-1/2), the sample's Poisson noise.
    With n = 1 the particle sits at the origin.

    Velocities are zero for ``virial_ratio = 0``. For Q > 0 they are isotropic Gaussian,
    centre-of-mass velocity removed, and scaled so that 2K / |W| = Q exactly for this
    realisation, with W summed over all pairs by the float64 force pipeline (O(n^2) time,
    so only for n <= 200000; about 25 s at that n on two cores). For reference, the continuous
    uniform cube has W = -0.9412 G M^2 / side.

    Parameters
    ----------
    n : int
        Number of particles, >= 1 (2 .. 200000 when ``virial_ratio > 0``).
    seed : int or None
        Seed for ``numpy.random.default_rng``; the same seed gives bitwise identical output.
    side : float
        Edge length, > 0, in length units.
    mass : float
        Total mass M, > 0; each particle has mass M / n.
    virial_ratio : float
        Q = 2K / |W| >= 0.
    G : float
        Gravitational constant, > 0 (used only for the virial scaling).

    Returns
    -------
    Particles
        pos (n, 3), vel (n, 3), mass (n,) float64; centre of mass at the origin and at rest.

    Raises
    ------
    ValueError
        Naming the argument: ``n`` not an integer >= 1, or outside 2 .. 200000 for Q > 0;
        ``side``, ``mass`` or ``G`` not finite and > 0; ``virial_ratio`` not finite and >= 0;
        ``seed`` not accepted by ``numpy.random.default_rng``.
    """
    n, mass, q, G = _check_common(n, mass, virial_ratio, G)
    side = check_positive_scalar("side", side, allow_zero=False)
    if q > 0 and n > CUBE_VIRIAL_MAX_N:
        raise ValueError(f"n: virial scaling of a cube needs n <= {CUBE_VIRIAL_MAX_N} "
                         f"(W is summed directly over pairs), got {n}")
    if q == 0 and n > IC_BLOCK:
        return _concatenate(uniform_cube_blocks(n, seed, side=side, mass=mass, block=IC_BLOCK))
    rng = _make_rng(seed)
    pos = _centred_box(rng, n, 0.5 * side)
    m = np.full(n, mass / n)
    w = _pair_potential_energy(pos, m, G) if q > 0 else 0.0
    vel = _virial_velocities(rng, m, q, w)
    return Particles(pos, vel, m)


# --- models of any N, block by block ----------------------------------------

#: Particles per block: a model of more than IC_BLOCK particles is drawn in blocks of this
#: size, each from its own random stream, in memory and when streamed alike, so the same
#: (n, seed) gives the same particles whatever memory the generator is given. 2^20
#: particles are ~60 MB of pos, vel and mass and ~310 MB while drawn.
IC_BLOCK = 1 << 20

#: Bytes of memory per particle of a block while it is drawn (pos, vel, mass, id and the
#: sampler's temporaries): peak RSS growth measured at 295 for Plummer blocks of 2^20
#: (numpy 2.4), with a margin.
BYTES_PER_BLOCK_PARTICLE = 320


def check_ic_budget(budget_bytes: int, n: int) -> None:
    """Raise ValueError naming the least budget that works when ``budget_bytes`` cannot
    hold the drawing of one block of a model of n particles (min(n, IC_BLOCK) of them)."""
    least = min(int(n), IC_BLOCK) * BYTES_PER_BLOCK_PARTICLE
    if budget_bytes < least:
        raise ValueError(f"memory budget {budget_bytes} bytes is too small to draw initial conditions block "
                         f"by block: the least that works is {least} bytes ({least / 2**20:.1f} MiB)")


def _block_streams(seed: int | None, n: int, block: int) -> list[tuple[int, int, np.random.SeedSequence]]:
    """(start, stop, seed sequence) of every block; fresh entropy is drawn once for seed=None."""
    try:
        root = np.random.SeedSequence(seed)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"seed: expected None or a non-negative integer, got {seed!r} ({exc})") from None
    starts = range(0, n, block)
    return [(s, min(s + block, n),
             root if k == 0 else np.random.SeedSequence(root.entropy, spawn_key=(k,)))
            for k, s in enumerate(starts)]


def _check_block(block: int) -> int:
    if isinstance(block, (bool, np.bool_)) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block: expected an integer >= 1, got {block!r}")
    return int(block)


def plummer_blocks(n: int, seed: int | None = None, *, G: float = 1.0, mass: float = 1.0,
                   block: int = IC_BLOCK) -> Iterator[Particles]:
    """The Plummer sphere of ``plummer`` (same sampling, scaling and arguments) as
    consecutive blocks of at most ``block`` particles, ids n0 .. n0 + len - 1, centre of
    mass at the origin and at rest over the whole model. Raises ValueError as
    ``plummer`` does, and for ``block`` not an integer >= 1."""
    n = _check_n(n, minimum=2, why=" for a Plummer model")
    G = check_positive_scalar("G", G, allow_zero=False)
    mass = check_positive_scalar("mass", mass, allow_zero=False)
    block = _check_block(block)
    if n <= block:
        yield _plummer_one_block(n, seed, G, mass)
        return
    streams = _block_streams(seed, n, block)
    draw = lambda s, e, ss: _plummer_raw(np.random.default_rng(ss), e - s, G, mass, n)  # noqa: E731
    sums = np.zeros((2, 3))
    total_mass = 0.0
    for s, e, ss in streams:  # pass 1: the centre of mass, summed block by block
        pos, vel, m = draw(s, e, ss)
        sums += (m @ pos, m @ vel)
        total_mass += m.sum()
    com_pos, com_vel = sums / total_mass
    for s, e, ss in streams:  # pass 2: the same blocks again, centred
        pos, vel, m = draw(s, e, ss)
        pos -= com_pos
        vel -= com_vel
        yield Particles(pos, vel, m, id=np.arange(s, e, dtype=np.int64))


def uniform_cube_blocks(n: int, seed: int | None = None, *, side: float = 1.0, mass: float = 1.0,
                        block: int = IC_BLOCK) -> Iterator[Particles]:
    """The cold uniform cube of ``uniform_cube`` (virial_ratio 0; a virial cube needs
    an O(n^2) potential and n <= CUBE_VIRIAL_MAX_N, which fits one block) as blocks of
    at most ``block`` particles. Each axis's mean is removed by the displacement that
    vanishes on the faces (``_remove_mean_inside``), with the sums taken over all
    blocks. Raises ValueError as ``uniform_cube`` does; for a model of several blocks
    whose mean cannot be removed that way (only plausible for a few particles, which never
    span several blocks) it raises instead of redrawing."""
    n = _check_n(n, minimum=1)
    side = check_positive_scalar("side", side, allow_zero=False)
    mass = check_positive_scalar("mass", mass, allow_zero=False)
    block = _check_block(block)
    if n <= block:
        yield uniform_cube(n, seed, side=side, mass=mass)
        return
    half = 0.5 * side
    streams = _block_streams(seed, n, block)
    draw = lambda s, e, ss: np.random.default_rng(ss).uniform(-half, half, size=(e - s, 3))  # noqa: E731
    x_sum, w_sum = np.zeros(3), np.zeros(3)
    for s, e, ss in streams:  # pass 1: the mean of each axis and of its distance to the faces
        x = draw(s, e, ss)
        x_sum += x.sum(axis=0)
        w_sum += (half - np.abs(x)).sum(axis=0)
    c, w_mean = x_sum / n, w_sum / n
    if not np.all(np.abs(c) <= w_mean):
        raise ValueError(f"uniform cube of {n} particles: the sample's mean {c} cannot be removed "
                         "inside the cube; use another seed")
    for s, e, ss in streams:  # pass 2: centred
        x = draw(s, e, ss)
        x -= (half - np.abs(x)) / w_mean * c
        yield Particles(x, np.zeros_like(x), np.full(e - s, mass / n), id=np.arange(s, e, dtype=np.int64))


#: The models that can be drawn block by block, by their CLI names.
BLOCK_MODELS: dict[str, Callable[..., Iterator[Particles]]] = {
    "plummer": plummer_blocks,
    "uniform-cube": uniform_cube_blocks,
}


def model_blocks(model: str, n: int, seed: int | None = None) -> Iterator[Particles]:
    """Blocks of a model by its CLI name (``BLOCK_MODELS``); ValueError naming the ones that stream."""
    if model not in BLOCK_MODELS:
        raise ValueError(f"model {model!r} cannot be drawn block by block; these can: {', '.join(BLOCK_MODELS)}")
    return BLOCK_MODELS[model](n, seed, block=IC_BLOCK)


def model_share(model: str, n: int, seed: int | None, begin: int, end: int) -> dict[str, np.ndarray]:
    """Particles [begin, end) of ``model_blocks(model, n, seed)`` (the same particles as the
    whole model's, for one MPI rank's share) as arrays "pos" (m, 3), "vel" (m, 3), "mass"
    (m,) float64 in N-body units, "id" (m,) int64; m = end - begin may be 0. The pieces of
    :func:`model_share_blocks` joined. Memory: the share plus one block. A seed is
    required: every rank must draw the same model."""
    parts: dict[str, list[np.ndarray]] = {"pos": [], "vel": [], "mass": [], "id": []}
    for piece in model_share_blocks(model, n, seed, begin, end):
        for key, a in piece.items():
            parts[key].append(a)
    empty = {"pos": np.empty((0, 3)), "vel": np.empty((0, 3)), "mass": np.empty(0), "id": np.empty(0, np.int64)}
    return {k: np.concatenate(v) if v else empty[k] for k, v in parts.items()}


def model_share_blocks(model: str, n: int, seed: int | None, begin: int, end: int,
                       block: int = IC_BLOCK) -> Iterator[dict[str, np.ndarray]]:
    """Particles [begin, end) of ``model_blocks(model, n, seed)`` (what :func:`model_share`
    returns, the same values in the same order) as consecutive pieces of at most
    min(``block``, ``IC_BLOCK``) particles: dicts "pos" (m, 3), "vel" (m, 3), "mass" (m,)
    float64 in N-body units, "id" (m,) int64, m >= 1 (an empty share yields none); the
    arrays are read-only (copy one to change it). The share is never joined: memory is
    one model block (``IC_BLOCK`` particles, drawn whatever ``block`` is, since the blocks
    are the model's random streams) and the pieces the caller keeps. The blocks before the share are drawn for the centring and
    dropped; those after it are drawn once (the centring's pass), not twice.

    Raises ValueError when called: no seed (every rank must draw the same model),
    [begin, end) not inside [0, n), ``block`` not an integer >= 1, a model that is not
    drawn block by block; and, at the first piece, as ``model_blocks`` for n (on every
    rank alike: a rank with an empty share draws the first block too).
    """
    if seed is None:
        raise ValueError("seed: a model drawn by several ranks needs a seed (each rank draws its share of the "
                         "same model)")
    if not (0 <= begin <= end <= n):
        raise ValueError(f"share [{begin}, {end}) outside the model's [0, {n})")
    return _share_pieces(model_blocks(model, n, seed), int(begin), int(end), _check_block(block))


def _share_pieces(blocks: Iterator[Particles], begin: int, end: int,
                  piece: int) -> Iterator[dict[str, np.ndarray]]:
    """Rows [begin, end) of the model's ``blocks`` in pieces of at most ``piece`` rows."""
    start = 0
    try:
        for blk in blocks:  # the first block checks the model's arguments, on every rank
            lo, hi = max(begin, start), min(end, start + blk.n)
            for s in range(lo, hi, piece):
                e = min(s + piece, hi)
                whole = s == start and e == start + blk.n
                out = {}
                for key, a in (("pos", blk.pos), ("vel", blk.vel), ("mass", blk.mass), ("id", blk.id)):
                    # a part of a block is copied, so that a piece the caller keeps does not
                    # keep the whole block alive (model_share's memory: the share plus one
                    # block); a whole block is passed on as it is, read-only like Particles'
                    # arrays, and so are the copies, so that every piece behaves alike
                    out[key] = a if whole else a[s - start:e - start].copy()
                    out[key].flags.writeable = False
                yield out
            start += blk.n
            if start >= end:
                break  # the blocks after the share are not needed again
    finally:
        blocks.close()  # a generator left early (by the caller too) ends here, not at collection


# --- argument checks -----------------------------------------------------------------

def _check_n(n: int, minimum: int, why: str = "") -> int:
    """Return ``n`` as int after checking it is an integer (not bool) >= ``minimum``."""
    if isinstance(n, (bool, np.bool_)):
        raise ValueError(f"n: expected an integer, got {n!r}")
    try:
        value = operator.index(n)  # accepts numpy integers, refuses 3.0 and "3"
    except TypeError:
        raise ValueError(f"n: expected an integer, got {n!r}") from None
    if value < minimum:
        raise ValueError(f"n: must be >= {minimum}{why}, got {value}")
    return value


def _check_common(n: int, mass: float, virial_ratio: float,
                  G: float) -> tuple[int, float, float, float]:
    """Validate the arguments shared by the uniform models; return (n, mass, q, G)."""
    q = check_positive_scalar("virial_ratio", virial_ratio, allow_zero=True)
    if q > 0:  # a single particle has no potential energy to balance
        n = _check_n(n, minimum=2, why=" when virial_ratio > 0")
    else:
        n = _check_n(n, minimum=1)
    mass = check_positive_scalar("mass", mass, allow_zero=False)
    G = check_positive_scalar("G", G, allow_zero=False)
    return n, mass, q, G


def _make_rng(seed: int | None) -> np.random.Generator:
    """``numpy.random.default_rng(seed)``; its TypeError becomes a ValueError naming seed."""
    try:
        return np.random.default_rng(seed)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"seed: expected None or a non-negative integer, got {seed!r} "
                         f"({exc})") from None


# --- sampling helpers ----------------------------------------------------------------

def _isotropic_directions(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, 3) unit vectors, isotropic: cos(theta) uniform on [-1, 1], phi on [0, 2 pi)."""
    u = rng.random((n, 2))
    cos_t = 1.0 - 2.0 * u[:, 0]
    sin_t = np.sqrt(np.maximum(0.0, 1.0 - cos_t * cos_t))
    phi = 2.0 * np.pi * u[:, 1]
    return np.column_stack((sin_t * np.cos(phi), sin_t * np.sin(phi), cos_t))


def _plummer_radius(m: np.ndarray) -> np.ndarray:
    """Invert m = r^3 / (1 + r^2)^(3/2) (a = 1): r = m^(1/3) / sqrt(1 - m^(2/3)).

    Written this way rather than (m^(-2/3) - 1)^(-1/2) so that m = 0 gives r = 0 without
    a division by zero.
    """
    m23 = m ** (2.0 / 3.0)
    return np.sqrt(m23 / (1.0 - m23))


def _plummer_speed_ratio(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n,) values of q = v / v_esc with density proportional to q^2 (1 - q^2)^(7/2).

    Von Neumann rejection (Aarseth et al. 1974, eqs. A4-A5), vectorised in batches; the
    batch sizes depend only on n and on earlier draws, so the output is deterministic.
    """
    out = np.empty(n)
    filled = 0
    while filled < n:
        want = n - filled
        batch = int(want / _ACCEPTANCE * 1.1) + 32  # usually one batch suffices
        q = rng.random(batch)
        y = _G_BOUND * rng.random(batch)
        accepted = q[y < q * q * (1.0 - q * q) ** 3.5]
        take = min(accepted.size, want)
        out[filled:filled + take] = accepted[:take]
        filled += take
    return out


def _centred_ball(rng: np.random.Generator, n: int, radius: float) -> np.ndarray:
    """(n, 3) points uniform in the ball |x| <= radius with their mean moved to the origin."""
    while True:
        r = radius * rng.random(n) ** (1.0 / 3.0)
        x = r[:, None] * _isotropic_directions(rng, n)
        centred = _remove_mean_inside(x, radius - r)
        if centred is not None:
            return centred


def _centred_box(rng: np.random.Generator, n: int, half: float) -> np.ndarray:
    """(n, 3) points uniform in [-half, half]^3 with their mean moved to the origin."""
    while True:
        x = rng.uniform(-half, half, size=(n, 3))
        axes = [_remove_mean_inside(x[:, k:k + 1], half - np.abs(x[:, k])) for k in range(3)]
        if all(a is not None for a in axes):
            return np.hstack(axes)


def _remove_mean_inside(x: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    """Move the mean of ``x`` (n, d) to zero without pushing points out of their domain.

    ``w`` (n,) >= 0 is each point's distance to the boundary along the direction it may be
    moved. The map x_i -> x_i - c w_i / <w>, with c the mean of x and <w> the mean of w,
    has mean exactly c - c = 0, and moves point i by |c| w_i / <w> <= w_i whenever
    |c| <= <w>: nobody crosses the boundary. A rigid shift by c would push up to
    ~n^(1/2) particles outside the surface and leave an empty lens on the other side.
    Returns None when |c| > <w>, so the caller redraws the sample (only likely for n of a
    few; for n = 1 an accepted draw lands exactly on the origin).
    """
    c = x.mean(axis=0)
    w_mean = w.mean()
    if not np.linalg.norm(c) <= w_mean:
        return None
    return x - np.outer(w / w_mean, c)


def _virial_velocities(rng: np.random.Generator, m: np.ndarray, q: float, w: float) -> np.ndarray:
    """(n, 3) velocities with 2K / |w| = q: zero for q = 0, else isotropic Gaussian, at rest."""
    n = len(m)
    if q == 0:
        return np.zeros((n, 3))
    v = rng.standard_normal((n, 3))
    v -= _mass_weighted_mean(v, m)
    kinetic = 0.5 * float(np.sum(m[:, None] * v * v))
    return v * np.sqrt(q * abs(w) / (2.0 * kinetic))


def _mass_weighted_mean(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """(3,) centre of mass of ``x`` (n, 3) with masses ``m`` (n,)."""
    return (m @ x) / m.sum()


def _pair_potential_energy(pos: np.ndarray, m: np.ndarray, G: float) -> float:
    """W = -G sum_{i<j} m_i m_j / |x_i - x_j| (unsoftened), from the float64 force pipeline."""
    from gravpipe.pipeline import Pipeline  # the pipeline module imports nothing from ic

    pipe = Pipeline(precision="double", eps=0.0, G=G)
    pipe.set_j(pos, m)
    pot = pipe.forces(pos, exclude=np.arange(len(m)))[1]
    return 0.5 * float(np.dot(m, pot))
