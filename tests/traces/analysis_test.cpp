// The analyses on the hand-built overlap fixture: every expected figure is
// worked out in test_fixtures.h from the intervals, not copied from output.
#include <catch2/catch.hpp>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "traces/analysis/analysis.h"
#include "traces/analysis/parts.h"
#include "traces/analysis/report_format.h"
#include "traces/store/trace_reader.h"
#include "traces/test_fixtures.h"

using namespace tandem::traces;
using namespace tandem::traces::testing;

namespace {

// Rank 0 of the overlap fixture on its own, for the analyses' detail functions.
struct RankZero {
  explicit RankZero(const std::string& name) : r(written(name)), tracks(r.loadRun(1)), cats(Classifier(), r.strings()) {
    for (const auto& t : tracks)
      if (t.rank == 0) rank0.tracks.push_back(&t);
  }
  static std::string written(const std::string& name) {
    std::string path = tempTracePath(name);
    writeOverlapFixture(path);
    return path;
  }
  TraceReader r;
  std::vector<Track> tracks;
  CategoryTable cats;
  detail::RankTracks rank0{0, {}};
};

}  // namespace

namespace {

// Starts a profiled one-rank run named `name` in `w`, its stream 0 a
// compute stream.
void beginOneRankRun(TraceWriter& w, const std::string& name) {
  RunInfo info;
  info.kind = RunKind::Real;
  info.name = name;
  info.world_size = 1;
  w.beginRun(info);
  w.addStream({0, 0, StreamKind::Compute, "compute", 0});
}

RunReport fixtureReport(const AnalysisOptions& options = {}) {
  std::string path = tempTracePath("analysis.sqlite");
  writeOverlapFixture(path);
  TraceReader r(path);
  return analyzeRun(r, r.defaultRunId(), options);
}

}  // namespace

TEST_CASE("temporal breakdown merges concurrent streams instead of summing them", "[analysis]") {
  RunReport rep = fixtureReport();
  REQUIRE(rep.ranks.size() == 2);
  const Breakdown& b0 = rep.ranks[0].breakdown;
  CHECK(b0.span_ns == 500);
  CHECK(b0.busy_ns == 450);
  CHECK(b0.idle_ns == 50);
  CHECK(b0.compute_ns == 380);
  CHECK(b0.comm_ns == 150);
  CHECK(b0.memcpy_ns == 70);
  CHECK(b0.overlap_ns == 100);
  CHECK(b0.overlap_pct == Approx(200.0 / 3.0));
  CHECK(b0.exposed_comm_ns == 50);
  CHECK(b0.memcpy_exclusive_ns == 20);
  CHECK(b0.recompute_ns == 50);
  CHECK(b0.recompute_share_pct == Approx(10.0));
  // The exclusive parts add up to the span; the naive sum of durations does not.
  CHECK(b0.compute_ns + b0.exposed_comm_ns + b0.memcpy_exclusive_ns + b0.sync_exclusive_ns + b0.idle_ns ==
        b0.span_ns);

  const Breakdown& b1 = rep.ranks[1].breakdown;
  CHECK(b1.span_ns == 470);
  CHECK(b1.idle_ns == 0);
  CHECK(b1.compute_ns == 380);
  CHECK(b1.comm_ns == 130);
  CHECK(b1.overlap_ns == 40);
  CHECK(b1.overlap_pct == Approx(100.0 * 40 / 130));
  CHECK(b1.exposed_comm_ns == 90);

  CHECK(rep.total.comm_ns == 280);
  CHECK(rep.total.overlap_pct == Approx(100.0 * 140 / 280));
}

TEST_CASE("idle time splits into host wait, kernel wait and other", "[analysis]") {
  RunReport rep = fixtureReport();
  const IdleBreakdown& i0 = rep.ranks[0].idle;
  CHECK(i0.has_launch_records);
  CHECK(i0.gaps == 3);
  CHECK(i0.host_wait_ns == 50);
  CHECK(i0.kernel_wait_ns == 10);
  CHECK(i0.other_ns == 100);
  CHECK_FALSE(rep.ranks[1].idle.has_launch_records);
  CHECK(rep.ranks[1].idle.gaps == 1);  // 330 -> 420 on stream 0
  CHECK(rep.ranks[1].idle.other_ns == 90);
}

