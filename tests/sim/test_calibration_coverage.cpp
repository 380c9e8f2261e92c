// Which of a plan's kernel tasks a calibration measured
// (simulator/cost/calibration_coverage.h), against the calibration that comes
// with tandem.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/plan/planner.h"
#include "engine/spec/job.h"
#include "simulator/cost/calibration_coverage.h"
#include "simulator/topology/topology_presets.h"

using namespace tandem;

namespace {

const sim::Calibration& committed() {
  static const sim::Calibration cal =
      sim::loadCalibration(std::string(TANDEM_SOURCE_DIR) + "/resources/calibration/h200x2-nv18.yaml");
  return cal;
}

const sim::DeviceSpec& h200() {
  static const sim::Topology topo = sim::loadTopology("h200x2-nv18");
  return topo.devices.at(0);
}

sim::CalibrationCoverage coverage(const Plan& plan, const sim::RooflineCostModel& cost) {
  return sim::calibrationCoverage(plan, cost, h200());
}

Plan gpt2(int micro_batch, int lm_head_chunks = 1) {
  JobSpec job = defaultJob();
  job.parallel.data_parallel = 1;
  job.training.micro_batch = micro_batch;
  job.schedule.lm_head_chunks = lm_head_chunks;
  return buildPlan(job);
}

}  // namespace

TEST_CASE("A plan of the calibrated shapes is covered, one between them interpolated", "[calibrate][coverage]") {
  const sim::RooflineCostModel cost(sim::RooflineParams::defaults(), committed());
  const sim::CalibrationCoverage at16 = coverage(gpt2(16), cost);
  CHECK(at16.kernel_tasks > 200);
  CHECK(at16.measured == at16.kernel_tasks);
  CHECK(at16.op_kind_fit == 0);
  CHECK(at16.roofline == 0);
  CHECK_FALSE(sim::calibrationCoverageWarning(at16));
  // Micro-batch 12 lies between the measured 8 and 16 in one number.
  const sim::CalibrationCoverage at12 = coverage(gpt2(12), cost);
  CHECK(at12.interpolated > 100);
  CHECK(at12.op_kind_fit == 0);
  CHECK_FALSE(sim::calibrationCoverageWarning(at12));
}

TEST_CASE("Shapes outside the calibrated ones are counted and named", "[calibrate][coverage]") {
  const sim::RooflineCostModel cost(sim::RooflineParams::defaults(), committed());
  // The LM head in 16 groups of 1024 tokens was one of the calibration's
  // runs: covered.
  const sim::CalibrationCoverage sixteen = coverage(gpt2(16, 16), cost);
  CHECK(sixteen.op_kind_fit == 0);
  CHECK_FALSE(sim::calibrationCoverageWarning(sixteen));
  // In 32 groups: GEMMs and cross-entropy of 512 tokens, below the smallest
  // measured LM head: four tasks per group.
  const sim::CalibrationCoverage split = coverage(gpt2(16, 32), cost);
  CHECK(split.op_kind_fit == 4 * 32);
  // The LM head's GEMMs and cross-entropy: a sizeable part of the kernel
  // time, taken from the op kinds' fits.
  CHECK(double(split.op_kind_fit_ns) > 0.05 * double(split.kernel_ns));
  CHECK(split.op_kind_fit_ns < split.kernel_ns / 2);
  REQUIRE(split.unmeasured_shapes.size() == 4);
  CHECK(split.unmeasured_shapes[0] == "matmul m=512 n=50304 k=768");
  const auto warning = sim::calibrationCoverageWarning(split);
  REQUIRE(warning);
  CHECK_THAT(*warning, Catch::StartsWith("the calibration did not measure 128 of the plan's " +
                                         std::to_string(split.kernel_tasks) +
                                         " kernel tasks, "));
  CHECK_THAT(*warning, Catch::Contains("% of their time (4 shapes: matmul m=512 n=50304 k=768, "));
  CHECK_THAT(*warning, Catch::Contains(" and 1 more), nor two shapes around them"));
  // Micro-batch 32, above every measured shape: nearly every task.
  const sim::CalibrationCoverage at32 = coverage(gpt2(32), cost);
  CHECK(at32.op_kind_fit > at32.kernel_tasks * 9 / 10);
}

