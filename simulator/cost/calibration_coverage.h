#pragma once
// How much of a plan a calibration measured. A calibration times each op
// kind at the shapes its runs had; a task of another shape is interpolated
// between two measured ones when it lies between them in one number, and
// otherwise takes its op kind's fit over all measured shapes, which can be
// far off outside them (the LM head in groups of 1024 tokens, below the
// smallest measured 4096: twice the measured cost, docs/accuracy.md).
// tandem simulate and the GUI's what-if say so, when such tasks hold at
// least 1% of the kernel time, rather than let such a step pass for a
// calibrated one.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/plan/plan.h"
#include "simulator/cost/cost_model.h"
#include "simulator/topology/topology.h"

namespace tandem::sim {

struct CalibrationCoverage {
  int kernel_tasks = 0;  // tasks that launch a kernel, over every rank program once
  int measured = 0;
  int interpolated = 0;
  int op_kind_fit = 0;  // outside the measured shapes of a calibrated op kind
  int roofline = 0;     // op kinds the calibration has no entry for
  // Kernel time alone, summed over the tasks, and its part in tasks that
  // took their op kind's fit (ns on the device the coverage was taken for).
  int64_t kernel_ns = 0;
  int64_t op_kind_fit_ns = 0;
  int64_t measured_ns = 0, interpolated_ns = 0, roofline_ns = 0;
  // The interpolated kernel time per op kind (what neighbourReadAccuracy
  // weighs each kind's errors by).
  std::map<OpKind, int64_t> interpolated_ns_by_op;
  // Of the interpolated time, the part read past every measured shape of
  // its kind in some number (RooflineCostModel::fieldsBeyondMeasured), and
  // per such shape, with the numbers it lies outside the range of
  // ("attention b=1 t=131072 c=4096 h=32 kv=8 (t)"), its time.
  int64_t beyond_ns = 0;
  std::map<std::string, int64_t> beyond_ns_by_shape;
  // "matmul m=1024 n=50304 k=768": each shape that took its op kind's fit,
  // once, in plan order.
  std::vector<std::string> unmeasured_shapes;
};

// Times are taken on `device` (a topology's first GPU will do: the
// calibration has one kind).
CalibrationCoverage calibrationCoverage(const Plan& plan, const RooflineCostModel& cost, const DeviceSpec& device);

// The share of the kernel time below which tasks outside the measured
// shapes go unmentioned (a single small GEMM of another shape among
// hundreds of measured ones moves a step by less than runs vary).
inline constexpr double kCoverageWarnShare = 0.01;

// One line when a calibration is in use (some task measured or
// interpolated) and tasks that take their op kind's fit hold at least
// kCoverageWarnShare of the kernel time, naming the first shapes; nullopt
// otherwise (without a calibration the roofline is the model, and saying
// so on every run would be noise).
std::optional<std::string> calibrationCoverageWarning(const CalibrationCoverage& coverage);

// How well the calibration reads the times it interpolates: every measured
// shape of the kinds the plan interpolates, read off the others as if it
// had not been measured (RooflineCostModel::neighbourReadErrors), each
// kind's errors weighted by the plan's interpolated time of that kind.
// On the held-out jobs (docs/accuracy.md) the interpolated kernels' real
// errors came within a factor of about two of these, either way; a shape
// far from every measured one can read worse.
struct NeighbourReadAccuracy {
  int shapes = 0;              // measured shapes read off the others
  double median = 0, p90 = 0;  // |read / measured - 1|, weighted
};
std::optional<NeighbourReadAccuracy> neighbourReadAccuracy(const CalibrationCoverage& coverage,
                                                           const RooflineCostModel& cost, const DeviceSpec& device,
                                                           Precision precision);

// "kernel time 38% measured, 62% read off measured neighbours; read so, 783
// measured shapes of those kinds come 3.5% off at the median, 14.6% at p90
// (...)": where the step's kernel time comes from and how well the
// calibration reads what it interpolates, when a calibration is in use;
// nullopt otherwise. Where at least kCoverageWarnShare of the kernel time
// was read past every measured shape in some number, it says how much and
// names the largest such shape.
std::optional<std::string> calibrationCoverageSummary(const CalibrationCoverage& coverage,
                                                      const std::optional<NeighbourReadAccuracy>& accuracy);

}  // namespace tandem::sim
