#pragma once
// The options every job-taking command shares: the job file (or a built-in
// name) and repeated --set key=value overrides.

#include <string>
#include <vector>

#include "engine/spec/job.h"

namespace CLI {
class App;
}

namespace tandem::cli {

struct JobOptions {
  std::string job = "default";
  std::vector<std::string> sets;
  void addTo(CLI::App& cmd, bool required);
  // Loads the job: "default" and "tiny" are the embedded jobs; anything else
  // is a YAML file (looked up under resources/ when not found as given).
  JobSpec load() const;
};

}  // namespace tandem::cli
