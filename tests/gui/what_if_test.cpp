// The what-if code path the GUI runs: re-plan GPT-2 124M (data parallel 8)
// on dgx-h200 with a different recompute policy for all layers, simulate,
// and open the new run.
#include <catch2/catch.hpp>
#include <QStatusBar>
#include <filesystem>

#include "cli/cli_test_util.h"
#include "engine/spec/job.h"
#include "gui/main_window.h"
#include "gui/run_loader.h"
#include "gui/what_if.h"
#include "gui_test_app.h"
#include "traces/store/trace_reader.h"

using namespace tandem;
using namespace tandem::gui;
namespace fs = std::filesystem;

namespace {

// A trace file in the temp folder, gone (with SQLite's write-ahead log
// beside it) before the test and after it: declare it before any reader of
// the file, so that it is destroyed after them.
class TempDb {
 public:
  explicit TempDb(const std::string& stem)
      : path_(fs::temp_directory_path() / (stem + std::to_string(::getpid()) + ".sqlite")) {
    remove();
  }
  ~TempDb() { remove(); }
  TempDb(const TempDb&) = delete;
  TempDb& operator=(const TempDb&) = delete;
  const fs::path& path() const { return path_; }

 private:
  void remove() const {
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path_.string() + suffix, ec);
  }
  fs::path path_;
};

}  // namespace

TEST_CASE("what-if: full recompute lowers peak memory and lengthens the step", "[gui][whatif]") {
  const TempDb temp("tandem_gui_whatif_");  // before the readers below: removed after them
  const fs::path& db = temp.path();
  std::vector<int> progress;
  WhatIfRequest base;
  base.overrides = {"recompute.policy=none"};
  base.out_path = db.string();
  base.run_name = "none";
  const WhatIfResult none = runWhatIf(base, [&](int pct, const std::string&) { progress.push_back(pct); });
  CHECK(progress.front() < progress.back());
  CHECK(progress.back() == 100);

  WhatIfRequest full = base;
  full.overrides = {"recompute.policy=full"};
  full.run_name = "full";
  const WhatIfResult rec = runWhatIf(full);

  CHECK(rec.run_id != none.run_id);
  CHECK(rec.peak_memory_bytes < none.peak_memory_bytes);
  CHECK(rec.step_ns > none.step_ns);
  CHECK(rec.recompute_ns > 0);
  CHECK(none.recompute_ns == 0);
  REQUIRE(rec.recompute.size() == 12);
  for (const auto& d : rec.recompute) CHECK(d.policy == RecomputePolicy::Full);

  // Both runs sit side by side in the file and open as timelines.
  traces::TraceReader reader(db.string());
  CHECK(reader.runs().size() == 2);
  LoadedRun loaded = loadRun(reader, rec.run_id);
  CHECK(loaded.timeline->ranks.size() == 8);
  bool has_recompute = false;
  for (const auto& t : loaded.timeline->tracks)
    for (uint8_t p : t.phase) has_recompute |= p == uint8_t(Phase::Recompute);
  CHECK(has_recompute);

  // The LM head in 16 groups: less memory than the whole head.
  WhatIfRequest split = base;
  split.overrides = {"recompute.policy=none", "schedule.lm_head_chunks=16"};
  split.run_name = "split";
  CHECK(runWhatIf(split).peak_memory_bytes < none.peak_memory_bytes);

  // Micro-batch 256 does not fit an H100 (102.94 GiB with the executor's
  // buffers and reserve): still simulated, warned about, and the warning
  // kept with the run.
  WhatIfRequest large = base;
  large.settings.topology = "dgx-h100";
  large.overrides = {"recompute.policy=none", "training.micro_batch=256"};
  large.run_name = "too large";
  const WhatIfResult too_large = runWhatIf(large);
  CHECK(too_large.step_ns > 0);
  REQUIRE(too_large.warnings.size() == 1);
  CHECK_THAT(too_large.warnings[0], Catch::StartsWith("rank 0 needs 102.94 GiB on its H100") &&
                                        Catch::Contains("a real run would refuse this plan; choices that fit: "));
  CHECK(none.warnings.empty());
  {
    traces::TraceReader large_reader(db.string());
    bool kept = false;
    for (const auto& st : large_reader.stats(too_large.run_id))
      kept |= st.name == "sim.memory_short_mib" && st.severity == traces::Severity::Warning;
    CHECK(kept);
  }

  // A bad setting is a readable error, not a crash.
  WhatIfRequest bad = base;
  bad.overrides = {"recompute.policy=sometimes"};
  CHECK_THROWS_WITH(runWhatIf(bad), Catch::Contains("recompute.policy"));
}

