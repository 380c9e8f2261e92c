#include "vocabulary/kinds.h"

#include <array>

namespace tandem {
namespace {

// Indexed by the enum's value: the order is the stored code.
constexpr std::array<std::string_view, 7> kPhases{"", "forward", "backward", "recompute", "optimizer", "comm", "data"};
constexpr std::array<std::string_view, 4> kStreamKinds{"compute", "comm", "copy", "host"};
static_assert(kPhases.size() == size_t(kLastPhase) + 1);
static_assert(kStreamKinds.size() == size_t(kLastStreamKind) + 1);

template <class E, size_t N>
std::string_view nameOf(const std::array<std::string_view, N>& names, E v) {
  const auto i = static_cast<size_t>(v);
  return i < N ? names[i] : std::string_view("?");
}

template <class E, size_t N>
std::optional<E> valueOf(const std::array<std::string_view, N>& names, std::string_view s) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<E>(i);
  return std::nullopt;
}

}  // namespace

std::string_view toString(Phase v) { return nameOf(kPhases, v); }
std::string_view toString(StreamKind v) { return nameOf(kStreamKinds, v); }
std::optional<Phase> parsePhase(std::string_view s) { return valueOf<Phase>(kPhases, s); }
std::optional<StreamKind> parseStreamKind(std::string_view s) { return valueOf<StreamKind>(kStreamKinds, s); }

}  // namespace tandem
