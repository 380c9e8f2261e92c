#include "traces/analysis/classify.h"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cctype>

namespace tandem::traces {

namespace {

constexpr std::array<std::string_view, kCategoryCount> kCategoryNames{"compute", "comm", "memcpy", "sync", "host"};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<ClassificationRule> defaultRules() {
  using K = ActivityKind;
  using C = Category;
  return {
      {K::Host, "", C::Host},
      {K::Sync, "", C::Sync},
      {K::Collective, "", C::Comm},
      {K::Send, "", C::Comm},
      {K::Recv, "", C::Comm},
      {K::Memcpy, "", C::Memcpy},
      {K::Memset, "", C::Memcpy},
      {std::nullopt, "nccl", C::Comm},
      // Kernels that spin on a flag or an event do no useful work.
      {std::nullopt, "synchronize", C::Sync},
      {std::nullopt, "waitevent", C::Sync},
      {std::nullopt, "wait_kernel", C::Sync},
      {std::nullopt, "spin_wait", C::Sync},
      {std::nullopt, "", C::Compute},
  };
}

}  // namespace

std::string_view toString(Category c) { return kCategoryNames[static_cast<size_t>(c)]; }

std::optional<Category> parseCategory(std::string_view s) {
  for (size_t i = 0; i < kCategoryNames.size(); ++i)
    if (kCategoryNames[i] == s) return static_cast<Category>(i);
  return std::nullopt;
}

Classifier::Classifier() : rules_(defaultRules()) {}

Classifier::Classifier(std::vector<ClassificationRule> user_rules) : rules_(std::move(user_rules)) {
  for (auto& r : rules_) r.pattern = lower(r.pattern);
  auto defaults = defaultRules();
  rules_.insert(rules_.end(), defaults.begin(), defaults.end());
}

ClassificationRule Classifier::parseRule(std::string_view text) {
  auto eq = text.rfind('=');
  if (eq == std::string_view::npos)
    throw TraceError(fmt::format("classification rule '{}': expected PATTERN=CATEGORY or kind:KIND[:PATTERN]=CATEGORY",
                                 text));
  std::string_view lhs = text.substr(0, eq);
  std::string_view rhs = text.substr(eq + 1);
  ClassificationRule rule;
  auto cat = parseCategory(rhs);
  if (!cat)
    throw TraceError(fmt::format("classification rule '{}': unknown category '{}' (allowed: compute, comm, memcpy, "
                                 "sync, host)",
                                 text, rhs));
  rule.category = *cat;
  if (lhs.starts_with("kind:")) {
    lhs.remove_prefix(5);
    auto colon = lhs.find(':');
    std::string_view kind = lhs.substr(0, colon);
    auto k = parseActivityKind(kind);
    if (!k)
      throw TraceError(fmt::format("classification rule '{}': unknown kind '{}' (allowed: kernel, memcpy, memset, "
                                   "collective, send, recv, sync, host)",
                                   text, kind));
    rule.kind = *k;
    if (colon != std::string_view::npos) rule.pattern = lower(lhs.substr(colon + 1));
  } else {
    if (lhs.empty()) throw TraceError(fmt::format("classification rule '{}': empty pattern", text));
    rule.pattern = lower(lhs);
  }
  return rule;
}

Category Classifier::classify(ActivityKind kind, std::string_view name) const {
  std::string lname;
  bool lowered = false;
  for (const auto& r : rules_) {
    if (r.kind && *r.kind != kind) continue;
    if (!r.pattern.empty()) {
      if (!lowered) {
        lname = lower(name);
        lowered = true;
      }
      if (lname.find(r.pattern) == std::string::npos) continue;
    }
    return r.category;
  }
  return Category::Compute;
}

}  // namespace tandem::traces
