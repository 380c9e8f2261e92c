// compareRuns: tasks matched by (rank, plan task id), per-step times, per-op
// error distribution and run-level differences, on hand-built runs.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <map>

#include <nlohmann/json.hpp>

#include "test_fixtures.h"
#include "traces/analysis/analysis.h"
#include "traces/analysis/compare.h"
#include "traces/store/trace_reader.h"

using namespace tandem::traces;
using tandem::traces::testing::act;
using tandem::traces::testing::task;
using tandem::traces::testing::tempTracePath;

namespace {

// Run A ("real"): two steps of 4 tasks on rank 0: two matmuls on the compute
// stream (100 and 200 ns per step), a layernorm (50 ns), and an all-reduce on
// the comm stream (80 ns) under the second matmul. Task 1 has two kernels per
// step (40 + 60 ns). Run B ("simulated"): one step, matmuls 110 and 200 ns,
// layernorm 40 ns, all-reduce 80 ns, plus a task A does not have.
void writeRuns(const std::string& path) {
  TraceWriter w(path);
  RunInfo real;
  real.kind = RunKind::Real;
  real.name = "real";
  w.beginRun(real);
  w.addStream({0, 0, StreamKind::Compute, "compute", 0});
  w.addStream({0, 1, StreamKind::Comm, "comm", 0});
  for (int step = 0; step < 2; ++step) {
    const int64_t t0 = step * 1000;
    w.addStep({0, step, t0, t0 + 500});
    w.addActivity(act(0, 0, t0, t0 + 100, ActivityKind::Kernel, "gemm_a", 0, Phase::Forward));
    w.addActivity(act(0, 0, t0 + 100, t0 + 140, ActivityKind::Kernel, "gemm_b1", 1, Phase::Forward));
    w.addActivity(act(0, 0, t0 + 140, t0 + 200, ActivityKind::Kernel, "gemm_b2", 1, Phase::Forward));
    w.addActivity(act(0, 0, t0 + 300, t0 + 350, ActivityKind::Kernel, "ln", 2, Phase::Backward));
    w.addActivity(act(0, 1, t0 + 110, t0 + 190, ActivityKind::Collective, "nccl", 3, Phase::Comm));
  }
  for (auto [id, op] : {std::pair{0, "matmul"}, {1, "matmul"}, {2, "layernorm"}, {3, "all_reduce"}})
    w.addPlanTask(task(0, id, fmt::format("t{}", id), op, Phase::Forward, id == 3 ? 1 : 0, {}));

  RunInfo sim;
  sim.kind = RunKind::Simulated;
  sim.name = "sim";
  w.beginRun(sim);
  w.addStream({0, 0, StreamKind::Compute, "compute", 0});
  w.addStream({0, 1, StreamKind::Comm, "comm", 0});
  w.addStep({0, 0, 0, 400});
  w.addActivity(act(0, 0, 0, 110, ActivityKind::Kernel, "t0", 0, Phase::Forward));
  w.addActivity(act(0, 0, 110, 310, ActivityKind::Kernel, "t1", 1, Phase::Forward));
  w.addActivity(act(0, 0, 310, 350, ActivityKind::Kernel, "t2", 2, Phase::Backward));
  w.addActivity(act(0, 1, 120, 200, ActivityKind::Collective, "t3", 3, Phase::Comm));
  w.addActivity(act(0, 0, 350, 400, ActivityKind::Kernel, "t9", 9, Phase::Optimizer));
  // What the simulation warned about, and a plain count.
  w.setStat({"sim.calibration_unmeasured_tasks", 1, Severity::Warning, "the calibration did not measure 1 task"});
  w.setStat({"sim.events", 12, Severity::Info, "discrete events processed"});
  for (auto [id, op] : {std::pair{0, "matmul"}, {1, "matmul"}, {2, "layernorm"}, {3, "all_reduce"}, {9, "adamw"}})
    w.addPlanTask(task(0, id, fmt::format("t{}", id), op, Phase::Forward, id == 3 ? 1 : 0, {}));
}

// A run of one rank with one compute stream and one step [0, 1000).
void beginOneStepRun(TraceWriter& w, RunKind kind, const std::string& name) {
  RunInfo info;
  info.kind = kind;
  info.name = name;
  w.beginRun(info);
  w.addStream({0, 0, StreamKind::Compute, "compute", 0});
  w.addStep({0, 0, 0, 1000});
}

}  // namespace