TEST_CASE("steps, step-time percentiles and attribution", "[analysis]") {
  RunReport rep = fixtureReport();
  CHECK_FALSE(rep.step_time.synthesized);
  REQUIRE(rep.steps.size() == 2);
  CHECK(rep.step_time.duration_ns.p50 == 470);
  CHECK(rep.step_time.duration_ns.p95 == 500);
  CHECK(rep.step_time.max_over_ranks_ns.count == 1);
  CHECK(rep.step_time.max_over_ranks_ns.max == 500);
  CHECK(rep.attribution.gpu_activities == 13);
  CHECK(rep.attribution.attributed == 12);
  REQUIRE(rep.attribution.top_unattributed.size() == 1);
  CHECK(rep.attribution.top_unattributed[0].first == "Memcpy HtoD");
  CHECK(rep.attribution.top_unattributed[0].second == 70);
}

TEST_CASE("kernel statistics by op and by name", "[analysis]") {
  RunReport rep = fixtureReport();
  auto find = [](const std::vector<KernelStat>& v, const std::string& key) {
    auto it = std::find_if(v.begin(), v.end(), [&](const KernelStat& s) { return s.key == key; });
    REQUIRE(it != v.end());
    return *it;
  };
  KernelStat matmul = find(rep.by_op, "matmul");
  CHECK(matmul.count == 2);
  CHECK(matmul.total_ns == 200);
  CHECK(matmul.tflops == Approx(2.0));  // only rank 0's activity carries flops
  KernelStat bwd = find(rep.by_name, "gemm_bwd");
  CHECK(bwd.count == 2);
  CHECK(bwd.total_ns == 330);
  CHECK(bwd.p50_ns == 150);
  CHECK(bwd.p95_ns == 180);
  KernelStat ar = find(rep.by_op, "all_reduce");
  CHECK(ar.category == "comm");
  CHECK(ar.gbps == Approx(2.0));
  KernelStat memcpy = find(rep.by_op, "memcpy");
  CHECK(memcpy.category == "memcpy");
  CHECK(memcpy.gbps == Approx(100.0));
  // Ordered by total time.
  for (size_t i = 1; i < rep.by_op.size(); ++i) CHECK(rep.by_op[i - 1].total_ns >= rep.by_op[i].total_ns);
}

// A profiled run's kernels carry no flops: the op's rate comes from its plan
// task's figures, once per execution (task and step), over all its kernels'
// time. Task 1 (1e6 flops, 4000 bytes) runs two kernels in each of two
// steps (100 + 50 ns each); a third kernel of it falls outside the steps.
TEST_CASE("a profiled run's op rates come from its plan tasks, once per step", "[analysis]") {
  using K = ActivityKind;
  using P = Phase;
  auto write = [](const std::string& path, bool with_steps) {
    TraceWriter w(path, WriterOptions{.truncate = true});
    beginOneRankRun(w, "plan-rates");
    for (int64_t base : {0, 1000}) {
      w.addActivity(act(0, 0, base, base + 100, K::Kernel, "gemm", 1, P::Forward));
      w.addActivity(act(0, 0, base + 100, base + 150, K::Kernel, "gemm_tail", 1, P::Forward));
      w.addActivity(act(0, 0, base + 200, base + 300, K::Kernel, "norm", 2, P::Forward));
    }
    w.addActivity(act(0, 0, 2500, 2600, K::Kernel, "gemm", 1, P::Forward));
    PlanTaskRow mm = task(0, 1, "layer0.fc.fwd", "matmul", P::Forward, 0, {});
    mm.flops = 1e6;
    mm.bytes = 4000;
    w.addPlanTask(mm);
    w.addPlanTask(task(0, 2, "layer0.ln.fwd", "layernorm", P::Forward, 0, {1}));  // no figures
    if (with_steps) {
      w.addStep({0, 0, 0, 1000});
      w.addStep({0, 1, 1000, 2000});
    }
  };
  auto byOp = [](const RunReport& rep, const std::string& op) {
    auto it = std::find_if(rep.by_op.begin(), rep.by_op.end(), [&](const KernelStat& s) { return s.key == op; });
    REQUIRE(it != rep.by_op.end());
    return *it;
  };
  const std::string path = tempTracePath("plan_rates.sqlite");
  write(path, true);
  TraceReader r(path);
  AnalysisOptions whole_run;
  whole_run.window = ReportWindow::WholeRun;
  const RunReport rep = analyzeRun(r, r.defaultRunId(), whole_run);
  CHECK(byOp(analyzeRun(r, r.defaultRunId()), "matmul").count == 4);  // the steps only, by default
  const KernelStat mm = byOp(rep, "matmul");
  CHECK(mm.count == 5);  // the whole run: the kernel outside the steps is counted, not rated
  CHECK(mm.flops == Approx(2e6));  // the totals the rates are taken from
  CHECK(mm.bytes == 8000);
  CHECK(mm.tflops == Approx(2e6 / 300.0 / 1e3));
  CHECK(mm.gbps == Approx(8000.0 / 300.0));
  CHECK(byOp(rep, "layernorm").tflops == 0);  // a task without figures has no rate
  // Without recorded steps the executions cannot be told apart: no rate.
  const std::string no_steps = tempTracePath("plan_rates_no_steps.sqlite");
  write(no_steps, false);
  TraceReader r2(no_steps);
  const KernelStat unrated = byOp(analyzeRun(r2, r2.defaultRunId()), "matmul");
  CHECK(unrated.tflops == 0);
  CHECK(unrated.gbps == 0);
}

