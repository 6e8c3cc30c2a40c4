#include "gravpipe/callback_forces.hpp"

#include <cstring>

#include "gravpipe/force_request_check.hpp"
#include "gravpipe/stopwatch.hpp"

namespace gravpipe {

CallbackForces::CallbackForces(Compute compute) : compute_(std::move(compute)) {
  if (!compute_) throw InputError("callback forces: no compute function given");
}

void CallbackForces::set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) {
  check_j_set(pos, mass, vel);
  has_vel_ = !vel.empty();
  pos_.assign(pos.begin(), pos.end());
  mass_.assign(mass.begin(), mass.end());
  stats_.j_particles += mass_.size();
}

void CallbackForces::update_j(Span<const double> pos, Span<const double> vel) {
  check_j_update(pos, vel, mass_.size(), has_vel_);
  pos_.assign(pos.begin(), pos.end());
}

void CallbackForces::forces(const ForceRequest& req) {
  if (!req.vel_i.empty()) throw InputError("forces: jerk is not available from this force source (a treecode)");
  const std::size_t ni = check_force_request(req, mass_.size(), false);
  const std::size_t n = mass_.size();
  // self-gravity: the j-set itself with every particle excluding itself
  bool self = ni == n && req.exclude.size() == n &&
              std::memcmp(req.pos_i.data(), pos_.data(), 3 * n * sizeof(double)) == 0;
  for (std::size_t k = 0; self && k < n; ++k) self = req.exclude[k] == static_cast<std::int64_t>(k);
  if (!self)
    throw InputError("forces: this force source computes self-gravity of its whole j-set only (i = j, each "
                     "particle excluding itself)");
  const auto t0 = Clock::now();
  const Work w = compute_({pos_.data(), pos_.size()}, {mass_.data(), n}, req.acc, req.pot);
  const double wall = seconds_since(t0);
  stats_.calls += 1;
  stats_.i_particles += n;
  stats_.interactions += w.interactions;
  stats_.seconds_j_write += w.seconds_j_write;
  stats_.seconds_comm += w.seconds_comm;
  stats_.seconds_compute += std::max(0.0, wall - w.seconds_j_write - w.seconds_comm);
}

}  // namespace gravpipe