TEST_CASE("compareRuns pairs tasks by name when the runs' plans number them differently", "[compare]") {
  // A: fc.fwd (id 0) 100 ns, fc.bwd (id 1) 200 ns. B, another plan: a
  // recompute task takes id 1 and fc.bwd moves to id 2. By id, B's id 1
  // would be compared with A's fc.bwd.
  const std::string path = tempTracePath("two-plans.sqlite");
  {
    TraceWriter w(path);
    for (int which = 0; which < 2; ++which) {
      beginOneStepRun(w, RunKind::Simulated, which == 0 ? "a" : "b");
      w.addActivity(act(0, 0, 0, 100, ActivityKind::Kernel, "k0", 0, Phase::Forward));
      w.addPlanTask(task(0, 0, "fc.fwd", "matmul", Phase::Forward, 0, {}));
      if (which == 0) {
        w.addActivity(act(0, 0, 100, 300, ActivityKind::Kernel, "k1", 1, Phase::Backward));
        w.addPlanTask(task(0, 1, "fc.bwd", "matmul_bwd_data", Phase::Backward, 0, {0}));
      } else {
        w.addActivity(act(0, 0, 100, 150, ActivityKind::Kernel, "k1", 1, Phase::Recompute));
        w.addActivity(act(0, 0, 150, 370, ActivityKind::Kernel, "k2", 2, Phase::Backward));
        w.addPlanTask(task(0, 1, "fc.fwd.recompute", "matmul", Phase::Recompute, 0, {0}));
        w.addPlanTask(task(0, 2, "fc.bwd", "matmul_bwd_data", Phase::Backward, 0, {1}));
      }
    }
  }
  TraceReader reader(path);
  const RunComparison c = compareRuns(reader, 1, reader, 2);
  CHECK(c.matched_by == "plan task name");
  CHECK(c.matched == 2);
  CHECK(c.only_a == 0);
  CHECK(c.only_b == 1);  // the recompute task
  std::map<std::string, TaskDelta> by_name;
  for (const TaskDelta& d : c.top_tasks) by_name[d.name] = d;
  REQUIRE(by_name.count("fc.bwd") == 1);
  CHECK(by_name["fc.bwd"].a_ns == Approx(200));
  CHECK(by_name["fc.bwd"].b_ns == Approx(220));
  CHECK(by_name["fc.bwd"].task_id == 2);  // as B numbers it
  CHECK(comparisonToText(c).find("the runs' plans number their tasks differently") != std::string::npos);
  CHECK(nlohmann::json::parse(comparisonToJson(c))["matched_by"] == "plan task name");
  CHECK(c.only_b_no_time == 0);  // the recompute task takes time
  CHECK(comparisonToText(c).find("only in B: 1)") != std::string::npos);
  // One plan: ids join, as before.
  CHECK(compareRuns(reader, 1, reader, 1).matched_by == "plan task id");
}

