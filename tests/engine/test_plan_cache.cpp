// The plan cache (engine/plan/plan_cache.h): a job planned once is read back
// equal to a fresh plan; another job, a damaged file and a full folder are
// handled.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "engine/plan/plan_cache.h"
#include "engine/plan/planner.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

fs::path freshDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("tandem-plan-cache-" + name);
  fs::remove_all(dir);
  return dir;
}

}  // namespace

TEST_CASE("A cached plan is read back equal to a fresh one; another job plans again", "[plan_cache]") {
  REQUIRE(programBuildId().has_value());  // Debian's linker writes one into every executable
  const fs::path dir = freshDir("roundtrip");
  const PlanCache cache(dir.string());
  REQUIRE(cache.enabled());
  JobSpec job = defaultJob();
  job.model.layers = 2;
  refreshJobText(job);
  PlanCacheStats first, second;
  const Plan built = cache.planFor(job, &first);
  CHECK_FALSE(first.from_cache);
  CHECK(first.note.empty());
  CHECK(fs::exists(first.path));
  const Plan read = cache.planFor(job, &second);
  CHECK(second.from_cache);
  CHECK(second.path == first.path);
  CHECK(read == buildPlan(job));
  CHECK(read == built);
  // Another job: another file, planned.
  JobSpec other = job;
  other.training.micro_batch = 2;
  refreshJobText(other);
  PlanCacheStats third;
  CHECK(cache.planFor(other, &third) == buildPlan(other));
  CHECK_FALSE(third.from_cache);
  CHECK(third.path != first.path);
}

TEST_CASE("A damaged cached plan is planned again and replaced; off plans every time", "[plan_cache]") {
  const fs::path dir = freshDir("damaged");
  const PlanCache cache(dir.string());
  JobSpec job = defaultJob();
  job.model.layers = 1;
  refreshJobText(job);
  const std::string path = cache.pathFor(job);
  fs::create_directories(dir);
  std::ofstream(path) << "{\"format\": \"tandem-plan\", \"version\": 1, \"trunc";
  PlanCacheStats s;
  CHECK(cache.planFor(job, &s) == buildPlan(job));
  CHECK_FALSE(s.from_cache);
  CHECK_THAT(s.note, Catch::Contains(path) && Catch::EndsWith("planned again"));
  PlanCacheStats again;
  cache.planFor(job, &again);
  CHECK(again.from_cache);  // replaced by a good one
  const PlanCache off("");
  CHECK_FALSE(off.enabled());
  PlanCacheStats none;
  CHECK(off.planFor(job, &none) == buildPlan(job));
  CHECK(none.path.empty());
}

TEST_CASE("The plan cache keeps its folder under its size, the least recently used plans going first",
          "[plan_cache]") {
  const fs::path dir = freshDir("pruned");
  const PlanCache cache(dir.string(), /*max_bytes=*/1);  // room for the newest plan only
  JobSpec a = defaultJob(), b = defaultJob();
  a.model.layers = 1;
  b.model.layers = 2;
  refreshJobText(a);
  refreshJobText(b);
  cache.planFor(a);
  cache.planFor(b);
  CHECK_FALSE(fs::exists(cache.pathFor(a)));
  CHECK(fs::exists(cache.pathFor(b)));
}