TEST_CASE("what-if: a calibration replaces the roofline defaults, and one of another GPU is warned about",
          "[gui][whatif]") {
  const TempDb temp("tandem_gui_calibrated_");  // before the readers below: removed after them
  const fs::path& db = temp.path();
  const std::string h200 = std::string(TANDEM_SOURCE_DIR) + "/resources/calibration/h200x2-nv18.yaml";
  WhatIfRequest base;
  base.overrides = {"parallel.data_parallel=1", "training.micro_batch=16"};
  base.settings.topology = "h200x2-nv18";
  base.out_path = db.string();
  const WhatIfResult roofline = runWhatIf(base);
  WhatIfRequest calibrated = base;
  calibrated.settings.calibration = h200;
  const WhatIfResult measured = runWhatIf(calibrated);
  CHECK(measured.step_ns != roofline.step_ns);
  CHECK(measured.warnings.empty());
  CHECK(roofline.warnings.empty());
  // The same file on H100s: it still runs, and says whose times it used.
  calibrated.settings.topology = "dgx-h100";
  const WhatIfResult other = runWhatIf(calibrated);
  REQUIRE(other.warnings.size() == 1);
  CHECK_THAT(other.warnings[0], Catch::Contains("measured on NVIDIA H200") && Catch::Contains("H100 GPUs"));
  // Shapes the calibration did not measure (the LM head in groups of 512
  // tokens) are named as well.
  calibrated.settings.topology = "h200x2-nv18";
  calibrated.overrides.push_back("schedule.lm_head_chunks=32");
  const WhatIfResult split = runWhatIf(calibrated);
  REQUIRE(split.warnings.size() == 1);
  CHECK_THAT(split.warnings[0], Catch::Contains("the calibration did not measure 128 of the plan's"));
  // ... and kept with the run, for whoever opens it later.
  {
    traces::TraceReader reader(db.string());
    bool kept = false;
    for (const auto& st : reader.stats(split.run_id))
      kept |= st.name == "sim.calibration_unmeasured_tasks" && st.value == 128;
    CHECK(kept);
  }
  // The main window says so when it opens that run.
  {
    tandem::gui::test::app();
    MainWindow window;
    REQUIRE(window.openFile(QString::fromStdString(db.string()), split.run_id));
    CHECK(window.statusBar()->currentMessage().startsWith("Warning about this run: the calibration did not measure 128"));
    // A run without warnings leaves the usual hints.
    REQUIRE(window.openFile(QString::fromStdString(db.string()), measured.run_id));
    CHECK_FALSE(window.statusBar()->currentMessage().contains("Warning"));
    // Compared with the run that warns: said with the comparison.
    REQUIRE(window.openCompare(QString::fromStdString(db.string()), split.run_id));
    CHECK(window.statusBar()->currentMessage().contains(" — warning about that run: the calibration did not measure 128"));
  }
  // A file that is not there: the error names it.
  calibrated.settings.calibration = "no-such-calibration.yaml";
  CHECK_THROWS_WITH(runWhatIf(calibrated), Catch::Contains("no-such-calibration.yaml"));
}

#include <QSignalSpy>
#include <QTest>

#include "gui/what_if_dialog.h"
#include "gui_test_app.h"

