// The plan facts a run keeps (plan_trace/plan_facts.h): the rows come from
// the plan, the stored plan decodes to the same plan, and a run that stored
// none is planned again only with a note saying so.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "engine/memory/gpu_footprint.h"
#include "engine/plan/plan_json.h"
#include "engine/plan/planner.h"
#include "engine/spec/job.h"
#include "plan_trace/plan_facts.h"
#include "traces/store/trace_reader.h"
#include "traces/store/trace_writer.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

std::string tempPath(const std::string& name) {
  const std::string p = (fs::temp_directory_path() / ("tandem_plan_trace_" + std::to_string(::getpid()) + "_" + name))
                            .string();
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(p + suffix, ec);
  return p;
}

Plan recomputedPlan() {
  return buildPlan(parseJob(jobToYaml(tinyJob()), "<tiny>", {"recompute.policy=full", "parallel.data_parallel=2"}));
}

int64_t writeRun(const std::string& path, const std::string& job_yaml, const traces::PlanFacts* facts) {
  traces::TraceWriter w(path);
  traces::RunInfo info;
  info.kind = traces::RunKind::Real;
  info.name = "run";
  info.job_yaml = job_yaml;
  const int64_t run = w.beginRun(info);
  if (facts) w.setPlanFacts(*facts);
  return run;
}

}  // namespace

TEST_CASE("plan facts are the plan's recompute decisions and memory, and the plan itself", "[plan_trace]") {
  const Plan plan = recomputedPlan();
  plan_trace::LayerTimes times{{0, 5000}};
  const traces::PlanFacts f = plan_trace::planFacts(plan, times);
  REQUIRE(f.recompute.size() == plan.recompute.size());
  for (size_t i = 0; i < f.recompute.size(); ++i) {
    CHECK(f.recompute[i].layer == plan.recompute[i].layer);
    CHECK(f.recompute[i].policy == "full");
    CHECK(f.recompute[i].bytes_kept == plan.recompute[i].bytes_kept);
    CHECK(f.recompute[i].bytes_saved == plan.recompute[i].bytes_saved);
    CHECK(f.recompute[i].extra_flops == plan.recompute[i].extra_flops);
    CHECK(f.recompute[i].extra_ns == (plan.recompute[i].layer == 0 ? 5000 : -1));
  }
  REQUIRE(f.memory.size() == plan.programs.size());
  const RankPlan& p0 = plan.programs[0];
  CHECK(f.memory[0].arena_bytes == p0.memory.arena_bytes);
  CHECK(f.memory[0].lower_bound_bytes == p0.memory.lower_bound_bytes);
  CHECK(f.memory[0].rank_count == int(p0.ranks.size()));
  CHECK(f.memory[0].gpu_run_bytes == gpu_footprint::runBytes(p0));
  CHECK(f.memory[0].by_category.size() == p0.memory.by_category.size());
  CHECK(f.plan_encoding == plan_trace::kPlanEncoding);
  CHECK(plan_trace::decodePlan(f.plan_blob, "test") == plan);
  // Compressed: a fraction of the JSON it holds.
  CHECK(f.plan_blob.size() * 4 < planToJson(plan).dump().size());
}

TEST_CASE("a run's stored plan is read back, never planned again", "[plan_trace]") {
  const std::string path = tempPath("stored.sqlite");
  const Plan plan = recomputedPlan();
  const traces::PlanFacts facts = plan_trace::planFacts(plan);
  // The run's job text says something else: only the stored plan counts.
  const int64_t run = writeRun(path, jobToYaml(tinyJob()), &facts);
  traces::TraceReader reader(path);
  std::string note;
  const Plan back = plan_trace::planOfRun(reader, run, &note);
  CHECK(back == plan);
  CHECK(note.empty());
  REQUIRE(plan_trace::storedPlan(reader, run).has_value());
}

TEST_CASE("a run without a stored plan is planned again from its job, with a note", "[plan_trace]") {
  const std::string path = tempPath("replanned.sqlite");
  const JobSpec job = tinyJob();
  const int64_t with_job = writeRun(path, job.yaml, nullptr);
  const int64_t bare = writeRun(path, "", nullptr);
  traces::TraceReader reader(path);
  CHECK_FALSE(plan_trace::storedPlan(reader, with_job).has_value());
  std::string note;
  const Plan replanned = plan_trace::planOfRun(reader, with_job, &note);
  CHECK(replanned.programs == buildPlan(job).programs);
  CHECK(replanned.job.content_hash == job.content_hash);
  CHECK(note.find("stores no plan") != std::string::npos);
  CHECK(note.find("planned again") != std::string::npos);
  CHECK_THROWS_WITH(plan_trace::planOfRun(reader, bare), Catch::Contains("carries no job and no stored plan"));
}

TEST_CASE("a damaged stored plan is a one-line error naming the run", "[plan_trace]") {
  const std::string path = tempPath("damaged.sqlite");
  traces::PlanFacts facts = plan_trace::planFacts(recomputedPlan());
  facts.plan_blob[facts.plan_blob.size() / 2] ^= 0x5A;
  facts.plan_blob.resize(facts.plan_blob.size() - 7);
  const int64_t run = writeRun(path, "", &facts);
  traces::TraceReader reader(path);
  CHECK_THROWS_WITH(plan_trace::storedPlan(reader, run),
                    Catch::Contains("run " + std::to_string(run)) && Catch::Contains("damaged"));
  traces::PlanFacts other = plan_trace::planFacts(recomputedPlan());
  other.plan_encoding = "msgpack";
  const int64_t run2 = writeRun(path, "", &other);
  traces::TraceReader reader2(path);
  CHECK_THROWS_WITH(plan_trace::storedPlan(reader2, run2), Catch::Contains("encoded as 'msgpack'"));
}
