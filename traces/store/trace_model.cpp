#include "traces/store/trace_model.h"

#include <array>

namespace tandem::traces {

namespace {

template <typename E, size_t N>
std::optional<E> parseFrom(const std::array<std::string_view, N>& names, std::string_view s) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<E>(i);
  return std::nullopt;
}

constexpr std::array<std::string_view, 3> kRunKinds{"real", "simulated", "imported"};
constexpr std::array<std::string_view, 8> kActivityKinds{"kernel",     "memcpy", "memset", "collective",
                                                         "send",       "recv",   "sync",   "host"};
constexpr std::array<std::string_view, 4> kSeverities{"info", "warning", "error", "data_loss"};

// The codes come from trace files, which may be damaged: a code past the
// table is spelled "?" instead of read past its end.
template <typename E, size_t N>
std::string_view nameOf(const std::array<std::string_view, N>& names, E v) {
  const auto i = static_cast<size_t>(v);
  return i < N ? names[i] : std::string_view("?");
}

}  // namespace

std::string_view toString(RunKind v) { return nameOf(kRunKinds, v); }
std::string_view toString(ActivityKind v) { return nameOf(kActivityKinds, v); }
std::string_view toString(Severity v) { return nameOf(kSeverities, v); }

std::optional<RunKind> parseRunKind(std::string_view s) { return parseFrom<RunKind>(kRunKinds, s); }
std::optional<ActivityKind> parseActivityKind(std::string_view s) {
  return parseFrom<ActivityKind>(kActivityKinds, s);
}
std::optional<Severity> parseSeverity(std::string_view s) { return parseFrom<Severity>(kSeverities, s); }

}  // namespace tandem::traces
