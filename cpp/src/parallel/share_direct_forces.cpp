#include "gravpipe/share_direct_forces.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "gravpipe/error.hpp"
#include "gravpipe/stopwatch.hpp"

namespace gravpipe {

namespace {

constexpr std::uint64_t kDouble = sizeof(double);

std::string rows_error(const char* name, std::size_t got, std::size_t want) {
  return std::string("forces: ") + name + " holds " + std::to_string(got) + " values, expected " +
         std::to_string(want);
}

}  // namespace

ShareDirectForces::ShareDirectForces(ForceProvider& local, ShareCollectives comm, std::int64_t n_total,
                                     std::size_t max_block)
    : local_(local), comm_(std::move(comm)), n_total_(n_total), max_block_(max_block) {
  if (comm_.ranks < 1 || comm_.rank < 0 || comm_.rank >= comm_.ranks)
    throw InputError("share forces: rank " + std::to_string(comm_.rank) + " of " + std::to_string(comm_.ranks));
  if (!comm_.min || !comm_.allgather || !comm_.allgatherv || !comm_.alltoallv)
    throw InputError("share forces: min, allgather, allgatherv and alltoallv must all be given");
  if (n_total_ < 1) throw InputError("share forces: n_total must be >= 1, got " + std::to_string(n_total_));
  if (max_block_ < static_cast<std::size_t>(comm_.ranks))
    throw InputError("share forces: max_block must be >= the number of processes (" + std::to_string(comm_.ranks) +
                     "), got " + std::to_string(max_block_));
  const auto p = static_cast<std::size_t>(comm_.ranks);
  counts_.resize(3 * p);
  sizes_.resize(p);
  back_.resize(p);
}

void ShareDirectForces::set_j(Span<const double> pos, Span<const double> mass, Span<const double> vel) {
  const std::size_t n = mass.size();
  if (pos.size() != 3 * n || (!vel.empty() && vel.size() != 3 * n))
    throw InputError("set_j: pos, mass and vel have different lengths");
  if (has_j_ && n != n_j_)
    throw InputError("set_j: " + std::to_string(n) + " j-particles, but this process's share holds " +
                     std::to_string(n_j_));
  if (n > 0) local_.set_j(pos, mass, vel);
  has_j_ = true, j_has_vel_ = !vel.empty(), n_j_ = n;
}

void ShareDirectForces::update_j(Span<const double> pos, Span<const double> vel) {
  if (!has_j_) throw InputError("update_j: no j-particles; call set_j first");
  if (pos.size() != 3 * n_j_) throw InputError("update_j: pos and vel must match the set_j call (3 n)");
  if (n_j_ > 0) local_.update_j(pos, vel);
}

void ShareDirectForces::write_j_taylor(const JTaylor& j) {
  if (n_j_ > 0 && j.index.size() > 0) local_.write_j_taylor(j);
}

void ShareDirectForces::predict_j(std::int64_t now_ticks, double tick) {
  if (n_j_ > 0) local_.predict_j(now_ticks, tick);
}

std::int64_t ShareDirectForces::global_min(std::int64_t mine) {
  const auto t0 = Clock::now();
  const std::int64_t all = comm_.min(mine);
  seconds_comm_ += seconds_since(t0);
  const auto others = static_cast<std::uint64_t>(comm_.ranks - 1);
  traffic_.agreements += 1;
  traffic_.bytes_sent += others * sizeof(std::int64_t);  // counted as an allgather of one value
  traffic_.bytes_received += others * sizeof(std::int64_t);
  return all;
}

void ShareDirectForces::check_request(const ForceRequest& req, std::size_t n_i) const {
  if (!has_j_) throw InputError("forces: no j-particles; call set_j first");
  if (req.pos_i.size() != 3 * n_i) throw InputError(rows_error("pos_i", req.pos_i.size(), 3 * n_i));
  if (req.acc.size() != 3 * n_i) throw InputError(rows_error("acc", req.acc.size(), 3 * n_i));
  if (req.pot.size() != n_i) throw InputError(rows_error("pot", req.pot.size(), n_i));
  if (req.vel_i.empty() != req.jerk.empty())
    throw InputError("forces: vel_i and jerk go together (jerk wanted) or are both empty");
  if (!req.vel_i.empty() && (req.vel_i.size() != 3 * n_i || req.jerk.size() != 3 * n_i))
    throw InputError("forces: vel_i and jerk must hold 3 values per i-particle");
  if (!req.vel_i.empty() && !j_has_vel_ && n_j_ > 0) throw InputError("forces: jerk wanted, but the j-set has no velocities");
  if (!req.exclude.empty() && req.exclude.size() != n_i) throw InputError(rows_error("exclude", req.exclude.size(), n_i));
  for (std::size_t k = 0; k < req.exclude.size(); ++k)
    if (req.exclude[k] < kNoExclusion || req.exclude[k] >= static_cast<std::int64_t>(n_j_))
      throw InputError("exclude: index " + std::to_string(req.exclude[k]) + " at position " + std::to_string(k) +
                       " is outside [-1, " + std::to_string(n_j_) + ") (this process's j-share)");
}

void ShareDirectForces::forces(const ForceRequest& req) {
  const std::size_t n_i = req.pos_i.size() / 3;
  check_request(req, n_i);
  const auto p = static_cast<std::size_t>(comm_.ranks);
  std::int64_t excluded = 0;
  for (std::size_t k = 0; k < req.exclude.size(); ++k) excluded += req.exclude[k] >= 0;
  // per process: its i-particles, its exclusions, and whether it wants jerks (-1: no i-particles)
  const std::int64_t mine[3] = {static_cast<std::int64_t>(n_i), excluded,
                                n_i == 0 ? -1 : static_cast<std::int64_t>(!req.vel_i.empty())};
  const auto t0 = Clock::now();
  comm_.allgather({mine, 3}, {counts_.data(), 3 * p});
  seconds_comm_ += seconds_since(t0);
  traffic_.bytes_sent += (p - 1) * sizeof(mine);
  traffic_.bytes_received += (p - 1) * sizeof(mine);

  std::int64_t total = 0, most = 0, total_excluded = 0;
  bool jerk = false, no_jerk = false;
  for (std::size_t q = 0; q < p; ++q) {
    total += counts_[3 * q], total_excluded += counts_[3 * q + 1];
    most = std::max(most, counts_[3 * q]);
    jerk |= counts_[3 * q + 2] == 1, no_jerk |= counts_[3 * q + 2] == 0;
  }
  if (jerk && no_jerk) throw InputError("forces: some processes want jerks and some do not");
  if (jerk && !j_has_vel_ && n_j_ > 0) throw InputError("forces: jerk wanted, but this process's j-set has no velocities");
  interactions_ += static_cast<std::uint64_t>(total * n_total_ - total_excluded);

  // rounds of at most max_block / P i-particles from each process: then neither the
  // gathered block nor the partials received for this process's part exceed max_block
  const auto per = static_cast<std::int64_t>(std::max<std::size_t>(1, max_block_ / p));
  Round r;
  r.part.resize(p);
  for (std::int64_t first = 0; first < most; first += per) {
    for (std::size_t q = 0; q < p; ++q) r.part[q] = std::clamp<std::int64_t>(counts_[3 * q] - first, 0, per);
    r.first = static_cast<std::size_t>(first);
    gather_block(req, r, jerk ? 6 : 3);
    compute_partials(jerk);
    return_partials(req, r, jerk ? 7 : 4);
    traffic_.rounds += 1;
  }
  traffic_.requests += 1;
}

// Every process's i-particles of the round (pos, and vel when jerks are wanted), in rank
// order, unpacked into the block's arrays; this process's own rows keep their exclusions.
void ShareDirectForces::gather_block(const ForceRequest& req, const Round& r, std::size_t width) {
  const auto p = static_cast<std::size_t>(comm_.ranks), me = static_cast<std::size_t>(comm_.rank);
  const auto mine = static_cast<std::size_t>(r.part[me]);
  send_.resize(mine * width);
  for (std::size_t e = 0; e < mine; ++e)
    for (std::size_t c = 0; c < 3; ++c) {
      send_[width * e + c] = req.pos_i[3 * (r.first + e) + c];
      if (width == 6) send_[width * e + 3 + c] = req.vel_i[3 * (r.first + e) + c];
    }
  std::size_t m = 0, offset = 0;
  for (std::size_t q = 0; q < p; ++q) {
    if (q == me) offset = m;
    sizes_[q] = r.part[q] * static_cast<std::int64_t>(width);
    m += static_cast<std::size_t>(r.part[q]);
  }
  block_.resize(m * width);
  const auto t0 = Clock::now();
  comm_.allgatherv({send_.data(), send_.size()}, {sizes_.data(), p}, {block_.data(), block_.size()});
  seconds_comm_ += seconds_since(t0);
  traffic_.bytes_sent += (p - 1) * mine * width * kDouble;
  traffic_.bytes_received += (m - mine) * width * kDouble;
  traffic_.largest_block = std::max(traffic_.largest_block, m);

  bpos_.resize(3 * m);
  bvel_.resize(width == 6 ? 3 * m : 0);
  bexclude_.assign(m, kNoExclusion);
  for (std::size_t k = 0; k < m; ++k)
    for (std::size_t c = 0; c < 3; ++c) {
      bpos_[3 * k + c] = block_[width * k + c];
      if (width == 6) bvel_[3 * k + c] = block_[width * k + 3 + c];
    }
  if (!req.exclude.empty())
    for (std::size_t e = 0; e < mine; ++e) bexclude_[offset + e] = req.exclude[r.first + e];
}

// This process's j-share on the whole block, packed per i-particle as acc (3), pot, jerk (3).
void ShareDirectForces::compute_partials(bool with_jerk) {
  const std::size_t m = bexclude_.size(), width = with_jerk ? 7 : 4;
  bacc_.assign(3 * m, 0.0);
  bpot_.assign(m, 0.0);
  bjerk_.assign(with_jerk ? 3 * m : 0, 0.0);
  if (n_j_ > 0)  // a process without particles adds zeros
    local_.forces({{bpos_.data(), bpos_.size()}, {bvel_.data(), bvel_.size()}, {bexclude_.data(), m},
                   {bacc_.data(), bacc_.size()}, {bpot_.data(), m}, {bjerk_.data(), bjerk_.size()}});
  partial_.resize(m * width);
  for (std::size_t k = 0; k < m; ++k) {
    for (std::size_t c = 0; c < 3; ++c) partial_[width * k + c] = bacc_[3 * k + c];
    partial_[width * k + 3] = bpot_[k];
    if (with_jerk)
      for (std::size_t c = 0; c < 3; ++c) partial_[width * k + 4 + c] = bjerk_[3 * k + c];
  }
}

// A reduce-scatter in rank order: each process receives the partials of its own rows from
// every process and adds them 0, 1, ..., P-1 (the same bits for the same P, every run).
void ShareDirectForces::return_partials(const ForceRequest& req, const Round& r, std::size_t width) {
  const auto p = static_cast<std::size_t>(comm_.ranks), me = static_cast<std::size_t>(comm_.rank);
  const auto mine = static_cast<std::size_t>(r.part[me]);
  std::size_t m = 0;
  for (std::size_t q = 0; q < p; ++q) {
    sizes_[q] = r.part[q] * static_cast<std::int64_t>(width);  // the block's rows of process q
    back_[q] = static_cast<std::int64_t>(mine * width);        // this process's rows, from q
    m += static_cast<std::size_t>(r.part[q]);
  }
  recv_.resize(p * mine * width);
  const auto t0 = Clock::now();
  comm_.alltoallv({partial_.data(), partial_.size()}, {sizes_.data(), p}, {recv_.data(), recv_.size()},
                  {back_.data(), p});
  seconds_comm_ += seconds_since(t0);
  traffic_.bytes_sent += (m - mine) * width * kDouble;
  traffic_.bytes_received += (p - 1) * mine * width * kDouble;
  traffic_.largest_receive = std::max(traffic_.largest_receive, p * mine);

  const std::size_t stride = mine * width;
  for (std::size_t e = 0; e < mine; ++e) {
    double sum[7];
    for (std::size_t c = 0; c < width; ++c) sum[c] = recv_[width * e + c];
    for (std::size_t q = 1; q < p; ++q)
      for (std::size_t c = 0; c < width; ++c) sum[c] += recv_[q * stride + width * e + c];
    const std::size_t row = r.first + e;
    for (std::size_t c = 0; c < 3; ++c) req.acc[3 * row + c] = sum[c];
    req.pot[row] = sum[3];
    if (width == 7)
      for (std::size_t c = 0; c < 3; ++c) req.jerk[3 * row + c] = sum[4 + c];
  }
}

PipelineStats ShareDirectForces::stats() const {
  PipelineStats s = local_.stats();
  s.interactions = interactions_;
  s.seconds_comm += seconds_comm_;
  return s;
}

}  // namespace gravpipe
