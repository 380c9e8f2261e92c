// Calibration loop on the CPU: a "measured" run produced by a cost model the
// calibration does not know (roofline efficiencies changed by hand), then
// `calibrateFromRuns` fits the simulator to it, and simulations with that
// calibration must reproduce the measured run (same job) and predict a job
// that was not measured (other micro-batch and layer count).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <cmath>

#include "engine/plan/planner.h"
#include "simulator/calibrate/calibrate.h"
#include "simulator/calibrate/calibrate_collectives.h"
#include "simulator/calibrate/calibrate_merge.h"
#include "simulator/calibrate/calibrate_overlap.h"
#include "simulator/calibrate/sweep_grid.h"
#include "engine/ir/kernel_revisions.h"
#include "simulator/cost/calibration_device.h"
#include "simulator/cost/calibration_warnings.h"
#include "simulator/cost/cost_model.h"
#include "simulator/pipeline/trace_output.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology_presets.h"
#include "tests/traces/test_fixtures.h"
#include "traces/store/sqlite_util.h"
#include "traces/store/trace_writer.h"

using namespace tandem;

namespace {

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
// Most jobs here run the default schedule, with the weight-gradient stream,
// so every shape is measured beside another kernel. The calibration charges
// such a kernel an even split of the overlap, which is exact when kernels
// side by side share the GPU fairly: the "hardware" and the calibrated model
// of these tests do (KernelSharing::FirstHolds has tests of its own in
// test_engine.cpp, and a calibration from one-stream runs in the test of the
// kernel overlap efficiency below).
sim::RooflineParams fairParams() {
  sim::RooflineParams p = sim::RooflineParams::defaults();
  p.kernel_sharing = sim::KernelSharing::Fair;
  return p;
}

sim::RooflineCostModel truthModel() {
  sim::RooflineParams p = fairParams();
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
  const std::string measured = traces::testing::tempTracePath("measured.sqlite");
  const JobSpec seen = smallJob(8, 4);
  const int64_t seen_truth_ns = simulate(seen, truth, {}, measured);

  const sim::CalibrationResult cal = sim::calibrateFromRuns({{measured, 1}});
  CHECK(cal.samples > 100);
  CHECK(cal.unmatched == 0);
  REQUIRE(!cal.ops.empty());
  // The YAML loads back into the same calibration.
  const sim::Calibration loaded = sim::parseCalibration(sim::calibrationToYaml(cal), "fitted.yaml");
  CHECK(loaded.ops.size() == cal.calibration.ops.size());

  const sim::RooflineCostModel calibrated(fairParams(), loaded);
  const sim::RooflineCostModel uncalibrated(fairParams());
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

TEST_CASE("Calibration fits one kind of GPU and notes differing software", "[calibrate]") {
  const sim::RooflineCostModel truth = truthModel();
  const JobSpec job = smallJob(8, 4);
  auto measuredOn = [&](const std::string& file, const std::string& devices) {
    const std::string path = traces::testing::tempTracePath(file);
    simulate(job, truth, {}, path);
    traces::sql::Db db(path, SQLITE_OPEN_READWRITE);
    db.exec("UPDATE runs SET devices_json = '" + devices + "'");
    return path;
  };
  const std::string a = measuredOn(
      "gpu-a.sqlite", R"([{"index":0,"name":"NVIDIA H200","driver":"580.1","cuda_runtime":"13.0","nccl":"2.28.3"}])");
  const std::string b = measuredOn(
      "gpu-b.sqlite", R"([{"index":0,"name":"NVIDIA H200","driver":"580.2","cuda_runtime":"13.0","nccl":"2.28.3"}])");
  const std::string c = measuredOn("gpu-c.sqlite", R"([{"index":0,"name":"NVIDIA H100 80GB HBM3"}])");

  const sim::CalibrationResult same_gpu = sim::calibrateFromRuns({{a, 1}, {b, 1}});
  const std::string yaml = sim::calibrationToYaml(same_gpu);
  CHECK_THAT(yaml, Catch::Contains("different driver or library versions: driver 580.1, cuda_runtime 13.0, nccl "
                                   "2.28.3 (gpu-a.sqlite run 1); driver 580.2"));
  CHECK_THAT(sim::calibrationToYaml(sim::calibrateFromRuns({{a, 1}})),
             !Catch::Contains("different driver or library versions"));
  CHECK_THROWS_WITH(sim::calibrateFromRuns({{a, 1}, {c, 1}}),
                    Catch::Contains("run 1 ran on NVIDIA H100 80GB HBM3, but gpu-a.sqlite run 1 ran on NVIDIA H200") &&
                        Catch::Contains("one kind of GPU"));

  // The file names that GPU as a key of its own, and reads it back.
  CHECK_THAT(yaml, Catch::Contains("\ngpu: \"NVIDIA H200\""));
  CHECK(sim::parseCalibration(yaml, "same.yaml").gpu == "NVIDIA H200");
  CHECK(sim::parseCalibration(sim::calibrationToYaml(sim::calibrateFromRuns({{c, 1}})), "c.yaml").gpu ==
        "NVIDIA H100 80GB HBM3");
}

TEST_CASE("FP8 GEMMs measured beside their bf16 shapes give the speed-up of the steps they ran in", "[calibrate][fp8]") {
  sim::CalibrationResult r;
  auto entry = [](int64_t ns, double gflop) {
    sim::CostEntry e;
    e.ns = ns;
    e.gflop = gflop;
    return e;
  };
  auto& fwd = r.calibration.ops[OpKind::Matmul].shapes;
  fwd["m=4096 n=4096 k=4096"] = entry(1000, 137.4);
  fwd["m=4096 n=4096 k=4096 fp8=1"] = entry(500, 137.4);                      // 2.0
  fwd["m=8192 n=4096 k=4096 epi=residual"] = entry(1800, 274.9);
  fwd["m=8192 n=4096 k=4096 fp8=1 epi=residual"] = entry(1000, 274.9);      // 1.8
  fwd["m=2048 n=4096 k=4096 fp8=1"] = entry(300, 68.7);                       // no bf16 twin: left out
  auto& wgrad = r.calibration.ops[OpKind::MatmulBwdWeight].shapes;
  wgrad["m=4096 n=4096 k=4096"] = entry(1000, 137.4);
  wgrad["m=4096 n=4096 k=4096 fp8=1 fp8t=1"] = entry(700, 137.4);            // transposed itself: left out
  wgrad["m=8192 n=4096 k=4096"] = entry(2000, 274.9);
  wgrad["m=8192 n=4096 k=4096 fp8=1"] = entry(1900, 274.9);  // its task summed a bias gradient too: left out
  r.with_bias_gradient.insert({OpKind::MatmulBwdWeight, "m=8192 n=4096 k=4096"});
  sim::deriveFp8Speedup(r);
  REQUIRE(r.calibration.fp8_gemm_speedup.count(OpKind::Matmul));
  const auto& points = r.calibration.fp8_gemm_speedup.at(OpKind::Matmul);
  REQUIRE(points.size() == 2);
  CHECK(points[0].first == Approx(137.4));
  CHECK(points[0].second == Approx(2.0));
  CHECK(points[1].first == Approx(274.9));
  CHECK(points[1].second == Approx(1.8));
  CHECK_FALSE(r.calibration.fp8_gemm_speedup.count(OpKind::MatmulBwdWeight));
  // Written and read back as the cost model takes it.
  const sim::Calibration back = sim::parseCalibration(sim::calibrationToYaml(r), "fp8.yaml");
  CHECK(back.fp8_gemm_speedup.at(OpKind::Matmul).size() == 2);
  // And without any FP8 shape nothing is derived.
  sim::CalibrationResult plain;
  plain.calibration.ops[OpKind::Matmul].shapes["m=4096 n=4096 k=4096"] = entry(1000, 137.4);
  sim::deriveFp8Speedup(plain);
  CHECK(plain.calibration.fp8_gemm_speedup.empty());
}

TEST_CASE("the sweep's FP8 points each have their bf16 twin in the grid, and plan FP8 GEMMs and writers",
          "[calibrate][fp8]") {
  const std::vector<sim::SweepPoint> grid = sim::sweepGrid("full");
  int fp8_points = 0, with_writers = 0;
  for (const sim::SweepPoint& p : grid) {
    std::vector<std::string> bf16_sets;
    for (const std::string& s : p.sets)
      if (s.rfind("training.precision=", 0) != 0 && s.rfind("training.fp8_scaling=", 0) != 0) bf16_sets.push_back(s);
    if (bf16_sets.size() == p.sets.size()) continue;
    ++fp8_points;
    INFO(p.name);
    CHECK(sim::inPart(p, "fp8"));
    // Its twin is in the grid, and in part fp8 too (a sweep of that part
    // alone derives the speed-ups).
    CHECK(std::any_of(grid.begin(), grid.end(), [&](const sim::SweepPoint& q) {
      return q.sets == bf16_sets && q.part != "fp8" && sim::inPart(q, "fp8");
    }));
    const Plan plan = buildPlan(sim::sweepJob(p));
    bool gemm = false, writer = false;
    for (const Task& t : plan.programs[0].tasks) {
      gemm = gemm || t.attrs.fp8;
      writer = writer || t.attrs.fp8_out;
    }
    CHECK(gemm);
    with_writers += writer;
  }
  CHECK(fp8_points >= 6);
  CHECK(with_writers >= 3);  // the Llama points under delayed scaling
}

TEST_CASE("FP8 writers measured beside their bf16 twins give each kind's slowdown", "[calibrate][fp8]") {
  sim::CalibrationResult r;
  auto entry = [](int64_t ns) {
    sim::CostEntry e;
    e.ns = ns;
    return e;
  };
  auto& swiglu_bwd = r.calibration.ops[OpKind::SwiGluBwd].shapes;
  swiglu_bwd["m=16384 c=5632 elements=92274688"] = entry(400);
  swiglu_bwd["m=16384 c=5632 fp8out=2 elements=92274688"] = entry(500);  // 1.25
  swiglu_bwd["m=8192 c=5632 elements=46137344"] = entry(200);
  swiglu_bwd["m=8192 c=5632 fp8out=2 elements=46137344"] = entry(270);   // 1.35
  swiglu_bwd["m=4096 c=5632 fp8out=2 elements=23068672"] = entry(100);   // no twin: left out
  swiglu_bwd["m=2048 c=5632 elements=11534336"] = entry(100);
  swiglu_bwd["m=2048 c=5632 fp8out=2 elements=11534336"] = entry(1000);  // 10x: something else, left out
  auto& rms = r.calibration.ops[OpKind::RmsNorm].shapes;
  rms["m=16384 c=2048"] = entry(50);
  sim::deriveFp8WriterSlowdown(r);
  REQUIRE(r.calibration.fp8_writer_slowdown.count(OpKind::SwiGluBwd));
  CHECK(r.calibration.fp8_writer_slowdown.at(OpKind::SwiGluBwd) == Approx(1.30));  // the median of 1.25 and 1.35
  CHECK_FALSE(r.calibration.fp8_writer_slowdown.count(OpKind::RmsNorm));
  // Written and read back as the cost model takes it.
  const sim::Calibration back = sim::parseCalibration(sim::calibrationToYaml(r), "writers.yaml");
  CHECK(back.fp8_writer_slowdown.at(OpKind::SwiGluBwd) == Approx(1.30).epsilon(1e-3));
}

TEST_CASE("A calibration of kernels that changed since is named, with the kinds and the revisions", "[calibrate]") {
  JobSpec job = parseJob(std::string(builtinJobText("llama-124m")), "llama-124m", {"model.layers=2"});
  const Plan plan = buildPlan(job);
  const sim::Topology topo = sim::loadTopology("dgx-h100");
  auto warnings = [&](const std::string& yaml) {
    const sim::Calibration cal = sim::parseCalibration(yaml, "k.yaml");
    const sim::RooflineCostModel cost(sim::RooflineParams::defaults(), cal);
    return sim::calibrationWarnings(plan, topo, cal, cost);
  };
  const std::string ops = "ops:\n  rmsnorm_bwd:\n    fit: {base_ns: 1000, ns_per_gflop: 0, ns_per_mb: 300}\n";
  // Recorded before revisions were: revision 1, older than this build's.
  const std::string now = std::to_string(kernelRevision(OpKind::RmsNormBwd));
  REQUIRE(kernelRevision(OpKind::RmsNormBwd) > 1);
  const auto old = warnings("version: 1\n" + ops);
  REQUIRE(old.lines.size() == 1);
  CHECK_THAT(old.lines[0], Catch::Contains("the calibration measured older kernels of rmsnorm_bwd (revision 1 "
                                           "measured, " + now + " in this build)"));
  REQUIRE(old.stats.size() == 1);
  CHECK(old.stats[0].name == "sim.calibration_stale_kernels");
  CHECK(old.stats[0].value > 0);
  // The build's revision: nothing to say; a kind the plan does not run: neither.
  CHECK(warnings("version: 1\nkernel_revisions: {rmsnorm_bwd: " + now + "}\n" + ops).lines.empty());
  CHECK(warnings("version: 1\nops:\n  layernorm_bwd:\n    fit: {base_ns: 1000, ns_per_gflop: 0, ns_per_mb: 300}\n")
            .lines.empty());
  // What tandem calibrate writes reads back.
  sim::CalibrationResult r;
  r.calibration.kernel_revisions[OpKind::RmsNormBwd] = 2;
  r.calibration.kernel_revisions[OpKind::Matmul] = 1;
  const sim::Calibration back = sim::parseCalibration(sim::calibrationToYaml(r), "back.yaml");
  CHECK(back.kernel_revisions == r.calibration.kernel_revisions);
  // Bad input is named.
  CHECK_THROWS_WITH(sim::parseCalibration("version: 1\nkernel_revisions: {rmsnorm_bwd: 0}\n", "z.yaml"),
                    Catch::Contains("kernel_revisions.rmsnorm_bwd"));
  CHECK_THROWS_WITH(sim::parseCalibration("version: 1\nkernel_revisions: {rms_bwd: 2}\n", "u.yaml"),
                    Catch::Contains("kernel_revisions.rms_bwd: unknown op kind"));
  CHECK_THROWS_WITH(sim::parseCalibration("version: 1\nkernel_revisions: 2\n", "m.yaml"),
                    Catch::Contains("kernel_revisions: expected a map"));
}

TEST_CASE("A calibration of one GPU on a topology of another is named", "[calibrate]") {
  CHECK(sim::gpuModelToken("NVIDIA H100 80GB HBM3") == "H100");
  CHECK(sim::gpuModelToken("NVIDIA H200") == "H200");
  CHECK(sim::gpuModelToken("h200") == "H200");
  CHECK(sim::gpuModelToken("NVIDIA A100-SXM4-80GB") == "A100");
  CHECK(sim::gpuModelToken("A100-PCIE-80GB") == "A100");
  CHECK(sim::gpuModelToken("") == "");

  const sim::Topology h100 = sim::loadTopology("dgx-h100");
  const sim::Topology h200 = sim::loadTopology("h200x2-nv18");
  const sim::Topology a100 = sim::loadTopology("pcie-4gpu");
  sim::Calibration cal = sim::parseCalibration("version: 1\ngpu: \"NVIDIA H200\"\n", "h200.yaml");
  CHECK_FALSE(sim::calibrationGpuMismatch(cal, h200));
  const auto on_h100 = sim::calibrationGpuMismatch(cal, h100);
  REQUIRE(on_h100);
  CHECK_THAT(*on_h100, Catch::Contains("calibration h200.yaml was measured on NVIDIA H200, but the topology dgx-h100 "
                                       "has H100 GPUs"));
  CHECK(sim::calibrationGpuMismatch(cal, a100));
  // A calibration that does not name its GPU says nothing either way.
  CHECK_FALSE(sim::calibrationGpuMismatch(sim::parseCalibration("version: 1\n", "plain.yaml"), h100));
  // Runs on two kinds of GPU at once name both: a topology of either is theirs.
  cal.gpu = "NVIDIA H100 80GB HBM3 + NVIDIA H200";
  CHECK_FALSE(sim::calibrationGpuMismatch(cal, h100));
  CHECK_FALSE(sim::calibrationGpuMismatch(cal, h200));
  CHECK(sim::calibrationGpuMismatch(cal, a100));

  // A folder is not a calibration file.
  CHECK_THROWS_WITH(sim::loadCalibration(std::string(TANDEM_SOURCE_DIR) + "/resources/calibration"),
                    Catch::Contains("resources/calibration:0: is a folder, not a calibration file"));
  // The key must name something.
  CHECK_THROWS_WITH(sim::parseCalibration("version: 1\ngpu: \"\"\n", "empty.yaml"),
                    Catch::Contains("empty.yaml:2") && Catch::Contains("gpu: expected the GPU's name"));
  CHECK_THROWS_WITH(sim::parseCalibration("version: 1\ngpu: [H200]\n", "list.yaml"),
                    Catch::Contains("gpu: expected the GPU's name"));
}

TEST_CASE("Calibration refuses runs it cannot re-plan", "[calibrate]") {
  const std::string path = traces::testing::tempTracePath("nojob.sqlite");
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

// What a real run has and a simulation does not: the executor fuses a task
// away (no kernel of its own), a rank that reaches a collective early waits
// inside the NCCL kernel, the host takes time before a step's first kernel
// and after its last. The measured run here is a simulation edited in SQL
// to show exactly those effects by known amounts.
TEST_CASE("Calibration accounts for fused tasks, collective waits and host time per step", "[calibrate]") {
  const sim::RooflineCostModel truth = truthModel();
  const std::string measured = traces::testing::tempTracePath("real-like.sqlite");
  const JobSpec job = smallJob(8, 4);
  simulate(job, truth, {}, measured);
  int64_t ce_bwd_tasks = 0;
  {
    traces::sql::Db db(measured, SQLITE_OPEN_READWRITE);
    {
      traces::sql::Stmt s(db, "SELECT COUNT(*) FROM plan_tasks WHERE op='cross_entropy_bwd'");
      REQUIRE(s.step());
      ce_bwd_tasks = s.colInt(0);
    }
    db.exec("DELETE FROM activities WHERE task_id IN (SELECT task_id FROM plan_tasks WHERE op='cross_entropy_bwd')");
    // Rank 1 arrives 40 us early at every collective and waits for rank 0.
    db.exec("UPDATE activities SET start_ns = start_ns - 40000 WHERE rank = 1 AND task_id IN "
            "(SELECT task_id FROM plan_tasks WHERE op='all_reduce')");
    db.exec("UPDATE collectives SET start_ns = start_ns - 40000 WHERE rank = 1");
    // 50 us of host time before the first kernel, 10 us after the last.
    db.exec("UPDATE steps SET start_ns = start_ns - 50000, end_ns = end_ns + 10000");
  }
  REQUIRE(ce_bwd_tasks > 0);
  const sim::CalibrationResult cal = sim::calibrateFromRuns({{measured, 1}});

  // The fused op costs nothing, and is written so.
  const auto ce = cal.calibration.ops.find(OpKind::CrossEntropyBwd);
  REQUIRE(ce != cal.calibration.ops.end());
  CHECK(ce->second.all_shapes.ns == 0);
  CHECK(std::find(cal.fused_ops.begin(), cal.fused_ops.end(), OpKind::CrossEntropyBwd) != cal.fused_ops.end());
  const std::string yaml = sim::calibrationToYaml(cal);
  const sim::Calibration loaded = sim::parseCalibration(yaml, "fitted.yaml");
  CHECK(loaded.ops.at(OpKind::CrossEntropyBwd).all_shapes.ns == 0);
  // Host time per step, and the launch gap of a simulation (none).
  REQUIRE(loaded.step_overhead_ns.has_value());
  CHECK(*loaded.step_overhead_ns == 60000);
  // The collectives keep rank 0's time (the last to arrive): the fitted line
  // reproduces the simulated collectives, not rank 1's 40 us of waiting.
  REQUIRE(!cal.collectives.empty());
  {
    const sim::RooflineCostModel calibrated(fairParams(), loaded);
    const Plan plan = buildPlan(job);
    const sim::Topology topo = sim::loadTopology("h200x2-nv18");
    sim::SimOptions opts;
    const sim::SimResult t = sim::simulatePlan(plan, topo, truth, opts);
    opts.collective_calibration = loaded.collectives;
    const sim::SimResult p = sim::simulatePlan(plan, topo, calibrated, opts);
    REQUIRE(t.collectives.size() == p.collectives.size());
    for (size_t i = 0; i < t.collectives.size(); ++i) {
      const double truth_ns = double(t.collectives[i].end_ns - t.collectives[i].start_ns);
      const double pred_ns = double(p.collectives[i].end_ns - p.collectives[i].start_ns);
      INFO("collective " << i << ": truth " << truth_ns << " ns, calibrated " << pred_ns << " ns");
      CHECK(std::fabs(pred_ns - truth_ns) < 0.05 * truth_ns + 2000);
    }
    // Every step of the calibrated simulation carries the host time.
    sim::Calibration no_host = loaded;
    no_host.step_overhead_ns.reset();
    const sim::SimResult q =
        sim::simulatePlan(plan, topo, sim::RooflineCostModel(fairParams(), no_host), opts);
    CHECK(p.step_ns - q.step_ns == 60000);
  }

  // A run in which every task had a collective beside it (one collective
  // spanning the run): the ops are measured, only slowed, and must keep
  // their cost; the fused one alone costs 0.
  {
    traces::sql::Db db(measured, SQLITE_OPEN_READWRITE);
    db.exec("UPDATE collectives SET start_ns = -1000000000, end_ns = 1000000000000");  // -1 s to 1000 s
  }
  const sim::CalibrationResult all_slowed = sim::calibrateFromRuns({{measured, 1}});
  CHECK(all_slowed.fused_ops == std::vector<OpKind>{OpKind::CrossEntropyBwd});
  const auto mm = all_slowed.calibration.ops.find(OpKind::Matmul);
  REQUIRE(mm != all_slowed.calibration.ops.end());
  CHECK(!mm->second.shapes.empty());
  for (const auto& [shape, e] : mm->second.shapes) CHECK(e.ns > 0);
}

TEST_CASE("Collective calibration by message size: interpolated on log(bytes), clamped outside", "[calibrate]") {
  const sim::Calibration cal = sim::parseCalibration(R"(version: 1
collectives:
  - {op: all_reduce, ranks: 2, latency_ns: 15000, gbps: 200, sizes: [[1048576, 100], [67108864, 280]]}
)",
                                                    "sizes.yaml");
  REQUIRE(cal.collectives.size() == 1);
  const sim::CollectiveCalibration& c = cal.collectives[0];
  CHECK(c.gbpsFor(1024) == Approx(100));           // below the table: its first size
  CHECK(c.gbpsFor(1048576) == Approx(100));
  CHECK(c.gbpsFor(8388608) == Approx(100 + 180 * 0.5));  // 8 MiB: halfway on log(bytes)
  CHECK(c.gbpsFor(1e12) == Approx(280));            // above: its last size
  CHECK_THROWS_WITH(sim::parseCalibration(R"(version: 1
collectives:
  - {op: all_reduce, ranks: 2, gbps: 200, sizes: [[2048, 100], [1024, 90]]}
)",
                                          "bad.yaml"),
                    Catch::Contains("bad.yaml:3") && Catch::Contains("ascending"));
}

// Buckets of nearly the same size get one bandwidth point: the fit must not
// tell a 21 MiB bucket from a 23 MiB one by the kernels that happened to run
// beside each in the calibration run. Here the larger of two sizes within
// 25% of each other is measured 20% slower; the calibration keeps one point.
TEST_CASE("Calibration pools collective sizes within 25% into one point", "[calibrate]") {
  const sim::RooflineCostModel truth = truthModel();
  const std::string measured = traces::testing::tempTracePath("pooled-sizes.sqlite");
  JobSpec job = smallJob(8, 4);
  job.comm.bucket_mib = 1;  // a bucket per weight: several sizes, some close together
  job.comm.first_bucket_mib = 1;
  simulate(job, truth, {}, measured);
  int64_t small = 0, large = 0;
  {
    traces::sql::Db db(measured, SQLITE_OPEN_READWRITE);
    std::vector<int64_t> sizes;
    traces::sql::Stmt s(db, "SELECT DISTINCT bytes FROM collectives WHERE bytes >= 1048576 ORDER BY bytes");
    while (s.step()) sizes.push_back(s.colInt(0));
    for (size_t i = 1; i < sizes.size() && large == 0; ++i)
      if (double(sizes[i]) <= 1.25 * double(sizes[i - 1])) small = sizes[i - 1], large = sizes[i];
    INFO(sizes.size() << " sizes of at least 1 MiB");
    REQUIRE(large > 0);
    db.exec(fmt::format("UPDATE activities SET end_ns = start_ns + (end_ns - start_ns) * 6 / 5 WHERE task_id IN "
                        "(SELECT task_id FROM collectives WHERE bytes = {})",
                        large));
  }
  const sim::CalibrationResult cal = sim::calibrateFromRuns({{measured, 1}});
  REQUIRE(!cal.collectives.empty());
  const auto& pts = cal.collectives.front().sizes;
  REQUIRE(!pts.empty());
  for (size_t i = 1; i < pts.size(); ++i) {
    INFO("points at " << pts[i - 1].first << " and " << pts[i].first << " bytes");
    CHECK(pts[i].first > pts[i - 1].first * 1.25);
  }
  int near = 0;
  for (const auto& [bytes, gbps] : pts)
    if (bytes >= double(small) && bytes <= double(large)) ++near;
  CHECK(near == 1);
}

TEST_CASE("Collectives on a compute stream stay out of the collective fit", "[calibrate][shard]") {
  // A sharded optimizer sums the squared norm with a 4-byte all-reduce on
  // the compute stream; its buckets are reduce-scattered and all-gathered on
  // the comm stream.
  const std::string measured = traces::testing::tempTracePath("sharded.sqlite");
  JobSpec job = smallJob(8, 4);
  job.parallel.shard_optimizer = true;
  simulate(job, truthModel(), {}, measured);
  const Plan plan = buildPlan(job);
  const int64_t buckets = int64_t(plan.programs[0].buckets.size());
  // One all-gather per bucket, and the embedding gradient's where it is gathered.
  const int64_t gathers = std::count_if(plan.programs[0].tasks.begin(), plan.programs[0].tasks.end(),
                                        [](const Task& t) { return t.op == OpKind::AllGather; });
  CHECK(gathers >= buckets);
  const sim::CalibrationResult cal = sim::calibrateFromRuns({{measured, 1}});
  int64_t rs = -1, ag = -1;
  for (const auto& rep : cal.collectives) {
    INFO(toString(rep.op) << " fitted from " << rep.samples << " samples");
    CHECK(rep.op != CollectiveOp::AllReduce);
    if (rep.op == CollectiveOp::ReduceScatter) rs = rep.samples;
    if (rep.op == CollectiveOp::AllGather) ag = rep.samples;
  }
  CHECK(rs == buckets);
  CHECK(ag == gathers);
}

// Kernel tasks start later in multi-rank runs: the calibration measures the
// extra from shapes seen in both kinds of run, and the engine adds it to
// every kernel task of a plan with more than one rank, and to nothing else.
TEST_CASE("Multi-rank launch gap: fitted from shapes measured both ways, added to multi-rank plans only",
          "[calibrate]") {
  sim::LaunchGapsByShape g;
  g.single[{OpKind::Matmul, "a"}] = {1000, 1100, 900};
  g.multi[{OpKind::Matmul, "a"}] = {1800, 1900};   // +850
  g.single[{OpKind::LayerNorm, "b"}] = {500};
  g.multi[{OpKind::LayerNorm, "b"}] = {1100};      // +600
  g.single[{OpKind::Add, "c"}] = {400};
  g.multi[{OpKind::Add, "c"}] = {1400};            // +1000
  g.multi[{OpKind::Gelu, "only multi"}] = {9000};  // not measured both ways: ignored
  int64_t shapes = 0;
  const auto extra = sim::multiRankLaunchExtra(g, &shapes);
  REQUIRE(extra.has_value());
  // The mean over the multi-rank task-steps: (850 x 2 + 600 + 1000) / 4.
  CHECK(*extra == Approx(825));
  CHECK(shapes == 3);
  // A rare long wait counts with its share of the steps' time (a median
  // would drop it): one step in three waits 9 us more.
  sim::LaunchGapsByShape rare;
  rare.single[{OpKind::Matmul, "a"}] = {1000};
  rare.multi[{OpKind::Matmul, "a"}] = {1000, 1000, 10000};
  CHECK(*sim::multiRankLaunchExtra(rare) == Approx(3000));
  sim::LaunchGapsByShape none;
  none.single[{OpKind::Matmul, "a"}] = {1000};
  CHECK(!sim::multiRankLaunchExtra(none).has_value());
  sim::LaunchGapsByShape faster;  // never negative
  faster.single[{OpKind::Matmul, "a"}] = {1000};
  faster.multi[{OpKind::Matmul, "a"}] = {500};
  CHECK(*sim::multiRankLaunchExtra(faster) == 0);

  // The engine: every kernel task of a two-rank plan lasts exactly that much
  // longer (comm_slowdown 1 so that no kernel is stretched), fused tasks
  // stay at 0, and a one-rank plan is unchanged.
  const sim::Topology topo = sim::loadTopology("h200x2-nv18");
  sim::Calibration base;
  base.comm_slowdown = 1.0;
  sim::Calibration with = base;
  with.multi_rank_launch_ns = 7000;
  const sim::RooflineCostModel plain(sim::RooflineParams::defaults(), base);
  const sim::RooflineCostModel extra_model(sim::RooflineParams::defaults(), with);
  for (const int dp : {1, 2}) {
    JobSpec job = smallJob(8, 2);
    job.parallel.data_parallel = dp;
    // One compute stream: kernels side by side share the GPU, which would
    // stretch both by more than the extra launch time.
    job.schedule.weight_gradient_stream = false;
    const Plan plan = buildPlan(job);
    const sim::SimResult a = sim::simulatePlan(plan, topo, plain);
    const sim::SimResult b = sim::simulatePlan(plan, topo, extra_model);
    std::map<int, int64_t> da, db;
    // A task's time is the sum of its activities (a weight gradient's bias
    // kernels are one of their own), as in a trace.
    for (const sim::SimActivity& x : a.ranks[0].activities) da[x.task] += x.end_ns - x.start_ns;
    for (const sim::SimActivity& x : b.ranks[0].activities) db[x.task] += x.end_ns - x.start_ns;
    REQUIRE(da.size() == db.size());
    int kernels = 0;
    for (const Task& t : plan.programs[0].tasks) {
      const int64_t want = dp > 1 && t.kind == TaskKind::Kernel && t.fused_into < 0 ? 7000 : 0;
      if (t.kind == TaskKind::Collective) continue;  // its time is the network's
      INFO("dp " << dp << ", task " << t.name);
      CHECK(db.at(t.id) - da.at(t.id) == want);
      kernels += want > 0;
    }
    if (dp > 1) CHECK(kernels > 20);
    if (dp == 1) CHECK(b.step_ns == a.step_ns);
  }
  // Written and read.
  sim::CalibrationResult r;
  r.calibration.multi_rank_launch_ns = 577;
  r.multi_rank_launch_shapes = 30;
  CHECK_THAT(sim::calibrationToYaml(r), Catch::Contains("multi_rank_launch_ns: 577  # per kernel task"));
  const sim::Calibration back = sim::parseCalibration("version: 1\nmulti_rank_launch_ns: 577\n", "read.yaml");
  REQUIRE(back.multi_rank_launch_ns.has_value());
  CHECK(*back.multi_rank_launch_ns == 577);
  CHECK_THROWS_WITH(sim::parseCalibration("version: 1\nmulti_rank_launch_ns: -5\n", "bad.yaml"),
                    Catch::Contains("bad.yaml:2"));
}

// The per-op comm slowdown is written with its sample counts and read back
// as the same factors (tests/sim/test_engine.cpp runs them).
TEST_CASE("comm_slowdown_by_op: written and read back", "[calibrate]") {
  sim::CalibrationResult r;
  r.calibration.comm_slowdown = 1.45;
  r.comm_slowdown_samples = 1700;
  r.calibration.comm_slowdown_by_op[OpKind::MatmulBwdWeight] = 1.65;
  r.calibration.comm_slowdown_by_op[OpKind::AttentionBwd] = 1.15;
  r.comm_slowdown_by_op_samples[OpKind::MatmulBwdWeight] = 501;
  r.comm_slowdown_by_op_samples[OpKind::AttentionBwd] = 261;
  const std::string yaml = sim::calibrationToYaml(r);
  CHECK_THAT(yaml, Catch::Contains("matmul_bwd_weight: 1.6500  # 501 task-steps"));
  const sim::Calibration back = sim::parseCalibration(yaml, "written.yaml");
  REQUIRE(back.comm_slowdown_by_op.size() == 2);
  CHECK(back.comm_slowdown_by_op.at(OpKind::MatmulBwdWeight) == Approx(1.65));
  CHECK(back.comm_slowdown_by_op.at(OpKind::AttentionBwd) == Approx(1.15));
  CHECK(*back.comm_slowdown == Approx(1.45));
}

// Layernorm backward rows wider than 768 take the executor's slower
// shared-memory path. Here the "hardware" charges 600 ns per MB on that path
// on top of 300 ns per MB: calibrated on widths 512 and 1280, the fit must
// learn the slow-path term and predict width 1024 (slow path, never
// measured) within 3%.
TEST_CASE("Calibration learns the layernorm backward's slow path and predicts an unseen wide row", "[calibrate]") {
  sim::Calibration truth_cal;
  sim::CostEntry e;
  e.has_fit = true;
  e.base_ns = 4000;
  e.ns_per_mb = 300;
  e.ns_per_mb_slow = 600;
  truth_cal.ops[OpKind::LayerNormBwd].all_shapes = e;
  const sim::RooflineCostModel truth(fairParams(), truth_cal);
  auto job = [](int hidden, int heads, int micro_batch) {
    JobSpec j = smallJob(micro_batch, 2);
    j.model.hidden = hidden;
    j.model.heads = heads;
    j.parallel.data_parallel = 1;
    return j;
  };
  std::vector<sim::CalibrationInput> inputs;
  int n = 0;
  for (const JobSpec& j : {job(512, 8, 8), job(512, 8, 2), job(1280, 10, 4)}) {
    const std::string path = traces::testing::tempTracePath(fmt::format("ln-slow-{}.sqlite", n++));
    simulate(j, truth, {}, path);
    inputs.push_back({path, 1});
  }
  const sim::CalibrationResult cal = sim::calibrateFromRuns(inputs);
  const auto& fit = cal.calibration.ops.at(OpKind::LayerNormBwd).all_shapes;
  CHECK(fit.ns_per_mb_slow > 0);
  const sim::RooflineCostModel calibrated(fairParams(), cal.calibration);
  const Plan held_out = buildPlan(job(1024, 8, 4));
  const sim::Topology topo = sim::loadTopology("h200x2-nv18");
  int checked = 0;
  for (const Task& t : held_out.programs[0].tasks) {
    // The layers' layernorms; the final one (it does not accumulate into dx,
    // so it moves fewer bytes) is one task of its shape per job, and the
    // shape's median is the layers' figure.
    if (t.op != OpKind::LayerNormBwd || !t.attrs.accumulate) continue;
    REQUIRE(sim::slowPathMb(t) > 0);
    const double want = double(truth.taskNs(t, topo.devices[0], held_out.job.training.precision));
    const double got = double(calibrated.taskNs(t, topo.devices[0], held_out.job.training.precision));
    INFO(t.name << ": truth " << want << " ns, calibrated " << got << " ns");
    CHECK(std::fabs(got - want) < 0.03 * want);
    ++checked;
  }
  CHECK(checked >= 4);
}

TEST_CASE("Task roles: the name without its layer and micro-batch", "[calibrate]") {
  CHECK(sim::taskRole("layer5.mlp.fc.bwd_weight.mb0") == "mlp.fc.bwd_weight");
  CHECK(sim::taskRole("layer11.attn.core.bwd.mb3") == "attn.core.bwd");
  CHECK(sim::taskRole("embed.bwd.mb0") == "embed.bwd");
  CHECK(sim::taskRole("optimizer.grad_norm") == "optimizer.grad_norm");
  // Only a whole "layerN." prefix and a whole ".mbN" suffix go.
  CHECK(sim::taskRole("layers.x.mb") == "layers.x.mb");
  CHECK(sim::taskRole("layer7x.y.mb1z") == "layer7x.y.mb1z");
}

TEST_CASE("Collective start wait and neighbour factors: read, range-checked, fitted back", "[calibrate]") {
  const sim::Calibration read = sim::parseCalibration(R"(version: 1
collective_start_wait: 0.6
collective_beside:
  "mlp.fc.bwd_weight": 1.3
  "attn.core.bwd": 0.95
)",
                                                     "beside.yaml");
  REQUIRE(read.collective_start_wait.has_value());
  CHECK(*read.collective_start_wait == Approx(0.6));
  CHECK(read.collective_beside.at("mlp.fc.bwd_weight") == Approx(1.3));
  CHECK_THROWS_WITH(sim::parseCalibration("version: 1\ncollective_start_wait: 1.5\n", "wait.yaml"),
                    Catch::Contains("wait.yaml:2"));
  CHECK_THROWS_WITH(sim::parseCalibration("version: 1\ncollective_beside:\n  \"x\": 0\n", "beside.yaml"),
                    Catch::Contains("beside.yaml:3"));
  CHECK_THROWS_WITH(sim::parseCalibration("version: 1\ncollective_beside: 2\n", "map.yaml"),
                    Catch::Contains("map.yaml:2") && Catch::Contains("expected a map"));