namespace {

// The what-if dialog on the built-in job (GPT-2 124M, data parallel 8) on
// dgx-h200, its runs appended to a trace file of its own.
struct DialogSession {
  QApplication& app = tandem::gui::test::app();  // before any widget
  const TempDb temp{"tandem_gui_dialog_"};  // before the readers of the file: removed after them
  WhatIfDialog dialog{QString(), "dgx-h200", QString::fromStdString(temp.path().string())};
};

// The fields of the dialog's first run: data parallel 4, micro-batch 8,
// accumulation 2, 50 MiB buckets, selective recompute, the LM head in 4 groups.
void setFirstRunFields(WhatIfDialog& dialog) {
  dialog.setDataParallel(4);
  dialog.setMicroBatch(8);
  dialog.setGradAccum(2);
  dialog.setBucketMib(50);
  dialog.setRecompute(RecomputePolicy::Selective);
  dialog.setLmHeadChunks(4);
}

// The fields as the too-large plan's first fitting choice leaves them (the
// starting point of the sharding and parallelism cases): data parallel 8,
// micro-batch 128, no accumulation, 50 MiB buckets, no recompute, the whole
// LM head, on dgx-h200 without a calibration.
void setFittedFields(WhatIfDialog& dialog) {
  dialog.setTopology("dgx-h200");
  dialog.setDataParallel(8);
  dialog.setMicroBatch(128);
  dialog.setGradAccum(1);
  dialog.setBucketMib(50);
  dialog.setRecompute(RecomputePolicy::None);
  dialog.setLmHeadChunks(1);
}

// Whether the dialog's request carries the override `o`.
bool hasOverride(const WhatIfDialog& dialog, const std::string& o) {
  const auto overrides = dialog.request().overrides;
  return std::find(overrides.begin(), overrides.end(), o) != overrides.end();
}

// The peak memory a "New run ..." status line names, in GiB; -1 without one.
double peakGiB(const QString& status) {
  const QString marker = "peak memory ";
  const int at = status.indexOf(marker);
  return at < 0 ? -1.0 : status.mid(at + marker.size()).section(' ', 0, 0).toDouble();
}

}  // namespace

TEST_CASE("what-if dialog: settings become overrides and a new run", "[gui][whatif]") {
  DialogSession session;
  WhatIfDialog& dialog = session.dialog;
  setFirstRunFields(dialog);
  const WhatIfRequest req = dialog.request();
  CHECK(req.settings.topology == "dgx-h200");
  CHECK(req.settings.calibration == "auto");  // the profile shipped for the GPU, as tandem simulate
  CHECK(std::find(req.overrides.begin(), req.overrides.end(), "parallel.data_parallel=4") != req.overrides.end());
  CHECK(std::find(req.overrides.begin(), req.overrides.end(), "training.micro_batch=8") != req.overrides.end());
  CHECK(std::find(req.overrides.begin(), req.overrides.end(), "training.grad_accum=2") != req.overrides.end());
  CHECK(std::find(req.overrides.begin(), req.overrides.end(), "comm.bucket_mib=50") != req.overrides.end());
  CHECK(std::find(req.overrides.begin(), req.overrides.end(), "recompute.policy=selective") != req.overrides.end());
  CHECK(std::find(req.overrides.begin(), req.overrides.end(), "schedule.lm_head_chunks=4") != req.overrides.end());
  CHECK_THAT(req.run_name, Catch::Contains(", LM head in 4 groups on dgx-h200"));

  QSignalSpy created(&dialog, &WhatIfDialog::runCreated);
  dialog.start();
  REQUIRE(created.wait(120000));
  traces::TraceReader reader(session.temp.path().string());
  const auto info = reader.run(created.at(0).at(1).toLongLong());
  CHECK(info.world_size == 4);
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
}

