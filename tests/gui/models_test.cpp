// Loading real trace files into the timeline, the side panels' models
// (through QAbstractItemModelTester), slice statistics and details, the main
// window's handling of bad input, and `tandem-gui --screenshot`.
#include <QAbstractItemModelTester>
#include <QImage>
#include <QProcess>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QStatusBar>
#include <QTest>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <sqlite3.h>

#include "gui/compare_view.h"
#include "gui/item_models.h"
#include "gui/main_window.h"
#include "gui/run_loader.h"
#include "gui/side_by_side.h"
#include "gui/side_by_side_view.h"
#include "gui/slice_stats.h"
#include "gui/synthetic_run.h"
#include "gui/timeline_palette.h"
#include "gui/timeline_view.h"
#include "gui_test_app.h"
#include "traces/analysis/analysis.h"
#include "traces/analysis/compare.h"
#include "traces/store/trace_reader.h"
#include "traces/store/trace_writer.h"

using namespace tandem;
using namespace tandem::gui;
namespace fs = std::filesystem;

namespace {

// One folder per test process, removed when the process ends.
struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("tandem_gui_tests_" + std::to_string(::getpid()));
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

fs::path tempPath(const std::string& name) {
  static TempDir temp;
  const fs::path& dir = temp.dir;
  fs::create_directories(dir);
  fs::path p = dir / name;
  fs::remove(p);
  return p;
}

// A matmul plan task of the given id and name.
traces::PlanTaskRow planTask(int64_t id, const std::string& name) {
  traces::PlanTaskRow t;
  t.task_id = id;
  t.name = name;
  t.op = "matmul";
  return t;
}

traces::ActivityRow act(int rank, int stream, int64_t s, int64_t e, traces::ActivityKind kind, std::string name,
                        int64_t task, Phase phase) {
  traces::ActivityRow a;
  a.rank = rank;
  a.stream = stream;
  a.start_ns = s;
  a.end_ns = e;
  a.kind = kind;
  a.name = std::move(name);
  a.task_id = task;
  a.phase = phase;
  a.layer = 0;
  a.micro_batch = 0;
  a.flops = task == 1 ? 2e9 : 0;
  a.bytes = 1'000'000;
  return a;
}

// Starts a profiled run named `name` of `world_size` ranks in `w`.
void beginProfiledRun(traces::TraceWriter& w, const std::string& name, int world_size) {
  traces::RunInfo info;
  info.kind = traces::RunKind::Real;
  info.name = name;
  info.world_size = world_size;
  w.beginRun(info);
}

// Two ranks; per rank: forward 0-1 ms, recompute 1-2 ms, backward 2-4 ms on
// compute; an all-reduce 2.5-3.5 ms (hidden) and 4.2-5 ms (exposed) on comm.
// Rank 1 runs `slow` times slower. With `empty_run`, a second run without
// activities follows.
std::string writeFixture(const std::string& name, double slow = 1.1, bool empty_run = false) {
  const std::string path = tempPath(name).string();
  traces::TraceWriter w(path);
  traces::RunInfo info;
  info.kind = traces::RunKind::Simulated;
  info.name = "fixture";
  info.job_yaml = "name: gpt2-fixture\nmodel:\n  layers: 1\n";
  info.topology = "dgx-h200";
  info.world_size = 2;
  info.created_unix_ns = 1'700'000'000'000'000'000;
  w.beginRun(info);
  using K = traces::ActivityKind;
  using P = Phase;
  for (int r = 0; r < 2; ++r) {
    const double f = r == 0 ? 1.0 : slow;
    auto t = [&](int64_t ns) { return int64_t(double(ns) * f); };
    w.addStream({r, 0, StreamKind::Compute, "compute", r});
    w.addStream({r, 1, StreamKind::Comm, "nccl", r});
    w.addActivity(act(r, 0, 0, t(1'000'000), K::Kernel, "layer0.fwd", 0, P::Forward));
    w.addActivity(act(r, 0, t(1'000'000), t(2'000'000), K::Kernel, "layer0.recompute", 1, P::Recompute));
    w.addActivity(act(r, 0, t(2'000'000), t(4'000'000), K::Kernel, "layer0.bwd", 2, P::Backward));
    w.addActivity(act(r, 1, t(2'500'000), t(3'500'000), K::Collective, "all_reduce.b0", 3, P::Comm));
    w.addActivity(act(r, 1, t(4'200'000), t(5'000'000), K::Collective, "all_reduce.b1", 4, P::Comm));
    w.addStep({r, 0, 0, t(5'000'000)});
  }
  if (empty_run) {
    traces::RunInfo empty = info;
    empty.name = "empty";
    w.beginRun(empty);
  }
  w.flush();
  return path;
}

}  // namespace