  // The "hardware": collectives wait for 60% of the remaining time of the
  // kernel running when they become ready, and take 1.3 times as long
  // beside attention backward. Compute is not slowed beside them, so that
  // the wait is measured exactly.
  sim::RooflineParams params = sim::RooflineParams::defaults();
  params.comm_slowdown = 1.0;
  // GEMMs at one efficiency whatever their shape: the neighbours named
  // below are the longest ones as designed.
  params.gemm_depth_half = 0;
  params.gemm_outputs_half_per_sm = 0;
  sim::Calibration hw;
  hw.collective_start_wait = 0.6;
  hw.collective_beside["attn.core.bwd"] = 1.3;
  const sim::RooflineCostModel truth(params, hw);
  const std::string measured = traces::testing::tempTracePath("collective-beside.sqlite");
  // GPT-2 124M's layers, whose buckets (about 22 MiB) each have one layer's
  // backward beside them.
  JobSpec job = defaultJob();
  job.training.micro_batch = 2;
  job.parallel.data_parallel = 2;
  // One compute stream, so that the longest kernel beside each bucket's
  // collective is the layer's attention backward, not a weight gradient.
  job.schedule.weight_gradient_stream = false;
  // The MLP projection's weight GEMM with its bias gradient (its own pass
  // over dy) is the other neighbour the longest: the role without a
  // slowdown that attention backward's factor is read against.
  job.schedule.fuse_bias_gradients = false;
  simulate(job, truth, {}, measured);
  const sim::CalibrationResult cal = sim::calibrateFromRuns({{measured, 1}});
  REQUIRE(cal.calibration.collective_start_wait.has_value());
  CHECK(*cal.calibration.collective_start_wait == Approx(0.6).margin(0.02));
  REQUIRE(cal.calibration.collective_beside.count("attn.core.bwd") == 1);
  const sim::Calibration loaded = sim::parseCalibration(sim::calibrationToYaml(cal), "fitted.yaml");
  REQUIRE(loaded.collective_beside.size() == cal.calibration.collective_beside.size());
  for (const auto& [role, f] : cal.calibration.collective_beside)
    CHECK(loaded.collective_beside.at(role) == Approx(f).epsilon(1e-3));
  // Factors are 1 or more (the simulator can only stretch a collective),
  // and attention backward's is the 1.3 of the hardware against the others.
  for (const auto& [role, f] : loaded.collective_beside) CHECK(f >= 1.0);
  CHECK(loaded.collective_beside.at("attn.core.bwd") / loaded.collective_beside.at("mlp.proj.bwd_weight") ==
        Approx(1.3).epsilon(0.02));

