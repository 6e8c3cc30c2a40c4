#include "g6_context.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "gravpipe/error.hpp"
#include "gravpipe/format_number.hpp"

namespace gravpipe::grape6 {

namespace {

// The pipeline's j-memory is in a curve order that a position update keeps; particles drift
// out of it, tiles loosen and fewer of them take the fast far path. Re-sort (a full set_j)
// after this many updates.
constexpr int kUpdatesPerSort = 32;

std::size_t env_size(const char* name, std::size_t fallback, std::size_t lo, std::size_t hi) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (*end != '\0' || v < static_cast<long long>(lo) || v > static_cast<long long>(hi))
    throw InputError(std::string(name) + "='" + text + "': expected an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return static_cast<std::size_t>(v);
}

bool all_finite(const std::vector<double>& a) {
  return std::all_of(a.begin(), a.end(), [](double v) { return std::isfinite(v); });
}

}  // namespace

Settings Settings::from_environment() {
  Settings s;
  if (const char* p = std::getenv("GRAVPIPE_G6_PRECISION"); p != nullptr && *p != '\0') {
    try {
      s.precision = parse_precision(p);
    } catch (const InputError&) {
      throw InputError(std::string("GRAVPIPE_G6_PRECISION='") + p + "': expected 'mixed' or 'double'");
    }
  }
  s.npipes = env_size("GRAVPIPE_G6_NPIPES", s.npipes, 1, 1 << 20);
  s.jmem = env_size("GRAVPIPE_G6_JMEM", s.jmem, 1, static_cast<std::size_t>(std::numeric_limits<int>::max()));
  s.nb_max = env_size("GRAVPIPE_G6_NB_MAX", s.nb_max, 1, 1 << 26);
  return s;
}

Context::Context(const Settings& settings)
    : settings_(settings), jmem_(settings.jmem), threads_(omp_get_max_threads()) {}

void Context::set_precision(Precision p) {
  settings_.precision = p;
  pipe_.reset();  // rebuilt, and the j-set rewritten, at the next calculation
}

void Context::set_ti(double ti) {
  if (!std::isfinite(ti)) {
    // the calculations that follow would predict to the old ti without a word: they fail
    // until a g6_set_ti succeeds
    ti_error_ = "ti = " + format_number(ti) + " is not finite";
    throw InputError(ti_error_);
  }
  ti_error_.clear();
  ti_ = ti;
}

void Context::check_ti() const {
  if (!ti_error_.empty())
    throw InputError("the last g6_set_ti failed (" + ti_error_ +
                     "): no time to predict the j-particles to; call g6_set_ti with a finite time");
}

void Context::set_j_particle(int address, const JParticle& p) { jmem_.write(address, p); }

void Context::reset() {
  jmem_.clear();
  pred_valid_ = false;
  pipe_.reset();
  has_pending_ = false;
  lists_valid_ = lists_read_ = nn_valid_ = false;
}

void Context::firsthalf_failed(const std::string& why) {
  has_pending_ = false;  // a failed firsthalf leaves nothing for lasthalf to compute
  lists_valid_ = lists_read_ = nn_valid_ = false;
  firsthalf_error_ = why;
}

void Context::firsthalf(IParticles i) {
  // a second firsthalf before its lasthalf would silently replace the first's i-particles
  const bool pending = has_pending_;
  has_pending_ = false;
  firsthalf_error_.clear();
  lists_valid_ = lists_read_ = nn_valid_ = false;
  if (pending)
    throw InputError("a g6calc_firsthalf is already pending (call firsthalf, then lasthalf, once each); "
                     "both are dropped");
  check_ti();
  if (!std::isfinite(i.eps2) || i.eps2 < 0) throw InputError("eps2 must be finite and >= 0");
  if (!all_finite(i.x) || !all_finite(i.v)) throw InputError("i-particle positions or velocities are NaN or infinite");
  if (!all_finite(i.h2)) throw InputError("h2 (neighbour radius squared) is NaN or infinite");
  jmem_.check_filled(i.nj);
  pending_ = std::move(i);
  has_pending_ = true;
}

void Context::predict(std::size_t nj) {
  if (pred_valid_ && pred_ti_ == ti_ && pred_version_ == jmem_.version() && pred_nj_ == nj) return;
  jmem_.predict(nj, ti_, pred_, threads_);
  pred_valid_ = true;
  pred_ti_ = ti_;
  pred_version_ = jmem_.version();
  pred_nj_ = nj;
  ++pred_stamp_;
}

// Bring the pipeline's j-memory to pred_: a full write (with a curve re-sort) when the
// pipeline is new, the softening or the set of particles changed, or enough updates went by;
// otherwise the cheap position/velocity update of the same set.
void Context::write_pipeline(double eps2) {
  if (!pipe_ || pipe_eps2_ != eps2) {
    pipe_ = std::make_unique<CpuPipeline>(settings_.precision, std::sqrt(eps2), 1.0, "auto", 0);
    pipe_eps2_ = eps2;
    pipe_stamp_ = ~std::uint64_t{0};
    pipe_layout_ = ~std::uint64_t{0};
  }
  if (pipe_stamp_ == pred_stamp_) return;
  const std::size_t nj = pred_.size();
  const Span<const double> pos(pred_.pos.data(), 3 * nj), vel(pred_.vel.data(), 3 * nj);
  if (pipe_layout_ != jmem_.layout_version() || pipe_nj_ != nj || updates_since_sort_ >= kUpdatesPerSort) {
    pipe_->set_j(pos, {pred_.mass.data(), nj}, vel);
    order_ = kd_order(pos);
    pipe_layout_ = jmem_.layout_version();
    pipe_nj_ = nj;
    updates_since_sort_ = 0;
  } else {
    pipe_->update_j(pos, vel);
    ++updates_since_sort_;
  }
  pipe_stamp_ = pred_stamp_;
}

void Context::ensure_neighbour_tiles() {
  if (search_stamp_ == pred_stamp_) return;
  if (order_.size() != pred_.size()) order_ = kd_order({pred_.pos.data(), pred_.pos.size()});
  search_.build(pred_, order_);
  search_stamp_ = pred_stamp_;
}

void Context::lasthalf(std::size_t nj, std::size_t ni, const ForceOutput& out) {
  if (!has_pending_) {
    const std::string why = firsthalf_error_;
    firsthalf_error_.clear();
    throw InputError(why.empty() ? "no g6calc_firsthalf is pending (call firsthalf, then lasthalf, once each)"
                                 : "the g6calc_firsthalf before it failed: " + why);
  }
  has_pending_ = false;
  check_ti();  // a g6_set_ti between firsthalf and lasthalf failed
  const IParticles& i = pending_;
  if (nj != i.nj || ni != i.ni)
    throw InputError("lasthalf (nj = " + std::to_string(nj) + ", ni = " + std::to_string(ni) +
                     ") does not match the pending firsthalf (nj = " + std::to_string(i.nj) +
                     ", ni = " + std::to_string(i.ni) + ")");
  jmem_.check_filled(nj);  // j-particles may have been rewritten since firsthalf
  exclude_.resize(ni);
  for (std::size_t k = 0; k < ni; ++k) exclude_[k] = jmem_.address_of(i.index[k], nj);
  if (ni == 0) return;
  predict(nj);
  if (nj == 0) {
    std::fill(out.acc.begin(), out.acc.end(), 0.0);
    std::fill(out.jerk.begin(), out.jerk.end(), 0.0);
    std::fill(out.pot.begin(), out.pot.end(), 0.0);
  } else {
    write_pipeline(i.eps2);
    pipe_->forces({{i.x.data(), 3 * ni}, {i.v.data(), 3 * ni}, {exclude_.data(), ni}, out.acc, out.pot, out.jerk});
  }
  const bool want_lists = std::any_of(i.h2.begin(), i.h2.end(), [](double h) { return h > 0; });
  if (!out.nn.empty() || want_lists) search_neighbours(i, !out.nn.empty(), out.nn);
}

void Context::search_neighbours(const IParticles& i, bool want_nearest, Span<int> nn) {
  ensure_neighbour_tiles();
  const std::size_t ni = i.ni;
  lists_.resize(ni);
  list_counts_.assign(ni, 0);
  nn_r2_.assign(ni, INFINITY);
  const auto n = static_cast<std::int64_t>(ni);
  // Each i-particle's search is independent; dynamic scheduling because list lengths vary.
#pragma omp parallel for schedule(dynamic, 4) num_threads(threads_) if (n * static_cast<std::int64_t>(pred_.size()) >= (1 << 16))
  for (std::int64_t k = 0; k < n; ++k) {
    const double* xi = &i.x[3 * k];
    if (want_nearest) {
      const NeighbourSearch::Nearest best = search_.nearest(xi, i.index[k]);
      nn[k] = best.index;
      nn_r2_[k] = best.r2;
    }
    lists_[k].clear();
    if (i.h2[k] > 0) list_counts_[k] = search_.within(xi, i.index[k], i.h2[k], settings_.nb_max, lists_[k]);
  }
  lists_valid_ = true;
  lists_read_ = false;
  nn_valid_ = want_nearest;
}

int Context::read_neighbour_list() {
  if (!lists_valid_) throw InputError("no neighbour lists: call g6calc_firsthalf and g6calc_lasthalf first");
  lists_read_ = true;
  const bool overflow = std::any_of(list_counts_.begin(), list_counts_.end(),
                                    [&](std::size_t c) { return c > settings_.nb_max; });
  return overflow ? 1 : 0;
}

int Context::get_neighbour_list(int ipipe, int maxlength, int& nblen, Span<int> nbl) const {
  if (!lists_valid_ || !lists_read_)
    throw InputError("call g6_read_neighbour_list after g6calc_lasthalf before g6_get_neighbour_list");
  if (ipipe < 0 || static_cast<std::size_t>(ipipe) >= lists_.size())
    throw InputError("ipipe = " + std::to_string(ipipe) + " is outside [0, ni = " + std::to_string(lists_.size()) + ")");
  if (maxlength < 0) throw InputError("maxlength must be >= 0");
  const std::vector<int>& list = lists_[ipipe];
  const std::size_t count = list_counts_[ipipe];
  const std::size_t copy = std::min(list.size(), static_cast<std::size_t>(maxlength));
  std::copy(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(copy), nbl.begin());
  // nblen counts what was written, never more than maxlength: a caller looping to nblen
  // stays inside its buffer; an incomplete list is flagged by the return value.
  nblen = static_cast<int>(copy);
  return copy < count ? 1 : 0;
}

void Context::nearest_r2(std::size_t ni, Span<double> r2) const {
  if (!nn_valid_) throw InputError("no nearest-neighbour distances: the last calculation was not g6calc_lasthalf2");
  if (ni > nn_r2_.size())
    throw InputError("ni = " + std::to_string(ni) + " exceeds the last lasthalf2's ni = " + std::to_string(nn_r2_.size()));
  std::copy(nn_r2_.begin(), nn_r2_.begin() + static_cast<std::ptrdiff_t>(ni), r2.begin());
}

}  // namespace gravpipe::grape6
