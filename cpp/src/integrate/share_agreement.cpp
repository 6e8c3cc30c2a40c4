#include "gravpipe/share_agreement.hpp"

#include <string>
#include <utility>

#include "gravpipe/format_number.hpp"

namespace gravpipe {

ShareAgreement::ShareAgreement(GlobalMin min) : min_(std::move(min)) {
  if (!min_) throw InputError("share agreement: no global minimum given");
}

std::int64_t ShareAgreement::earliest(std::int64_t mine, double t) {
  if (!shared()) return mine;
  const std::int64_t all = min_(failed_ ? kFailed : mine);
  if (all != kFailed) return all;
  if (failed_) throw *failed_;
  throw IntegrationError("a particle of another process failed at or before t = " + format_number(t) +
                             " (that process names it)",
                         -1, t);
}

void ShareAgreement::fail(const IntegrationError& e) {
  if (!shared()) throw e;
  if (!failed_) failed_ = e;
}

}  // namespace gravpipe