TEST_CASE("Without a calibration nothing is said; a kind calibrated as a whole covers every shape",
          "[calibrate][coverage]") {
  const sim::RooflineCostModel roofline;
  const sim::CalibrationCoverage c = coverage(gpt2(16), roofline);
  CHECK(c.roofline == c.kernel_tasks);
  CHECK_FALSE(sim::calibrationCoverageWarning(c));
  // One op kind timed for all its shapes, one at a single shape.
  const sim::Calibration cal = sim::parseCalibration(
      "version: 1\nops:\n  layernorm:\n    ns: 1000\n  matmul:\n    shapes:\n      \"m=1 n=2 k=3\": {ns: 5}\n",
      "two.yaml");
  const sim::RooflineCostModel cost(sim::RooflineParams::defaults(), cal);
  const sim::CalibrationCoverage mixed = coverage(gpt2(16), cost);
  CHECK(mixed.measured == 25);  // the layernorms (12 x 2 and the final one)
  CHECK(mixed.op_kind_fit > 0);  // every matmul
  CHECK(mixed.roofline == mixed.kernel_tasks - mixed.measured - mixed.op_kind_fit);
  CHECK(sim::calibrationCoverageWarning(mixed));
}

TEST_CASE("A shape outside the calibrated ones is not worth a warning below 1% of the kernel time",
          "[calibrate][coverage]") {
  // Selective recompute on 4 ranks, micro-batch 8, two micro-batches per
  // step: one data-gradient GEMM of a shape the calibration has not seen,
  // among 550 measured tasks.
  JobSpec job = defaultJob();
  job.parallel.data_parallel = 4;
  job.training.micro_batch = 8;
  job.training.grad_accum = 2;
  job.recompute.policy = RecomputePolicy::Selective;
  const sim::RooflineCostModel cost(sim::RooflineParams::defaults(), committed());
  const sim::CalibrationCoverage c = coverage(buildPlan(job), cost);
  REQUIRE(c.op_kind_fit >= 1);
  CHECK(double(c.op_kind_fit_ns) < sim::kCoverageWarnShare * double(c.kernel_ns));
  CHECK_FALSE(sim::calibrationCoverageWarning(c));
}

TEST_CASE("A task's time and the rule it came from come from one lookup", "[calibrate][coverage]") {
  const Plan plan = gpt2(16);
  const Task* gemm = nullptr;
  const Task* load = nullptr;
  for (const Task& t : plan.programs[0].tasks) {
    if (!gemm && t.op == OpKind::Matmul && t.fused_into < 0) gemm = &t;
    if (!load && t.op == OpKind::LoadBatch) load = &t;
  }
  REQUIRE(gemm);
  const std::string key = sim::shapeKey(*gemm);
  // A shape entry with its blocks alone says nothing about time: the task
  // takes its op kind's efficiency, and the rule says so.
  const sim::Calibration blocks_only = sim::parseCalibration(
      "version: 1\nops:\n  matmul:\n    flops_efficiency: 0.5\n    shapes:\n      \"" + key +
          "\": {blocks: 132}\n      \"m=1 n=2 k=3\": {ns: 5}\n",
      "blocks.yaml");
  const sim::Calibration whole_kind =
      sim::parseCalibration("version: 1\nops:\n  matmul:\n    flops_efficiency: 0.5\n", "kind.yaml");
  const sim::RooflineCostModel with_blocks(sim::RooflineParams::defaults(), blocks_only);
  const sim::RooflineCostModel by_kind(sim::RooflineParams::defaults(), whole_kind);
  const auto fit = with_blocks.taskTime(*gemm, h200(), Precision::BF16);
  const auto kind = by_kind.taskTime(*gemm, h200(), Precision::BF16);
  CHECK(fit.source == sim::TimeSource::OpKindFit);
  CHECK(kind.source == sim::TimeSource::Measured);  // a kind with no shapes covers every shape
  CHECK(fit.ns == kind.ns);
  CHECK(fit.ns == with_blocks.taskNs(*gemm, h200(), Precision::BF16));
  // A timed shape entry is measured and gives its time.
  const sim::Calibration timed = sim::parseCalibration(
      "version: 1\nops:\n  matmul:\n    shapes:\n      \"" + key + "\": {ns: 777}\n", "timed.yaml");
  const sim::RooflineCostModel measured(sim::RooflineParams::defaults(), timed);
  const auto m = measured.taskTime(*gemm, h200(), Precision::BF16);
  CHECK(m.source == sim::TimeSource::Measured);
  CHECK(m.ns == 777);
  // The batch's copy to the GPU is not a kernel, calibrated or not.
  REQUIRE(load);
  CHECK(measured.taskTime(*load, h200(), Precision::BF16).source == sim::TimeSource::NoKernel);
}

