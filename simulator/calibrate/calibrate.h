#pragma once
// Fitting the simulator's cost model from measured runs (`tandem calibrate`).
//
// Every measured activity carries its plan task id, and every run carries the
// job it came from, so re-planning the job gives each measurement its task:
// op kind, shape, FLOPs and bytes. From those samples:
//   - per op kind, a fit  ns = base + a * GFLOP + b * MB (+ c * MB on a
//     kernel's slow path, slowPathMb)  minimising the relative error
//     (coefficients kept non-negative), which predicts shapes never measured;
//   - per op kind and shape, the median measured duration, used as is for
//     shapes that were measured;
//   - per collective (op, ranks), latency + bus bytes / bandwidth fitted over
//     the message sizes measured;
//   - launch costs: the gap before each kernel on its stream is added to the
//     task of that kernel (gaps of 20 us or more are waits, not launches), so
//     durations written include them, as the format's `ns` ("launch
//     included") asks; the median gap is the launch overhead of ops without
//     a calibration;
//   - op kinds that are planned but never measured (the executor fused them
//     into another task's kernel) cost 0;
//   - comm_slowdown, the factor by which kernels run slower while a
//     collective is resident on their rank, by least squares over the
//     task-steps that overlapped one (against the shape's clean steps);
//   - per collective and measured message size (>= 1 MiB), the bus
//     bandwidth reached, so that the simulation follows NCCL's size curve;
//   - step_overhead_ns: the host's time per step outside all GPU work;
//   - multi_rank_launch_ns: how much longer a kernel task's launch gap is in
//     runs of more than one rank than in one-rank runs (median over the
//     task shapes measured both ways); the multi-rank runs' samples are
//     written without it and the simulation adds it to every kernel task of
//     a plan with more than one rank.

#include <map>
#include <set>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "simulator/cost/cost_model.h"
#include "traces/analysis/compare.h"
#include "traces/store/trace_reader.h"

