// Recompute, topology and compare views on a simulated GPT-2 124M run
// (data parallel 8, dgx-h200): table models through QAbstractItemModelTester,
// the comparison's figures, and the views rendered offscreen.
#include <QAbstractItemModelTester>
#include <QImage>
#include <QSignalSpy>
#include <QTest>
#include <sqlite3.h>
#include <catch2/catch.hpp>
#include <filesystem>
#include <unistd.h>
#include <map>

#include "engine/memory/gpu_footprint.h"
#include "engine/plan/planner.h"
#include "gui/compare_view.h"
#include "gui/main_window.h"
#include "gui/recompute_view.h"
#include "gui/run_loader.h"
#include "gui/topology_view.h"
#include "gui/what_if.h"
#include "gui_test_app.h"
#include "simulator/topology/topology_presets.h"
#include "traces/analysis/compare.h"
#include "traces/store/trace_reader.h"

using namespace tandem;
using namespace tandem::gui;
namespace fs = std::filesystem;

namespace {

// Two simulated runs of GPT-2 124M on dgx-h200 in one file: recompute none
// (run a) and full (run b). Built once for every test case.
struct SimFixture {
  std::string path;
  int64_t none_id = -1, full_id = -1;
  SimFixture() {
    path = (fs::temp_directory_path() / ("tandem_gui_views_" + std::to_string(::getpid()) + ".sqlite")).string();
    fs::remove(path);
    WhatIfRequest r;
    r.out_path = path;
    r.overrides = {"recompute.policy=none"};
    r.run_name = "none";
    none_id = runWhatIf(r).run_id;
    r.overrides = {"recompute.policy=full"};
    r.run_name = "full";
    full_id = runWhatIf(r).run_id;
  }
  ~SimFixture() {
    // The file and SQLite's write-ahead log beside it.
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path + suffix, ec);
  }
};

const SimFixture& simRuns() {
  static SimFixture f;
  return f;
}

}  // namespace

TEST_CASE("compare: full recompute adds recompute time and lengthens the step", "[gui][compare]") {
  traces::TraceReader reader(simRuns().path);
  const traces::RunComparison c = traces::compareRuns(reader, simRuns().none_id, reader, simRuns().full_id, 100000);
  CHECK(c.matched > 100);
  CHECK(c.only_b > 0);  // the recompute tasks exist only with recompute on
  auto row = [&](const std::string& m) {
    for (const auto& r : summaryRows(c))
      if (r.metric == m) return r;
    FAIL("no row " << m);
    return CompareSummaryRow{};
  };
  CHECK(row("step").b_ns > row("step").a_ns);
  CHECK(row("recompute").a_ns == 0);
  CHECK(row("recompute").b_ns > 0);
  CHECK(c.verdict.find("recompute +") != std::string::npos);

  test::app();
  CompareView view;
  QAbstractItemModelTester t1(view.summary(), QAbstractItemModelTester::FailureReportingMode::Fatal);
  QAbstractItemModelTester t2(view.tasks(), QAbstractItemModelTester::FailureReportingMode::Fatal);
  view.setComparison("A", "B", c);
  CHECK(view.summary()->rowCount() == int(summaryRows(c).size()));
  CHECK(view.tasks()->rowCount() == int(c.matched));
}

TEST_CASE("compare view shows tandem compare's figures for runs from trace files", "[gui][compare]") {
  test::app();
  // What `tandem compare` computes for the same two runs (A: no recompute).
  traces::TraceReader reader(simRuns().path);
  const traces::RunComparison expected = traces::compareRuns(reader, simRuns().none_id, reader, simRuns().full_id);
  REQUIRE(!expected.by_op.empty());

  MainWindow w;
  CompareView* view = w.compareView();
  QAbstractItemModelTester t1(view->opErrors(), QAbstractItemModelTester::FailureReportingMode::Fatal);
  QAbstractItemModelTester t2(view->streamWaits(), QAbstractItemModelTester::FailureReportingMode::Fatal);
  REQUIRE(w.openFile(QString::fromStdString(simRuns().path), simRuns().full_id));
  REQUIRE(w.openCompare(QString::fromStdString(simRuns().path), simRuns().none_id));
  // Computed on a worker thread; the view says so meanwhile.
  QTRY_VERIFY_WITH_TIMEOUT(view->opErrors()->rowCount() > 0, 60000);
  const auto& ops = view->opErrors()->rows();
  REQUIRE(ops.size() == expected.by_op.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    CHECK(ops[i].op == expected.by_op[i].op);
    CHECK(ops[i].tasks == expected.by_op[i].tasks);
    CHECK(ops[i].median_abs_pct == Approx(expected.by_op[i].median_abs_pct));
    CHECK(ops[i].max_abs_pct == Approx(expected.by_op[i].max_abs_pct));
    CHECK(ops[i].alone_tasks + ops[i].beside_tasks == ops[i].tasks);
    const QModelIndex alone = view->opErrors()->index(int(i), OpErrorModel::Alone);
    CHECK(view->opErrors()->data(alone, Qt::DisplayRole).toString() ==
          (ops[i].alone_tasks == 0 ? QString("-")
                                   : QString::asprintf("%.1f%% (%lld)", expected.by_op[i].alone_median_abs_pct,
                                                       (long long)expected.by_op[i].alone_tasks)));
  }
  CHECK(view->streamWaits()->rowCount() == int(expected.stream_waits.size()));
  const QString step_error = QString::asprintf("%+.2f%%", expected.step_error_pct);
  CHECK(view->traceComparisonText().contains(step_error));
  CHECK(view->traceComparisonText().contains(QString("%1 matched").arg(expected.matched)));
  // Full recompute adds recompute tasks: some ops exist only in B, and B's
  // step is longer.
  CHECK(expected.only_b > 0);
  CHECK(expected.step_error_pct > 0);
  view->resize(1000, 700);
  CHECK(!view->grab().toImage().isNull());

  // A run that did not come from a file has no store to compare from.
  LoadedRun a = loadRunFile(simRuns().path, simRuns().none_id);
  w.showRun(a.timeline, a.breakdown, "generated");
  CHECK(view->opErrors()->rowCount() == 0);
  CHECK(view->traceComparisonText().contains("needs both runs from trace files"));
}

