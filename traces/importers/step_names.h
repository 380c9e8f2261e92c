#pragma once
// Step annotations in imported traces: torch.profiler's "ProfilerStep#N"
// and tandem's own NVTX "step N" ranges mark training steps.

#include <charconv>
#include <optional>
#include <string_view>

namespace tandem::traces {

// The step number a range's name marks, if it marks one.
inline std::optional<int> stepNumberOf(std::string_view name) {
  for (std::string_view prefix : {std::string_view("ProfilerStep#"), std::string_view("step ")}) {
    if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) continue;
    int step = -1;
    const char* first = name.data() + prefix.size();
    const char* last = name.data() + name.size();
    const auto [end, ec] = std::from_chars(first, last, step);
    if (ec == std::errc() && end == last && step >= 0) return step;
  }
  return std::nullopt;
}

}  // namespace tandem::traces