TEST_CASE("what-if dialog: a calibration is named in the run, and one of another GPU is warned about",
          "[gui][whatif]") {
  DialogSession session;
  WhatIfDialog& dialog = session.dialog;
  setFirstRunFields(dialog);
  // A calibration of H200s on dgx-h200: chosen, named in the run, no
  // warning (with the whole LM head: the calibration measured its shapes).
  const QString h200 = QStringLiteral(TANDEM_SOURCE_DIR "/resources/calibration/h200x2-nv18.yaml");
  dialog.setCalibration(h200);
  dialog.setLmHeadChunks(1);
  CHECK(dialog.request().settings.calibration == h200.toStdString());
  CHECK_THAT(dialog.request().run_name, Catch::EndsWith(", calibrated"));
  QSignalSpy calibrated(&dialog, &WhatIfDialog::runCreated);
  dialog.start();
  REQUIRE(calibrated.wait(120000));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
  CHECK_FALSE(dialog.statusText().contains("Warning"));
  // Where the step's kernel time comes from, under the step.
  CHECK(dialog.statusText().contains("\nkernel time "));
  // The same calibration on H100s: the status line says whose times it used.
  dialog.setTopology("dgx-h100");
  QSignalSpy warned(&dialog, &WhatIfDialog::runCreated);
  dialog.start();
  REQUIRE(warned.wait(120000));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
  CHECK(dialog.statusText().contains("Warning: calibration"));
  CHECK(dialog.statusText().contains("H100 GPUs"));
  dialog.setTopology("dgx-h200");
  dialog.setCalibration("none");
  CHECK(dialog.request().settings.calibration == "none");
  // Plans that fit offer no choices.
  CHECK(dialog.fittingChoices().isEmpty());
}

TEST_CASE("what-if dialog: a plan too large offers the choices that fit, and an applied one fits",
          "[gui][whatif]") {
  DialogSession session;
  WhatIfDialog& dialog = session.dialog;
  setFirstRunFields(dialog);
  dialog.setLmHeadChunks(1);  // as the calibrated runs left it: the whole LM head
  // A plan too large for the topology's GPUs: the choices that would fit are
  // offered, and applying one sets the fields, after which it fits.
  dialog.setTopology("dgx-h100");
  dialog.setDataParallel(8);
  dialog.setGradAccum(1);
  dialog.setRecompute(RecomputePolicy::None);
  dialog.setMicroBatch(256);
  QSignalSpy too_large(&dialog, &WhatIfDialog::runCreated);
  dialog.start();
  REQUIRE(too_large.wait(120000));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
  CHECK(dialog.statusText().contains("so a real run would refuse this plan"));
  const QStringList choices = dialog.fittingChoices();
  REQUIRE(choices.size() == 3);
  // Half the micro-batch, twice the accumulation: the global batch kept
  // (its gradients accumulated: 0.7 GiB more than micro-batch 128 alone).
  INFO(choices[0].toStdString());
  CHECK(choices[0] == "recompute.policy=none training.micro_batch=128 training.grad_accum=2 (53.4 GiB)");
  dialog.applyFittingChoice(0);
  CHECK(std::find(dialog.request().overrides.begin(), dialog.request().overrides.end(), "training.micro_batch=128") !=
        dialog.request().overrides.end());
  CHECK(std::find(dialog.request().overrides.begin(), dialog.request().overrides.end(), "training.grad_accum=2") !=
        dialog.request().overrides.end());
  CHECK(std::find(dialog.request().overrides.begin(), dialog.request().overrides.end(), "recompute.policy=none") !=
        dialog.request().overrides.end());
  QSignalSpy fits(&dialog, &WhatIfDialog::runCreated);
  dialog.start();
  REQUIRE(fits.wait(120000));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
  CHECK_FALSE(dialog.statusText().contains("refuse"));
  CHECK(dialog.fittingChoices().isEmpty());
}

