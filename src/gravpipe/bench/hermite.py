"""``gravpipe bench hermite``: throughput of the block-timestep Hermite integrator.

A Plummer sphere (``gravpipe.ic.plummer``, N-body units) is integrated with the 4th-order
Hermite scheme (Aarseth's criterion ``eta``, softening ``eps``) from t = 0 to ``t_end``
on the CPU pipeline, and the Simulation's own time breakdown (seed 000, PCI-HIB eqs. 5-14)
is reported for the evolve phase only (the start-up force evaluation on all particles is
left out):

- host: predict, correct, new steps, block scheduling (T_host);
- transfer: j-particle writes, i-particle writes and result reads, including the format
  conversion (T_comm);
- compute: the force kernels (T_grape).

The figures the issue asks for are particle steps per second (over the whole evolve
time) and the share of host + transfer time in the step (goal <= 20%). As a reference
measured in the same run, the pipeline's all-pairs acc+jerk+pot rate at the same N,
precision and thread count (``gravpipe.bench.direct.measure_pipeline``) is the peak that
the Hermite blocks' interactions per second (over compute time) are compared with:
blocks have fewer i-particles than N, so their rate is below the all-pairs one.

Cost: the number of particle steps grows about linearly with ``t_end``; for N = 16384,
eta = 0.02, eps = 1/64 a Plummer sphere takes ~2.8e6 particle steps (~4.5e10
interactions, ~1280 active particles per block) per N-body time unit. On the 2-core AVX2
development machine, otherwise idle, that is ~23 s per time unit in mixed precision
(1.2e5 particle steps/s, host + transfer ~6% of the step, 0.85-0.88 x the all-pairs
rate) and ~40 s in double. The default t_end = 0.25 (two dt_max = 0.125 intervals) takes
~5.6 s of evolve and ~8.5 s in all there (up to ~18 s while other work shares the
machine, when the host + transfer share also rises to 20-27%: OpenMP threads wait for
time slices).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import gravpipe as gp
from gravpipe.bench.direct import FLOPS_WITH_JERK, measure_pipeline
from gravpipe.simulation import Simulation, Timings

BACKEND = "cpu"


@dataclass
class HermiteBenchResult:
    """One Hermite benchmark run. Seconds are wall-clock, for the evolve phase only."""

    n: int
    t_end: float
    precision: str
    threads: int | None       # CPU threads (None on CUDA)
    eta: float
    eps: float
    seconds_total: float      # evolve time inside the core (host + transfer + compute)
    seconds_host: float       # predict, correct, schedule (T_host)
    seconds_transfer: float   # j/i writes and result reads (T_comm)
    seconds_compute: float    # force kernels (T_grape)
    blocks: int               # block steps
    particle_steps: int       # sum over blocks of the active particles
    interactions: int         # pairwise interactions (acc+jerk+pot)
    particle_steps_per_second: float  # over seconds_total
    interactions_per_second: float    # interactions over compute time
    host_transfer_share: float        # (host + transfer) / (host + transfer + compute)
    energy_error: float       # (E(t_end) - E(0)) / |E(0)|
    # reference measured in the same run: the pipeline's all-pairs acc+jerk+pot rate at the
    # same N, precision and threads, and the Hermite rate as a fraction of it
    pipeline_interactions_per_second: float = 0.0
    ratio_to_pipeline: float = 0.0
    backend: str = "cpu"

    @property
    def mean_block_size(self) -> float:
        """Average active particles per block."""
        return self.particle_steps / self.blocks if self.blocks else 0.0

    @property
    def gflops(self) -> float:
        """Compute-time flop rate, 60 flops per interaction with jerk (GRAPE convention)."""
        return self.interactions_per_second * FLOPS_WITH_JERK / 1e9


def _delta(after: Timings, before: Timings) -> Timings:
    return Timings(host=after.host - before.host, transfer=after.transfer - before.transfer,
                   compute=after.compute - before.compute, total=after.total - before.total,
                   steps=after.steps - before.steps, particle_steps=after.particle_steps - before.particle_steps,
                   interactions=after.interactions - before.interactions)


def run(n: int = 16384, t_end: float = 0.25, precision: str = "mixed", threads: int | None = None,
        eta: float = 0.02, eps: float = 1 / 64, seed: int = 1, backend: str = BACKEND) -> HermiteBenchResult:
    """Integrate a Plummer sphere of ``n`` particles to ``t_end`` with Hermite and measure it.

    ``t_end`` must be a multiple of dt_max = 0.125 (the Simulation's output quantum);
    ``threads`` None uses all OpenMP threads. Also measures the all-pairs pipeline rate at
    the same N (best of one measurement before and one after the run, ~1 s at N = 16384)
    as the reference; ``threads`` is resolved for it as for the Simulation's pipeline
    (same argument, same Pipeline class). Raises ``ValueError`` for bad
    arguments, as ``Simulation`` does. ``backend`` "cuda" runs the forces and the
    j-prediction on the GPU (threads must then be None).
    """
    # the reference, best of a measurement before and one after the run: one all-pairs
    # evaluation at N = 16384 takes ~0.1-0.5 s, so a single one is easily disturbed
    ref_before, used_threads = measure_pipeline(n, precision, jerk=True, backend=backend, threads=threads,
                                                seed=seed)
    particles = gp.ic.plummer(n, seed=seed)
    sim = Simulation(particles, integrator="hermite", eps=eps, eta=eta, precision=precision,
                     threads=threads, backend=backend)
    before = sim.timings  # the start-up force evaluation on all particles is not a step
    sim.evolve(t_end, progress=False)
    t = _delta(sim.timings, before)
    energy_error = sim.energy_error()
    ref_after, _ = measure_pipeline(n, precision, jerk=True, backend=backend, threads=threads, seed=seed)
    seconds_ref = min(ref_before, ref_after)
    pipeline_rate = n * (n - 1) / seconds_ref if seconds_ref > 0 else 0.0
    rate = t.interactions / t.compute if t.compute > 0 else 0.0
    return HermiteBenchResult(
        n=n, t_end=float(t_end), precision=precision, threads=used_threads, eta=float(eta), eps=float(eps),
        seconds_total=t.total, seconds_host=t.host, seconds_transfer=t.transfer, seconds_compute=t.compute,
        blocks=t.steps, particle_steps=t.particle_steps, interactions=t.interactions,
        particle_steps_per_second=t.particle_steps / t.total if t.total > 0 else 0.0,
        interactions_per_second=rate,
        host_transfer_share=t.host_transfer_share,
        energy_error=energy_error,
        backend=sim.backend,
        pipeline_interactions_per_second=pipeline_rate,
        ratio_to_pipeline=rate / pipeline_rate if pipeline_rate > 0 else 0.0,
    )


def summary(r: HermiteBenchResult) -> str:
    """A few lines for the terminal: the issue's figures first, then the breakdown."""
    return "\n".join([
        f"Hermite, Plummer N = {r.n}, t = 0 -> {r.t_end:g}, {r.precision}, "
        f"{'CUDA' if r.backend == 'cuda' else f'{r.threads} threads'}, "
        f"eta = {r.eta:g}, eps = {r.eps:g}",
        f"  particle steps/s {r.particle_steps_per_second:.3e}   host+transfer share "
        f"{100 * r.host_transfer_share:.1f}% (goal <= {25 if r.backend == 'cuda' else 20}%)   dE/E {r.energy_error:.2e}",
        f"  {r.blocks:,} blocks, {r.particle_steps:,} particle steps ({r.mean_block_size:.0f} per block), "
        f"{r.interactions:.3e} interactions",
        f"  seconds: host {r.seconds_host:.3f}, transfer {r.seconds_transfer:.3f}, compute "
        f"{r.seconds_compute:.3f}, total {r.seconds_total:.3f}",
        f"  interactions/s over compute {r.interactions_per_second:.3e} ({r.gflops:.1f} Gflop/s at "
        f"{FLOPS_WITH_JERK}/interaction) = {r.ratio_to_pipeline:.2f} x the all-pairs pipeline rate "
        f"{r.pipeline_interactions_per_second:.3e} measured in this run",
    ])


def as_json(results: list[HermiteBenchResult], machine: dict) -> dict:
    return {"benchmark": "hermite", "backend": sorted({r.backend for r in results}), "model": "plummer",
            "flop_convention": {"acc+jerk+pot": FLOPS_WITH_JERK},
            "reference": "pipeline all-pairs acc+jerk+pot rate, same N, precision and threads",
            "machine": machine,
            "results": [asdict(r) | {"mean_block_size": r.mean_block_size, "gflops": r.gflops}
                        for r in results]}
