#include "simulator/calibrate/calibrate_derive.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "simulator/calibrate/calibrate_merge.h"

namespace tandem::sim {
namespace {

double idealNs(const DeviceSpec& d, double gflop, double mb) {
  return std::max(gflop * 1e9 / (d.bf16_flops * 1e-9), mb * 1e6 / d.hbm_gbps);
}

// The op kind's entries on `to`: each shape's time beyond the fixed cost
// scaled by its ideal times' ratio, the fit's per-MB terms by the
// bandwidths'.
OpCalibration rescaleOp(OpKind op, const OpCalibration& oc, const DeviceSpec& from, const DeviceSpec& to) {
  OpCalibration out = oc;
  const double fixed = oc.all_shapes.has_fit ? oc.all_shapes.base_ns : 0.0;
  const double bw_ratio = from.hbm_gbps / to.hbm_gbps;
  out.all_shapes.ns_per_mb *= bw_ratio;
  out.all_shapes.ns_per_mb_slow *= bw_ratio;
  for (auto& [key, e] : out.shapes) {
    if (e.ns < 0) continue;
    if (e.gflop < 0 || e.mb < 0)
      throw std::runtime_error(fmt::format("ops.{}.shapes[{}] has no recorded work (gflop, mb): a calibration "
                                           "written before shapes recorded their work cannot be rescaled",
                                           toString(op), key));
    const double ideal_from = idealNs(from, e.gflop, e.mb);
    const double ratio = ideal_from > 0 ? idealNs(to, e.gflop, e.mb) / ideal_from : 1.0;
    const double beyond = std::max(double(e.ns) - fixed, 0.0);
    e.ns = int64_t(std::llround(std::min(double(e.ns), fixed) + beyond * ratio));
  }
  return out;
}

}  // namespace

CalibrationResult deriveCalibration(const std::string& source_yaml, const std::string& source_name,
                                    const DeviceSpec& from, const DeviceSpec& to, const std::string& gpu_name) {
  if (from.bf16_flops <= 0 || from.hbm_gbps <= 0 || to.bf16_flops <= 0 || to.hbm_gbps <= 0)
    throw std::runtime_error("deriving a calibration needs both GPUs' bf16 peak and memory bandwidth");
  const Calibration src = parseCalibration(source_yaml, source_name);
  CalibrationResult r;
  Calibration& c = r.calibration;
  c.source = "tandem calibrate --derive";
  c.launch_overhead_ns = src.launch_overhead_ns;
  c.step_overhead_ns = src.step_overhead_ns;
  c.kernel_overlap_efficiency = src.kernel_overlap_efficiency;
  c.kernel_sharing = src.kernel_sharing;
  c.fixed_grid_guests = src.fixed_grid_guests;
  c.kernel_revisions = src.kernel_revisions;  // the same kernels, measured on the other GPU
  // FP8 over BF16 speed is a ratio of two GEMMs on the same tensor cores:
  // kept where the target has an FP8 peak in the same ratio to its BF16 one
  // (H100 and H200: one GH100 at one power limit), dropped elsewhere.
  const bool same_fp8_ratio = from.fp8_flops > 0 && to.fp8_flops > 0 &&
                              std::abs(to.fp8_flops / to.bf16_flops - from.fp8_flops / from.bf16_flops) < 1e-6;
  if (same_fp8_ratio) c.fp8_gemm_speedup = src.fp8_gemm_speedup;
  // A writer's FP8 kernel against its bf16 twin: both move bytes, a ratio
  // kept on any GPU.
  c.fp8_writer_slowdown = src.fp8_writer_slowdown;
  const std::string name = std::filesystem::path(source_name).filename().string();
  r.provenance.push_back(fmt::format(
      "derived for the {} from {} (measured on {}): kernel times beyond each kind's fixed cost scaled by the "
      "shape's ideal time on each GPU, max(FLOPs / peak, bytes / bandwidth): peaks {:.0f} -> {:.0f} TFLOP/s, "
      "memory {:.0f} -> {:.0f} GB/s; launch, step overheads and kernel sharing kept",
      gpu_name, name, src.gpu.empty() ? "an unnamed GPU" : src.gpu, from.bf16_flops / 1e12, to.bf16_flops / 1e12,
      from.hbm_gbps, to.hbm_gbps));
  if (!src.fp8_gemm_speedup.empty())
    r.provenance.push_back(same_fp8_ratio
                               ? "fp8_gemm_speedup kept: the same FP8 to BF16 peak ratio on both GPUs"
                               : "fp8_gemm_speedup dropped: the GPUs' FP8 to BF16 peak ratios differ (or one has no "
                                 "FP8), FP8 GEMMs take the roofline at the FP8 peak");
  for (const auto& [op, oc] : src.ops) {
    if (oc.shapes.empty() && !oc.all_shapes.has_fit && oc.all_shapes.ns == 0) {
      r.fused_ops.push_back(op);  // fused into another task's kernel on either GPU
      continue;
    }
    c.ops[op] = rescaleOp(op, oc, from, to);
    const CostEntry& fit = c.ops[op].all_shapes;
    OpFitReport rep;
    rep.op = op;
    rep.shapes = int64_t(oc.shapes.size());
    rep.base_ns = fit.base_ns;
    rep.ns_per_gflop = fit.ns_per_gflop;
    rep.ns_per_mb = fit.ns_per_mb;
    rep.ns_per_mb_slow = fit.ns_per_mb_slow;
    r.ops.push_back(rep);
  }
  // The collectives run over the same NVLink generation and NCCL: kept, as
  // a refit on one GPU keeps them (calibrate_merge.h), when the source has them.
  Calibration probe = src;
  const bool has_multi_rank = probe.comm_slowdown || !probe.collectives.empty() || probe.multi_rank_launch_ns;
  if (has_multi_rank) {
    c.gpu = src.gpu;  // the merge checks that both halves name one GPU
    keepMultiRankKeys(r, source_yaml, source_name);
  }
  c.gpu = gpu_name;
  return r;
}

}  // namespace tandem::sim