  // Calibrated, the simulation gives every collective its measured time;
  // without the neighbour factors those beside attention backward are off
  // by about 30%.
  const Plan plan = buildPlan(job);
  const sim::Topology topo = sim::loadTopology("h200x2-nv18");
  sim::SimOptions opts;
  const sim::SimResult t = sim::simulatePlan(plan, topo, truth, opts);
  opts.collective_calibration = loaded.collectives;
  sim::RooflineParams calibrated_params = sim::RooflineParams::defaults();
  calibrated_params.comm_slowdown = 1.0;
  const sim::SimResult p = sim::simulatePlan(plan, topo, sim::RooflineCostModel(calibrated_params, loaded), opts);
  sim::Calibration no_beside = loaded;
  no_beside.collective_beside.clear();
  const sim::SimResult q = sim::simulatePlan(plan, topo, sim::RooflineCostModel(calibrated_params, no_beside), opts);
  REQUIRE(t.collectives.size() == p.collectives.size());
  REQUIRE(t.collectives.size() == q.collectives.size());
  double worst_with = 0, worst_without = 0;
  for (size_t i = 0; i < t.collectives.size(); ++i) {
    const double truth_ns = double(t.collectives[i].end_ns - t.collectives[i].start_ns);
    if (t.collectives[i].bytes < (1 << 20)) continue;
    worst_with =
        std::max(worst_with, std::fabs(double(p.collectives[i].end_ns - p.collectives[i].start_ns) / truth_ns - 1));
    worst_without =
        std::max(worst_without, std::fabs(double(q.collectives[i].end_ns - q.collectives[i].start_ns) / truth_ns - 1));
  }
  INFO("worst collective error with the neighbour factors " << worst_with << ", without " << worst_without);
  CHECK(worst_with < 0.05);
  CHECK(worst_without > 0.1);
}

