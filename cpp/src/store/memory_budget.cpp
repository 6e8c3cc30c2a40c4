// The byte budget, its reservations and the parsing of byte sizes.
#include "gravpipe/memory_budget.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "gravpipe/error.hpp"

namespace gravpipe {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// The multiplier of a unit suffix (already lower case, spaces stripped); 0 when unknown.
double unit_factor(const std::string& unit) {
  struct Unit { const char* name; double factor; };
  static constexpr Unit kUnits[] = {
      {"", 1}, {"b", 1},
      {"k", 1024.0}, {"kib", 1024.0}, {"m", 1048576.0}, {"mib", 1048576.0},
      {"g", 1073741824.0}, {"gib", 1073741824.0}, {"t", 1099511627776.0}, {"tib", 1099511627776.0},
      {"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}};
  for (const Unit& u : kUnits)
    if (unit == u.name) return u.factor;
  return 0;
}

}  // namespace

std::uint64_t parse_byte_size(const std::string& text) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  const auto bad = [&](const std::string& why) {
    return InputError("byte size '" + text + "': " + why +
                      " (expected a number and a unit, e.g. 4GiB, 512MiB, 1.5GB, 65536)");
  };
  std::size_t digits = 0;
  while (digits < s.size() && (std::isdigit(static_cast<unsigned char>(s[digits])) || s[digits] == '.')) ++digits;
  if (digits == 0) throw bad("no number");
  char* end = nullptr;
  const std::string number = s.substr(0, digits);
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value)) throw bad("not a number");
  const double factor = unit_factor(lower(s.substr(digits)));
  if (factor == 0) throw bad("unknown unit '" + s.substr(digits) + "'");
  const double bytes = std::round(value * factor);
  if (bytes >= 1.8e19) throw bad("too large");
  return static_cast<std::uint64_t>(bytes);
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[48];
  if (u == 0 || v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f %s", v, kUnits[u]);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return buf;
}

Reservation& Reservation::operator=(Reservation&& o) noexcept {
  if (this != &o) {
    release();
    budget_ = std::exchange(o.budget_, nullptr);
    bytes_ = o.bytes_;
  }
  return *this;
}

void Reservation::release() {
  if (budget_ != nullptr) budget_->give_back(bytes_);
  budget_ = nullptr;
}

Reservation MemoryBudget::reserve(std::uint64_t bytes, const std::string& what) {
  std::uint64_t used = used_.load();
  do {
    if (bytes > total_ || used > total_ - bytes)
      throw BudgetError("memory budget " + format_bytes(total_) + " exceeded: " + what + " asks for " +
                            format_bytes(bytes) + " with " + format_bytes(used) +
                            " already charged; the least budget that works here is " +
                            format_bytes(used + bytes) + " (" + std::to_string(used + bytes) + " bytes)",
                        bytes, used + bytes);
  } while (!used_.compare_exchange_weak(used, used + bytes));
  std::uint64_t peak = peak_.load();
  while (used + bytes > peak && !peak_.compare_exchange_weak(peak, used + bytes)) {
  }
  return Reservation(this, bytes);
}

}  // namespace gravpipe