TEST_CASE("recompute view lists the plan's per-layer decisions and re-simulates in the background",
          "[gui][recompute]") {
  test::app();
  LoadedRun run = loadRunFile(simRuns().path, simRuns().full_id);
  RecomputeView view;
  QAbstractItemModelTester tester(view.model(), QAbstractItemModelTester::FailureReportingMode::Fatal);
  view.setRun(QString::fromStdString(simRuns().path), run.info, run.facts, run.schema_version, run.timeline);
  REQUIRE(view.model()->rowCount() == 12);
  // The planned peak and what a GPU run needs beyond it (the executor's
  // buffers and the reserve tandem run keeps free), per rank.
  const Plan plan = buildPlan(parseJob(run.info.job_yaml, "run"));
  const double need_mib = double(gpu_footprint::runBytes(plan.programs[0])) / double(1 << 20);
  CHECK(view.summaryText().contains(QString("a GPU run needs %1 MiB free per rank").arg(need_mib, 0, 'f', 1)));
  CHECK(need_mib > double(plan.programs[0].memory.peak_bytes) / double(1 << 20) + 512);
  for (const auto& r : view.model()->rows()) {
    CHECK(r.policy == RecomputePolicy::Full);
    CHECK(r.bytes_saved > 0);
    CHECK(r.extra_ns > 0);  // recompute time found on the timeline
  }
  view.resize(900, 600);
  const QImage img = view.grab().toImage();
  CHECK(!img.isNull());

  QSignalSpy created(&view, &RecomputeView::runCreated);
  view.simulatePolicy(RecomputePolicy::Selective);
  CHECK(view.busy());
  REQUIRE(created.wait(120000));
  CHECK(created.at(0).at(1).toLongLong() > simRuns().full_id);
  QTRY_VERIFY_WITH_TIMEOUT(!view.busy(), 10000);
}

TEST_CASE("a run shows the recompute decisions and memory it recorded, not today's plan of its job",
          "[gui][recompute][facts]") {
  test::app();
  // A copy of the file whose full-recompute run then gets another job text:
  // planning that run's job now gives no recompute and another memory plan,
  // as a change of the planner would. The view must still show what the
  // run was planned with.
  const std::string path = (fs::temp_directory_path() / ("tandem_gui_facts_" + std::to_string(::getpid()) +
                                                         ".sqlite"))
                               .string();
  fs::copy_file(simRuns().path, path, fs::copy_options::overwrite_existing);
  const JobSpec planned = parseJob(defaultJob().yaml, "<default>", {"recompute.policy=full"});
  const JobSpec today = parseJob(defaultJob().yaml, "<default>", {"recompute.policy=none"});
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, "UPDATE runs SET job_yaml=?, job_hash=? WHERE id=?", -1, &st, nullptr) ==
            SQLITE_OK);
    sqlite3_bind_text(st, 1, today.yaml.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, today.content_hash.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, simRuns().full_id);
    REQUIRE(sqlite3_step(st) == SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  const LoadedRun run = loadRunFile(path, simRuns().full_id);
  REQUIRE(run.info.job_yaml == today.yaml);
  RecomputeView view;
  view.setRun(QString::fromStdString(path), run.info, run.facts, run.schema_version, run.timeline);
  const Plan then = buildPlan(planned), now = buildPlan(today);
  REQUIRE(then.programs[0].memory.peak_bytes != now.programs[0].memory.peak_bytes);
  REQUIRE(view.model()->rows().size() == then.recompute.size());
  for (size_t i = 0; i < then.recompute.size(); ++i) {
    const RecomputeRow& r = view.model()->rows()[i];
    CHECK(r.policy == RecomputePolicy::Full);
    CHECK(r.bytes_saved == then.recompute[i].bytes_saved);
    CHECK(r.extra_flops == then.recompute[i].extra_flops);
    CHECK(r.extra_ns > 0);  // the recompute time the simulation recorded
  }
  auto mib = [](int64_t bytes) { return QString::number(double(bytes) / double(1 << 20), 'f', 1) + " MiB"; };
  CHECK(view.summaryText().contains("planned peak memory " + mib(then.programs[0].memory.peak_bytes)));
  CHECK_FALSE(view.summaryText().contains("planned peak memory " + mib(now.programs[0].memory.peak_bytes)));
  CHECK(view.summaryText().contains(
      QString("a GPU run needs %1 free per rank").arg(mib(gpu_footprint::runBytes(then.programs[0])))));
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path + suffix, ec);
}