TEST_CASE("Kernel overlap efficiency: fitted from a run with the weight-gradient stream", "[calibrate]") {
  // The "hardware": kernels of two compute streams side by side get 1.3
  // times the throughput of one. Calibrated from a run on one compute
  // stream (every kernel alone) and one with the weight-gradient stream,
  // the fit finds the factor back and predicts another job's step with
  // the stream.
  sim::RooflineParams p = sim::RooflineParams::defaults();
  for (double& e : p.flops_efficiency) e *= 0.8;
  p.kernel_overlap_efficiency = 1.3;
  const sim::RooflineCostModel truth(p);
  JobSpec alone = smallJob(8, 4);
  alone.parallel.data_parallel = 1;
  alone.schedule.weight_gradient_stream = false;
  JobSpec shared = alone;
  shared.schedule.weight_gradient_stream = true;
  const std::string a = traces::testing::tempTracePath("overlap-alone.sqlite");
  const std::string b = traces::testing::tempTracePath("overlap-shared.sqlite");
  simulate(alone, truth, {}, a);
  const int64_t shared_truth_ns = simulate(shared, truth, {}, b);

  const sim::CalibrationResult cal = sim::calibrateFromRuns({{a, 1}, {b, 1}});
  REQUIRE(cal.calibration.kernel_overlap_efficiency.has_value());
  CHECK(cal.kernel_overlap_samples == 1);
  // Read off the timelines: the throughput while several kernels ran. It
  // comes out a little low, because a weight gradient's bias kernels wait
  // beside the holder and take nothing of the extra (first_holds).
  CHECK(*cal.calibration.kernel_overlap_efficiency == Approx(1.3).epsilon(0.06));

  // Refitted by simulation on the measured machine (what `tandem calibrate
  // --topology` and bench_sim_vs_real do): the simulator shares the GPU
  // exactly like this "hardware", so the same factor comes back.
  sim::CalibrationResult refitted = cal;
  const auto refit = sim::refitOverlapBySimulation(refitted, {{a, 1}, {b, 1}}, sim::loadTopology("h200x2-nv18"));
  REQUIRE(refit.has_value());
  CHECK(refit->runs == 1);
  CHECK(refit->efficiency == Approx(1.3).epsilon(0.02));
  CHECK(refit->mean_abs_error_pct < 0.5);
  CHECK(refitted.kernel_overlap_by_simulation);
  const sim::Calibration loaded = sim::parseCalibration(sim::calibrationToYaml(refitted), "fitted.yaml");
  REQUIRE(loaded.kernel_overlap_efficiency.has_value());
  const sim::RooflineCostModel calibrated(sim::RooflineParams::defaults(), loaded);
  INFO("shared job: truth " << shared_truth_ns << " ns, calibrated " << simulate(shared, calibrated, loaded));
  CHECK(std::fabs(double(simulate(shared, calibrated, loaded) - shared_truth_ns)) / double(shared_truth_ns) < 0.01);
  // An unseen job (other micro-batch and depth): its shapes come from the
  // fitted lines, with and without the stream alike.
  JobSpec other = smallJob(4, 6);
  other.parallel.data_parallel = 1;
  JobSpec other_alone = other;
  other_alone.schedule.weight_gradient_stream = false;
  const double err = std::fabs(double(simulate(other, calibrated, loaded) - simulate(other, truth, {}))) /
                     double(simulate(other, truth, {}));
  const double err_alone =
      std::fabs(double(simulate(other_alone, calibrated, loaded) - simulate(other_alone, truth, {}))) /
      double(simulate(other_alone, truth, {}));
  INFO("unseen job: error " << err << " with the stream, " << err_alone << " on one stream");
  CHECK(err < 0.05);
  CHECK(std::fabs(err - err_alone) < 0.01);
  // Only runs on one stream: nothing to refit.
  sim::CalibrationResult untouched = cal;
  CHECK(!sim::refitOverlapBySimulation(untouched, {{a, 1}}, sim::loadTopology("h200x2-nv18")).has_value());
  CHECK(!untouched.kernel_overlap_by_simulation);

  // Without a run on one stream nothing was measured alone: the shared
  // times are charged evenly and the simulation shares evenly.
  const sim::CalibrationResult only_shared = sim::calibrateFromRuns({{b, 1}});
  CHECK(only_shared.kernel_overlap_samples == 0);
  CHECK(*only_shared.calibration.kernel_overlap_efficiency == 1.0);
}