TEST_CASE("what-if dialog: sharding (ZeRO-1, ZeRO-3, groups) reaches the request, the run name and the run",
          "[gui][whatif]") {
  DialogSession session;
  WhatIfDialog& dialog = session.dialog;
  setFittedFields(dialog);
  // Sharding: the request carries both switches, the run's name says which.
  auto has = [&](const std::string& o) { return hasOverride(dialog, o); };
  CHECK(has("parallel.shard_optimizer=false"));
  CHECK(has("parallel.shard_parameters=false"));
  dialog.setSharding(WhatIfDialog::Sharding::Parameters);
  CHECK(has("parallel.shard_optimizer=false"));
  CHECK(has("parallel.shard_parameters=true"));
  CHECK_THAT(dialog.request().run_name, Catch::Contains(", ZeRO-3"));
  QSignalSpy zero3(&dialog, &WhatIfDialog::runCreated);
  dialog.start();
  REQUIRE(zero3.wait(120000));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
  CHECK(dialog.statusText().startsWith("New run"));
  // Hybrid: shard groups of 4 of the 8 ranks.
  dialog.setDataParallel(8);
  dialog.setShardGroupSize(4);
  CHECK(has("parallel.shard_group_size=4"));
  CHECK_THAT(dialog.request().run_name, Catch::Contains(", ZeRO-3 in groups of 4"));
  QSignalSpy hybrid(&dialog, &WhatIfDialog::runCreated);
  dialog.start();
  REQUIRE(hybrid.wait(120000));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
  CHECK(dialog.statusText().startsWith("New run"));
  dialog.setSharding(WhatIfDialog::Sharding::Optimizer);
  CHECK(has("parallel.shard_group_size=0"));  // only with the parameters sharded
  CHECK(has("parallel.shard_optimizer=true"));
  CHECK(has("parallel.shard_parameters=false"));
  CHECK_THAT(dialog.request().run_name, Catch::Contains(", ZeRO-1"));
  dialog.setSharding(WhatIfDialog::Sharding::Gradients);
  CHECK(has("parallel.shard_gradients=true"));
  CHECK(has("parallel.shard_optimizer=false"));
  CHECK(has("parallel.shard_parameters=false"));
  CHECK_THAT(dialog.request().run_name, Catch::Contains(", ZeRO-2"));
}

TEST_CASE("what-if dialog: tensor and sequence parallelism, and a tensor-parallel size the heads refuse",
          "[gui][whatif]") {
  DialogSession session;
  WhatIfDialog& dialog = session.dialog;
  setFittedFields(dialog);
  auto has = [&](const std::string& o) { return hasOverride(dialog, o); };
  // Tensor parallelism: 4 replicas of 2 ranks on the 8 GPUs.
  CHECK(has("parallel.tensor_parallel=1"));
  dialog.setDataParallel(4);
  dialog.setTensorParallel(2);
  CHECK(has("parallel.tensor_parallel=2"));
  CHECK_THAT(dialog.request().run_name, Catch::Contains("dp 4 x tp 2,"));
  QSignalSpy split(&dialog, &WhatIfDialog::runCreated);
  dialog.start();
  REQUIRE(split.wait(120000));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
  CHECK(dialog.statusText().startsWith("New run"));
  const QString without_sequence = dialog.statusText();
  // The same with the residual stream's tokens split over each pair: less
  // peak memory.
  CHECK(has("parallel.sequence_parallel=false"));
  dialog.setSequenceParallel(true);
  CHECK(has("parallel.sequence_parallel=true"));
  CHECK_THAT(dialog.request().run_name, Catch::Contains("dp 4 x tp 2 (sequence parallel),"));
  QSignalSpy sequence(&dialog, &WhatIfDialog::runCreated);
  dialog.start();
  REQUIRE(sequence.wait(120000));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
  INFO(without_sequence.toStdString() << " / " << dialog.statusText().toStdString());
  CHECK(peakGiB(dialog.statusText()) > 0);
  CHECK(peakGiB(dialog.statusText()) < peakGiB(without_sequence));
  // Without a tensor-parallel group there are no tokens to split: not asked for.
  dialog.setTensorParallel(1);
  CHECK(has("parallel.sequence_parallel=false"));
  dialog.setSequenceParallel(false);
  dialog.setTensorParallel(2);
  // 5 does not divide GPT-2's 12 heads: refused on one line, no run.
  QSignalSpy refused(&dialog, &WhatIfDialog::failed);
  dialog.setTensorParallel(5);
  dialog.start();
  REQUIRE(refused.wait(60000));
  CHECK(refused.at(0).at(0).toString().contains("tensor_parallel 5 does not divide model.heads 12"));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
}

