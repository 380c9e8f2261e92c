#pragma once
// A cache of built plans on disk (`--plan-cache DIR`), so that a job planned
// once is read back instead of planned again: by the next `tandem run` or
// `tandem simulate` of it, or by the other nodes of a cluster that share the
// folder.
//
// A plan depends on the job and on the planner that built it, and the
// planner changes with every build of tandem (the format version alone
// does not say when a pass moved a task). So the key is a hash of the job's
// canonical text, the plan format and the running program's build id (the
// GNU build-id note the linker writes into every executable): a rebuilt
// tandem never reads a plan of another build, and every node running the
// same binary shares its plans. A program without a build id plans every
// time (PlanCache::enabled() says why).
//
// Files are written whole (temporary file, then rename) and named
// `<key>.plan.json` in the plan format (docs/plan-format.md); a file that
// does not read back, or whose job differs from the one asked for, is
// planned again and replaced. The folder is kept under a size limit by
// removing the plans used least recently.

#include <cstdint>
#include <optional>
#include <string>

#include "engine/plan/plan.h"

namespace tandem {

// $TANDEM_PLAN_CACHE, else $XDG_CACHE_HOME/tandem/plans, else
// $HOME/.cache/tandem/plans; empty when none of them is set.
std::string defaultPlanCacheDir();

// The running executable's GNU build id (hex), if it has one.
std::optional<std::string> programBuildId();

struct PlanCacheStats {
  bool from_cache = false;
  std::string path;        // the plan's file in the cache (empty when the cache is off)
  double seconds = 0;      // spent reading or planning (and writing)
  std::string note;        // why the cache was not used, or why an entry was replaced
};

class PlanCache {
 public:
  // dir empty: off. Keeps at most `max_bytes` of plans (least recently used
  // removed first).
  explicit PlanCache(std::string dir, int64_t max_bytes = int64_t(4) << 30);

  bool enabled() const { return !dir_.empty() && build_id_.has_value(); }
  // Why the cache is off (empty when it is on).
  std::string disabledReason() const;

  // The job's plan: read back from the cache when it holds it, else built
  // with buildPlan and stored (a store that fails is a note, not an error:
  // the plan is still returned).
  Plan planFor(const JobSpec& job, PlanCacheStats* stats = nullptr) const;

  // The file the job's plan is kept in.
  std::string pathFor(const JobSpec& job) const;

 private:
  void prune() const;
  std::string dir_;
  int64_t max_bytes_;
  std::optional<std::string> build_id_;
};

}  // namespace tandem