TEST_CASE("critical path follows the dependency that finished last", "[analysis]") {
  RunReport rep = fixtureReport();
  const CriticalPath& cp = rep.critical_path;
  REQUIRE(cp.available);
  // Rank 1's path (1 -> 2 -> 4 -> 6, 470 ns) is longer than rank 0's (450 ns).
  CHECK(cp.rank == 1);
  CHECK(cp.length_ns == 470);
  CHECK(cp.task_count == 4);
  CHECK(cp.busy_ns == 460);
  CHECK(cp.wait_ns == 10);
  REQUIRE(cp.tasks.size() == 4);
  CHECK(cp.tasks[2].task_id == 4);
  CHECK(cp.tasks[2].name == "bucket0.all_reduce");
  CHECK(cp.by_phase_ns.at("backward") == 180);

  // Rank 0 alone: 5 -> 7 -> 2 -> 4 -> 6 through the side stream and the all-reduce.
  RankZero z("cp0.sqlite");
  CriticalPath cp0 = detail::criticalPath({z.rank0}, z.cats, z.r.strings(), z.r.planTasks(1), z.r.steps(1), 50);
  REQUIRE(cp0.tasks.size() == 5);
  std::vector<int64_t> ids;
  for (const auto& t : cp0.tasks) ids.push_back(t.task_id);
  CHECK(ids == std::vector<int64_t>{5, 7, 2, 4, 6});
  CHECK(cp0.length_ns == 450);
  CHECK(cp0.wait_ns == 70);
  CHECK(cp0.tasks[4].wait_before_ns == 50);
}

TEST_CASE("critical path of a many-step run: within the median step", "[analysis]") {
  // A plan's task ids repeat in every step. Three steps of one rank, 100,
  // 130 and 110 ns long: task 1 on stream 0, task 3 beside it on stream 1,
  // task 2 after both. Spanning all steps, each task would cover the whole
  // run and the path's busy time would exceed its length.
  using K = ActivityKind;
  using P = Phase;
  std::string path = tempTracePath("cp_steps.sqlite");
  {
    TraceWriter w(path, WriterOptions{.truncate = true});
    beginOneRankRun(w, "three-steps");
    w.addStream({0, 1, StreamKind::Compute, "compute.wgrad", 0});
    w.addPlanTask(task(0, 1, "fwd", "matmul", P::Forward, 0, {}));
    w.addPlanTask(task(0, 3, "wgrad", "matmul_bwd_weight", P::Backward, 1, {1}));
    w.addPlanTask(task(0, 2, "adamw", "adamw", P::Optimizer, 0, {1, 3}));
    const int64_t starts[] = {0, 100, 230}, lengths[] = {100, 130, 110};
    for (int k = 0; k < 3; ++k) {
      const int64_t t0 = starts[k], side_end = t0 + lengths[k] - 30;
      w.addActivity(act(0, 0, t0, t0 + 40, K::Kernel, "gemm", 1, P::Forward));
      w.addActivity(act(0, 1, t0 + 40, side_end, K::Kernel, "gemm_w", 3, P::Backward));
      w.addActivity(act(0, 0, side_end + 5, t0 + lengths[k], K::Kernel, "adamw", 2, P::Optimizer));
      w.addStep({0, k, t0, t0 + lengths[k]});
    }
  }
  TraceReader r(path);
  const CriticalPath& cp = analyzeRun(r, 1).critical_path;
  REQUIRE(cp.available);
  CHECK(cp.step == 2);  // 110 ns: the median of 100, 110, 130
  CHECK(cp.steps_recorded == 3);
  CHECK(cp.task_count == 3);
  CHECK(cp.length_ns == 110);
  CHECK(cp.busy_ns == 105);  // 40 + 40 + 25
  CHECK(cp.wait_ns == 5);
  REQUIRE(cp.tasks.size() == 3);
  CHECK(cp.tasks[1].name == "wgrad");
  CHECK(cp.tasks[1].start_ns == 270);
}

