#pragma once
// What an activity counts as in the breakdown: compute, communication,
// memory copy, synchronisation or host work.
//
// Rules are tried in order, user rules before the defaults; the first whose
// kind (if given) and name pattern (case-insensitive substring, if given)
// match decides. Defaults follow Holistic Trace Analysis: kernels whose name
// contains "nccl" are communication, memcpy/memset are memory, everything
// else a kernel does is compute, except synchronisation and wait kernels,
// which are never compute.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "traces/store/trace_model.h"

namespace tandem::traces {

enum class Category : uint8_t { Compute, Comm, Memcpy, Sync, Host };
inline constexpr int kCategoryCount = 5;
std::string_view toString(Category c);
std::optional<Category> parseCategory(std::string_view s);

struct ClassificationRule {
  std::optional<ActivityKind> kind;  // any kind when empty
  std::string pattern;               // lower-case substring of the name; any name when empty
  Category category = Category::Compute;
};

class Classifier {
 public:
  Classifier();  // the default rules only
  explicit Classifier(std::vector<ClassificationRule> user_rules);

  // Parses "PATTERN=CATEGORY", "kind:KIND=CATEGORY" or "kind:KIND:PATTERN=CATEGORY"
  // (CATEGORY one of compute, comm, memcpy, sync, host). Throws TraceError.
  static ClassificationRule parseRule(std::string_view text);

  Category classify(ActivityKind kind, std::string_view name) const;
  const std::vector<ClassificationRule>& rules() const { return rules_; }

 private:
  std::vector<ClassificationRule> rules_;
};

}  // namespace tandem::traces