TEST_CASE("A GEMM kind's fit runs an unmeasured shape no faster than its fastest measured one",
          "[calibrate][coverage]") {
  const Plan plan = gpt2(16);
  const Task* gemm = nullptr;
  for (const Task& t : plan.programs[0].tasks)
    if (!gemm && t.op == OpKind::Matmul && t.fused_into < 0) gemm = &t;
  REQUIRE(gemm);
  REQUIRE(sim::gemmKeyFlops(sim::shapeKey(*gemm)));
  CHECK(*sim::gemmKeyFlops("m=1024 n=1024 k=512 epi=gelu") == Approx(2.0 * 1024 * 1024 * 512));
  CHECK_FALSE(sim::gemmKeyFlops("b=16 t=1024 c=768 h=12"));
  // A fit of 100 ns per GFLOP (10 PFLOP/s: what an additive fit can promise
  // far from its shapes) beside a measured shape that ran 2 m n k FLOPs in
  // 10 us, and a slow tiny one that does not lower the bound.
  const std::string fit = "    fit: {base_ns: 0, ns_per_gflop: 100, ns_per_mb: 0}\n";
  const sim::Calibration bounded = sim::parseCalibration(
      "version: 1\nops:\n  matmul:\n" + fit +
          "    shapes:\n      \"m=1024 n=1024 k=1024\": {ns: 10000}\n      \"m=1 n=2 k=3\": {ns: 5000}\n",
      "bounded.yaml");
  const sim::Calibration fit_only = sim::parseCalibration("version: 1\nops:\n  matmul:\n" + fit, "fit.yaml");
  const sim::RooflineCostModel with_shapes(sim::RooflineParams::defaults(), bounded);
  const sim::RooflineCostModel without(sim::RooflineParams::defaults(), fit_only);
  const auto t = with_shapes.taskTime(*gemm, h200(), Precision::BF16);
  CHECK(t.source == sim::TimeSource::OpKindFit);
  const double fastest = 2.0 * 1024 * 1024 * 1024 / 10000.0;  // FLOP per ns
  CHECK(t.ns == int64_t(std::ceil(gemm->flops / fastest)));
  CHECK(t.ns > std::llround(100 * gemm->flops * 1e-9));
  // Without a measured shape the fit is all there is (a kind measured as a
  // whole).
  CHECK(without.taskTime(*gemm, h200(), Precision::BF16).ns == std::llround(100 * gemm->flops * 1e-9));
}

TEST_CASE("The Llama 2 7B calibration measured every kernel of the job, on one rank and on eight",
          "[calibrate][coverage][llama]") {
  const sim::Calibration seven =
      sim::loadCalibration(std::string(TANDEM_SOURCE_DIR) + "/resources/calibration/h200-llama2-7b.yaml");
  const sim::RooflineCostModel cost(sim::RooflineParams::defaults(), seven);
  JobSpec job = parseJob(std::string(builtinJobText("llama2-7b")), "llama2-7b");
  const Plan eight = buildPlan(job);  // as its file gives it: 8 ranks, parameters sharded
  job.parallel.data_parallel = 1;
  job.parallel.shard_parameters = false;
  const Plan one = buildPlan(job);  // as it was profiled on one H200
  const sim::CalibrationCoverage c1 = coverage(one, cost);
  CHECK(c1.kernel_tasks > 3000);
  CHECK(c1.measured == c1.kernel_tasks);
  CHECK_FALSE(sim::calibrationCoverageWarning(c1));
  // Sharded over eight, the optimizer's tasks take a shard's shapes, which
  // the one-GPU run did not have: small, and no warning for them.
  const sim::CalibrationCoverage c8 = coverage(eight, cost);
  INFO("8 ranks: " << c8.measured << " measured, " << c8.interpolated << " interpolated, " << c8.op_kind_fit
                   << " from the op kind's fit, " << c8.roofline << " roofline of " << c8.kernel_tasks);
  CHECK(c8.measured > c8.kernel_tasks * 9 / 10);
  CHECK(c8.roofline == 0);
  CHECK_FALSE(sim::calibrationCoverageWarning(c8));
  // The shipped GPT-2 calibration measured none of its GEMM shapes.
  const sim::RooflineCostModel gpt2_cost(sim::RooflineParams::defaults(), committed());
  CHECK(sim::calibrationCoverageWarning(coverage(one, gpt2_cost)));
}

