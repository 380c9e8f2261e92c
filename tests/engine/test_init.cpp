// Parameter initialisation drawn on several threads: the same values, in the
// same order, as one thread draws them.
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "engine/init.h"
#include "engine/planner.h"
#include "test_jobs.h"

using namespace tandem;

TEST_CASE("Parameters drawn on worker threads arrive in order with the sequential values", "[init]") {
  const Plan plan = buildPlan(test::llamaJob(1, 1, 3));
  const RankPlan& rp = plan.programs.at(0);
  std::vector<const ParamInfo*> params;
  for (const ParamInfo& p : rp.params) params.push_back(&p);
  REQUIRE(params.size() > 8);
  for (int threads : {1, 3, 16}) {
    std::vector<std::string> order;
    std::vector<std::thread::id> callers;
    int mismatches = 0;
    forEachInitialParameter(plan.job, rp, params, 0, threads, [&](const ParamInfo& p, const std::vector<float>& v) {
      order.push_back(p.name);
      callers.push_back(std::this_thread::get_id());
      if (v != initialParameterValues(plan.job, rp, p, 0)) ++mismatches;
    });
    INFO("threads " << threads);
    CHECK(mismatches == 0);
    REQUIRE(order.size() == params.size());
    for (size_t i = 0; i < params.size(); ++i) CHECK(order[i] == params[i]->name);
    // `use` runs on the calling thread (the executor's CUDA calls are made there).
    for (const std::thread::id& id : callers) CHECK(id == std::this_thread::get_id());
  }
  // Nothing to draw: `use` is never called.
  int calls = 0;
  forEachInitialParameter(plan.job, rp, {}, 0, 4, [&](const ParamInfo&, const std::vector<float>&) { ++calls; });
  CHECK(calls == 0);
}
