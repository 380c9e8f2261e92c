#pragma once
// Numbers in text a user hands us (flags, environment variables, fields of
// tables): the whole text must be the number (no spaces, no trailing
// characters, nothing out of range), or there is none. The benchmarks'
// flags, the CLI's checks, the launcher's variables and the simulator's
// shape fields all read numbers this one way.
#include <charconv>
#include <cmath>
#include <optional>
#include <string_view>
#include <system_error>

namespace tandem {

// A whole decimal number that fits Int ("5", "-3"; no leading '+' or spaces).
template <typename Int = long long>
std::optional<Int> parseWholeNumber(std::string_view text) {
  Int v{};
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end) return std::nullopt;
  return v;
}

// A finite number in decimal or exponent form ("2", "-0.5", ".5", "1e-3");
// no leading '+' or spaces, no hexadecimal, no "inf" or "nan".
inline std::optional<double> parseFiniteNumber(std::string_view text) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace tandem
