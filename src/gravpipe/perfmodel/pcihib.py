"""Seed 000 (Kawai et al., PCI-HIB for GRAPE-4) eqs. 2-22 with the paper's own constants.

The equations are written here as the paper writes them, with its constants (section 4), so
that a test can check that they reproduce the paper's own statements: the library's
j-particle write speed (eq. 2 against Table 2 and section 4.2), the share of host time in
the equal-timestep code (section 4.3), and how much faster the PHIB host (AlphaStation
500, "AS500") is than the THIB host (AXP 3000/700, "AA3000") for each algorithm (5%,
10-30%, ~40%; sections 4.3-4.5). gravpipe's own model (``gravpipe.perfmodel.model``)
follows the same decomposition T = T_host + T_transfer + T_pipeline with measured constants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

N_VP = 94                 # virtual pipelines of one processor board
T_PIPE = 6.25e-8          # s, 16 MHz pipeline clock
J_MEMORY = 43690          # j-particles one board holds (eq. 10)
C1_J, C2_J = 8.5e-6, 2.5e-6   # eq. 2: j-particle write T_j = C1 + C2 n (s, s per particle)
C_I, C_R = 1.4e-4, 1.9e-4     # eqs. 3-4: i-particle write and result read per block of N_VP (s)
WORD = 4                  # bytes per word
J_WORDS, I_WORDS, R_WORDS = 19, 10, 10   # words per particle (eqs. 8, 13)
T_JP = C2_J / J_WORDS                    # s per word, j-particle write
T_IP = C_I / (N_VP * I_WORDS)            # s per word, i-particle write
T_RES = C_R / (N_VP * R_WORDS)           # s per word, result read

HOSTS = {  # section 4: t_host1 (eq. 6), T_host2 (eq. 11), t_int, t_const, t_list (eq. 17)
    "AS500": {"t_host1": 0.5e-6, "T_host2": 1.3e-5, "t_int": 1.9e-6, "t_const": 1.6e-6, "t_list": 0.8e-6},
    "AA3000": {"t_host1": 1.0e-6, "T_host2": 2.5e-5, "t_int": 3.6e-6, "t_const": 3.5e-6, "t_list": 3.3e-6},
}


@dataclass(frozen=True)
class Split:
    """One step (or one particle step) split as the paper splits it (seconds)."""
    host: float
    pipeline: float
    transfer: float

    @property
    def total(self) -> float:
        return self.host + self.pipeline + self.transfer


def _blocks(n: float) -> int:
    """[(n + n_vp - 1) / n_vp]: blocks of N_VP (the paper's [x] is the floor)."""
    return math.floor((n + N_VP - 1) / N_VP)


def g_factor(n: float) -> float:
    """Eqs. 9, 14, 22: the pipelines' loss of efficiency for an i-set of n."""
    return _blocks(n) * N_VP / n


def t_j(n: int) -> float:
    """Eq. 2: seconds to write n j-particles."""
    return C1_J + C2_J * n


def equal_timestep(n: int, host: str = "AS500") -> Split:
    """Eqs. 5-10: one shared step of n particles."""
    g1 = g_factor(n)
    r = math.floor((n - 1) / J_MEMORY + 1)
    return Split(host=n * HOSTS[host]["t_host1"],
                 pipeline=g1 * 3 * n * n * T_PIPE / N_VP,
                 transfer=n * (J_WORDS * T_JP + 10 * g1 * r * T_IP + 10 * g1 * r * T_RES))


def block_size(n: int) -> float:
    """Eq. 15: particles sharing one time (Makino et al. 1997)."""
    return 1.6 * math.sqrt(n)


def individual_timestep(n: int, host: str = "AS500") -> Split:
    """Eqs. 11-15: time per particle step."""
    g2 = g_factor(block_size(n))
    return Split(host=HOSTS[host]["T_host2"], pipeline=g2 * 3 * n * T_PIPE / N_VP,
                 transfer=38 * T_JP + 10 * g2 * T_IP + 10 * g2 * T_RES)


def n_terms(n: int, theta: float, n_crit: int) -> float:
    """Eqs. 20-21: the mean interaction list length (Makino 1991a), n_g = n_crit / 4."""
    ng = n_crit / 4
    l8 = math.log(8)
    return (ng + 14 * ng ** (2 / 3) + 84 * ng ** (1 / 3) + 56 * math.log(ng) / l8
            - 31 * theta ** -3 * math.log10(ng) - 72
            + 1e2 * theta ** -3 * math.log(10) / l8 * math.log10(n * theta ** 3 / 23))


def treecode(n: int, theta: float = 0.75, n_crit: int = 4000, host: str = "AS500") -> Split:
    """Eqs. 16-22: one treecode step. The list term of eq. 17 divides by the particles
    sharing one list, n_g (the paper's n_pi)."""
    h = HOSTS[host]
    ng = n_crit / 4
    terms = n_terms(n, theta, n_crit)
    g3 = g_factor(ng)
    return Split(host=n * h["t_int"] + n * math.log10(n) * h["t_const"] + n * terms / ng * h["t_list"],
                 pipeline=g3 * 3 * n * terms * T_PIPE / N_VP,
                 transfer=n * (J_WORDS * terms / ng * T_JP + 10 * g3 * T_RES))