TEST_CASE("what-if dialog: context parallelism, and a size the sequence refuses", "[gui][whatif]") {
  DialogSession session;
  WhatIfDialog& dialog = session.dialog;
  setFittedFields(dialog);
  auto has = [&](const std::string& o) { return hasOverride(dialog, o); };
  CHECK(has("parallel.context_parallel=1"));
  dialog.setDataParallel(8);
  QSignalSpy whole(&dialog, &WhatIfDialog::runCreated);
  dialog.start();
  REQUIRE(whole.wait(120000));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
  const QString without_split = dialog.statusText();
  // 4 replicas whose sequences are split over 2 ranks each: the same 8
  // GPUs, half the tokens per rank, so less activation memory.
  dialog.setDataParallel(4);
  dialog.setContextParallel(2);
  CHECK(has("parallel.context_parallel=2"));
  CHECK_THAT(dialog.request().run_name, Catch::Contains("dp 4 x cp 2,"));
  QSignalSpy split(&dialog, &WhatIfDialog::runCreated);
  dialog.start();
  REQUIRE(split.wait(120000));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
  INFO(without_split.toStdString() << " / " << dialog.statusText().toStdString());
  CHECK(dialog.statusText().startsWith("New run"));
  CHECK(peakGiB(dialog.statusText()) > 0);
  CHECK(peakGiB(dialog.statusText()) < peakGiB(without_split));
  // 2 x 3 does not divide GPT-2's 1024 positions: refused on one line, no run.
  QSignalSpy refused(&dialog, &WhatIfDialog::failed);
  dialog.setContextParallel(3);
  dialog.start();
  REQUIRE(refused.wait(60000));
  CHECK(refused.at(0).at(0).toString().contains("context_parallel 3 splits each sequence into 6 equal chunks"));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
}

TEST_CASE("what-if dialog: pipeline stages, uneven and interleaved, and a stage list that does not match",
          "[gui][whatif]") {
  DialogSession session;
  WhatIfDialog& dialog = session.dialog;
  setFittedFields(dialog);
  auto has = [&](const std::string& o) { return hasOverride(dialog, o); };
  // Pipeline: 2 replicas of 4 stages (GPT-2's 12 blocks, 3 per stage), 8
  // micro-batches in flight.
  CHECK(has("parallel.pipeline_parallel=1"));
  dialog.setDataParallel(2);
  dialog.setPipelineParallel(4);
  dialog.setGradAccum(8);
  CHECK(has("parallel.pipeline_parallel=4"));
  CHECK_THAT(dialog.request().run_name, Catch::Contains("dp 2 x pp 4,"));
  QSignalSpy staged(&dialog, &WhatIfDialog::runCreated);
  dialog.start();
  REQUIRE(staged.wait(120000));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
  CHECK(dialog.statusText().startsWith("New run"));
  // Uneven stages: the LM head's stage with fewer blocks.
  dialog.setPipelineLayers("4,4,3,1");
  CHECK(has("parallel.pipeline_layers=[4,4,3,1]"));
  CHECK_THAT(dialog.request().run_name, Catch::Contains("x pp 4 (4,4,3,1 blocks)"));
  QSignalSpy uneven(&dialog, &WhatIfDialog::runCreated);
  dialog.start();
  REQUIRE(uneven.wait(120000));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
  CHECK(dialog.statusText().startsWith("New run"));
  // Interleaved: 3 chunks per stage, GPT-2's 12 blocks in 12 chunks of one
  // (the 8 micro-batches are a multiple of the 4 stages).
  dialog.setPipelineLayers("");
  CHECK(has("parallel.pipeline_chunks=1"));
  dialog.setPipelineChunks(3);
  CHECK(has("parallel.pipeline_chunks=3"));
  CHECK_THAT(dialog.request().run_name, Catch::Contains("x pp 4 (interleaved, 3 chunks)"));
  QSignalSpy chunked(&dialog, &WhatIfDialog::runCreated);
  dialog.start();
  REQUIRE(chunked.wait(120000));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
  CHECK(dialog.statusText().startsWith("New run"));
  dialog.setPipelineChunks(1);
  dialog.setPipelineLayers("4,4,3,1");
  // Two counts for four stages: refused on the status line, no run.
  QSignalSpy miscounted(&dialog, &WhatIfDialog::failed);
  dialog.setPipelineLayers("6,6");
  dialog.start();
  REQUIRE(miscounted.wait(60000));
  CHECK(miscounted.at(0).at(0).toString().contains("2 stages listed for pipeline_parallel 4"));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
  dialog.setPipelineLayers("");
  dialog.setPipelineChunks(2);
  dialog.setPipelineParallel(1);
  CHECK(has("parallel.pipeline_chunks=1"));  // no stages to deal chunks over
}

