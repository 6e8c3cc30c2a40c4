#include "g6_jmemory.hpp"

#include <cmath>
#include <string>

#include "gravpipe/error.hpp"

namespace gravpipe::grape6 {

namespace {

bool finite3(const double a[3]) { return std::isfinite(a[0]) && std::isfinite(a[1]) && std::isfinite(a[2]); }

// Predictions of fewer particles than this stay on the calling thread: a fork costs more.
constexpr std::int64_t kMinParallel = 8192;

}  // namespace

void JMemory::write(int address, const JParticle& p) {
  if (address < 0 || static_cast<std::size_t>(address) >= capacity_)
    throw InputError("address " + std::to_string(address) + " is outside the j-memory [0, " +
                     std::to_string(capacity_) + ") (GRAVPIPE_G6_JMEM sets its size)");
  const auto a = static_cast<std::size_t>(address);
  if (a >= slots_.size()) {
    slots_.resize(a + 1);
    state_.resize(a + 1, State::Empty);
  }
  ++version_;
  const bool finite = std::isfinite(p.tj) && std::isfinite(p.mass) && finite3(p.x) && finite3(p.v) &&
                      finite3(p.aby2) && finite3(p.a1by6) && finite3(p.a2by18);
  if (!finite || p.mass < 0) {
    state_[a] = State::Invalid;
    ++layout_version_;
    throw InputError("j-particle at address " + std::to_string(address) + " (index " + std::to_string(p.index) +
                     "): " + (finite ? "negative mass" : "NaN or infinite input") +
                     "; the address stays invalid until written again");
  }
  if (state_[a] != State::Valid || slots_[a].mass != p.mass || slots_[a].index != p.index) ++layout_version_;
  slots_[a] = p;
  state_[a] = State::Valid;
}

void JMemory::clear() {
  slots_.clear();
  state_.clear();
  ++version_;
  ++layout_version_;
}

void JMemory::check_filled(std::size_t nj) const {
  if (nj > capacity_)
    throw InputError("nj = " + std::to_string(nj) + " exceeds the j-memory size " + std::to_string(capacity_));
  for (std::size_t a = 0; a < nj; ++a) {
    const State s = a < state_.size() ? state_[a] : State::Empty;
    if (s == State::Empty)
      throw InputError("nj = " + std::to_string(nj) + " but address " + std::to_string(a) +
                       " was never written by g6_set_j_particle (since g6_open or g6_reset)");
    if (s == State::Invalid)
      throw InputError("address " + std::to_string(a) + " holds invalid data (its last g6_set_j_particle failed)");
  }
}

void JMemory::predict(std::size_t nj, double ti, PredictedJ& out, int threads) const {
  out.pos.resize(3 * nj);
  out.vel.resize(3 * nj);
  out.mass.resize(nj);
  out.index.resize(nj);
  const auto n = static_cast<std::int64_t>(nj);
#pragma omp parallel for schedule(static) num_threads(threads) if (n >= kMinParallel)
  for (std::int64_t a = 0; a < n; ++a) {
    const JParticle& p = slots_[a];
    const double dt = ti - p.tj;
    for (int c = 0; c < 3; ++c) {
      out.pos[3 * a + c] = p.x[c] + dt * (p.v[c] + dt * (p.aby2[c] + dt * (p.a1by6[c] + dt * 0.75 * p.a2by18[c])));
      out.vel[3 * a + c] = p.v[c] + dt * (2.0 * p.aby2[c] + dt * (3.0 * p.a1by6[c] + dt * 3.0 * p.a2by18[c]));
    }
    out.mass[a] = p.mass;
    out.index[a] = p.index;
  }
}

void JMemory::rebuild_index_map() const {
  address_of_index_.clear();
  duplicates_.clear();
  for (std::size_t a = 0; a < slots_.size(); ++a) {
    if (state_[a] != State::Valid) continue;
    const int index = slots_[a].index;
    const auto [it, fresh] = address_of_index_.emplace(index, static_cast<std::int64_t>(a));
    if (!fresh) {
      auto& dup = duplicates_[index];
      if (it->second >= 0) dup.push_back(it->second);
      dup.push_back(static_cast<std::int64_t>(a));
      it->second = -2;
    }
  }
  map_version_ = layout_version_;
}

std::int64_t JMemory::address_of(int index, std::size_t nj) const {
  if (map_version_ != layout_version_) rebuild_index_map();
  const auto it = address_of_index_.find(index);
  if (it == address_of_index_.end()) return -1;
  if (it->second >= 0) return it->second < static_cast<std::int64_t>(nj) ? it->second : -1;
  std::int64_t found = -1;
  for (const std::int64_t a : duplicates_.at(index)) {
    if (a >= static_cast<std::int64_t>(nj)) continue;
    if (found >= 0)
      throw InputError("index " + std::to_string(index) + " is held by j-particles at addresses " +
                       std::to_string(found) + " and " + std::to_string(a) +
                       "; an i-particle with that index needs one j-particle per index");
    found = a;
  }
  return found;
}

}  // namespace gravpipe::grape6
