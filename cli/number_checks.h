#pragma once
// Checks of numeric flags whose messages read well. CLI11's PositiveNumber
// answered `--steps 0` with "Value 0 not in range 0.000000 to 1797693...",
// the largest double written out in 309 digits.
#include <CLI/CLI.hpp>

#include <string>

#include "engine/spec/parse_number.h"

namespace tandem::cli {

// A whole number of at least `min` (1 for counts of steps, GPUs, ...).
inline CLI::Validator wholeNumberAtLeast(long long min) {
  return CLI::Validator(
      [min](std::string& v) -> std::string {
        const auto x = parseWholeNumber(v);
        if (!x || *x < min) return "takes a whole number of at least " + std::to_string(min) + ", not '" + v + "'";
        return {};
      },
      "INT>=" + std::to_string(min));
}

// A number greater than 0 (seconds, GB/s).
inline CLI::Validator numberAboveZero() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        const auto x = parseFiniteNumber(v);
        if (!x || *x <= 0) return "takes a number greater than 0, not '" + v + "'";
        return {};
      },
      "NUMBER>0");
}

}  // namespace tandem::cli
