import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/reference.py


def clustered_set(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """pos (n,3), vel (n,3), mass (n,): a diffuse Gaussian with a dense clump (1/8 of the
    particles, 100x smaller) and a few hard pairs, the cases where precision is hardest."""
    rng = np.random.default_rng(seed)
    pos = rng.normal(size=(n, 3))
    k = n // 8
    pos[:k] = 0.01 * rng.normal(size=(k, 3)) + 0.3
    pos[k:k + 4] = pos[k + 4:k + 8] + 1e-3 * rng.normal(size=(4, 3))  # close pairs
    vel = rng.normal(size=(n, 3))
    mass = rng.random(n) / n
    return pos, vel, mass


@pytest.fixture
def clustered():
    return clustered_set