TEST_CASE("Transfer starts: the last member's arrival, per instance and group", "[calibrate]") {
  auto row = [](int rank, int64_t task, const char* group, int64_t start, int64_t end) {
    traces::CollectiveRow c;
    c.rank = rank, c.task_id = task, c.op = "all_reduce", c.group = group, c.start_ns = start, c.end_ns = end;
    return c;
  };
  const std::vector<traces::CollectiveRow> rows = {
      row(0, 7, "dp", 1000, 2000),  // step 1: rank 0 waits 600 ns for rank 1
      row(1, 7, "dp", 1600, 2000),
      row(0, 7, "dp", 9000, 9500),  // step 2: rank 1 is the early one
      row(1, 7, "dp", 8800, 9500),
      row(0, 8, "dp", 1100, 1900),  // another task overlapping task 7: not its peer
      row(2, 7, "tp", 500, 1500),   // the same task id in another group: not a peer
  };
  const std::vector<int64_t> s = sim::transferStarts(rows);
  CHECK(s == std::vector<int64_t>{1600, 1600, 9000, 9000, 1100, 500});
}

TEST_CASE("comm_slowdown: fitted through NCCL's kernels and an early rank's wait", "[calibrate]") {
  // The "hardware" slows kernels 1.5 times while a collective runs. Real
  // traces show each collective as NCCL's kernel on the comm stream too, and
  // a rank that arrives early spins in it: neither may hide the slowdown
  // (each made the fit clamp to 1 on two H200s, docs/accuracy.md).
  sim::RooflineParams params = sim::RooflineParams::defaults();
  params.comm_slowdown = 1.5;
  params.gemm_depth_half = 0;
  params.gemm_outputs_half_per_sm = 0;
  const sim::RooflineCostModel truth(params);
  const std::string measured = traces::testing::tempTracePath("comm-slowdown.sqlite");
  JobSpec job = smallJob(8, 4);
  job.schedule.weight_gradient_stream = false;  // slowed kernels only, no sharing
  simulate(job, truth, {}, measured);
  auto fitted = [&] {
    const sim::CalibrationResult cal = sim::calibrateFromRuns({{measured, 1}});
    REQUIRE(cal.calibration.comm_slowdown.has_value());
    return *cal.calibration.comm_slowdown;
  };
  CHECK(fitted() == Approx(1.5).epsilon(0.03));
  {
    traces::sql::Db db(measured, SQLITE_OPEN_READWRITE);
    // NCCL's kernels: a kernel activity for every collective, on its stream.
    db.exec("INSERT INTO activities(run, rank, stream, start_ns, end_ns, device, kind, name, task_id, phase, layer, "
            "micro_batch, correlation_id, bytes, flops) SELECT run, rank, stream, start_ns, end_ns, device, 0, name, "
            "task_id, phase, layer, micro_batch, correlation_id, bytes, flops FROM activities WHERE kind = 3");
  }
  CHECK(fitted() == Approx(1.5).epsilon(0.03));
  {
    traces::sql::Db db(measured, SQLITE_OPEN_READWRITE);
    // Rank 1 reaches every collective 300 us early; its kernels then ran
    // at full speed (the transfer had not begun).
    db.exec("UPDATE activities SET start_ns = start_ns - 300000 WHERE rank = 1 AND stream IN "
            "(SELECT DISTINCT stream FROM activities WHERE kind = 3)");
    db.exec("UPDATE collectives SET start_ns = start_ns - 300000 WHERE rank = 1");
  }
  CHECK(fitted() == Approx(1.5).epsilon(0.03));
}

