// An out-of-core store of the fields the external sort needs (those of the out-of-core
// leapfrog: gravpipe.ooc.OOC_FIELDS), filled with a clustered set of particles whose "index"
// is their position in the caller's order, as gravpipe.store writes it.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gravpipe/particle_store.hpp"

namespace gravpipe_test {

inline std::vector<gravpipe::FieldSpec> sortable_fields() {
  using gravpipe::FieldType;
  std::vector<gravpipe::FieldSpec> f = gravpipe::default_fields();
  f.push_back({"index", 1, FieldType::I64, ""});
  f.push_back({"key", 1, FieldType::I64, ""});
  f.push_back({"pos~", 3, FieldType::F64, "body~"});
  f.push_back({"vel~", 3, FieldType::F64, ""});
  f.push_back({"mass~", 1, FieldType::F64, "body~"});
  f.push_back({"id~", 1, FieldType::I64, ""});
  f.push_back({"index~", 1, FieldType::I64, ""});
  f.push_back({"key~", 1, FieldType::I64, ""});
  return f;
}

/// Caller-order particles: pos 3n, vel 3n, mass n, id n.
struct Particles {
  std::vector<double> pos, vel, mass;
  std::vector<std::int64_t> id;
};

/// A dense core in a sparse halo, and repeated positions (equal keys, ordered by index).
inline Particles clustered_particles(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Particles p;
  for (std::int64_t k = 0; k < n; ++k) {
    const double scale = k % 3 == 0 ? 0.05 : 1.0;
    for (int c = 0; c < 3; ++c) {
      p.pos.push_back(k % 50 == 7 ? 0.125 : scale * normal(rng));
      p.vel.push_back(normal(rng));
    }
    p.mass.push_back(1.0 / static_cast<double>(n));
    p.id.push_back(1000 + 7 * k);
  }
  return p;
}

/// Write every field the sort reads: pos, vel, mass, id, and index 0..n-1.
inline void fill_store(gravpipe::ParticleStore& s, const Particles& p) {
  const std::int64_t n = s.size();
  s.write("pos", 0, n, p.pos.data());
  s.write("vel", 0, n, p.vel.data());
  s.write("mass", 0, n, p.mass.data());
  s.write("id", 0, n, p.id.data());
  std::vector<std::int64_t> index(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) index[static_cast<std::size_t>(k)] = k;
  s.write("index", 0, n, index.data());
}

}  // namespace gravpipe_test
