// A simulation written through the trace writer reads back as a `simulated`
// run with the plan's task ids, and the trace analyses agree with the
// simulator's own summary.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

#include "engine/plan/planner.h"
#include "plan_trace/plan_rows.h"
#include "sim_fixtures.h"
#include "simulator/pipeline/trace_output.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology_presets.h"
#include "traces/analysis/analysis.h"
#include "traces/store/trace_reader.h"
#include "traces/store/trace_writer.h"

using namespace tandem;
using namespace tandem::sim;
using namespace tandem::sim::testing;

namespace {

Plan overlapPlan(int world) {
  RankPlan rp = twoStreamProgram();
  rp.num_events = 1;
  rp.tasks.push_back(kernel(0, 0, 1e9, 0));
  Task k1 = kernel(1, 0, 2e9, 0);
  k1.record_event = 0;
  rp.tasks.push_back(k1);
  Task ar = collective(2, 1, CollectiveOp::AllReduce, 8'000'000, "world");
  ar.wait_events = {0};
  rp.tasks.push_back(ar);
  rp.tasks.push_back(kernel(3, 0, 4e10, 0, Phase::Backward));
  rp.memory.peak_bytes = 1 << 20;
  Plan p = uniformPlan(world, rp);
  p.job.name = "trace-test";
  return p;
}

std::string writeTrace(const Plan& plan, const Topology& topo, const SimResult& r, const std::string& name) {
  const std::string path = std::string(TANDEM_BINARY_DIR) + "/" + name;
  std::filesystem::remove(path);
  std::filesystem::remove(path + "-wal");
  std::filesystem::remove(path + "-shm");
  traces::TraceWriter w(path);
  writeSimulationTrace(w, plan, topo, r);
  return path;
}

}  // namespace

TEST_CASE("a simulated run reads back like a real one", "[trace]") {
  Topology topo = ringTopology(4, 100, 500);
  Plan plan = overlapPlan(4);
  RooflineCostModel cost;
  SimOptions opt;
  opt.symmetry = SymmetryMode::Auto;
  SimResult r = simulatePlan(plan, topo, cost, opt);
  REQUIRE(r.stats.symmetric);
  const std::string path = writeTrace(plan, topo, r, "sim_trace_test.sqlite");

  traces::TraceReader reader(path);
  auto runs = reader.runs();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].kind == traces::RunKind::Simulated);
  CHECK(runs[0].world_size == 4);
  CHECK(runs[0].name == "trace-test (simulated)");
  const int64_t run = runs[0].id;
  // Represented ranks are written with their representative's timeline.
  CHECK(reader.activityCount(run) == 4 * 4);
  CHECK(reader.streams(run).size() == 4 * 2);
  std::vector<int64_t> task_ids;
  reader.forEachActivity(run, [&](const traces::ActivityRow& a) {
    if (a.rank == 3) task_ids.push_back(a.task_id);
  });
  std::sort(task_ids.begin(), task_ids.end());
  CHECK(task_ids == std::vector<int64_t>{0, 1, 2, 3});

  traces::RunReport report = traces::analyzeRun(reader, run);
  REQUIRE(report.ranks.size() == 4);
  const SimRankSummary s = summarizeRank(r, 2);
  CHECK(report.ranks[2].breakdown.span_ns == s.step_ns);
  CHECK(report.ranks[2].breakdown.compute_ns == s.compute_ns);
  CHECK(report.ranks[2].breakdown.comm_ns == s.comm_ns);
  CHECK(report.ranks[2].breakdown.exposed_comm_ns == s.exposed_comm_ns);
  CHECK(report.ranks[2].breakdown.overlap_pct == Approx(s.overlap_pct));
}