TEST_CASE("idle gaps: charged to the work before and after, inside the steps", "[analysis]") {
  // Rank 0's GPU work covers [0,400) and [450,500): one gap of 50 ns after
  // the all-reduce (task 4, the last to end) and before adamw (task 6).
  // Rank 1's covers [0,470) without a gap.
  RunReport rep = fixtureReport();
  const IdleGaps& g = rep.idle_gaps;
  CHECK(g.steps == 2);
  CHECK(g.gaps == 1);
  CHECK(g.total_ns == 50);
  REQUIRE(g.pairs.size() == 1);
  CHECK(g.pairs[0].before == "all_reduce");
  CHECK(g.pairs[0].after == "adamw");
  CHECK(g.pairs[0].count == 1);
  const std::string text = reportToText(rep);
  CHECK(text.find("idle gaps within the steps: 1 gaps, 0.000 ms, 0.0 us per step") != std::string::npos);
  CHECK(text.find("all_reduce -> adamw") != std::string::npos);

  // Steps cut the window: a step that ends at 420 leaves the gap (which
  // starts at 400) in; one that ends at 390 leaves it out.
  RankZero z("gaps.sqlite");
  auto gaps = [&](const std::vector<StepRow>& steps) {
    return detail::idleGaps({z.rank0}, z.cats, z.r.strings(), z.r.planTasks(1), steps, 10).gaps;
  };
  CHECK(gaps({{0, 0, 0, 420}}) == 1);
  CHECK(gaps({{0, 0, 0, 390}}) == 0);
  CHECK(gaps({}) == 1);  // no steps: the whole run
}

TEST_CASE("stream waits: each stream's gaps, charged to its own work, and what other streams filled",
          "[analysis]") {
  // Rank 0: stream 0 waits [100,150) (matmul -> matmul_bwd_data) and
  // [350,450) (gelu -> adamw); stream 4 waits [120,130) (add -> add); the
  // all-reduce and the copy are alone on their streams. The rank's GPU work
  // covers [0,400) and [450,500), so the waits are filled 50, 50 and 10 ns.
  // Rank 1: stream 0 waits [330,420) (gelu -> adamw), filled by the
  // all-reduce [290,420).
  RunReport rep = fixtureReport();
  const StreamWaits& w = rep.stream_waits;
  CHECK(w.steps == 2);
  CHECK(w.waits == 4);
  CHECK(w.total_ns == 250);
  CHECK(w.filled_ns == 200);
  REQUIRE(w.streams.size() == 2);
  CHECK(w.streams[0].stream == 0);
  CHECK(w.streams[0].stream_name == "compute");
  CHECK(w.streams[0].waits == 3);
  CHECK(w.streams[0].total_ns == 240);
  CHECK(w.streams[0].filled_ns == 190);
  CHECK(w.streams[1].stream == 4);
  CHECK(w.streams[1].stream_name == "side");
  CHECK(w.streams[1].total_ns == 10);
  CHECK(w.streams[1].filled_ns == 10);
  // Medians over (rank, step): stream 0 waited 150 ns (100 filled) in rank
  // 0's step and 90 (all filled) in rank 1's; nearest rank takes the lower.
  CHECK(w.streams[0].p50_step_ns == 90);
  CHECK(w.streams[0].p50_step_filled_ns == 90);
  CHECK(w.streams[1].p50_step_ns == 10);
  CHECK(w.pair_kinds == 3);
  REQUIRE(w.pairs.size() == 3);
  CHECK(w.pairs[0].stream == 0);
  CHECK(w.pairs[0].before == "gelu");
  CHECK(w.pairs[0].after == "adamw");
  CHECK(w.pairs[0].count == 2);
  CHECK(w.pairs[0].total_ns == 190);
  CHECK(w.pairs[0].filled_ns == 140);
  CHECK(w.pairs[1].before == "matmul");
  CHECK(w.pairs[1].after == "matmul_bwd_data");
  CHECK(w.pairs[1].filled_ns == 50);
  CHECK(w.pairs[2].stream == 4);
  CHECK(w.pairs[2].before == "add");
  CHECK(w.pairs[2].after == "add");

  const std::string text = reportToText(rep);
  CHECK(text.find("stream waits within the steps: 4 waits, 0.000 ms, 0.1 us per step, 80.0% filled by other "
                  "streams' work") != std::string::npos);
  CHECK(text.find("s0 compute: gelu -> adamw") != std::string::npos);
  CHECK(text.find("(median step 0.1 us)  s0 compute") != std::string::npos);  // 90 ns
  CHECK(text.find("73.7% filled") != std::string::npos);  // 140 of 190
  const auto json = nlohmann::json::parse(reportToJson(rep));
  CHECK(json["stream_waits"]["waits"] == 4);
  CHECK(json["stream_waits"]["filled_ns"] == 200);
  CHECK(json["stream_waits"]["streams"][0]["name"] == "compute");
  CHECK(json["stream_waits"]["pairs"][0]["filled_ns"] == 140);

  // Steps cut the window as for the idle gaps: a step of rank 0 ending at
  // 340 keeps only the first two waits (they start at 100 and 120).
  RankZero z("waits.sqlite");
  const StreamWaits cut =
      detail::streamWaits({z.rank0}, z.cats, z.r.strings(), z.r.planTasks(1), {{0, 0, 0, 340}}, z.r.streams(1), 10);
  CHECK(cut.waits == 2);
  CHECK(cut.total_ns == 60);
  CHECK(cut.filled_ns == 60);
  // A wait that runs into the next step is no wait inside a step: with the
  // steps [0,420) and [420,500), stream 0's wait [350,450) ends in the
  // second step and is left out.
  const StreamWaits split = detail::streamWaits({z.rank0}, z.cats, z.r.strings(), z.r.planTasks(1),
                                                {{0, 0, 0, 420}, {0, 1, 420, 500}}, z.r.streams(1), 10);
  CHECK(split.steps == 2);
  CHECK(split.waits == 2);
  CHECK(split.total_ns == 60);
}

