// ListBatch (tree_list_batch.hpp): appending gathered lists and their sinks.
#include "gravpipe/tree_list_batch.hpp"

#include <limits>
#include <string>

#include "gravpipe/error.hpp"

namespace gravpipe {

namespace {
std::int32_t job_size(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw InputError(std::string("tree list batch: ") + what + " exceed 2^31-1 in one group");
  return static_cast<std::int32_t>(n);
}
}  // namespace

std::size_t ListBatch::add(const GatheredList& l, const GroupSinks& s, std::size_t n_i) {
  if (!l.mixed) throw InputError("tree list batch: the GPU list kernel takes mixed-precision lists only");
  if (s.xf.size() < n_i || s.exclude.size() < n_i)
    throw InputError("tree list batch: fewer sinks than n_i (sinks not set in mixed precision?)");
  ListJob j;
  j.p_begin = static_cast<std::int64_t>(particles.size());
  j.c_begin = static_cast<std::int64_t>(cells.size());
  j.m_begin = static_cast<std::int64_t>(pidx.size());
  j.i_begin = static_cast<std::int64_t>(sinks.size());
  j.np = job_size(l.f.p.size(), "particles");
  j.n_masked = job_size(l.n_masked, "masked particles");
  j.nc = job_size(l.f.c.size(), "cells");
  j.ni = job_size(n_i, "sinks");
  particles.insert(particles.end(), l.f.p.begin(), l.f.p.end());
  cells.insert(cells.end(), l.f.c.begin(), l.f.c.end());
  pidx.insert(pidx.end(), l.pidx.begin(), l.pidx.begin() + static_cast<std::ptrdiff_t>(l.n_masked));
  for (std::size_t q = 0; q < n_i; ++q) sinks.push_back({s.xf[q], s.yf[q], s.zf[q], 0.0f});
  exclude.insert(exclude.end(), s.exclude.begin(), s.exclude.begin() + static_cast<std::ptrdiff_t>(n_i));
  jobs.push_back(j);
  return jobs.size() - 1;
}

std::size_t ListBatch::bytes() const {
  return jobs.size() * sizeof(ListJob) + particles.size() * sizeof(ListParticle<float>) +
         cells.size() * sizeof(ListCell<float>) + pidx.size() * sizeof(std::int64_t) +
         sinks.size() * sizeof(ListParticle<float>) + exclude.size() * sizeof(std::int64_t);
}

void ListBatch::clear() {
  jobs.clear(), particles.clear(), cells.clear(), pidx.clear(), sinks.clear(), exclude.clear();
}

}  // namespace gravpipe