TEST_CASE("what-if dialog: an unknown topology fails, naming it", "[gui][whatif]") {
  DialogSession session;
  WhatIfDialog& dialog = session.dialog;
  setFittedFields(dialog);
  QSignalSpy failed(&dialog, &WhatIfDialog::failed);
  dialog.setTopology("no-such-topology");
  dialog.start();
  REQUIRE(failed.wait(60000));
  CHECK(failed.at(0).at(0).toString().contains("no-such-topology"));
  QTRY_VERIFY_WITH_TIMEOUT(!dialog.busy(), 10000);
}

TEST_CASE("what-if and tandem simulate give the same step for the same settings", "[gui][whatif][parity]") {
  // One pipeline behind both (simulator/pipeline/simulate_job.h): the GUI's
  // what-if with `tandem simulate`'s options set gives the step the command
  // prints, symmetric mode and kernel sharing included.
  using cli::testing::runTandem;
  struct Case {
    const char* flags;
    sim::SimulateSettings settings;
  };
  std::vector<Case> cases(4);
  cases[0].flags = "--symmetric off";
  cases[0].settings.symmetry = sim::SymmetryMode::Off;
  cases[1].flags = "--symmetric on --kernel-sharing fair";
  cases[1].settings.symmetry = sim::SymmetryMode::On;
  cases[1].settings.kernel_sharing = sim::KernelSharing::Fair;
  cases[2].flags = "--kernel-sharing first_holds --calibration h200x2-nv18 --algorithm ring --call-floor-ns 0";
  cases[2].settings.kernel_sharing = sim::KernelSharing::FirstHolds;
  cases[2].settings.calibration = "h200x2-nv18";
  cases[2].settings.algorithm = sim::Algorithm::Ring;
  cases[2].settings.call_floor_ns = 0;
  cases[3].flags = "--protocol simple --nvls";
  cases[3].settings.protocol = sim::Protocol::Simple;
  cases[3].settings.nvls = true;
  const TempDb temp("tandem_gui_parity_");
  int64_t previous = -1;
  bool differ = false;
  for (Case& c : cases) {
    c.settings.topology = "dgx-h200";
    WhatIfRequest r;
    r.settings = c.settings;
    r.out_path = temp.path().string();
    const WhatIfResult gui = runWhatIf(r);
    // The default job runs its weight gradients on a second compute stream,
    // so kernel sharing matters.
    const auto cli = runTandem(std::string("simulate default --topology dgx-h200 --json ") + c.flags,
                               temp.path().string() + ".cli");
    INFO(c.flags << "\n" << cli.err);
    REQUIRE(cli.exit_code == 0);
    const auto at = cli.out.find("\"step_ns\": ");
    REQUIRE(at != std::string::npos);
    const int64_t cli_step = std::stoll(cli.out.substr(at + 11));
    CHECK(gui.step_ns == cli_step);
    differ |= previous >= 0 && cli_step != previous;
    previous = cli_step;
  }
  CHECK(differ);  // the settings reach the simulation: not every case gives the same step
}