TEST_CASE("the report names the run's devices and their software", "[analysis]") {
  RunReport rep = fixtureReport();
  // A real run's record per rank, after a merge of two per-rank files.
  rep.run.devices_json =
      R"([{"rank":0,"index":0,"name":"NVIDIA H200","compute_capability":"9.0","driver":"580.159.04",)"
      R"("cuda_driver":"13.0","cuda_runtime":"13.0","cublaslt":"13.1.0","nccl":"2.28.3"},)"
      R"({"rank":1,"index":1,"name":"NVIDIA H200","compute_capability":"9.0","driver":"580.159.04",)"
      R"("cuda_driver":"13.0","cuda_runtime":"13.0","cublaslt":"13.1.0","nccl":"2.28.3"}])";
  CHECK(reportToText(rep).find("devices: 2 x NVIDIA H200 (cc 9.0, driver 580.159.04, CUDA 13.0, cuBLASLt 13.1.0, "
                               "NCCL 2.28.3)\n") != std::string::npos);
  const auto json = nlohmann::json::parse(reportToJson(rep));
  CHECK(json["run"]["devices"].size() == 2);
  CHECK(json["run"]["devices"][1]["nccl"] == "2.28.3");
  // The simulator's record names a model per rank.
  rep.run.devices_json = R"([{"rank":0,"name":"gpu0","model":"H200"},{"rank":1,"name":"gpu1","model":"H200"}])";
  CHECK(reportToText(rep).find("devices: 2 x H200\n") != std::string::npos);
  // Free-form text that is no JSON array names nothing, and breaks nothing.
  rep.run.devices_json = "one H200";
  CHECK(reportToText(rep).find("devices:") == std::string::npos);
  CHECK(!nlohmann::json::parse(reportToJson(rep))["run"].contains("devices"));
}

TEST_CASE("stragglers: the rank that enters collectives last", "[analysis]") {
  RunReport rep = fixtureReport();
  CHECK(rep.stragglers.collectives_matched == 1);
  CHECK(rep.stragglers.straggler_rank == 1);
  REQUIRE(rep.stragglers.ranks.size() == 2);
  CHECK(rep.stragglers.ranks[1].max_delay_ns == 40);
  CHECK(rep.stragglers.ranks[0].last_count == 0);
}