TEST_CASE("How well a calibration reads what it interpolates: each measured shape read off the others",
          "[calibrate][coverage][interpolation]") {
  // Three GEMM shapes along m, their time over the ideal (1 GFLOP per ms at
  // these peaks) 9, 3 and 1.
  const std::string yaml = "version: 1\nops:\n  matmul:\n    shapes:\n"
                           "      \"m=1024 n=512 k=512\": {ns: 9000000, gflop: 1, mb: 0}\n"
                           "      \"m=2048 n=512 k=512\": {ns: 6000000, gflop: 2, mb: 0}\n"
                           "      \"m=4096 n=512 k=512\": {ns: 4000000, gflop: 4, mb: 0}\n";
  sim::RooflineParams params = sim::RooflineParams::defaults();
  params.launch_overhead_ns = 0;  // the fixed part of each time: none
  const sim::RooflineCostModel model(params, sim::parseCalibration(yaml, "three.yaml"));
  sim::DeviceSpec device;
  device.bf16_flops = 1e12;  // 1000 FLOP per ns
  device.hbm_gbps = 1e9;
  std::vector<double> errors = model.neighbourReadErrors(OpKind::Matmul, device, Precision::BF16);
  REQUIRE(errors.size() == 3);
  std::sort(errors.begin(), errors.end());
  // m=2048 between the other two (a factor 4 apart): slowness sqrt(9 x 1),
  // exactly as measured.
  CHECK(errors[0] == Approx(0.0).margin(1e-6));
  // m=1024 off the trend of the two above it, which goes on past 3 x 1.1
  // and stops there: 3.3 against 9.
  CHECK(errors[1] == Approx(1 - 3.3 / 9).epsilon(1e-4));
  // m=4096 likewise: 3 / 1.1 = 2.73 against 1.
  CHECK(errors[2] == Approx(3 / 1.1 - 1).epsilon(1e-4));
  // A kind without recorded work has nothing to read off.
  CHECK(model.neighbourReadErrors(OpKind::Attention, device, Precision::BF16).empty());

  // Pooled over the kinds a plan interpolates, weighted by its time there.
  sim::CalibrationCoverage c;
  c.kernel_tasks = 10;
  c.measured = 4;
  c.interpolated = 6;
  c.kernel_ns = 1000;
  c.measured_ns = 400;
  c.interpolated_ns = 600;
  c.interpolated_ns_by_op[OpKind::Matmul] = 600;
  const auto accuracy = sim::neighbourReadAccuracy(c, model, device, Precision::BF16);
  REQUIRE(accuracy);
  CHECK(accuracy->shapes == 3);
  CHECK(accuracy->median == Approx(errors[1]));
  CHECK(accuracy->p90 == Approx(errors[2]));
  const auto line = sim::calibrationCoverageSummary(c, accuracy);
  REQUIRE(line);
  CHECK(line->find("kernel time 40% measured, 60% read off measured neighbours; read so, 3 measured shapes of those "
                   "kinds come 63.3% off at the median, 172.7% at p90") == 0);
  // A share of the time read outside the measured shapes' range is named
  // with its largest shape; under 1% of the kernel time it goes unsaid.
  sim::CalibrationCoverage past = c;
  past.beyond_ns = 300;
  past.beyond_ns_by_shape["attention b=1 t=65536 c=768 h=12 (b x kv, t)"] = 200;
  past.beyond_ns_by_shape["matmul m=65536 n=768 k=768 (m)"] = 100;
  const auto past_line = sim::calibrationCoverageSummary(past, accuracy);
  REQUIRE(past_line);
  CHECK(past_line->find("60% read off measured neighbours (30% outside the measured shapes' range in some number, "
                        "most of it attention b=1 t=65536 c=768 h=12 (b x kv, t): read by the trend of the nearest") !=
        std::string::npos);
  past.beyond_ns = 9;
  CHECK(sim::calibrationCoverageSummary(past, accuracy)->find("outside the measured") == std::string::npos);
  // Nothing interpolated: no reading to report; no calibration: no line.
  sim::CalibrationCoverage all_measured = c;
  all_measured.interpolated = 0;
  all_measured.interpolated_ns = 0;
  all_measured.interpolated_ns_by_op.clear();
  all_measured.measured_ns = 1000;
  CHECK_FALSE(sim::neighbourReadAccuracy(all_measured, model, device, Precision::BF16));
  CHECK(sim::calibrationCoverageSummary(all_measured, std::nullopt) == "kernel time 100% measured");
  CHECK_FALSE(sim::calibrationCoverageSummary(sim::CalibrationCoverage{}, std::nullopt));
}
