// Calibration loop on the CPU: a "measured" run produced by a cost model the
// calibration does not know (roofline efficiencies changed by hand), then
// `calibrateFromRuns` fits the simulator to it, and simulations with that
// calibration must reproduce the measured run (same job) and predict a job
// that was not measured (other micro-batch and layer count).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <unistd.h>

#include "engine/planner.h"
#include "simulator/calibrate.h"
#include "simulator/cost_model.h"
#include "simulator/engine.h"
#include "simulator/sim_trace_output.h"
#include "simulator/topology_presets.h"
#include "traces/trace_writer.h"

using namespace tandem;

namespace {

std::string tempPath(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tandem-calibrate-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path p = dir / name;
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(p.string() + suffix);
  return p.string();
}

JobSpec smallJob(int micro_batch, int layers) {
  JobSpec j = defaultJob();
  j.model.layers = layers;
  j.model.hidden = 512;
  j.model.heads = 8;
  j.model.seq_len = 512;
  j.training.micro_batch = micro_batch;
  j.parallel.data_parallel = 2;
  return j;
}

// The "hardware truth": a roofline whose efficiencies differ from the defaults.
sim::RooflineCostModel truthModel() {
  sim::RooflineParams p = sim::RooflineParams::defaults();
  for (double& e : p.flops_efficiency) e *= 0.8;
  for (double& e : p.bw_efficiency) e *= 0.7;
  return sim::RooflineCostModel(p);
}

int64_t simulate(const JobSpec& job, const sim::CostModel& cost, const sim::Calibration& cal,
                 const std::string& trace_path = "") {
  const Plan plan = buildPlan(job);
  const sim::Topology topo = sim::loadTopology("h200x2-nv18");
  sim::SimOptions opts;
  opts.collective_calibration = cal.collectives;
  const sim::SimResult r = sim::simulatePlan(plan, topo, cost, opts);
  if (!trace_path.empty()) {
    traces::TraceWriter w(trace_path);
    sim::writeSimulationTrace(w, plan, topo, r);
  }
  return r.step_ns;
}

}  // namespace

TEST_CASE("Calibration fitted from a measured run predicts measured and unseen jobs", "[calibrate]") {
  const sim::RooflineCostModel truth = truthModel();
  const std::string measured = tempPath("measured.sqlite");
  const JobSpec seen = smallJob(8, 4);
  const int64_t seen_truth_ns = simulate(seen, truth, {}, measured);

  const sim::CalibrationResult cal = sim::calibrateFromRuns({{measured, 1}});
  CHECK(cal.samples > 100);
  CHECK(cal.unmatched == 0);
  REQUIRE(!cal.ops.empty());
  // The YAML loads back into the same calibration.
  const sim::Calibration loaded = sim::parseCalibration(sim::calibrationToYaml(cal), "fitted.yaml");
  CHECK(loaded.ops.size() == cal.calibration.ops.size());

  const sim::RooflineCostModel calibrated(sim::RooflineParams::defaults(), loaded);
  const sim::RooflineCostModel uncalibrated;
  const int64_t seen_pred_ns = simulate(seen, calibrated, loaded);
  const double seen_err = std::fabs(double(seen_pred_ns - seen_truth_ns)) / double(seen_truth_ns);
  INFO("seen job: truth " << seen_truth_ns << " ns, calibrated " << seen_pred_ns << " ns");
  CHECK(seen_err < 0.01);

  const JobSpec unseen = smallJob(4, 6);
  const int64_t unseen_truth_ns = simulate(unseen, truth, {});
  const int64_t unseen_pred_ns = simulate(unseen, calibrated, loaded);
  const int64_t unseen_default_ns = simulate(unseen, uncalibrated, {});
  const double unseen_err = std::fabs(double(unseen_pred_ns - unseen_truth_ns)) / double(unseen_truth_ns);
  const double default_err = std::fabs(double(unseen_default_ns - unseen_truth_ns)) / double(unseen_truth_ns);
  INFO("unseen job: truth " << unseen_truth_ns << " calibrated " << unseen_pred_ns << " uncalibrated "
                            << unseen_default_ns);
  CHECK(unseen_err < 0.05);
  CHECK(unseen_err < default_err);
}

TEST_CASE("Calibration refuses runs it cannot re-plan", "[calibrate]") {
  const std::string path = tempPath("nojob.sqlite");
  {
    traces::TraceWriter w(path);
    traces::RunInfo r;
    r.kind = traces::RunKind::Real;
    r.name = "imported";
    w.beginRun(r);
  }
  CHECK_THROWS_WITH(sim::calibrateFromRuns({{path, -1}}), Catch::Contains("carries no job"));
  CHECK_THROWS_WITH(sim::calibrateFromRuns({{path, 7}}), Catch::Contains("7"));
}