TEST_CASE("classification rules are configurable and sync is never compute", "[analysis]") {
  CHECK(Classifier().classify(ActivityKind::Kernel, "ncclKernel_AllReduce_RING") == Category::Comm);
  CHECK(Classifier().classify(ActivityKind::Kernel, "cudaStreamWaitEvent") == Category::Sync);
  CHECK(Classifier().classify(ActivityKind::Sync, "anything") == Category::Sync);
  CHECK(Classifier().classify(ActivityKind::Kernel, "sm90_gemm") == Category::Compute);
  Classifier custom({Classifier::parseRule("gelu=comm"), Classifier::parseRule("kind:memcpy:htod=compute")});
  CHECK(custom.classify(ActivityKind::Kernel, "GELU_recompute") == Category::Comm);
  CHECK(custom.classify(ActivityKind::Memcpy, "Memcpy HtoD") == Category::Compute);
  CHECK(custom.classify(ActivityKind::Memcpy, "Memcpy DtoH") == Category::Memcpy);
  CHECK_THROWS_WITH(Classifier::parseRule("gelu=gpu"), Catch::Contains("unknown category 'gpu'"));
  CHECK_THROWS_WITH(Classifier::parseRule("kind:blob=comm"), Catch::Contains("unknown kind 'blob'"));
  CHECK_THROWS_WITH(Classifier::parseRule("gelu"), Catch::Contains("PATTERN=CATEGORY"));

  // Reclassifying the recompute kernel as communication changes the figures.
  AnalysisOptions options{Classifier({Classifier::parseRule("gelu=comm")})};
  RunReport rep = fixtureReport(options);
  CHECK(rep.ranks[0].breakdown.compute_ns == 330);
  CHECK(rep.ranks[0].breakdown.comm_ns == 150);  // [300,350) lies inside [250,400)
  CHECK(rep.ranks[0].breakdown.overlap_ns == 50);  // only gemm_bwd's [250,300) hides it now
}

TEST_CASE("an empty run is an error, not an empty report", "[analysis][errors]") {
  std::string path = tempTracePath("empty-run.sqlite");
  {
    TraceWriter w(path);
    RunInfo info;
    info.name = "nothing";
    w.beginRun(info);
  }
  TraceReader r(path);
  CHECK_THROWS_WITH(analyzeRun(r, 1), Catch::Contains("has no activities"));
}

TEST_CASE("stragglers without task ids match collectives by name and occurrence", "[analysis]") {
  std::string path = tempTracePath("stragglers.sqlite");
  {
    TraceWriter w(path, WriterOptions{.truncate = true});
    w.beginRun({});
    // Rank 2 enters both all-reduces last (by 30 and 50 ns); rank 0 enters the
    // all-gather last. A split collective counts from its first piece.
    for (int rank = 0; rank < 3; ++rank) {
      int64_t late = rank == 2 ? 1 : 0;
      w.addActivity(act(rank, 1, 100 + late * 30, 200, ActivityKind::Kernel, "ncclAllReduce"));
      w.addActivity(act(rank, 1, 300 + late * 50, 400, ActivityKind::Kernel, "ncclAllReduce"));
      w.addActivity(act(rank, 2, rank == 0 ? 520 : 500, 600, ActivityKind::Kernel, "ncclAllGather"));
      w.addActivity(act(rank, 0, 0, 90, ActivityKind::Kernel, "gemm"));
    }
  }
  TraceReader r(path);
  RunReport rep = analyzeRun(r, 1);
  CHECK(rep.stragglers.collectives_matched == 3);
  CHECK(rep.stragglers.straggler_rank == 2);
  REQUIRE(rep.stragglers.ranks.size() == 3);
  CHECK(rep.stragglers.ranks[2].last_count == 2);
  CHECK(rep.stragglers.ranks[2].max_delay_ns == 50);
  CHECK(rep.stragglers.ranks[2].mean_delay_ns == Approx(80.0 / 3));
  CHECK(rep.stragglers.ranks[0].last_count == 1);
  CHECK(rep.stragglers.ranks[0].max_delay_ns == 20);
}