TEST_CASE("a run from before plan facts were stored says so", "[gui][recompute][facts]") {
  test::app();
  // The committed real capture is a schema-1 file: it has a job, no facts.
  const std::string v1 = std::string(TANDEM_SOURCE_DIR) + "/tests/traces/fixtures/real-tiny-h200.sqlite";
  const LoadedRun run = loadRunFile(v1, -1);
  CHECK(run.schema_version == 1);
  CHECK(run.facts.empty());
  RecomputeView view;
  view.setRun(QString::fromStdString(v1), run.info, run.facts, run.schema_version, run.timeline);
  CHECK(view.model()->rowCount() == 0);
  CHECK(view.summaryText().contains("written before tandem stored its plan's decisions (trace schema 1)"));
}

TEST_CASE("topology view colours links by their simulated utilization", "[gui][topology]") {
  test::app();
  MainWindow w;
  w.resize(1200, 800);
  REQUIRE(w.openFile(QString::fromStdString(simRuns().path), simRuns().none_id));
  w.setView(MainWindow::View::Topology);
  const QImage img = w.topologyView()->grab().toImage();
  // Some link pixels carry a utilization colour other than idle grey.
  int coloured = 0;
  const QRgb idle = TopologyView::utilizationColor(0).rgb();
  for (int y = 0; y < img.height(); y += 2)
    for (int x = 0; x < img.width(); x += 2) {
      const QColor c = img.pixelColor(x, y);
      if (c.rgb() != idle && c.saturation() > 120 && c.hue() >= 0 && c.hue() <= 130) ++coloured;
    }
  CHECK(coloured > 50);
  CHECK(TopologyView::utilizationColor(1.0) != TopologyView::utilizationColor(0.1));
}

TEST_CASE("recompute policies are editable per layer and become job overrides", "[gui][recompute]") {
  test::app();
  RecomputeModel model;
  std::vector<RecomputeRow> rows(4);
  for (int l = 0; l < 4; ++l) rows[size_t(l)].layer = l;
  model.setRows(rows);
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Warning);
  const QModelIndex cell = model.index(2, RecomputeModel::Policy);
  CHECK((model.flags(cell) & Qt::ItemIsEditable));
  CHECK_FALSE((model.flags(model.index(2, RecomputeModel::Kept)) & Qt::ItemIsEditable));
  CHECK(model.setData(cell, "full"));
  CHECK_FALSE(model.setData(cell, "sometimes"));  // not a policy: refused, unchanged
  CHECK(model.data(cell, Qt::DisplayRole).toString() == "full");
  auto policies = model.policies();
  CHECK(policies[2] == RecomputePolicy::Full);
  CHECK(policies[1] == RecomputePolicy::None);
  const auto overrides = recomputeOverrides(policies);
  REQUIRE(overrides.size() == 4);
  CHECK(overrides[2] == "recompute.layers.2=full");
  CHECK(overrides[0] == "recompute.layers.0=none");
  // The overrides plan exactly what the table shows.
  JobSpec job = parseJob(defaultJob().yaml, "<default>",
                         recomputeOverrides({{3, RecomputePolicy::Full}, {5, RecomputePolicy::Selective}}));
  const Plan plan = buildPlan(job);
  CHECK(plan.recompute[3].policy == RecomputePolicy::Full);
  CHECK(plan.recompute[5].policy == RecomputePolicy::Selective);
  CHECK(plan.recompute[4].policy == RecomputePolicy::None);
  model.setAllPolicies(RecomputePolicy::Selective);
  for (const auto& [layer, p] : model.policies()) CHECK(p == RecomputePolicy::Selective);
}
