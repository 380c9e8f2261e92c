#include "cli/plan_cache_option.h"

// Whether the plan was read back is the command's to report (its text or
// JSON); what goes wrong with the cache is a warning here.

#include <CLI/CLI.hpp>
#include <fmt/core.h>

namespace tandem::cli {

void PlanCacheOption::addTo(CLI::App& cmd) {
  cmd.add_option("--plan-cache", dir,
                 "folder of plans built before, read back instead of planned again (keyed by the job and this "
                 "tandem build; shareable between nodes); off: plan every time")
      ->type_name("DIR|off")
      ->capture_default_str();
}

Plan PlanCacheOption::plan(const JobSpec& job, const std::string& command, PlanCacheStats* stats) const {
  PlanCacheStats local;
  PlanCacheStats& s = stats ? *stats : local;
  const PlanCache cache(dir == "off" ? std::string() : dir);
  Plan p = cache.planFor(job, &s);
  // A cache that was asked for and could not be used says why; "off" and
  // no home folder are quiet.
  if (!s.note.empty() && dir != "off" && !dir.empty()) fmt::print(stderr, "{}: plan cache: {}\n", command, s.note);
  return p;
}

}  // namespace tandem::cli