TEST_CASE("compareRuns says which tasks of one run only take no time", "[compare]") {
  // A (real): one kernel for fc.fwd. B (simulated): fc.fwd, and its GELU
  // fused into it, a zero-length activity as the simulator writes one.
  const std::string path = tempTracePath("fused-only-in-b.sqlite");
  {
    TraceWriter w(path);
    for (int which = 0; which < 2; ++which) {
      beginOneStepRun(w, which == 0 ? RunKind::Real : RunKind::Simulated, which == 0 ? "real" : "sim");
      w.addActivity(act(0, 0, 0, 100, ActivityKind::Kernel, "k0", 0, Phase::Forward));
      w.addPlanTask(task(0, 0, "fc.fwd", "matmul", Phase::Forward, 0, {}));
      w.addPlanTask(task(0, 1, "gelu.fwd", "gelu", Phase::Forward, 0, {0}));
      if (which == 1) w.addActivity(act(0, 0, 100, 100, ActivityKind::Kernel, "gelu.fwd", 1, Phase::Forward));
    }
  }
  TraceReader reader(path);
  const RunComparison c = compareRuns(reader, 1, reader, 2);
  CHECK(c.matched == 1);
  CHECK(c.only_b == 1);
  CHECK(c.only_b_no_time == 1);
  CHECK(c.only_a_no_time == 0);
  CHECK(comparisonToText(c).find("only in B: 1, 1 of them taking no time") != std::string::npos);
  const auto j = nlohmann::json::parse(comparisonToJson(c));
  CHECK(j["only_b_no_time"] == 1);
  CHECK(j["only_a_no_time"] == 0);
}

