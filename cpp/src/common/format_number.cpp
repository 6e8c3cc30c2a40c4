#include "gravpipe/format_number.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

namespace gravpipe {

namespace {

/// Python's layout of the significant digits `d` (no point) with decimal exponent e of the
/// first digit.
std::string python_layout(const std::string& d, int e) {
  if (e < -4 || e >= 16) {
    std::string s = d.substr(0, 1);
    if (d.size() > 1) s += "." + d.substr(1);
    const std::string exp = std::to_string(std::abs(e));
    return s + (e < 0 ? "e-" : "e+") + (exp.size() < 2 ? "0" : "") + exp;
  }
  if (e < 0) return "0." + std::string(static_cast<std::size_t>(-e - 1), '0') + d;
  const auto whole = static_cast<std::size_t>(e) + 1;
  if (d.size() <= whole) return d + std::string(whole - d.size(), '0') + ".0";
  return d.substr(0, whole) + "." + d.substr(whole);
}

}  // namespace

std::string format_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // shortest round-trip digits in scientific form: [-]d[.ddd]e[+-]xx
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);
  const bool negative = sci[0] == '-';
  const std::size_t e_at = sci.find('e');
  std::string digits;
  for (std::size_t k = negative ? 1 : 0; k < e_at; ++k)
    if (sci[k] != '.') digits += sci[k];
  const int exponent = std::atoi(sci.c_str() + e_at + 1);
  return (negative ? "-" : "") + python_layout(digits, exponent);
}

}  // namespace gravpipe
