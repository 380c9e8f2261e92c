// The shipped job files (resources/jobs/), compiled in by
// cmake/TandemEmbed.cmake so the binary works without that folder, and the
// two jobs the tools start from.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/spec/job.h"

namespace tandem {

// Generated from resources/jobs/*.yaml (see engine/CMakeLists.txt).
const std::vector<std::pair<std::string_view, std::string_view>>& embeddedJobFiles();

std::vector<std::string> builtinJobNames() {
  std::vector<std::string> names;
  for (const auto& [name, text] : embeddedJobFiles()) names.emplace_back(name);
  return names;
}

std::string_view builtinJobText(std::string_view name) {
  for (const auto& [builtin, text] : embeddedJobFiles())
    if (builtin == name) return text;
  return {};
}

// Parsed on every call: the texts are small, and no mutable state is kept.
JobSpec defaultJob() { return parseJob(std::string(builtinJobText("gpt2-124m-dp8")), "<embedded>"); }
JobSpec tinyJob() { return parseJob(std::string(builtinJobText("gpt2-tiny")), "<embedded>"); }

}  // namespace tandem