TEST_CASE("Rank speeds: a slower GPU of a multi-rank run is measured from its forward kernels", "[calibrate]") {
  // The "measured" run: two ranks on a machine whose second GPU runs at 0.9
  // of the first's speed. Calibration reads rank 1's forward kernels as 0.9
  // of rank 0's, and writes it as a comment, not a key.
  const sim::RooflineCostModel truth(fairParams());
  JobSpec job = smallJob(8, 2);
  job.schedule.weight_gradient_stream = false;
  const Plan plan = buildPlan(job);
  sim::Topology topo = sim::loadTopology("h200x2-nv18");
  topo.devices[1].speed = 0.9;
  const std::string measured = traces::testing::tempTracePath("slow-rank.sqlite");
  {
    const sim::SimResult r = sim::simulatePlan(plan, topo, truth);
    traces::TraceWriter w(measured);
    sim::writeSimulationTrace(w, plan, topo, r);
  }
  const sim::CalibrationResult cal = sim::calibrateFromRuns({{measured, 1}});
  REQUIRE(cal.rank_speed.count(1) == 1);
  CHECK(cal.rank_speed.at(1) == Approx(0.9).epsilon(0.005));
  CHECK(cal.rank_speed_runs == 1);
  const std::string yaml = sim::calibrationToYaml(cal);
  CHECK(yaml.find("rank 1 0.9000") != std::string::npos);
  CHECK(sim::parseCalibration(yaml, "fitted.yaml").collective_beside.size() ==
        cal.calibration.collective_beside.size());  // still a valid calibration
  // A one-rank run measures none.
  JobSpec one = job;
  one.parallel.data_parallel = 1;
  const std::string single = traces::testing::tempTracePath("one-rank.sqlite");
  simulate(one, truth, {}, single);
  CHECK(sim::calibrateFromRuns({{single, 1}}).rank_speed.empty());
}

TEST_CASE("Multi-rank keys kept from another calibration through a one-rank refit", "[calibrate]") {
  const sim::RooflineCostModel truth = truthModel();
  const std::string measured = traces::testing::tempTracePath("one_rank.sqlite");
  JobSpec job = smallJob(4, 2);
  job.parallel.data_parallel = 1;
  simulate(job, truth, {}, measured);
  sim::CalibrationResult fit = sim::calibrateFromRuns({{measured, 1}});
  REQUIRE(!sim::hasMultiRankKeys(fit));
  const size_t fitted_ops = fit.calibration.ops.size();
  REQUIRE(fitted_ops > 0);

  const std::string base =
      "# Calibration of a two-GPU machine.\n"
      "#   measured by hand\n"
      "version: 1\n"
      "launch_overhead_ns: 999\n"
      "comm_slowdown: 1.4\n"
      "comm_slowdown_by_op:\n  matmul_bwd_weight: 1.5\n"
      "multi_rank_launch_ns: 400\n"
      "collective_start_wait: 0.9\n"
      "collective_beside:\n  \"(none)\": 1.05\n"
      "ops:\n  matmul:\n    ns: 1234\n"
      "collectives:\n  - {op: all_reduce, ranks: 2, latency_ns: 20000, gbps: 300, sizes: [[1048576, 100], [67108864, "
      "350]]}\n";
  sim::keepMultiRankKeys(fit, base, "two.yaml");
  const std::string yaml = sim::calibrationToYaml(fit);
  INFO(yaml);
  CHECK_THAT(yaml, Catch::Contains("comm_slowdown: 1.4000  # kept from two.yaml"));
  CHECK_THAT(yaml, Catch::Contains("multi-rank keys kept from two.yaml, whose header reads:"));
  CHECK_THAT(yaml, Catch::Contains("#     measured by hand"));
  const sim::Calibration back = sim::parseCalibration(yaml, "merged.yaml");
  // The multi-rank keys are the base's ...
  CHECK(*back.comm_slowdown == Approx(1.4));
  CHECK(back.comm_slowdown_by_op.at(OpKind::MatmulBwdWeight) == Approx(1.5));
  CHECK(*back.multi_rank_launch_ns == 400);
  CHECK(*back.collective_start_wait == Approx(0.9));
  CHECK(back.collective_beside.at(sim::kNoKernelBeside) == Approx(1.05));
  REQUIRE(back.collectives.size() == 1);
  CHECK(back.collectives[0].ranks == 2);
  CHECK(back.collectives[0].latency_ns == 20000);
  REQUIRE(back.collectives[0].sizes.size() == 2);
  CHECK(back.collectives[0].sizes[1].second == Approx(350));
  // ... the rest is the fit's: its ops (not the base's matmul), its launch overhead.
  CHECK(back.ops.size() == fitted_ops);
  CHECK(back.ops.at(OpKind::Matmul).all_shapes.has_fit);
  CHECK(back.ops.at(OpKind::Matmul).all_shapes.ns == -1);
  CHECK(back.launch_overhead_ns != std::optional<int64_t>(999));

  // Kept once, the fit has multi-rank keys: a second keep would drop them.
  CHECK_THROWS_WITH(sim::keepMultiRankKeys(fit, base, "two.yaml"), Catch::Contains("multi-rank keys of their own"));
  sim::CalibrationResult fresh = sim::calibrateFromRuns({{measured, 1}});
  CHECK_THROWS_WITH(sim::keepMultiRankKeys(fresh, "version: 1\nlaunch_overhead_ns: 5\n", "plain.yaml"),
                    Catch::Contains("plain.yaml has no multi-rank keys"));
  CHECK_THROWS_AS(sim::keepMultiRankKeys(fresh, "version: 1\ncomm_slowdown: -2\n", "bad.yaml"), sim::CalibrationError);
  // Keys of another kind of GPU are not kept.
  fresh.calibration.gpu = "NVIDIA H200";
  CHECK_THROWS_WITH(sim::keepMultiRankKeys(fresh, "version: 1\ngpu: \"NVIDIA H100 80GB HBM3\"\ncomm_slowdown: 1.4\n",
                                           "h100.yaml"),
                    Catch::Contains("the runs ran on NVIDIA H200, but h100.yaml was measured on NVIDIA H100 80GB HBM3"));
  sim::keepMultiRankKeys(fresh, "version: 1\ngpu: \"NVIDIA H200\"\ncomm_slowdown: 1.4\n", "h200.yaml");
  CHECK(*fresh.calibration.comm_slowdown == Approx(1.4));
}

