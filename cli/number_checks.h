#pragma once
// Checks of numeric flags whose messages read well. CLI11's PositiveNumber
// answered `--steps 0` with "Value 0 not in range 0.000000 to 1797693...",
// the largest double written out in 309 digits.
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

namespace tandem::cli {

// A whole number of at least `min` (1 for counts of steps, GPUs, ...).
inline CLI::Validator wholeNumberAtLeast(long long min) {
  return CLI::Validator(
      [min](std::string& v) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long x = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end != 0 || errno == ERANGE || x < min)
          return "takes a whole number of at least " + std::to_string(min) + ", not '" + v + "'";
        return {};
      },
      "INT>=" + std::to_string(min));
}

// A number greater than 0 (seconds, GB/s).
inline CLI::Validator numberAboveZero() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double x = std::strtod(v.c_str(), &end);
        if (v.empty() || *end != 0 || errno == ERANGE || !std::isfinite(x) || x <= 0)
          return "takes a number greater than 0, not '" + v + "'";
        return {};
      },
      "NUMBER>0");
}

}  // namespace tandem::cli
