// Numbers in error messages, written as Python's repr writes a float ("-1.0", "nan",
// "1e-05", "0.25"), so that a message reads the same whether the Python layer or the core
// raised it (force_request_check.hpp).
#pragma once
#include <string>

namespace gravpipe {

/// The shortest decimal that reads back as v, in Python's repr layout: fixed notation with
/// at least one digit after the point for exponents -4..15, else d.ddde+XX.
std::string format_number(double v);

}  // namespace gravpipe
