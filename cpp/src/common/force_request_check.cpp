#include "gravpipe/force_request_check.hpp"

#include <cmath>
#include <string>

#include "gravpipe/error.hpp"
#include "gravpipe/format_number.hpp"

namespace gravpipe {

namespace {

std::string count(std::size_t n) { return std::to_string(n); }

/// "pos has 27 values; 10 masses need 30"
void check_rows(const char* where, const char* name, std::size_t size, std::size_t rows, const char* of,
                std::size_t width) {
  if (size != width * rows)
    throw InputError(std::string(where) + name + " has " + count(size) + " values; " + count(rows) + " " + of +
                     " need " + count(width * rows));
}

}  // namespace

void check_eps(double eps) {
  if (!(std::isfinite(eps) && eps >= 0))
    throw InputError("eps: must be finite and >= 0, got " + format_number(eps));
}

void check_G(double G) {
  if (!(std::isfinite(G) && G > 0)) throw InputError("G: must be finite and > 0, got " + format_number(G));
}

std::size_t check_j_set(Span<const double> pos, Span<const double> mass, Span<const double> vel) {
  const std::size_t n = mass.size();
  if (n == 0) throw InputError("pos: empty j-particle set");
  check_rows("set_j: ", "pos", pos.size(), n, "masses", 3);
  if (!vel.empty()) check_rows("set_j: ", "vel", vel.size(), n, "masses", 3);
  return n;
}

void check_j_update(Span<const double> pos, Span<const double> vel, std::size_t n_j, bool j_has_vel) {
  if (n_j == 0) throw InputError("update_j: no j-particles; call set_j first");
  check_rows("update_j: ", "pos", pos.size(), n_j, "j-particles", 3);
  if (vel.empty() == j_has_vel)
    throw InputError(j_has_vel ? "update_j: vel missing; the j-set was written with velocities"
                               : "update_j: vel given; the j-set was written without velocities");
  if (j_has_vel) check_rows("update_j: ", "vel", vel.size(), n_j, "j-particles", 3);
}

std::size_t check_request_sizes(const ForceRequest& req, std::size_t n_j, bool j_has_vel) {
  if (n_j == 0) throw InputError("forces: no j-particles; call set_j first");
  const std::size_t n = req.pos_i.size() / 3;
  if (req.pos_i.size() != 3 * n)
    throw InputError("pos_i: has " + count(req.pos_i.size()) + " values, not 3 per particle");
  if (n == 0) throw InputError("pos_i: empty i-particle set");
  check_rows("forces: ", "acc", req.acc.size(), n, "i-particles", 3);
  check_rows("forces: ", "pot", req.pot.size(), n, "i-particles", 1);
  if (!req.vel_i.empty() && !j_has_vel)
    throw InputError("vel_i: jerk needs j-particle velocities; call set_j(pos, mass, vel)");
  if (req.vel_i.empty() != req.jerk.empty())
    throw InputError("forces: vel_i and jerk go together (jerk wanted) or are both empty");
  if (!req.vel_i.empty()) {
    check_rows("forces: ", "vel_i", req.vel_i.size(), n, "i-particles", 3);
    check_rows("forces: ", "jerk", req.jerk.size(), n, "i-particles", 3);
  }
  if (!req.exclude.empty() && req.exclude.size() != n)
    throw InputError("exclude: expected shape (" + count(n) + ",), got (" + count(req.exclude.size()) + ",)");
  return n;
}

void check_exclude(Span<const std::int64_t> exclude, std::size_t n_j) {
  const auto top = static_cast<std::int64_t>(n_j);
  for (std::size_t k = 0; k < exclude.size(); ++k)
    if (exclude[k] < kNoExclusion || exclude[k] >= top)
      throw InputError("exclude: index " + std::to_string(exclude[k]) + " at position " + count(k) +
                       " is outside [" + std::to_string(kNoExclusion) + ", " + count(n_j) + ")");
}

std::size_t check_force_request(const ForceRequest& req, std::size_t n_j, bool j_has_vel) {
  const std::size_t n = check_request_sizes(req, n_j, j_has_vel);
  check_exclude(req.exclude, n_j);
  return n;
}

}  // namespace gravpipe
