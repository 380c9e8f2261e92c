#pragma once
// --plan-cache DIR|off for the commands that plan a job (tandem run,
// simulate): the job's plan read back from the cache when an earlier run of
// the same tandem build planned it (engine/plan/plan_cache.h).

#include <string>

#include "engine/plan/plan.h"
#include "engine/plan/plan_cache.h"

namespace CLI {
class App;
}

namespace tandem::cli {

struct PlanCacheOption {
  std::string dir = defaultPlanCacheDir();
  void addTo(CLI::App& cmd);
  // The job's plan through the cache ("off": planned); a cache that could
  // not be used, or an entry replaced, is a warning on stderr (`command`:
  // "tandem simulate"). `stats` says whether it was read back.
  Plan plan(const JobSpec& job, const std::string& command, PlanCacheStats* stats = nullptr) const;
};

}  // namespace tandem::cli