TEST_CASE("Kernel geometry: each shape's main kernel's blocks, and the room they leave beside them", "[calibrate]") {
  const sim::RooflineCostModel truth = truthModel();
  const JobSpec job = smallJob(8, 4);
  const std::string path = traces::testing::tempTracePath("geometry.sqlite");
  simulate(job, truth, {}, path);
  {
    // The launch geometry a profiled run stores: the data-gradient GEMMs
    // with a block on each of an H200's 132 SMs, the weight-gradient GEMMs
    // with 120, the layernorm backward with many small blocks. One
    // weight-gradient task's longest kernel says 96: the shape keeps the
    // blocks most of its tasks had.
    traces::sql::Db db(path, SQLITE_OPEN_READWRITE);
    auto geometry = [&](const std::string& op, int blocks) {
      db.exec(fmt::format("INSERT INTO activity_geometry SELECT a.id, {}, 1, 1, 384, 1, 1 FROM activities a JOIN "
                          "plan_tasks p ON p.run = a.run AND p.rank = a.rank AND p.task_id = a.task_id WHERE "
                          "p.op = '{}' AND a.kind = 0",
                          blocks, op));
    };
    geometry("matmul_bwd_data", 132);
    geometry("matmul_bwd_weight", 120);
    geometry("layernorm_bwd", 264);
    db.exec("UPDATE activity_geometry SET grid_x = 96 WHERE activity = (SELECT MIN(a.id) FROM activities a JOIN "
            "plan_tasks p ON p.run = a.run AND p.rank = a.rank AND p.task_id = a.task_id WHERE p.op = "
            "'matmul_bwd_weight' AND p.name = (SELECT id FROM strings WHERE value = 'layer0.attn.qkv.bwd_weight.mb0'))");
    // What each data-gradient GEMM block holds, as a profiled run records it
    // (168 registers per thread, 208 KiB of shared memory, clusters of 2).
    db.exec("INSERT INTO kernel_resources SELECT g.activity, 168, 212992, 2, 1, 1 FROM activity_geometry g JOIN "
            "activities a ON a.id = g.activity JOIN plan_tasks p ON p.run = a.run AND p.rank = a.rank AND "
            "p.task_id = a.task_id WHERE p.op = 'matmul_bwd_data'");
    // Their kernels' names, as cuBLASLt's name them: the output tile.
    db.exec("INSERT INTO strings(value) VALUES ('nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT')");
    db.exec("UPDATE activities SET name = (SELECT id FROM strings WHERE value LIKE 'nvjet%') WHERE id IN (SELECT "
            "a.id FROM activities a JOIN plan_tasks p ON p.run = a.run AND p.rank = a.rank AND p.task_id = a.task_id "
            "WHERE p.op = 'matmul_bwd_data' AND a.kind = 0)");
  }
  const sim::CalibrationResult cal = sim::calibrateFromRuns({{path, 1}});
  const std::string yaml = sim::calibrationToYaml(cal);
  const sim::Calibration loaded = sim::parseCalibration(yaml, "geometry.yaml");
  const auto& wgrad = loaded.ops.at(OpKind::MatmulBwdWeight);
  CHECK(wgrad.all_shapes.blocks == 120);
  REQUIRE(!wgrad.shapes.empty());
  for (const auto& [shape, e] : wgrad.shapes) CHECK(e.blocks == 120);
  CHECK(loaded.ops.at(OpKind::MatmulBwdData).all_shapes.blocks == 132);
  // Each data-gradient shape keeps its blocks' resources; the others say none.
  REQUIRE(!loaded.ops.at(OpKind::MatmulBwdData).shapes.empty());
  for (const auto& [shape, e] : loaded.ops.at(OpKind::MatmulBwdData).shapes) {
    CHECK(e.threads == 384);
    CHECK(e.registers == 168);
    CHECK(e.shared_bytes == 212992);
    CHECK(e.cluster == 2);
  }
  CHECK(yaml.find("threads: 384, regs: 168, smem: 212992, cluster: 2, tile: 256x128") != std::string::npos);
  for (const auto& [shape, e] : loaded.ops.at(OpKind::MatmulBwdData).shapes)
    CHECK((e.tile && *e.tile == sim::GemmTile{256, 128}));
  for (const auto& [shape, e] : wgrad.shapes) {
    CHECK(e.threads == -1);
    CHECK(!e.tile);  // its kernels' names (the plan's task names here) hold no tile
  }
  CHECK(loaded.ops.at(OpKind::LayerNormBwd).all_shapes.blocks == 264);
  // No geometry, no blocks: the forward GEMMs' entries say nothing.
  CHECK(loaded.ops.at(OpKind::Matmul).all_shapes.blocks == -1);
  for (const auto& [shape, e] : loaded.ops.at(OpKind::Matmul).shapes) CHECK(e.blocks == -1);

  const sim::RooflineCostModel model(sim::RooflineParams::defaults(), loaded);
  sim::DeviceSpec h200;
  h200.sm_count = 132;
  const Plan plan = buildPlan(job);
  auto task = [&](const std::string& name) -> const Task& {
    for (const Task& t : plan.programs[0].tasks)
      if (t.name == name) return t;
    FAIL("no task " << name);
    return plan.programs[0].tasks[0];
  };
  const Task& dgrad = task("layer1.mlp.fc.bwd_data.mb0");
  CHECK(model.smRoomBeside(dgrad, h200) == sim::SmRoom::None);  // a block on every SM
  CHECK(model.smRoomBeside(task("layer1.mlp.fc.bwd_weight.mb0"), h200) == sim::SmRoom::Some);  // 12 SMs left
  CHECK(model.smRoomBeside(task("layer1.ln2.bwd.mb0"), h200) == sim::SmRoom::Some);  // small blocks
  CHECK(model.smRoomBeside(task("layer1.mlp.fc.fwd.mb0"), h200) == sim::SmRoom::Unknown);
  sim::DeviceSpec bigger = h200;
  bigger.sm_count = 144;  // the same 132 blocks leave 12 SMs of a larger GPU
  CHECK(model.smRoomBeside(dgrad, bigger) == sim::SmRoom::Some);
  // How much room: the SMs without a block, where the blocks take whole SMs.
  CHECK(model.spareSmShare(task("layer1.mlp.fc.bwd_weight.mb0"), h200) == Approx(12.0 / 132));
  CHECK(model.spareSmShare(dgrad, bigger) == Approx(12.0 / 144));
  CHECK(model.spareSmShare(dgrad, h200) == -1);
  CHECK(model.spareSmShare(task("layer1.ln2.bwd.mb0"), h200) == -1);  // room, in an amount blocks do not tell
  // A fixed grid (its blocks gain nothing on the few SMs a holder leaves):
  // the persistent GEMMs, and the layernorm backward's 264 blocks, two per
  // SM here, not on a GPU where they are more than two per SM.
  CHECK(model.fixedGrid(dgrad, h200));
  CHECK(model.fixedGrid(task("layer1.ln2.bwd.mb0"), h200));
  sim::DeviceSpec smaller = h200;
  smaller.sm_count = 100;
  CHECK_FALSE(model.fixedGrid(task("layer1.ln2.bwd.mb0"), smaller));
  CHECK_FALSE(model.fixedGrid(task("layer1.mlp.gelu.fwd.mb0"), h200));  // nothing calibrated of its kind
  // Only under a calibration fitted with that rule (as `tandem calibrate`
  // writes them); an older file keeps the replay its efficiency was fitted
  // with, the GEMMs' last rounds alone.
  CHECK(loaded.fixed_grid_guests);
  CHECK(yaml.find("fixed_grid_guests: true") != std::string::npos);
  sim::Calibration older = loaded;
  older.fixed_grid_guests = false;
  const sim::RooflineCostModel older_model(sim::RooflineParams::defaults(), older);
  CHECK_FALSE(older_model.fixedGrid(task("layer1.ln2.bwd.mb0"), h200));
  CHECK(older_model.fixedGrid(dgrad, h200));
  CHECK_THROWS_WITH(sim::parseCalibration("version: 1\nfixed_grid_guests: maybe\n", "bad.yaml"),
                    Catch::Contains("fixed_grid_guests: expected true or false"));
  // A shape the runs did not have takes its nearest measured one's blocks.
  JobSpec wider = job;
  wider.training.micro_batch = 12;
  const Plan other = buildPlan(wider);
  for (const Task& t : other.programs[0].tasks)
    if (t.name == "layer1.mlp.fc.bwd_data.mb0") {
      REQUIRE(loaded.ops.at(OpKind::MatmulBwdData).shapes.count(sim::shapeKey(t)) == 0);
      CHECK(model.kernelBlocks(t, h200) == 132);
    }
  // A GEMM far larger than the measured ones (Llama 2 7B's MLP beside this
  // small model's): its output holds two waves of even the largest tile,
  // so it fills the SMs, where its nearest measured neighbour's 120 blocks
  // would leave 12 free for the kernels beside it.
  JobSpec large = job;
  large.model.hidden = 4096;
  large.model.heads = 32;
  const Plan big = buildPlan(large);
  int found = 0;
  for (const Task& t : big.programs[0].tasks)
    if (t.name == "layer1.mlp.fc.bwd_weight.mb0") {
      ++found;
      REQUIRE(loaded.ops.at(OpKind::MatmulBwdWeight).shapes.count(sim::shapeKey(t)) == 0);
      CHECK(sim::gemmOutputTiles(t) == 64 * 32);  // dW 16384 x 4096
      CHECK(model.kernelBlocks(t, h200) == 132);
      CHECK(model.smRoomBeside(t, h200) == sim::SmRoom::None);
      CHECK(model.spareSmShare(t, h200) == -1);
      sim::DeviceSpec smaller = h200;
      smaller.sm_count = 108;
      CHECK(model.kernelBlocks(t, smaller) == 108);
    }
  CHECK(found == 1);
  // Calibrations without geometry leave kernels as before.
  CHECK(sim::RooflineCostModel().smRoomBeside(dgrad, h200) == sim::SmRoom::Unknown);
  // dx [4096, 512] in 256 x 128 tiles: 2 x 32 = 64 on 132 blocks, one round.
  CHECK(model.lastRound(dgrad, h200).share == 0);
  CHECK(model.lastRound(task("layer1.mlp.fc.bwd_weight.mb0"), h200).share == 0);  // no tile known
}