TEST_CASE("report: GPU power and clock per rank from the profiler's stats", "[analysis][report]") {
  RunReport rep = fixtureReport();
  // Without power stats the section is left out.
  CHECK(reportToText(rep).find("GPU power per rank") == std::string::npos);
  rep.stats.push_back({"gpu.energy_power_w.rank0", 705, Severity::Info, ""});
  rep.stats.push_back({"gpu.energy_per_step_mj.rank0", 22040, Severity::Info, ""});
  rep.stats.push_back({"gpu.sm_clock_mhz_median.rank0", 1695, Severity::Info, ""});
  rep.stats.push_back({"gpu.power_capped_pct.rank0", 68, Severity::Info, ""});
  rep.stats.push_back({"gpu.sm_clock_mhz_median.rank1", 1605, Severity::Info, ""});
  rep.stats.push_back({"gpu.sm_clock_mhz_median.rankx", 1, Severity::Info, ""});  // not a rank: ignored
  rep.stats.push_back({"gpu.sm_clock_mhz_median.rank99999999999", 1, Severity::Info, ""});  // nor this
  const std::string text = reportToText(rep);
  CHECK(text.find("rank    0:   705 W,   22.04 J/step, SM clock median  1695 MHz,  68% of samples") !=
        std::string::npos);
  CHECK(text.find("rank    1:     - W,       - J/step, SM clock median  1605 MHz,    - of samples") !=
        std::string::npos);
  CHECK(text.find("slowest clock: rank 1, 5.3% below rank 0") != std::string::npos);
  CHECK(text.find("rank 9999") == std::string::npos);
  CHECK(text.find("mostly at the power cap") != std::string::npos);  // rank 0: 68% of samples
  rep.stats.erase(std::remove_if(rep.stats.begin(), rep.stats.end(),
                                 [](const StatRow& s) { return s.name == "gpu.power_capped_pct.rank0"; }),
                  rep.stats.end());
  rep.stats.push_back({"gpu.power_capped_pct.rank0", 20, Severity::Info, ""});
  CHECK(reportToText(rep).find("mostly at the power cap") == std::string::npos);
}

TEST_CASE("pipeline transfers: the exposed part of sends and receives, the bubble", "[analysis]") {
  // One stage: compute [0,100) and [300,400); a receive waiting [100,300)
  // for its neighbour, a send [350,450) half under compute; an all-reduce
  // [420,500), communication but not point to point, beside the send's
  // last 30 ns.
  std::string path = tempTracePath("p2p.sqlite");
  {
    TraceWriter w(path, WriterOptions{.batch_rows = 4, .truncate = true});
    RunInfo info;
    info.kind = RunKind::Simulated;
    info.name = "p2p";
    info.world_size = 1;
    w.beginRun(info);
    w.addStream({0, 0, StreamKind::Compute, "compute", 0});
    w.addStream({0, 1, StreamKind::Comm, "comm.recv", 0});
    w.addStream({0, 2, StreamKind::Comm, "comm.send", 0});
    w.addActivity(act(0, 0, 0, 100, ActivityKind::Kernel, "layer0.fwd", 1, Phase::Forward));
    w.addActivity(act(0, 0, 300, 400, ActivityKind::Kernel, "layer0.bwd", 2, Phase::Backward));
    w.addActivity(act(0, 1, 100, 300, ActivityKind::Recv, "pipe.recv.bwd.mb0", 3, Phase::Comm));
    w.addActivity(act(0, 2, 350, 450, ActivityKind::Send, "pipe.send.bwd.mb0", 4, Phase::Comm));
    w.addActivity(act(0, 1, 420, 500, ActivityKind::Collective, "ncclAllReduce", 5, Phase::Comm));
  }
  TraceReader r(path);
  const RunReport rep = analyzeRun(r, r.defaultRunId());
  REQUIRE(rep.ranks.size() == 1);
  const Breakdown& b = rep.ranks[0].breakdown;
  CHECK(b.comm_ns == 350);           // [100,300) + [350,500)
  CHECK(b.exposed_comm_ns == 300);   // all but [350,400)
  CHECK(b.p2p_ns == 300);            // [100,300) + [350,450)
  CHECK(b.exposed_p2p_ns == 220);    // [100,300) + [400,420): the send alone
  const std::string text = reportToText(rep);
  CHECK_THAT(text, Catch::Contains("p2p wait"));
  CHECK(nlohmann::json::parse(reportToJson(rep))["ranks"][0]["breakdown"]["exposed_p2p_ns"] == 220);
  // Runs without transfers keep the table as it was.
  CHECK_THAT(reportToText(fixtureReport()), !Catch::Contains("p2p wait"));
}