TEST_CASE("a trace file loads into lanes with the store's overlap figures", "[gui][loader]") {
  const std::string path = writeFixture("load.sqlite");
  traces::TraceReader reader(path);
  const int64_t run = reader.runs().front().id;
  LoadedRun loaded = loadRun(reader, run);
  const TimelineData& d = *loaded.timeline;
  REQUIRE(d.ranks.size() == 2);
  CHECK(d.sliceCount() == 10);
  CHECK(d.steps.size() == 1);
  const RankLanes& r0 = d.ranks[0];
  CHECK(r0.hidden_ns == 1'000'000);
  CHECK(r0.exposed_ns == 800'000);
  REQUIRE(r0.overlap.size() == 2);
  CHECK(r0.overlap.code == std::vector<uint8_t>{uint8_t(OverlapCode::Hidden), uint8_t(OverlapCode::Exposed)});
  // Same figures as `tandem report` computes.
  const traces::RunReport report = traces::analyzeRun(reader, run);
  REQUIRE(loaded.breakdown.size() == report.ranks.size());
  for (size_t i = 0; i < report.ranks.size(); ++i) {
    CHECK(loaded.breakdown[i].breakdown.exposed_comm_ns == report.ranks[i].breakdown.exposed_comm_ns);
    CHECK(loaded.breakdown[i].breakdown.overlap_ns == report.ranks[i].breakdown.overlap_ns);
    CHECK(loaded.breakdown[i].breakdown.recompute_ns == report.ranks[i].breakdown.recompute_ns);
  }
  const Track& compute = d.tracks[size_t(r0.tracks[0])];
  CHECK(compute.kind == StreamKind::Compute);
  CHECK(compute.phase[1] == uint8_t(Phase::Recompute));
  const TaskFacts* facts = d.factsFor(0, 1);
  REQUIRE(facts != nullptr);
  CHECK(facts->flops == 2e9);
}

TEST_CASE("a profiled run's power and SM clock samples load as counter lanes", "[gui][loader]") {
  const std::string path = writeFixture("counters.sqlite");
  {
    traces::TraceWriter w(path);
    beginProfiledRun(w, "profiled", 2);
    for (int r = 0; r < 2; ++r) {
      w.addStream({r, 0, StreamKind::Compute, "compute", r});
      w.addActivity(act(r, 0, 0, 3'000'000, traces::ActivityKind::Kernel, "k", 0, Phase::Forward));
    }
    // Written out of order; rank 1 has a single sample (no line), energy is not drawn.
    w.addCounter({0, "gpu.power_w", 2'000'000, 640.0});
    w.addCounter({0, "gpu.power_w", 0, 700.0});
    w.addCounter({0, "gpu.power_w", 1'000'000, 705.0});
    w.addCounter({0, "gpu.sm_clock_mhz", 0, 1980.0});
    w.addCounter({0, "gpu.sm_clock_mhz", 2'000'000, 1605.0});
    w.addCounter({0, "gpu.energy_mj", 1'000'000, 700.0});
    w.addCounter({1, "gpu.power_w", 0, 650.0});
    // Rank 1's energy counter moves every 100 ms by 70 J (700 W), sampled every 10 ms.
    for (int64_t t = 0; t <= 300'000'000; t += 10'000'000)
      w.addCounter({1, "gpu.energy_mj", t, 70'000.0 * double(t / 100'000'000)});
  }
  traces::TraceReader reader(path);
  const LoadedRun loaded = loadRun(reader, 2);
  const TimelineData& d = *loaded.timeline;
  REQUIRE(d.ranks.size() == 2);
  REQUIRE(d.ranks[0].counters.size() == 2);
  // Rank 0's energy counter never moves: its power is the driver's reading.
  const CounterLane& power = d.ranks[0].counters[0];
  CHECK(power.name == "gpu.power_w");
  CHECK(power.label == "power W (NVML)");
  CHECK(power.t_ns == std::vector<int64_t>{0, 1'000'000, 2'000'000});
  CHECK(power.value == std::vector<double>{700.0, 705.0, 640.0});
  CHECK(power.min == 640.0);
  CHECK(power.max == 705.0);
  CHECK(d.ranks[0].counters[1].name == "gpu.sm_clock_mhz");
  // Rank 1's power comes from its energy counter: 700 W over each 100 ms
  // between the counter's moves, drawn as steps; no clock samples.
  REQUIRE(d.ranks[1].counters.size() == 1);
  const CounterLane& from_energy = d.ranks[1].counters[0];
  CHECK(from_energy.name == "gpu.energy_mj");
  CHECK(from_energy.label == "power W");
  CHECK(from_energy.t_ns == std::vector<int64_t>{0, 100'000'000, 100'000'000, 200'000'000, 200'000'000, 300'000'000});
  CHECK(from_energy.min == Approx(700.0));
  CHECK(from_energy.max == Approx(700.0));
  // The first run of the file (simulated, no samples) has none.
  CHECK(loadRun(reader, 1).timeline->ranks[0].counters.empty());
}

TEST_CASE("a real run and its simulation compare by plan task name, per step inside the steps",
          "[gui][compare]") {
  // Run A (real): kernels named as the GPU names them; two steps [0,1000)
  // and [1000,2000); task 0 (fc.fwd) 100 ns per step, task 1 (fc.bwd) two
  // kernels of 40 and 60 ns per step; before the steps a set-up kernel of
  // task 0 (GEMM algorithm timing) of 1000 ns. Run B (simulated): one step,
  // activities named by their tasks, fc.fwd 110 ns, fc.bwd 200 ns.
  const std::string path = tempPath("real_sim.sqlite").string();
  {
    traces::TraceWriter w(path);
    using K = traces::ActivityKind;
    using P = Phase;
    traces::RunInfo real;
    real.kind = traces::RunKind::Real;
    real.name = "real";
    w.beginRun(real);
    w.addStream({0, 0, StreamKind::Compute, "compute", 0});
    w.addActivity(act(0, 0, -5000, -4000, K::Kernel, "nvjet_tuning", 0, P::Forward));
    for (int step = 0; step < 2; ++step) {
      const int64_t t0 = step * 1000;
      w.addStep({0, step, t0, t0 + 1000});
      w.addActivity(act(0, 0, t0, t0 + 100, K::Kernel, "nvjet_fwd", 0, P::Forward));
      w.addActivity(act(0, 0, t0 + 100, t0 + 140, K::Kernel, "nvjet_bwd", 1, P::Backward));
      w.addActivity(act(0, 0, t0 + 140, t0 + 200, K::Kernel, "bias_sum", 1, P::Backward));
    }
    w.addPlanTask(planTask(0, "fc.fwd"));
    w.addPlanTask(planTask(1, "fc.bwd"));
    traces::RunInfo sim;
    sim.kind = traces::RunKind::Simulated;
    sim.name = "sim";
    w.beginRun(sim);
    w.addStream({0, 0, StreamKind::Compute, "compute", 0});
    w.addStep({0, 0, 0, 500});
    w.addActivity(act(0, 0, 0, 110, K::Kernel, "fc.fwd", 0, P::Forward));
    w.addActivity(act(0, 0, 110, 310, K::Kernel, "fc.bwd", 1, P::Backward));
    w.addPlanTask(planTask(0, "fc.fwd"));
    w.addPlanTask(planTask(1, "fc.bwd"));
    w.flush();
  }
  traces::TraceReader reader(path);
  const auto runs = reader.runs();
  REQUIRE(runs.size() == 2);
  const LoadedRun a = loadRun(reader, runs[0].id), b = loadRun(reader, runs[1].id);
  // The comparison `tandem compare` makes, as the compare view shows it.
  const traces::RunComparison c = traces::compareRuns(reader, runs[0].id, reader, runs[1].id, 100);
  CHECK(c.matched == 2);
  CHECK(c.only_a == 0);
  CHECK(c.only_b == 0);
  std::map<std::string, traces::TaskDelta> by_name;
  for (const traces::TaskDelta& d : c.top_tasks) by_name[d.name] = d;
  REQUIRE(by_name.count("fc.fwd") == 1);
  REQUIRE(by_name.count("fc.bwd") == 1);
  CHECK(by_name["fc.fwd"].a_ns == Approx(100));  // the set-up kernel before the steps left out
  CHECK(by_name["fc.fwd"].b_ns == Approx(110));
  CHECK(by_name["fc.bwd"].a_ns == Approx(100));  // 40 + 60 per step
  CHECK(by_name["fc.bwd"].b_ns == Approx(200));
  // Per step inside the steps: A computes 200 ns per step (not its whole
  // span's 1400 ns over two steps), B 310.
  auto row = [&](const std::string& m) {
    for (const auto& r : summaryRows(c))
      if (r.metric == m) return r;
    FAIL("no row " << m);
    return CompareSummaryRow{};
  };
  CHECK(row("compute").a_ns == Approx(200));
  CHECK(row("compute").b_ns == Approx(310));
  CHECK(row("idle").a_ns == Approx(800));

  // The details of A's fc.fwd kernel in step 1 name its counterpart in B's
  // single step (by plan task, not by the kernel's name).
  const TimelineData& ta = *a.timeline;
  int track = -1;
  int64_t index = -1;
  for (size_t k = 0; k < ta.tracks.size(); ++k)
    for (size_t i = 0; i < ta.tracks[k].size(); ++i)
      if (ta.tracks[k].start_ns[i] == 1000) track = int(k), index = int64_t(i);
  REQUIRE(track >= 0);
  std::map<std::string, std::string> details;
  for (const auto& [k, v] : sliceDetails(ta, track, index, b.timeline.get())) details[k] = v;
  CHECK(details["compared run"].rfind("110 ns (fc.fwd)", 0) == 0);
}

TEST_CASE("bad input raises readable errors", "[gui][loader]") {
  const fs::path text = tempPath("not_a_db.sqlite");
  std::ofstream(text) << "this is not a database\n";
  CHECK_THROWS_AS(loadRunFile(text.string(), -1), traces::TraceError);

  const fs::path foreign = tempPath("foreign.sqlite");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(foreign.string().c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "CREATE TABLE people(name TEXT); INSERT INTO people VALUES('x');", nullptr, nullptr,
                       nullptr) == SQLITE_OK);
  sqlite3_close(db);
  CHECK_THROWS_AS(loadRunFile(foreign.string(), -1), traces::TraceError);

  const std::string path = writeFixture("empty_run.sqlite", 1.1, true);
  traces::TraceReader reader(path);
  const int64_t empty_run = reader.runs().back().id;
  CHECK_THROWS_AS(loadRun(reader, empty_run), LoadError);
  CHECK_THROWS_AS(loadRun(reader, 999), traces::TraceError);
}

// A profiled run's task may run several kernels in a row (an attention:
// a rotation, then the attention kernel); its plan work counts once per
// execution. The all-reduce, alone on its track, is one execution per step.
TEST_CASE("slice statistics count a task's plan work once per execution", "[gui][stats]") {
  const std::string path = tempPath("executions.sqlite").string();
  {
    traces::TraceWriter w(path);
    beginProfiledRun(w, "profiled", 1);
    using K = traces::ActivityKind;
    using P = Phase;
    w.addStream({0, 0, StreamKind::Compute, "compute", 0});
    w.addStream({0, 1, StreamKind::Comm, "nccl", 0});
    for (int step = 0; step < 2; ++step) {
      const int64_t b = step * 1000;
      w.addStep({0, step, b, b + 1000});
      w.addActivity(act(0, 0, b, b + 100, K::Kernel, "rotate", 7, P::Forward));
      w.addActivity(act(0, 0, b + 100, b + 300, K::Kernel, "attn", 7, P::Forward));
      w.addActivity(act(0, 0, b + 300, b + 500, K::Kernel, "gemm", 8, P::Forward));
      w.addActivity(act(0, 1, b + 400, b + 600, K::Collective, "ncclAllReduce", 9, P::Comm));
    }
    auto plan = [&](int64_t id, const std::string& name, const std::string& op, double flops, int64_t bytes) {
      traces::PlanTaskRow t;
      t.task_id = id;
      t.name = name;
      t.op = op;
      t.flops = flops;
      t.bytes = bytes;
      w.addPlanTask(t);
    };
    plan(7, "layer0.attn", "attention", 3e6, 0);
    plan(8, "layer0.fc", "matmul", 1e6, 0);
    plan(9, "bucket0.all_reduce", "all_reduce", 0, 4000);
    w.flush();
  }
  LoadedRun loaded = loadRunFile(path, -1);
  std::map<std::string, traces::KernelStat> by_op;
  for (const auto& s : sliceStats(*loaded.timeline, StatsGroup::Op, INT64_MIN, INT64_MAX)) by_op[s.key] = s;
  REQUIRE(by_op.count("attention") == 1);
  CHECK(by_op["attention"].count == 4);
  CHECK(by_op["attention"].flops == Approx(6e6));  // twice, not four times
  CHECK(by_op["attention"].tflops == Approx(6e6 / 600.0 / 1e3));
  CHECK(by_op["matmul"].tflops == Approx(2e6 / 400.0 / 1e3));
  CHECK(by_op["all_reduce"].bytes == 8000);  // once per step
  CHECK(by_op["all_reduce"].gbps == Approx(8000.0 / 400.0));
  // A kernel's details give its task's rate over the execution's kernels.
  const TimelineData& d = *loaded.timeline;
  std::map<std::string, std::string> attn, gemm;
  const int compute = d.ranks[0].tracks[0];
  REQUIRE(d.tracks[size_t(compute)].kind == StreamKind::Compute);
  for (const auto& [k, v] : sliceDetails(d, compute, 1, nullptr)) attn[k] = v;  // step 0's attention kernel
  for (const auto& [k, v] : sliceDetails(d, compute, 2, nullptr)) gemm[k] = v;
  CHECK(attn["achieved"] == "10.0 TFLOP/s");  // 3e6 flops over 100 + 200 ns
  CHECK(attn["task's kernels"].rfind("2 in a row", 0) == 0);
  CHECK(gemm["achieved"] == "5.0 TFLOP/s");
  CHECK(gemm.count("task's kernels") == 0);
}

TEST_CASE("slice statistics and details", "[gui][stats]") {
  const std::string path = writeFixture("stats.sqlite");
  LoadedRun loaded = loadRunFile(path, -1);
  const TimelineData& d = *loaded.timeline;
  auto by_name = sliceStats(d, StatsGroup::Name, INT64_MIN, INT64_MAX);
  REQUIRE(by_name.size() == 5);
  // Longest first: backward (2 ms + 2.2 ms).
  CHECK(by_name[0].key == "layer0.bwd");
  CHECK(by_name[0].count == 2);
  CHECK(by_name[0].total_ns == 4'200'000);
  CHECK(by_name[0].p95_ns == 2'200'000);
  auto by_phase = sliceStats(d, StatsGroup::Phase, INT64_MIN, INT64_MAX);
  bool found_recompute = false;
  for (const auto& s : by_phase) found_recompute |= s.key == "recompute" && s.count == 2;
  CHECK(found_recompute);
  // A window over 0.5-1.5 ms holds forward and recompute of both ranks.
  auto window = sliceStats(d, StatsGroup::Name, 500'000, 1'050'000);
  int64_t n = 0;
  for (const auto& s : window) n += s.count;
  CHECK(n == 3);  // rank 1's recompute starts at 1.1 ms

  // Details of rank 0's recompute slice, compared with a 20% slower run.
  const std::string slower = writeFixture("slower.sqlite", 1.2);
  LoadedRun other = loadRunFile(slower, -1);
  const int track = d.ranks[1].tracks[0];  // rank 1 compute
  auto rows = sliceDetails(d, track, 1, other.timeline.get());
  auto field = [&](const std::string& k) {
    for (auto& [key, v] : rows)
      if (key == k) return v;
    return std::string();
  };
  CHECK(field("name") == "layer0.recompute");
  CHECK(field("phase") == "recompute");
  CHECK(field("plan task") == "1");
  CHECK(field("duration") == "1.1 ms");
  CHECK(field("achieved") == "1.8 TFLOP/s");  // 2 GFLOP in 1.1 ms
  CHECK(field("compared run").rfind("1.2 ms", 0) == 0);
  CHECK(field("difference").rfind("-100 us", 0) == 0);
  int other_track = -1;
  CHECK(counterpartOf(d, track, 2, *other.timeline, other_track) == 2);
  CHECK(other_track == other.timeline->ranks[1].tracks[0]);
}

TEST_CASE("side panel models pass QAbstractItemModelTester and sort numerically", "[gui][models]") {
  test::app();
  auto data = std::make_shared<TimelineData>(makeSyntheticRun({2, 2, 4, 2, {}, 3}));
  KernelStatsModel stats;
  QAbstractItemModelTester t1(&stats, QAbstractItemModelTester::FailureReportingMode::Fatal);
  stats.setRows(sliceStats(*data, StatsGroup::Op, INT64_MIN, INT64_MAX), "op");
  REQUIRE(stats.rowCount() > 3);
  CHECK(stats.headerData(0, Qt::Horizontal, Qt::DisplayRole).toString() == "op");

  QSortFilterProxyModel proxy;
  proxy.setSourceModel(&stats);
  proxy.setSortRole(kSortRole);
  QAbstractItemModelTester t2(&proxy, QAbstractItemModelTester::FailureReportingMode::Fatal);
  proxy.sort(KernelStatsModel::Count, Qt::DescendingOrder);
  for (int r = 1; r < proxy.rowCount(); ++r)
    CHECK(proxy.index(r - 1, KernelStatsModel::Count).data(kSortRole).toLongLong() >=
          proxy.index(r, KernelStatsModel::Count).data(kSortRole).toLongLong());

  BreakdownModel breakdown;
  QAbstractItemModelTester t3(&breakdown, QAbstractItemModelTester::FailureReportingMode::Fatal);
  breakdown.setRows(breakdownFromTimeline(*data));
  CHECK(breakdown.rowCount() == 2);
  CHECK(breakdown.index(0, BreakdownModel::Exposed).data(kSortRole).toLongLong() == data->ranks[0].exposed_ns);

  DetailsModel details;
  QAbstractItemModelTester t4(&details, QAbstractItemModelTester::FailureReportingMode::Fatal);
  details.setRows(sliceDetails(*data, 0, 10, nullptr));
  CHECK(details.rowCount() > 8);
  CHECK(details.value("rank / stream") == "0 / compute");
  details.setRows({});
  CHECK(details.rowCount() == 0);

  RunListModel runs;
  QAbstractItemModelTester t5(&runs, QAbstractItemModelTester::FailureReportingMode::Fatal);
  const std::string path = writeFixture("runs.sqlite", 1.1, true);
  traces::TraceReader reader(path);
  runs.setRunsOf(path, reader.runs());
  REQUIRE(runs.rowCount() == 2);
  CHECK(runs.index(0, RunListModel::Kind).data().toString() == "simulated");
  CHECK(runs.index(0, RunListModel::Job).data().toString() == "gpt2-fixture");
  CHECK(runs.index(0, RunListModel::Topology).data().toString() == "dgx-h200");
  CHECK(runs.index(0, RunListModel::Date).data().toString() == "2023-11-14 22:13");
  runs.setRunsOf(path, reader.runs());  // reopening replaces, not duplicates
  CHECK(runs.rowCount() == 2);
}

TEST_CASE("the main window shows bad input as a message and good runs as lanes", "[gui][window]") {
  test::app();
  MainWindow w;
  w.resize(1200, 800);
  const fs::path text = tempPath("garbage.sqlite");
  std::ofstream(text) << "garbage";
  CHECK_FALSE(w.openFile(QString::fromStdString(text.string())));
  CHECK(w.lastError().contains("not a SQLite database"));
  CHECK(w.timeline()->message() == w.lastError());
  w.grab();  // painting the message must not crash

  const std::string path = writeFixture("window.sqlite", 1.1, true);
  traces::TraceReader reader(path);
  CHECK_FALSE(w.openFile(QString::fromStdString(path), reader.runs().back().id));
  CHECK(w.lastError().contains("no activities"));

  REQUIRE(w.openFile(QString::fromStdString(path), reader.runs().front().id));
  CHECK(w.lastError().isEmpty());
  CHECK(w.timeline()->message().isEmpty());
  CHECK(w.runs()->rowCount() == 2);
  CHECK(w.breakdown()->rowCount() == 2);
  w.selectRange(0, 2'000'000);
  CHECK(w.rangeStats()->rowCount() == 2);  // forward and recompute; both ranks share the names
  w.timeline()->selectSlice({0, 1});
  CHECK(w.details()->value("phase") == "recompute");
  w.setView(MainWindow::View::Statistics);
  CHECK(w.stats()->rowCount() > 0);
}

TEST_CASE("a load reports its progress and stops when told to", "[gui][loader]") {
  const std::string path = writeFixture("progress.sqlite");
  traces::TraceReader reader(path);
  const int64_t run = reader.runs().front().id;
  for (int64_t parallel_from : {int64_t(1'000'000), int64_t(1)}) {
    INFO("parallel_from " << parallel_from);  // 1: track by track over two connections
    std::vector<std::pair<int, std::string>> seen;
    LoadOptions options;
    options.parallel_from = parallel_from;
    options.progress = [&](int pct, const std::string& stage) {
      seen.push_back({pct, stage});
      return true;
    };
    const LoadedRun loaded = loadRun(reader, run, options);
    CHECK(loaded.timeline->sliceCount() == 10);
    REQUIRE(seen.size() >= 4);
    for (size_t i = 1; i < seen.size(); ++i) CHECK(seen[i].first >= seen[i - 1].first);
    CHECK(seen.back().first == 100);
    CHECK(seen.front().second == "reading 10 activities");
    const bool per_track = std::any_of(seen.begin(), seen.end(), [](const auto& s) {
      return s.second.rfind("reading activities: ", 0) == 0;
    });
    CHECK(per_track == (parallel_from == 1));
    // Told to stop at any of its points, it throws instead of returning.
    for (size_t stop_at = 0; stop_at < seen.size(); ++stop_at) {
      size_t calls = 0;
      options.progress = [&](int, const std::string&) { return calls++ < stop_at; };
      CHECK_THROWS_AS(loadRun(reader, run, options), LoadCancelled);
      CHECK(calls == stop_at + 1);
    }
  }
}

TEST_CASE("the main window opens a file in the background with progress, and can cancel it", "[gui][window]") {
  test::app();
  MainWindow w;
  const std::string first = writeFixture("background_first.sqlite");
  const std::string second = writeFixture("background_second.sqlite", 1.5);
  QSignalSpy finished(&w, &MainWindow::loadFinished);

  w.openFileInBackground(QString::fromStdString(first));
  CHECK(w.loadPending());
  REQUIRE(finished.wait(30000));
  CHECK(finished.takeFirst().at(0).toBool());
  CHECK_FALSE(w.loadPending());
  REQUIRE(w.timeline()->data() != nullptr);
  CHECK(w.timeline()->data()->sliceCount() == 10);
  CHECK(w.breakdown()->rowCount() == 2);
  const TimelineData* shown = w.timeline()->data();

  // Cancelled: said at once, and whatever the worker still sends is dropped:
  // the first run stays shown.
  w.openFileInBackground(QString::fromStdString(second));
  w.cancelLoad();
  REQUIRE(finished.size() == 1);
  CHECK_FALSE(finished.takeFirst().at(0).toBool());
  CHECK_FALSE(w.loadPending());
  CHECK(w.statusBar()->currentMessage().contains("cancelled"));
  QTest::qWait(300);
  CHECK(w.timeline()->data() == shown);
  CHECK(finished.isEmpty());

  // A second open replaces one still running; a file that is not there is
  // a message, as with openFile.
  w.openFileInBackground(QString::fromStdString(first));
  w.openFileInBackground(QString::fromStdString(second));
  REQUIRE(finished.wait(30000));
  while (finished.size() < 2 && finished.wait(1000)) {
  }
  CHECK(finished.last().at(0).toBool());
  CHECK(w.timeline()->data() != shown);
  const QString missing = QString::fromStdString(tempPath("missing.sqlite").string());
  finished.clear();
  w.openFileInBackground(missing);
  REQUIRE(finished.wait(30000));
  CHECK_FALSE(finished.takeFirst().at(0).toBool());
  CHECK(w.lastError().contains("missing.sqlite"));

  // The run to compare with loads the same way, beside a load of the shown
  // run; each says when it is done.
  QSignalSpy compared(&w, &MainWindow::compareLoadFinished);
  w.openFileInBackground(QString::fromStdString(first));
  w.openCompareInBackground(QString::fromStdString(second));
  CHECK(w.loadPending());
  REQUIRE((!compared.isEmpty() || compared.wait(30000)));
  REQUIRE((!finished.isEmpty() || finished.wait(30000)));
  CHECK(compared.takeFirst().at(0).toBool());
  CHECK(finished.takeFirst().at(0).toBool());
  CHECK_FALSE(w.loadPending());
  CHECK(w.timeline()->data()->sliceCount() == 10);
  // The two runs side by side, as `tandem compare` computes them on a worker.
  QTRY_VERIFY_WITH_TIMEOUT(!w.traceComparisonPending(), 30000);
  CHECK(w.compareView()->summary()->rowCount() > 0);
  // A file that cannot be compared with is said in the status bar.
  w.openCompareInBackground(missing);
  REQUIRE(compared.wait(30000));
  CHECK_FALSE(compared.takeFirst().at(0).toBool());
  CHECK(w.statusBar()->currentMessage().startsWith("Cannot compare: "));
}

TEST_CASE("tandem-gui --screenshot renders a file and fails cleanly on bad input", "[gui][cli]") {
  const QString exe = QString(TANDEM_BINARY_DIR) + "/gui/tandem-gui";
  REQUIRE(fs::exists(exe.toStdString()));
  const std::string db = writeFixture("shot.sqlite");
  const fs::path png = tempPath("shot.png");
  QProcess p;
  p.start(exe, {"--screenshot", QString::fromStdString(png.string()), QString::fromStdString(db), "--size",
                "1000x700"});
  REQUIRE(p.waitForFinished(60000));
  CHECK(p.exitCode() == 0);
  QImage img(QString::fromStdString(png.string()));
  REQUIRE(!img.isNull());
  CHECK(img.width() == 1000);
  int hidden = 0, exposed = 0, recompute = 0;
  const QRgb h = paintColor(PaintClass::Hidden).rgb(), e = paintColor(PaintClass::Exposed).rgb(),
             rc = paintColor(PaintClass::Recompute).rgb();
  for (int y = 0; y < img.height(); ++y)
    for (int x = 0; x < img.width(); ++x) {
      const QRgb c = img.pixel(x, y);
      hidden += c == h;
      exposed += c == e;
      recompute += c == rc;
    }
  CHECK(hidden > 100);
  CHECK(exposed > 100);
  CHECK(recompute > 100);

  const fs::path bad = tempPath("bad.txt");
  std::ofstream(bad) << "nope";
  const fs::path bad_png = tempPath("bad.png");
  p.start(exe, {"--screenshot", QString::fromStdString(bad_png.string()), QString::fromStdString(bad.string())});
  REQUIRE(p.waitForFinished(60000));
  CHECK(p.exitCode() != 0);
  CHECK(QString(p.readAllStandardError()).contains("not a SQLite database"));
  CHECK(fs::exists(bad_png));  // the window with its message, for the user to see

  p.start(exe, {"--screenshot", QString::fromStdString(bad_png.string()), QString::fromStdString(db), "--range",
                "5:1"});
  REQUIRE(p.waitForFinished(60000));
  CHECK(p.exitCode() != 0);
  CHECK(QString(p.readAllStandardError()).contains("--range"));
}

TEST_CASE("the loader opens a PyTorch profiler trace by importing it once", "[gui][loader][import]") {
  const std::string kineto = std::string(TANDEM_SOURCE_DIR) + "/tests/traces/fixtures/kineto_small.json";
  const std::string db = traceDatabaseFor(kineto);
  CHECK(db != kineto);
  CHECK(std::filesystem::exists(db));
  CHECK(traceDatabaseFor(kineto) == db);  // reused while the file is unchanged
  LoadedRun loaded = loadRunFile(kineto, -1);
  CHECK(loaded.path == db);
  CHECK(loaded.info.kind == traces::RunKind::Imported);
  REQUIRE(loaded.timeline);
  CHECK(!loaded.timeline->tracks.empty());
  // A tandem trace is read as it is.
  const std::string real = std::string(TANDEM_SOURCE_DIR) + "/tests/traces/fixtures/real-tiny-h200.sqlite";
  const std::filesystem::path copy = std::filesystem::temp_directory_path() / "tandem-gui-real-copy.sqlite";
  std::filesystem::copy_file(real, copy, std::filesystem::copy_options::overwrite_existing);
  CHECK(traceDatabaseFor(copy.string()) == copy.string());
  // A read-only open of a WAL database leaves its -wal and -shm behind.
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(copy.string() + suffix);
}

TEST_CASE("a real run's kernels show compact demangled names, the whole symbol in the details", "[gui][names]") {
  const std::string real = std::string(TANDEM_SOURCE_DIR) + "/tests/traces/fixtures/real-tiny-h200.sqlite";
  const std::filesystem::path copy = std::filesystem::temp_directory_path() / "tandem-gui-names-copy.sqlite";
  std::filesystem::copy_file(real, copy, std::filesystem::copy_options::overwrite_existing);
  LoadedRun loaded = loadRunFile(copy.string(), -1);
  REQUIRE(loaded.timeline);
  const TimelineData& d = *loaded.timeline;
  for (const std::string& n : d.names) CHECK_FALSE(n.starts_with("_Z"));
  // A slice of our attention kernel: its name, and its symbol in the details.
  bool found = false;
  for (size_t t = 0; t < d.tracks.size() && !found; ++t)
    for (size_t i = 0; i < d.tracks[t].size() && !found; ++i) {
      const int32_t id = d.tracks[t].name_id[i];
      if (size_t(id) >= d.symbols.size() || !d.symbols[size_t(id)].starts_with("_Z")) continue;
      if (d.names[size_t(id)].find("attentionForwardKernel") == std::string::npos) continue;
      found = true;
      CHECK(d.names[size_t(id)] == "tandem::cuda::attentionForwardKernel<float, 16>");
      std::map<std::string, std::string> rows;
      for (const auto& [k, v] : sliceDetails(d, int(t), int64_t(i), nullptr)) rows[k] = v;
      CHECK(rows["name"] == d.names[size_t(id)]);
      CHECK(rows["symbol"].starts_with("void tandem::cuda::(anonymous namespace)::attentionForwardKernel<float, 16>("));
    }
  CHECK(found);
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(copy.string() + suffix);
}

TEST_CASE("a real run opens on its median step; the step keys move between steps", "[gui][steps]") {
  test::app();
  const std::string real = std::string(TANDEM_SOURCE_DIR) + "/tests/traces/fixtures/real-tiny-h200.sqlite";
  const std::filesystem::path copy = std::filesystem::temp_directory_path() / "tandem-gui-steps-copy.sqlite";
  std::filesystem::copy_file(real, copy, std::filesystem::copy_options::overwrite_existing);
  LoadedRun loaded = loadRunFile(copy.string(), -1);
  REQUIRE(loaded.timeline);
  const TimelineData& d = *loaded.timeline;
  // Steps 0.90 ms (1), 0.91 ms (2) and 134.5 ms (0: graph capture).
  REQUIRE(d.steps.size() == 3);
  CHECK(d.medianStep() == 2);
  CHECK(d.slowestStep() == 0);
  TimelineView view;
  view.resize(1200, 600);
  view.setData(loaded.timeline);
  auto shows = [&](int k) {
    const StepMark& s = d.steps[size_t(k)];
    const TimeMapping m = view.mapping();
    return m.start_ns <= s.start_ns && m.end_ns >= s.end_ns &&
           double(m.end_ns - m.start_ns) <= 1.1 * double(s.end_ns - s.start_ns);
  };
  CHECK(shows(2));
  CHECK(view.currentStep() == 2);
  QTest::keyClick(&view, Qt::Key_BracketLeft);
  CHECK(shows(1));
  QTest::keyClick(&view, Qt::Key_BracketLeft);
  CHECK(shows(0));
  QTest::keyClick(&view, Qt::Key_BracketLeft);  // no step before the first
  CHECK(shows(0));
  QTest::keyClick(&view, Qt::Key_BracketRight);
  CHECK(shows(1));
  QTest::keyClick(&view, Qt::Key_L);
  CHECK(shows(0));

  // Statistics describe the steps: the plan's ops lead, the copies and
  // waits before the first step are left out unless asked for.
  const auto [from, to] = d.stepsSpan();
  const auto in_steps = sliceStats(d, StatsGroup::Op, from, to);
  const auto whole = sliceStats(d, StatsGroup::Op, INT64_MIN, INT64_MAX);
  REQUIRE(!in_steps.empty());
  CHECK(in_steps.front().key == "adamw");
  int64_t steps_count = 0, whole_count = 0;
  for (const auto& s : in_steps) steps_count += s.count;
  for (const auto& s : whole) whole_count += s.count;
  CHECK(steps_count < whole_count);
  // Host waits (cudaEventSynchronize, on the host's tracks) are no GPU
  // work: never among the GPU rows; host rows, where a trace puts them on a
  // device stream, come after every GPU row.
  const auto by_name = sliceStats(d, StatsGroup::Name, INT64_MIN, INT64_MAX);
  bool host_seen = false;
  for (const auto& s : by_name) {
    if (s.category == "host") host_seen = true;
    else CHECK_FALSE(host_seen);
    if (s.key.find("Synchronize") != std::string::npos) CHECK(s.category == "host");
  }
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(copy.string() + suffix);
}

TEST_CASE("a real run and its simulation on one axis: aligned steps, each task linked to its twin",
          "[gui][side-by-side]") {
  test::app();
  // Real: steps [0,1000) and [1000,2000), task 0 (100 ns) then task 1 (two
  // kernels); simulated: steps [0,500) and [500,1000), task 0 then task 1.
  const std::string path = tempPath("side_by_side.sqlite").string();
  {
    traces::TraceWriter w(path);
    using K = traces::ActivityKind;
    using P = Phase;
    for (const bool real : {true, false}) {
      traces::RunInfo info;
      info.kind = real ? traces::RunKind::Real : traces::RunKind::Simulated;
      info.name = real ? "real" : "sim";
      w.beginRun(info);
      w.addStream({0, 0, StreamKind::Compute, "compute", 0});
      const int64_t len = real ? 1000 : 500;
      for (int step = 0; step < 2; ++step) {
        const int64_t t0 = step * len;
        w.addStep({0, step, t0, t0 + len});
        if (real) {
          w.addActivity(act(0, 0, t0, t0 + 100, K::Kernel, "nvjet_fwd", 0, P::Forward));
          w.addActivity(act(0, 0, t0 + 100, t0 + 140, K::Kernel, "nvjet_bwd", 1, P::Backward));
          w.addActivity(act(0, 0, t0 + 140, t0 + 200, K::Kernel, "bias_sum", 1, P::Backward));
        } else {
          w.addActivity(act(0, 0, t0, t0 + 110, K::Kernel, "fc.fwd", 0, P::Forward));
          w.addActivity(act(0, 0, t0 + 110, t0 + 310, K::Kernel, "fc.bwd", 1, P::Backward));
        }
      }
      w.addPlanTask(planTask(0, "fc.fwd"));
      w.addPlanTask(planTask(1, "fc.bwd"));
    }
    w.flush();
  }
  traces::TraceReader reader(path);
  const auto runs = reader.runs();
  REQUIRE(runs.size() == 2);
  const LoadedRun real = loadRun(reader, runs[0].id), sim = loadRun(reader, runs[1].id);

  // Real step 1 beside simulated step 0.
  const SideBySide s = sideBySide(*real.timeline, *sim.timeline, 1, 0, "real", "simulated");
  const TimelineData& d = *s.data;
  REQUIRE(d.ranks.size() == 2);
  CHECK(d.ranks[0].title == "real rank 0");
  CHECK(d.ranks[1].title == "simulated rank 0");
  CHECK(s.shift_ns == 1000);  // the simulated step 0 now starts where the real step 1 does
  REQUIRE(s.first_b_track == 1);
  const Track& a = d.tracks[0];
  const Track& b = d.tracks[1];
  CHECK(b.start_ns[0] == 1000);
  auto find = [](const Track& t, int64_t start) {
    for (size_t i = 0; i < t.size(); ++i)
      if (t.start_ns[i] == start) return int64_t(i);
    return int64_t(-1);
  };
  // Real step 1's second task (its first kernel) is simulated step 0's.
  const SliceRef real_bwd{0, find(a, 1100)};
  REQUIRE(real_bwd.valid());
  CHECK(twinOf(s, real_bwd) == (SliceRef{1, find(b, 1110)}));
  // Its second kernel has the same twin; and back again, the first kernel.
  CHECK(twinOf(s, SliceRef{0, find(a, 1140)}) == (SliceRef{1, find(b, 1110)}));
  CHECK(twinOf(s, SliceRef{1, find(b, 1110)}) == real_bwd);
  // Real step 0 would pair with simulated step -1: none.
  CHECK_FALSE(twinOf(s, SliceRef{0, find(a, 0)}).valid());
  // The simulated step 1 (shifted to 1500) pairs with a real step 2: none.
  CHECK_FALSE(twinOf(s, SliceRef{1, find(b, 1500)}).valid());

  // Coloured by difference, per (rank, task, step): fc.fwd 110 against 100
  // ns is longer, fc.bwd 200 against 40 + 60 much longer, on both sides;
  // real step 0 (no simulated step before 0) stays grey.
  SideBySide coloured = s;
  CHECK(colourByDifference(coloured, true) == 2);
  const Track& ca = coloured.data->tracks[0];
  const Track& cb = coloured.data->tracks[1];
  CHECK(ca.paint[size_t(find(ca, 1000))] == uint8_t(PaintClass::Longer));
  CHECK(ca.paint[size_t(find(ca, 1100))] == uint8_t(PaintClass::MuchLonger));
  CHECK(ca.paint[size_t(find(ca, 1140))] == uint8_t(PaintClass::MuchLonger));
  CHECK(cb.paint[size_t(find(cb, 1110))] == uint8_t(PaintClass::MuchLonger));
  CHECK(ca.paint[size_t(find(ca, 0))] == uint8_t(PaintClass::Other));
  CHECK(differenceClass(1.0) == PaintClass::Alike);
  CHECK(differenceClass(0.5) == PaintClass::MuchShorter);
  colourByDifference(coloured, false);
  CHECK(coloured.data->tracks[0].paint.empty());

  // The tab: picking a task outlines its twin.
  SideBySideView view;
  view.resize(1200, 500);
  view.setRuns(real.timeline, sim.timeline, "real", "simulated");
  REQUIRE(view.layout());
  CHECK(view.layout()->step_a == 0);  // both runs' median (lower) step
  view.alignAt(1, 0);
  const SideBySide* l = view.layout();
  const SliceRef pick{0, find(l->data->tracks[0], 1100)};
  view.timeline()->selectSlice(pick);
  CHECK(view.timeline()->linkedSlice() == twinOf(*l, pick));
  CHECK(view.timeline()->linkedSlice().valid());
  view.timeline()->selectSlice({});
  CHECK_FALSE(view.timeline()->linkedSlice().valid());
  view.setColourByDifference(true);
  REQUIRE(view.layout());
  CHECK_FALSE(view.layout()->data->tracks[0].paint.empty());
}