TEST_CASE("GEMM tiles: read off kernel names, written in calibrations, and the last round they leave", "[calibrate]") {
  using sim::GemmTile;
  CHECK(sim::gemmTileFromKernelName("nvjet_sm90_tst_320x128_64x3_2x1_v_bz_coopB_NTT") == GemmTile{320, 128});
  CHECK(sim::gemmTileFromKernelName("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_bias_TNN") == GemmTile{128, 256});
  CHECK(sim::gemmTileFromKernelName(
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_aux_bf16_dgelu") ==
        GemmTile{128, 128});
  CHECK(sim::gemmTileFromKernelName("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_2x1x1_0_tnn") ==
        GemmTile{128, 256});
  CHECK(!sim::gemmTileFromKernelName("_ZN6tandem4cuda45_GLOBAL__N__98279acc_12_layernorm_cu_80422fea21layernormBackwardWideILi2EE"));
  CHECK(!sim::gemmTileFromKernelName("nvjet_sm90_tst_4x4096_64x3"));  // no edge of 8 to 512 and a separator after
  CHECK(!sim::gemmTileFromKernelName(""));
  CHECK(sim::parseGemmTile("320x128") == GemmTile{320, 128});
  CHECK(!sim::parseGemmTile("320x128x64"));
  CHECK(!sim::parseGemmTile("320"));
  CHECK(!sim::parseGemmTile("1024x128"));

  const std::string yaml = "version: 1\nops:\n  matmul_bwd_data:\n    shapes:\n"
                           "      \"m=8192 n=2048 k=8192\": {ns: 380000, blocks: 132, tile: 256x128}\n"
                           "      \"m=8192 n=2048 k=2048\": {ns: 95000, blocks: 128, tile: 256x128}\n";
  const sim::Calibration cal = sim::parseCalibration(yaml, "tiles.yaml");
  REQUIRE(cal.ops.at(OpKind::MatmulBwdData).shapes.at("m=8192 n=2048 k=8192").tile == GemmTile{256, 128});
  CHECK_THROWS_WITH(sim::parseCalibration("version: 1\nops:\n  matmul:\n    shapes:\n      \"m=1 n=1 k=1\": {ns: 1, "
                                          "tile: 320by128}\n",
                                          "bad.yaml"),
                    Catch::Contains("bad.yaml:5") && Catch::Contains("tile") && Catch::Contains("320by128"));
  const sim::RooflineCostModel model(sim::RooflineParams::defaults(), cal);
  CHECK(model.hasLastRounds());
  CHECK_FALSE(sim::RooflineCostModel().hasLastRounds());
  sim::DeviceSpec h200;
  h200.sm_count = 132;
  Task t;
  t.kind = TaskKind::Kernel;
  t.op = OpKind::MatmulBwdData;
  t.attrs.m = 8192, t.attrs.n = 2048, t.attrs.k = 8192;  // dx [8192, 8192]
  // cuBLASLt's M runs along the output's columns: 8192 / 256 x 8192 / 128.
  CHECK(sim::gemmOutputTiles(t, GemmTile{256, 128}) == 32 * 64);
  CHECK(sim::gemmOutputTiles(t, GemmTile{128, 64}) == 64 * 128);
  // 2048 tiles on 132 blocks: 16 rounds, the last with 2048 - 15 x 132 = 68
  // tiles, leaving 64 SMs.
  const sim::LastRound lr = model.lastRound(t, h200);
  CHECK(lr.share == Approx(1.0 / 16));
  CHECK(lr.spare == Approx(64.0 / 132));
  // dx [8192, 2048]: 8 x 64 = 512 tiles on 128 blocks, 4 full rounds.
  t.attrs.k = 2048;
  CHECK(model.lastRound(t, h200).share == 0);
  // A shape not calibrated takes its nearest one's tile and blocks: dx
  // [8192, 7936], 31 x 64 = 1984 tiles on 132 blocks, the last of 16 rounds
  // with 4.
  t.attrs.k = 7936;
  const sim::LastRound near = model.lastRound(t, h200);
  CHECK(near.share == Approx(1.0 / 16));
  CHECK(near.spare == Approx(128.0 / 132));
  // Other kinds have no tile.
  t.op = OpKind::LayerNormBwd;
  CHECK(model.lastRound(t, h200).share == 0);
}

namespace {

// A weight-gradient calibration of two measured shapes (YAML lines of the
// shapes map), and a weight-gradient task dW [n, k] over m tokens.
sim::RooflineCostModel weightGradientModel(const std::string& shape_lines) {
  const std::string yaml = "version: 1\nops:\n  matmul_bwd_weight:\n    shapes:\n" + shape_lines;
  return sim::RooflineCostModel(sim::RooflineParams::defaults(), sim::parseCalibration(yaml, "wgrad.yaml"));
}

Task weightGradient(int64_t m, int64_t n, int64_t k) {
  Task t;
  t.kind = TaskKind::Kernel;
  t.op = OpKind::MatmulBwdWeight;
  t.attrs.m = m, t.attrs.n = n, t.attrs.k = k;
  return t;
}

}  // namespace

TEST_CASE("GEMM kernels: a shape not measured takes the tile and blocks of the one nearest in output shape",
          "[calibrate]") {
  sim::DeviceSpec h100;
  h100.sm_count = 132;
  // GPT-2 1.5B's MLP weight gradient over 8192 tokens, dW [6400, 1600]: the
  // sweep measured it at 16384 tokens (320 x 128, the tile the traces show
  // at 8192 too) and a Llama output [6144, 2048] at 8192 (256 x 128).
  const sim::RooflineCostModel tiles =
      weightGradientModel("      \"m=16384 n=6400 k=1600\": {ns: 537000, blocks: 132, tile: 320x128}\n"
                          "      \"m=8192 n=6144 k=2048\": {ns: 300000, blocks: 132, tile: 256x128}\n");
  // 1600 / 320 x 6400 / 128 = 250 tiles: two rounds, the last with 118
  // (256 x 128 would cut 350: three rounds).
  const sim::LastRound lr = tiles.lastRound(weightGradient(8192, 6400, 1600), h100);
  CHECK(lr.share == Approx(1.0 / 2));
  CHECK(lr.spare == Approx(14.0 / 132));

  // dW [1024, 1024] over 16384 tokens, a single round of tiles: measured at
  // 32768 tokens (a 128-block kernel) and, at the same depth, for the output
  // [1024, 768] (120 blocks). The blocks come with the kernel, as the tile
  // does: the same output at another depth's.
  const sim::RooflineCostModel model =
      weightGradientModel("      \"m=32768 n=1024 k=1024\": {ns: 120000, blocks: 128, tile: 256x128}\n"
                          "      \"m=16384 n=1024 k=768\": {ns: 50000, blocks: 120, tile: 128x128}\n");
  const Task t = weightGradient(16384, 1024, 1024);
  CHECK(model.kernelBlocks(t, h100) == 128);
  CHECK(model.spareSmShare(t, h100) == Approx(4.0 / 132));
  // Evenly weighed the same-depth shape (ln(1024/768) = 0.29 against ln 2)
  // would have given 120.
  CHECK(sim::nearestShapeKey(sim::shapeKey(t), {"m=32768 n=1024 k=1024", "m=16384 n=1024 k=768"}) ==
        "m=16384 n=1024 k=768");
}

TEST_CASE("Calibration files: blocks are whole numbers", "[calibrate]") {
  const sim::Calibration ok = sim::parseCalibration(
      "version: 1\nops:\n  matmul_bwd_data:\n    blocks: 132\n    shapes:\n      \"m=1 n=2 k=3\": {ns: 10, blocks: 120}\n",
      "ok.yaml");
  CHECK(ok.ops.at(OpKind::MatmulBwdData).all_shapes.blocks == 132);
  CHECK(ok.ops.at(OpKind::MatmulBwdData).shapes.at("m=1 n=2 k=3").blocks == 120);
  CHECK_THROWS_WITH(sim::parseCalibration("version: 1\nops:\n  matmul:\n    blocks: 1.5\n", "half.yaml"),
                    Catch::Contains("half.yaml:4") && Catch::Contains("whole number of thread blocks"));
  CHECK_THROWS_WITH(sim::parseCalibration("version: 1\nops:\n  matmul:\n    blocks: 0\n", "zero.yaml"),
                    Catch::Contains("ops.matmul.blocks") && Catch::Contains("out of range"));
  // A shape's block resources: read back, and a value no SM allows refused.
  const std::string shape = "version: 1\nops:\n  matmul:\n    shapes:\n      \"m=1 n=2 k=3\": {ns: 100, blocks: 132, ";
  const sim::Calibration res = sim::parseCalibration(shape + "threads: 384, regs: 168, smem: 212992, cluster: 2}\n", "r.yaml");
  const sim::CostEntry& e = res.ops.at(OpKind::Matmul).shapes.at("m=1 n=2 k=3");
  CHECK(e.threads == 384);
  CHECK(e.registers == 168);
  CHECK(e.shared_bytes == 212992);
  CHECK(e.cluster == 2);
  CHECK_THROWS_WITH(sim::parseCalibration(shape + "regs: 300}\n", "regs.yaml"),
                    Catch::Contains("regs.yaml:5") && Catch::Contains("regs") && Catch::Contains("out of range"));
  CHECK_THROWS_WITH(sim::parseCalibration(shape + "smem: 1.5}\n", "smem.yaml"),
                    Catch::Contains("smem") && Catch::Contains("whole number"));
  CHECK_THROWS_WITH(sim::parseCalibration("version: 1\nops:\n  matmul:\n    regs: 64\n", "kind.yaml"),
                    Catch::Contains("unknown key"));
}

TEST_CASE("An FP8 run calibrates its FP8 GEMMs under shapes of their own, out of the op kind's fit",
          "[calibrate][fp8]") {
  JobSpec job = smallJob(8, 4);
  job.model.family = ModelFamily::Llama;
  job.model.kv_heads = 4;
  job.model.mlp_ratio = 2.75;
  job.model.tied_embeddings = false;
  job.training.precision = Precision::FP8;
  job.training.fp8_scaling = Fp8Scaling::Current;
  const sim::RooflineCostModel truth = truthModel();
  const std::string measured = traces::testing::tempTracePath("measured_fp8.sqlite");
  const int64_t truth_ns = simulate(job, truth, {}, measured);
  const sim::CalibrationResult cal = sim::calibrateFromRuns({{measured, 1}});
  // The blocks' GEMMs under "fp8=1" keys; the LM head's (bf16) under its own.
  int fp8_shapes = 0, bf16_shapes = 0;
  for (const OpKind op : {OpKind::Matmul, OpKind::MatmulBwdData, OpKind::MatmulBwdWeight}) {
    const auto it = cal.calibration.ops.find(op);
    REQUIRE(it != cal.calibration.ops.end());
    for (const auto& [shape, e] : it->second.shapes) (shape.find("fp8=1") != std::string::npos ? fp8_shapes : bf16_shapes)++;
  }
  CHECK(fp8_shapes >= 9);   // three roles of the blocks' four linear layers, some sharing a shape
  CHECK(bf16_shapes == 3);  // the LM head's three GEMMs
  // The FP8 job again from that calibration: its own GEMMs' times, not
  // their times taken for bf16 ones and sped up once more.
  const sim::Calibration loaded = sim::parseCalibration(sim::calibrationToYaml(cal), "fp8.yaml");
  const sim::RooflineCostModel calibrated(fairParams(), loaded);
  const int64_t again_ns = simulate(job, calibrated, loaded);
  INFO("FP8 job: truth " << truth_ns << " ns, from its calibration " << again_ns << " ns");
  CHECK(std::fabs(double(again_ns - truth_ns)) / double(truth_ns) < 0.02);
  // Task by task: the largest FP8 GEMM as measured (filed under a bf16 key,
  // it came out at its time over the FP8 speed-up once more).
  const Plan plan = buildPlan(job);
  const sim::DeviceSpec gpu = sim::loadTopology("h200x2-nv18").devices.at(0);
  const Task* largest = nullptr;
  for (const Task& t : plan.programs[0].tasks)
    if (t.attrs.fp8 && t.fused_into < 0 && (!largest || t.flops > largest->flops)) largest = &t;
  REQUIRE(largest != nullptr);
  const double want = double(truth.taskNs(*largest, gpu, Precision::FP8));
  const double got = double(calibrated.taskNs(*largest, gpu, Precision::FP8));
  INFO(largest->name << ": truth " << want << " ns, calibrated " << got << " ns");
  CHECK(std::fabs(got - want) / want < 0.05);
  // And the bf16 GEMM of that shape does not take the FP8 kernel's time.
  JobSpec bf16_job = job;
  bf16_job.training.precision = Precision::BF16;
  const Plan bf16_plan = buildPlan(bf16_job);
  const Task* same = nullptr;
  for (const Task& t : bf16_plan.programs[0].tasks)
    if (t.name == largest->name) same = &t;
  REQUIRE(same != nullptr);
  const double bf16_ns = double(calibrated.taskNs(*same, gpu, Precision::BF16));
  INFO(same->name << " in bf16: " << bf16_ns << " ns");
  CHECK(bf16_ns > 1.2 * want);
}