TEST_CASE("compareRuns matches tasks and reports per-op errors", "[compare]") {
  const std::string path = tempTracePath("compare.sqlite");
  writeRuns(path);
  TraceReader reader(path);
  const RunComparison c = compareRuns(reader, 1, reader, 2);
  CHECK(c.matched == 4);
  CHECK(c.only_a == 0);
  CHECK(c.only_b == 1);
  // Step times: A 500 ns per step, B 400 ns: -20 %.
  CHECK(c.a.step_ns == Approx(500));
  CHECK(c.b.step_ns == Approx(400));
  CHECK(c.step_error_pct == Approx(-20.0));
  REQUIRE(c.by_op.size() == 3);
  const OpError& mm = c.by_op[2];  // sorted: all_reduce, layernorm, matmul
  CHECK(mm.op == "matmul");
  CHECK(mm.tasks == 2);
  CHECK(mm.a_total_ns == Approx(200));  // per step: 100 + (40 + 60)
  CHECK(mm.b_total_ns == Approx(310));
  // errors: task 0 +10 %, task 1 +100 % (200 vs 100)
  CHECK(mm.median_abs_pct == Approx(10.0));
  CHECK(mm.max_abs_pct == Approx(100.0));
  CHECK(c.by_op[1].op == "layernorm");
  CHECK(c.by_op[1].max_abs_pct == Approx(20.0));
  CHECK(c.by_op[0].median_abs_pct == Approx(0.0));
  // Split by what ran beside: in both runs the all-reduce runs under task 1
  // (A: 80 of its 100 ns, B: 80 of 200), never under task 0 or the
  // layernorm, so the matmuls' errors part: task 0 alone (+10 %), task 1
  // beside (+100 %).
  CHECK(mm.alone_tasks == 1);
  CHECK(mm.alone_median_abs_pct == Approx(10.0));
  CHECK(mm.beside_tasks == 1);
  CHECK(mm.beside_median_abs_pct == Approx(100.0));
  CHECK(c.by_op[1].alone_tasks == 1);
  CHECK(c.by_op[1].beside_tasks == 0);
  CHECK(c.by_op[0].beside_tasks == 1);  // the all-reduce, under task 1
  const auto times = taskTimesPerStep(reader, 1);
  CHECK(times.at({0, 1}).beside_share == Approx(0.8));
  CHECK(times.at({0, 0}).beside_share == Approx(0.0));
  CHECK(taskTimesPerStep(reader, 2).at({0, 1}).beside_share == Approx(0.4));
  CHECK(comparisonToText(c).find("10.0% (1)") != std::string::npos);
  CHECK(nlohmann::json::parse(comparisonToJson(c))["by_op"][2]["beside_median_abs_pct"] == Approx(100.0));
  // The largest absolute difference first: task 1 (+100 ns).
  REQUIRE(!c.top_tasks.empty());
  CHECK(c.top_tasks.front().task_id == 1);
  // Named by the plan ("t1"), not by its first kernel ("gemm_b1").
  CHECK(c.top_tasks.front().name == "t1");
  CHECK(c.top_tasks.front().errorPct() == Approx(100.0));
  CHECK(c.top_tasks.front().a_beside == Approx(0.8));  // the all-reduce under 80 of its 100 ns
  CHECK(c.top_tasks.front().b_beside == Approx(0.4));
  // Overlap: A's all-reduce [110,190) lies under compute [0,200): 100 %.
  // B's [120,200) lies under [0,310): 100 %.
  CHECK(c.a.overlap_pct == Approx(100.0));
  CHECK(c.b.overlap_pct == Approx(100.0));
  CHECK(c.a.exposed_comm_ns == Approx(0.0));

  // Stream waits, median over (rank, step) (nearest rank: the lower of
  // two). A's compute stream waits [200,300) (matmul -> layernorm) in step 0
  // and [1200,1300) in step 1: median 100 ns. Its time from the layernorm
  // (ends 350) to step 1's first matmul (1000) runs into the next step and
  // is no wait; nor is the comm stream's from one step's all-reduce to the
  // next, its only work in a step, so it has no waits and is not listed.
  // B's compute stream never waits.
  REQUIRE(c.stream_waits.size() == 1);
  CHECK(c.stream_waits[0].stream == 0);
  CHECK(c.stream_waits[0].name == "compute");
  CHECK(c.stream_waits[0].a_ns == Approx(100));
  CHECK(c.stream_waits[0].a_filled_ns == Approx(0));
  CHECK(c.stream_waits[0].b_ns == Approx(0));
  {
    // The report's sums behind those medians.
    TraceReader r(path);
    const StreamWaits w = analyzeRun(r, 1).stream_waits;
    REQUIRE(w.streams.size() == 1);
    CHECK(w.streams[0].stream == 0);
    CHECK(w.streams[0].waits == 2);
    CHECK(w.streams[0].total_ns == 200);
    CHECK(w.streams[0].filled_ns == 0);
  }

  const auto j = nlohmann::json::parse(comparisonToJson(c));
  CHECK(j["step_error_pct"].get<double>() == Approx(-20.0));
  CHECK(j["stream_waits"][0]["a_ns"].get<double>() == Approx(100));
  CHECK(comparisonToText(c).find("s0 compute") != std::string::npos);
  CHECK(j["by_op"].size() == 3);
  CHECK(comparisonToText(c).find("matmul") != std::string::npos);

  // B's warning is said with the comparison; info stats are not.
  CHECK(c.a.warnings.empty());
  REQUIRE(c.b.warnings.size() == 1);
  CHECK(c.b.warnings[0].name == "sim.calibration_unmeasured_tasks");
  CHECK(comparisonToText(c).find("B warns (sim.calibration_unmeasured_tasks 1): the calibration did not measure 1 "
                                 "task\n") != std::string::npos);
  CHECK(comparisonToText(c).find("sim.events") == std::string::npos);
  CHECK(j["a"]["warnings"].empty());
  REQUIRE(j["b"]["warnings"].size() == 1);
  CHECK(j["b"]["warnings"][0]["severity"] == "warning");
}

TEST_CASE("compareRuns refuses runs without task ids", "[compare]") {
  const std::string path = tempTracePath("compare-empty.sqlite");
  {
    TraceWriter w(path);
    RunInfo r;
    r.name = "untagged";
    w.beginRun(r);
    w.addStream({0, 0, StreamKind::Compute, "compute", 0});
    w.addActivity(act(0, 0, 0, 10, ActivityKind::Kernel, "k"));
  }
  TraceReader reader(path);
  CHECK_THROWS_WITH(compareRuns(reader, 1, reader, 1), Catch::Contains("no activities with plan task ids"));
}