TEST_CASE("writing the same simulation twice gives the same rows", "[trace]") {
  Topology topo = ringTopology(2, 100, 500);
  Plan plan = overlapPlan(2);
  RooflineCostModel cost;
  SimResult a = simulatePlan(plan, topo, cost);
  SimResult b = simulatePlan(plan, topo, cost);
  const std::string pa = writeTrace(plan, topo, a, "sim_trace_a.sqlite");
  const std::string pb = writeTrace(plan, topo, b, "sim_trace_b.sqlite");
  traces::TraceReader ra(pa), rb(pb);
  std::vector<std::tuple<int, int, int64_t, int64_t, int64_t, std::string>> rows_a, rows_b;
  ra.forEachActivity(ra.defaultRunId(), [&](const traces::ActivityRow& x) {
    rows_a.emplace_back(x.rank, x.stream, x.start_ns, x.end_ns, x.task_id, x.name);
  });
  rb.forEachActivity(rb.defaultRunId(), [&](const traces::ActivityRow& x) {
    rows_b.emplace_back(x.rank, x.stream, x.start_ns, x.end_ns, x.task_id, x.name);
  });
  REQUIRE(!rows_a.empty());
  CHECK(rows_a == rows_b);
  CHECK(ra.runs()[0].created_unix_ns == 0);
}

TEST_CASE("plan rows: stream order and the recorders of waited events, as the trace stores them", "[trace]") {
  // Tasks 0, 1 and 3 on stream 0 (1 records event 0), the all-reduce 2 on
  // stream 1 waiting for that event. The profiler stores the same rows for a
  // real run (plan_trace/gpu/plan_observer.h), so the two graphs match.
  Topology topo = ringTopology(2, 100, 500);
  Plan plan = overlapPlan(2);
  // One program stands for both ranks (uniformPlan); rank 1 is written with it.
  const std::vector<traces::PlanTaskRow> rows = plan_trace::planTaskRows(1, plan.programs[0]);
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].deps.empty());
  CHECK(rows[1].deps == std::vector<int64_t>{0});
  CHECK(rows[2].deps == std::vector<int64_t>{1});  // first on its stream; event 0's recorder
  CHECK(rows[3].deps == std::vector<int64_t>{1});
  CHECK(rows[2].op == "all_reduce");
  CHECK(rows[2].bytes == 8'000'000);
  CHECK(rows[3].phase == Phase::Backward);
  CHECK(rows[1].rank == 1);

  RooflineCostModel cost;
  const SimResult r = simulatePlan(plan, topo, cost);
  traces::TraceReader reader(writeTrace(plan, topo, r, "sim_trace_rows.sqlite"));
  std::vector<traces::PlanTaskRow> stored;
  for (const traces::PlanTaskRow& t : reader.planTasks(reader.defaultRunId()))
    if (t.rank == 1) stored.push_back(t);
  REQUIRE(stored.size() == rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    CHECK(stored[i].task_id == rows[i].task_id);
    CHECK(stored[i].op == rows[i].op);
    CHECK(stored[i].phase == rows[i].phase);
    CHECK(stored[i].bytes == rows[i].bytes);
    CHECK(stored[i].deps == rows[i].deps);
  }
}

TEST_CASE("a simulated run's weight gradients are rated by their own figures, once", "[trace]") {
  // GPT-2's weight gradients carry their bias sums as trailing kernels,
  // activities without figures of their own: the rate must not take the
  // plan's figures for them as well.
  JobSpec job = defaultJob();
  job.model.layers = 2;
  job.parallel.data_parallel = 1;
  const Plan plan = buildPlan(job);
  const Topology topo = loadTopology("dgx-h100");
  const SimResult r = simulatePlan(plan, topo, RooflineCostModel{});
  const std::string path = writeTrace(plan, topo, r, "sim_trace_rates.sqlite");
  traces::TraceReader reader(path);
  const int64_t run = reader.defaultRunId();
  double flops = 0;
  int64_t flops_ns = 0, trailing = 0;
  reader.forEachActivity(run, [&](const traces::ActivityRow& a) {
    if (a.name.find("bwd_weight") == std::string::npos) return;
    if (a.flops > 0) {
      flops += a.flops;
      flops_ns += a.end_ns - a.start_ns;
    } else {
      ++trailing;
    }
  });
  REQUIRE(trailing > 0);
  REQUIRE(flops_ns > 0);
  const traces::RunReport report = traces::analyzeRun(reader, run);
  const auto it = std::find_if(report.by_op.begin(), report.by_op.end(),
                               [](const traces::KernelStat& s) { return s.key == "matmul_bwd_weight"; });
  REQUIRE(it != report.by_op.end());
  CHECK(it->flops == Approx(flops));
  CHECK(it->tflops == Approx(flops / double(flops_ns) / 1e3));
  CHECK(it->tflops * 1e12 <= topo.devices.at(0).bf16_flops);
}