namespace tandem::sim {

struct CalibrationInput {
  std::string path;
  int64_t run = -1;
  // A run of `tandem calibrate --sweep` (sweep_grid.h): its shapes are
  // marked as swept, and a shape that other runs measured too takes theirs.
  bool sweep = false;
};

struct OpFitReport {
  OpKind op = OpKind::Matmul;
  int64_t samples = 0;
  int64_t shapes = 0;
  double base_ns = 0, ns_per_gflop = 0, ns_per_mb = 0;
  double ns_per_mb_slow = 0;  // per MB on a kernel's slow path (slowPathMb)
  double median_residual_pct = 0, max_residual_pct = 0;  // of the fit, over the samples
};

struct CollectiveFitReport {
  CollectiveOp op = CollectiveOp::AllReduce;
  int ranks = 0;
  int64_t samples = 0;
  int64_t latency_ns = 0;
  double gbps = 0;
  double max_residual_pct = 0;
  std::vector<std::pair<double, double>> sizes;  // (message bytes, bus GB/s) of each measured size >= 1 MiB
};

// Collectives' measured time against the pooled size model, by the task
// role of the kernels beside them the longest (Calibration::collective_beside).
struct CollectiveBesideReport {
  std::string role;
  double factor = 1;  // median of measured / pooled-model time
  int64_t samples = 0;
};

struct CalibrationResult {
  Calibration calibration;
  std::vector<CollectiveBesideReport> collective_beside;
  std::vector<OpFitReport> ops;
  std::vector<CollectiveFitReport> collectives;
  std::vector<std::string> provenance;  // one line per run used
  // What the user should know about how runs were read: a run that stored
  // no plan (written before trace schema 2) had its job planned again.
  std::vector<std::string> notes;
  int64_t samples = 0;
  int64_t unmatched = 0;  // activities whose task id is not in the re-planned job
  std::vector<OpKind> fused_ops;  // planned kernel ops no run measured (cost 0)
  int64_t comm_slowdown_samples = 0;
  std::map<OpKind, int64_t> comm_slowdown_by_op_samples;  // task-steps behind each comm_slowdown_by_op entry
  int64_t collective_start_wait_samples = 0;
  int64_t multi_rank_launch_shapes = 0;  // task shapes measured in one-rank and multi-rank runs
  int64_t kernel_overlap_samples = 0;    // steps (or runs, when refitted by simulation) behind
                                         // kernel_overlap_efficiency
  bool kernel_overlap_by_simulation = false;  // refitOverlapBySimulation (calibrate_overlap.h) chose it
  // Per rank of the multi-rank runs: its forward kernels' speed relative to
  // rank 0's (rank 0's time over its own for the forward kernel tasks both
  // ran, summed; the median over runs). A property of the machine measured
  // (its GPUs' clocks differ), not of its kind, so it is not a key of the
  // calibration: bench_sim_vs_real sets it as the topology's device speeds.
  std::map<int, double> rank_speed;
  int64_t rank_speed_runs = 0;
  // Where the multi-rank keys came from when they were kept from another
  // calibration (keepMultiRankKeys, calibrate_merge.h); empty when fitted.
  std::string multi_rank_source;
  // (op kind, shape) of weight-gradient tasks that also summed a bias
  // gradient: deriveFp8Speedup leaves them out (their FP8 time holds
  // biasGradientFp8 too, not only the GEMM's).
  std::set<std::pair<OpKind, std::string>> with_bias_gradient;
};

// A multi-rank run's forward kernel speed of every rank but 0 relative to
// rank 0 (see CalibrationResult::rank_speed); empty for one-rank runs.
std::map<int, double> forwardSpeedByRank(const std::map<traces::TaskKey, traces::TaskTime>& times, const Plan& plan);

// Per task shape (op kind, shapeKey), the launch gaps of its task-steps in
// one-rank runs (`single`) and in runs of more than one rank (`multi`). The
// extra gap a kernel task pays in multi-rank runs: over the shapes present in
// both, (mean multi - mean single) weighted by the shape's multi-rank
// task-steps, at least 0; nullopt when no shape is in both. A mean, so that
// the extra adds up to the steps' measured total (the gaps have a long tail:
// the median, used before, gave 592 ns where the mean is 816 ns on the
// seventh session's runs).
struct LaunchGapsByShape {
  std::map<std::pair<OpKind, std::string>, std::vector<double>> single, multi;
};
std::optional<double> multiRankLaunchExtra(const LaunchGapsByShape& gaps, int64_t* shapes_used = nullptr);

// The devices a run's devices_json names (docs/trace-schema.md): the
// distinct device models or names joined with " + " ("" when it names
// none), and the first device's driver and library versions ("" when not
// recorded).
struct RunDevices {
  std::string gpus, software;
};
RunDevices runDevices(const std::string& devices_json);

// Fits a calibration from the given runs (every real run of a file when its
// run id is -1). Throws std::runtime_error naming the file and run when a run
// has no job to re-plan or no task ids.
CalibrationResult calibrateFromRuns(const std::vector<CalibrationInput>& inputs);

// The calibration as YAML in the format of docs/simulator.md, with the fit
// residuals and the provenance as comments and fields.
std::string calibrationToYaml(const CalibrationResult& result);
// The `fixed_grid_guests: true` line a calibration fitted under today's
// replay carries, with its comment, without the newline.
std::string fixedGridGuestsLine();

// From the fitted shapes of `out`: the FP8 GEMM speed-up of each GEMM kind
// by GFLOP where the runs measured a shape both in FP8 and in bf16
// (Calibration::fp8_gemm_speedup; calibrateFromRuns calls it).
void deriveFp8Speedup(CalibrationResult& out);
// Likewise the norms' and activations' FP8 writers against their bf16
// twins (Calibration::fp8_writer_slowdown).
void deriveFp8WriterSlowdown(CalibrationResult& out);

}  // namespace tandem::sim
