// The leapfrog's kick and drift on the pages of an out-of-core store, block by block: the
// loops of LeapfrogIntegrator::step (leapfrog.hpp) with the same arithmetic per element, so
// an out-of-core step (kick-drift, sort, tree forces, kick) gives the in-core step's state
// bit for bit. Blocks are charged to the store's budget.
#pragma once
#include <cstdint>

#include "gravpipe/particle_store.hpp"

namespace gravpipe {

/// vel += h acc, then pos += dt vel, for every particle ("vel", "acc", "pos").
void paged_kick_drift(ParticleStore& s, double h, double dt, std::int64_t block);

/// vel += h acc for every particle. First checks that "acc" and "pot" are finite, as the
/// in-core leapfrog does after its forces: IntegrationError naming the particle (its
/// "index", the caller's order) and the time t otherwise.
void paged_kick(ParticleStore& s, double h, std::int64_t block, double t);

/// The IntegrationError check of paged_kick alone (after the first forces of a run).
void check_paged_forces(ParticleStore& s, std::int64_t block, double t);

}  // namespace gravpipe
