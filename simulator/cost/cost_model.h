#pragma once
// Compute cost model: how long a non-communication task of the Plan takes on
// a device. The default is a roofline with per-op-kind efficiencies plus a
// launch overhead; a calibration file (docs/simulator.md, "Calibration
// format") replaces efficiencies per op kind and per shape, or gives measured
// durations and fitted coefficients, and carries measured collective figures.

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/plan/plan.h"
#include "simulator/cost/framework_kernels.h"
#include "simulator/cost/gemm_tiles.h"
#include "simulator/cost/shape_interpolation.h"
#include "simulator/network/collectives.h"
#include "simulator/topology/topology.h"

namespace tandem::sim {

class CalibrationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Every op kind, so that a table indexed by one is never read past its end
// (Recv is the last; the transfers are timed by the network, not here).
inline constexpr size_t kOpKindCount = size_t(OpKind::Recv) + 1;

// How kernels of one rank's compute streams running at once divide the GPU.
//  - FirstHolds: the kernel that started first runs as if alone (as long
//    as the efficiency is at least 1), the others share what the efficiency
//    adds beyond one kernel; when it ends, the next oldest holds. Measured on
//    H200 (docs/accuracy.md): a kernel keeps the SMs its blocks hold, so a
//    GEMM or layernorm backward launched beside a running GEMM barely moves
//    until that one ends, and the running one keeps its speed.
//  - Fair: processor sharing, each of n runs n / efficiency times slower.
enum class KernelSharing : uint8_t { FirstHolds, Fair };

struct RooflineParams {
  // Fraction of peak FLOP/s and of HBM bandwidth an op kind reaches; indexed
  // by OpKind. Defaults in roofline_defaults (cost_model.cpp), documented in
  // docs/simulator.md.
  std::array<double, kOpKindCount> flops_efficiency{};
  std::array<double, kOpKindCount> bw_efficiency{};
  int64_t launch_overhead_ns = 3000;   // per kernel: launch gap between dependent kernels
  double comm_slowdown = 1.10;         // compute runs this much slower while a collective runs
  // Kernels of several compute streams running at once share the GPU and
  // together get kernel_overlap_efficiency times the throughput of one
  // alone (1: together they take as long as one after the other). How they
  // divide it is kernel_sharing.
  double kernel_overlap_efficiency = 1.0;
  KernelSharing kernel_sharing = KernelSharing::FirstHolds;
  double host_to_device_gbps = 25.0;   // LoadBatch and host memcpy (PCIe Gen5 x16, effective)
  int64_t host_task_ns = 5000;         // plain host work
  // FP8 over BF16 speed of a GEMM by its GFLOP, per GEMM op kind, as
  // Calibration::fp8_gemm_speedup: what an FP8 GEMM takes where the
  // calibration has no table of its own (defaults in cost_model.cpp, with
  // where they were measured); none: the FP8 peak at the bf16 efficiency.
  std::map<OpKind, std::vector<std::pair<double, double>>> fp8_gemm_speedup;
  // A GEMM timed by the roofline reaches its op kind's flops_efficiency
  // only when deep and wide: depth / (depth + gemm_depth_half) of it for its
  // reduction depth (each output tile's fixed prologue and epilogue against
  // its main loop), times outputs / (outputs + gemm_outputs_half_per_sm x
  // SMs) for its output elements (too few tiles to fill the SMs). 0 turns
  // either off. Defaults fitted to a measured sweep (cost_model.cpp).
  double gemm_depth_half = 0;
  double gemm_outputs_half_per_sm = 0;
  static RooflineParams defaults();
};

// Room for other kernels on the SMs beside a kernel that holds the GPU.
// A GEMM's or attention kernel's block takes a whole SM (shared memory or
// registers), so one with a block on every SM leaves none until its last
// blocks retire (None), one with fewer blocks than SMs leaves the rest
// (Some); a memory-bound kernel's small blocks leave room beside them
// (Some). Unknown without a calibrated launch geometry.
enum class SmRoom : int8_t { Unknown = -1, None = 0, Some = 1 };

// Op kinds whose kernels' blocks take a whole SM each (SmRoom).
bool blocksTakeWholeSms(OpKind op);

// A persistent GEMM's last round of tiles: its blocks walk the output's tiles
// in rounds, and the blocks with one tile fewer leave after the round
// before, so the SMs the last round leaves take the next kernel's blocks
// while it ends (CostModel::lastRound). share 0: no such round (one round, or
// a last round as full as the others).
struct LastRound {
  float spare = -1;  // share of the SMs free in it
  float share = 0;   // share of the main kernel's time it lasts (1 / rounds)
};

// A GEMM shape key's FLOPs, 2 m n k ("m=16384 n=2304 k=768", epilogue
// or not); nothing for a key without the three.
std::optional<double> gemmKeyFlops(const std::string& key);

// Where a measured shape's time came from (written by calibrations that
// include a sweep, calibrate_sweep.h).
enum class ShapeOrigin : uint8_t { Unknown, Sweep, Runs };

// A duration rule: any of the fields set (>= 0) wins over the op's default in
// this order: ns, fit, efficiencies.
struct CostEntry {
  int64_t ns = -1;              // measured duration, launch included
  double flops_efficiency = -1;
  double bw_efficiency = -1;
  bool has_fit = false;         // ns = base_ns + ns_per_gflop * GFLOP + ns_per_mb * MB (+ ns_per_mb_slow * slow MB)
  double base_ns = 0, ns_per_gflop = 0, ns_per_mb = 0, ns_per_mb_slow = 0;
  // Thread blocks of the shape's main kernel as traced (-1: unknown;
  // CostModel::smRoomBeside).
  int blocks = -1;
  // What each of those blocks holds on an SM, as traced (-1: unknown):
  // threads, registers per thread, shared memory in bytes (static and
  // dynamic), and the blocks of its thread block cluster (1: none). They
  // say how many blocks of which kernels an SM can hold at once; recorded
  // for that, not read by the cost model yet.
  int threads = -1, registers = -1, shared_bytes = -1, cluster = -1;
  // A GEMM's output tile, as its kernel's name says (the last round of a
  // persistent GEMM's tiles leaves SMs free; replay.cpp).
  std::optional<GemmTile> tile;
  // A measured shape's work: its task's FLOPs (in GFLOP) and bytes moved
  // (in MB), as planned. With them, shapes never measured take the
  // efficiency of their measured neighbours (RooflineCostModel::taskTime);
  // -1 where the file does not say (calibrations written before them).
  double gflop = -1, mb = -1;
  ShapeOrigin origin = ShapeOrigin::Unknown;
};

struct OpCalibration {
  CostEntry all_shapes;                       // the op kind's default
  std::map<std::string, CostEntry> shapes;    // by shapeKey()
};

struct Calibration {
  std::string source;
  // The GPU its runs ran on, as their device records name it ("NVIDIA
  // H200"); empty when the file does not say. calibration_device.h compares
  // it with a topology's GPUs.
  std::string gpu;
  std::optional<int64_t> launch_overhead_ns;
  std::optional<double> comm_slowdown;
  // Per op kind, where the runs measured it apart (kernels of different
  // kinds lose different shares to NCCL); other kinds take comm_slowdown.
  std::map<OpKind, double> comm_slowdown_by_op;
  std::optional<int64_t> step_overhead_ns;  // host time per step outside all GPU work
  std::optional<int64_t> multi_rank_launch_ns;  // per kernel task, extra in plans of more than one rank
  std::optional<double> kernel_overlap_efficiency;  // RooflineParams::kernel_overlap_efficiency
  std::optional<KernelSharing> kernel_sharing;       // RooflineParams::kernel_sharing
  // Whether memory-bound kernels of a fixed grid gain nothing beside a
  // holder (CostModel::fixedGrid; the persistent GEMMs always): the replay
  // rule kernel_overlap_efficiency was fitted under. Written by `tandem
  // calibrate` since the rule exists; a file without it keeps the replay
  // its efficiency was fitted with.
  bool fixed_grid_guests = false;
  std::map<OpKind, OpCalibration> ops;
  // Per GEMM op kind and shape key: the kernel the GPU executor gets for
  // shapes its runs never had (the GEMM census, simulator/calibrate/
  // gemm_census.h): blocks, tile, cluster and a block's resources, no time.
  // cuBLASLt's choice does not follow the shape smoothly (a weight gradient
  // of 1280 x 5120 gets 120 blocks in clusters of 8 where its swept
  // neighbours of 1600 x 4800 get 132), so the replay's spare SMs and last
  // rounds read it off a dense grid of real choices rather than off the
  // nearest timed shape. Times still come from `ops`.
  std::map<OpKind, std::map<std::string, CostEntry>> gemm_kernels;
  // The revision of each op kind's kernel its runs measured
  // (engine/ir/kernel_revisions.h); a kind not listed was measured at
  // revision 1 (files from before the revisions were recorded).
  std::map<OpKind, int> kernel_revisions;
  int kernelRevisionMeasured(OpKind op) const {
    const auto it = kernel_revisions.find(op);
    return it == kernel_revisions.end() ? 1 : it->second;
  }
  std::vector<CollectiveCalibration> collectives;
  // A collective that becomes ready while kernels run on its GPU starts
  // after this share of their remaining time: NCCL's kernel waits for SMs.
  std::optional<double> collective_start_wait;
  // A collective that shares its GPUs the longest with kernels of this task
  // role takes this factor times its time: NCCL shares the SMs and the
  // memory with them, and how much it loses depends on the kernel
  // (docs/accuracy.md, "What a bucket's all-reduce runs beside").
  // Two entries are not task roles: kNoKernelBeside (no kernel ran beside
  // it) and kUnseenKernelBeside (a role the calibration never saw).
  std::map<std::string, double> collective_beside;
  // Per GEMM op kind (matmul, matmul_bwd_data, matmul_bwd_weight): how much
  // faster the FP8 GEMM of a shape runs than its BF16 one, as (GFLOP,
  // speedup) points in ascending GFLOP (bench_fp8_gemm at the power limit).
  // An FP8 GEMM of such a kind takes its bf16 time, calibrated or not, over
  // the speedup interpolated in log GFLOP (the end points beyond them);
  // kinds not listed take the roofline at the FP8 peak.
  std::map<OpKind, std::vector<std::pair<double, double>>> fp8_gemm_speedup;
  // Per op kind of a norm or activation that writes FP8 itself under
  // delayed scaling (OpAttrs::fp8_out): its kernel's time over its bf16
  // twin's on the same shape (profiled FP8 runs beside bf16 runs of the same
  // shapes, `tandem calibrate`). An FP8 writer of a shape no FP8 run measured
  // takes its bf16 twin's time times this (1 for kinds not listed).
  std::map<OpKind, double> fp8_writer_slowdown;
};
inline constexpr const char* kNoKernelBeside = "(none)";
inline constexpr const char* kUnseenKernelBeside = "(other)";

// "mlp.fc.bwd_weight": a task's name without its layer and micro-batch
// ("layer5.mlp.fc.bwd_weight.mb0"), so that one role covers every layer,
// micro-batch and model size.
std::string taskRole(const std::string& task_name);

// "m=16384 n=2304 k=768": the non-zero shape attributes of a task in the fixed
// order m n k b t c h v elements; a task that launches a fused kernel
// (engine/passes/fusion.h) has the fused kernel's shape ("m n k" of the GEMM,
// "m c" of the layernorm) and "epi=gelu", "epi=dgelu" or "epi=add_layernorm".
std::string shapeKey(const Task& task);
// Whether a shape key is an FP8 kernel's: a GEMM's ("fp8=1") or a norm's
// or activation's writing FP8 ("fp8out=N"), other kernels than the bf16
// ones of their shapes (an op kind's fit leaves them out).
bool isFp8ShapeKey(const std::string& key);
// The op kind a task is costed and calibrated as: its own, except a task
// that launches a fused kernel: a GELU epilogue counts as its GEMM's op (a
// GELU backward that launches the DGELU GEMM as a data-gradient matmul), a
// residual add that also does the layernorm after it as a layernorm.
OpKind costOpKind(const Task& task);

// The MB of a task's bytes that the executor moves on a slower path of its
// kernel, for the calibrated fit's ns_per_mb_slow term: layernorm backward
// rows wider than 768 elements keep their dw/db partial sums in shared memory
// instead of registers (engine/cuda/layernorm.cu, kLnAccInSmem). On H200 that
// path took about twice the time per byte. 0 for everything else.
double slowPathMb(const Task& task);

// Parses the calibration YAML; errors are CalibrationError "FILE:LINE: field: problem".
Calibration parseCalibration(const std::string& yaml_text, const std::string& source);
Calibration loadCalibration(const std::string& path);

class CostModel {
 public:
  virtual ~CostModel() = default;
  // Duration in ns of a kernel, memcpy or host task on `device`, alone on the GPU.
  // It may depend on the task, the device's figures (model, peaks, memory,
  // SMs, MIG slice) and the precision, never on the device's name or host:
  // the engine computes it once per program and kind of device.
  virtual int64_t taskNs(const Task& task, const DeviceSpec& device, Precision precision) const = 0;
  // Factor applied to compute tasks that start while a collective runs on the same GPU.
  virtual double commSlowdown() const = 0;
  // The same for one task (by its op kind where calibrated apart).
  virtual double commSlowdown(const Task& task) const {
    (void)task;
    return commSlowdown();
  }
  // Host time of a step outside all GPU work (launching the step's graph
  // before its first kernel, noticing its end after the last), added to
  // every rank's step.
  virtual int64_t stepOverheadNs() const { return 0; }
  // Extra launch time of a kernel task in a plan of more than one rank
  // (kernels wait longer to start in multi-process runs), added by the engine.
  virtual int64_t multiRankLaunchNs() const { return 0; }
  // Throughput of kernels of several compute streams running at once,
  // relative to one alone (RooflineParams::kernel_overlap_efficiency), and
  // how they divide it (RooflineParams::kernel_sharing).
  virtual double kernelOverlapEfficiency() const { return 1.0; }
  virtual KernelSharing kernelSharing() const { return KernelSharing::FirstHolds; }
  // The part of a task's time (ns, within taskNs) spent in kernels launched
  // after its main one, which take the GPU anew beside other streams' work:
  // a weight gradient's bias-gradient kernels after its GEMM. 0 for most.
  virtual int64_t trailingNs(const Task& task, const DeviceSpec& device, Precision precision) const {
    (void)task, (void)device, (void)precision;
    return 0;
  }
  // Whether kernels launched beside the task's main kernel while it holds
  // the GPU find SMs to run on (docs/simulator.md, kernel sharing).
  virtual SmRoom smRoomBeside(const Task& task, const DeviceSpec& device) const {
    (void)task, (void)device;
    return SmRoom::Unknown;
  }
  // The share of the SMs a holder with room leaves, where its blocks say
  // (a GEMM or attention kernel with fewer blocks than SMs: (SMs - blocks)
  // / SMs); -1 otherwise (a memory-bound kernel leaves room in an amount
  // its blocks do not tell).
  virtual double spareSmShare(const Task& task, const DeviceSpec& device) const {
    (void)task, (void)device;
    return -1;
  }
  // Whether the task's main kernel divides its work among a fixed grid of
  // large blocks, so that beside a holder that leaves a few SMs (the spare
  // SMs of a GEMM with fewer blocks than SMs, or its last round of tiles)
  // the blocks that land there gain it no time: it ends when the blocks
  // that start after the holder are through theirs. A persistent GEMM's
  // blocks take their tiles in a fixed order; this base model knows no
  // other (docs/simulator.md, kernel sharing).
  virtual bool fixedGrid(const Task& task, const DeviceSpec& device) const {
    (void)device;
    return gemmOutputTiles(task) > 0;
  }
  // Whether fixed grids gain nothing on a holder's spare SMs too, not only
  // in its last round (Calibration::fixed_grid_guests: the replay a
  // calibration's kernel_overlap_efficiency was fitted with).
  virtual bool fixedGridBesideSpareSms() const { return false; }
  // The task's main kernel's last round of tiles, where its tile is
  // calibrated (a GEMM's, from its kernel's name); share 0 otherwise.
  virtual LastRound lastRound(const Task& task, const DeviceSpec& device) const {
    (void)task, (void)device;
    return {};
  }
  // Whether lastRound may give any task a last round (false: the replay
  // skips asking).
  virtual bool hasLastRounds() const { return false; }
  // Share of the remaining time of the kernels running beside a collective
  // that it waits before it starts (Calibration::collective_start_wait).
  virtual double collectiveStartWait() const { return 0; }
  // Factor on the time of a collective beside kernels of this task role
  // (Calibration::collective_beside); 1 when not calibrated.
  virtual bool hasCollectiveBeside() const { return false; }
  virtual double collectiveBeside(const std::string& role) const {
    (void)role;
    return 1.0;
  }
};

// Where a task's time comes from in a RooflineCostModel (calibration
// coverage: calibration_coverage.h).
enum class TimeSource : uint8_t {
  NoKernel,      // a host task, the data copy, or work fused into another task's kernel
  Measured,      // the calibration measured the task's shape
  Interpolated,  // between two measured shapes (shape_interpolation.h)
  OpKindFit,     // the op kind is calibrated, this shape is outside what was measured
  Roofline,      // the op kind is not calibrated: peak figures and default efficiencies
};

class RooflineCostModel : public CostModel {
 public:
  explicit RooflineCostModel(RooflineParams params = RooflineParams::defaults(), Calibration calibration = {});
  int64_t taskNs(const Task& task, const DeviceSpec& device, Precision precision) const override {
    return taskTime(task, device, precision).ns;
  }
  // A task's time and the rule it came from, in one lookup (taskNs is its ns).
  struct TaskTime {
    int64_t ns = 0;
    TimeSource source = TimeSource::NoKernel;
  };
  // With another framework's kernels (OpAttrs::eager, flash2;
  // framework_kernels.h) the task takes theirs.
  TaskTime taskTime(const Task& task, const DeviceSpec& device, Precision precision) const;
  double commSlowdown() const override { return params_.comm_slowdown; }
  double commSlowdown(const Task& task) const override {
    const auto it = calibration_.comm_slowdown_by_op.find(costOpKind(task));
    return it == calibration_.comm_slowdown_by_op.end() ? params_.comm_slowdown : it->second;
  }
  int64_t stepOverheadNs() const override { return calibration_.step_overhead_ns.value_or(0); }
  int64_t multiRankLaunchNs() const override { return calibration_.multi_rank_launch_ns.value_or(0); }
  double kernelOverlapEfficiency() const override { return params_.kernel_overlap_efficiency; }
  KernelSharing kernelSharing() const override { return params_.kernel_sharing; }
  int64_t trailingNs(const Task& task, const DeviceSpec& device, Precision precision) const override;
  SmRoom smRoomBeside(const Task& task, const DeviceSpec& device) const override;
  double spareSmShare(const Task& task, const DeviceSpec& device) const override;
  bool fixedGrid(const Task& task, const DeviceSpec& device) const override;
  bool fixedGridBesideSpareSms() const override { return calibration_.fixed_grid_guests; }
  LastRound lastRound(const Task& task, const DeviceSpec& device) const override;
  bool hasLastRounds() const override;
  // The calibrated shape whose main kernel's tile and blocks stand for the
  // task's: its own, else its nearest with both (cuBLASLt picks the kernel
  // by shape); none for a calibration without tiles.
  const CostEntry* tiledEntry(const Task& task) const;
  // The kernel geometry (blocks, and a tile when `with_tile`) of shape key
  // `key` of the task's op kind: traced by the calibration's runs, else
  // found by its GEMM census (Calibration::gemm_kernels), else the nearest
  // shape of either; none when neither has one.
  const CostEntry* kernelEntry(const Task& task, const std::string& key, bool with_tile) const;
  const CostEntry* kernelEntryUncached(const Task& task, const std::string& key, bool with_tile) const;
  // The shape whose launch geometry (tile, blocks) and measured range a task
  // takes: its own (shapeKey), except that an FP8 GEMM under a calibration
  // that measured no FP8 GEMM of its kind takes the bf16 kernel's of its
  // shape, as its time does (fp8FromBf16Time).
  std::string geometryKey(const Task& task) const;
  // The thread blocks of the task's main kernel on `device`: its shape's as
  // calibrated, else a block per SM for a GEMM whose output has two waves
  // of the largest tile (gemmOutputTiles), else its nearest calibrated
  // shape's, else its op kind's; -1 unknown (nothing calibrated of its kind).
  int kernelBlocks(const Task& task, const DeviceSpec& device) const;
  // How far a time read off measured neighbours (TimeSource::Interpolated)
  // is off for the op kind: each measured shape read off the others,
  // |read / measured - 1| (WorkInterpolator::leaveOneOutErrors); empty where
  // the calibration records no work for the kind.
  std::vector<double> neighbourReadErrors(OpKind op, const DeviceSpec& device, Precision precision) const;
  // The op kind's measured shapes with their work (null where the
  // calibration records none), and what it reads their efficiencies
  // against: the device's peaks at the precision, and the op kind's fixed
  // cost (its fit's constant, else the launch).
  const WorkInterpolator* workInterpolator(OpKind op) const;
  // Whether a task read off measured neighbours (TimeSource::Interpolated)
  // lies past every measured shape of its kind in some number (an
  // attention at a longer sequence than any measured): those fields, none
  // when it lies within (WorkInterpolator::fieldsBeyondMeasured).
  std::vector<std::string> fieldsBeyondMeasured(const Task& task) const;
  PeakRates peakRates(const DeviceSpec& device, Precision precision) const;
  int64_t fixedNs(OpKind op) const;
  double collectiveStartWait() const override { return calibration_.collective_start_wait.value_or(0); }
  bool hasCollectiveBeside() const override { return !calibration_.collective_beside.empty(); }
  double collectiveBeside(const std::string& role) const override {
    const auto& m = calibration_.collective_beside;
    auto it = m.find(role.empty() ? std::string(kNoKernelBeside) : role);
    if (it == m.end() && !role.empty()) it = m.find(kUnseenKernelBeside);
    return it == m.end() ? 1.0 : it->second;
  }
  const RooflineParams& params() const { return params_; }

 private:
  // The task as the plan's own kernel runs it: calibrated, interpolated or
  // from the roofline.
  TaskTime ownKernelTime(const Task& task, const DeviceSpec& device, Precision precision) const;
  // A fused GEMM the framework runs as separate GEMMs (OpAttrs::parts):
  // the parts' times summed.
  TaskTime separateGemmsTime(const Task& task, const DeviceSpec& device, Precision precision) const;
  // An FP8 GEMM under a measured speedup table (Calibration::fp8_gemm_speedup):
  // nothing when its op kind has none.
  std::optional<TaskTime> fp8FromBf16Time(const Task& task, const DeviceSpec& device, Precision precision) const;
  // A norm or activation writing FP8 (OpAttrs::fp8_out) of a shape no FP8
  // run measured, where the calibration has its op kind: its bf16 twin's
  // time times Calibration::fp8_writer_slowdown.
  std::optional<TaskTime> fp8WriterFromBf16Time(const Task& task, const DeviceSpec& device, Precision precision) const;
  // The K-major copies of its operands an FP8 GEMM makes itself where no
  // cast wrote them (gpu_footprint::fp8TransposeCount): part of its task.
  int64_t fp8TransposeNs(const Task& task, const DeviceSpec& device) const;
  // Whether the calibration has a time (or a fit) for this shape of the op kind.
  bool measuredShape(OpKind op, const std::string& key) const;
  // A chain of another framework's kernels, each timed by its roofline at
  // the elementwise ops' efficiencies, with a launch each.
  int64_t chainNs(const std::vector<PassKernel>& kernels, const DeviceSpec& device) const;
  // A materialized attention (OpAttrs::materialized): the framework's
  // kernels, each timed by its own roofline, summed.
  int64_t materializedAttentionNs(const Task& task, const DeviceSpec& device, Precision precision) const;
  // What of its op kind's efficiency a GEMM's shape lets the roofline reach
  // on this GPU (RooflineParams::gemm_depth_half, scaled by the GPU's
  // DeviceSpec::best_gemm_fraction over the H100's); 1 for other kinds.
  double gemmShapeFactor(const Task& task, const DeviceSpec& device) const;
  // The same for a GEMM of `outputs` output elements, each a sum of `depth`
  // products (1 where either is 0).
  double gemmShapeFactor(double outputs, double depth, const DeviceSpec& device) const;
  // An unmeasured shape's time from the measured ones (shape_interpolation.h).
  std::optional<int64_t> interpolatedNs(const Task& task, const std::string& key, const DeviceSpec& device,
                                        Precision precision) const;
  std::optional<int64_t> interpolatedNsUncached(const Task& task, const std::string& key, const DeviceSpec& device,
                                                Precision precision) const;
  int kernelBlocksUncached(const Task& task, const DeviceSpec& device, const OpCalibration& oc,
                           const std::string& key) const;

  RooflineParams params_;
  Calibration calibration_;
  std::map<OpKind, ShapeInterpolator> interpolators_;  // measured shapes per op kind (shape_interpolation.h)
  // Measured shapes with their work, per op kind: where the calibration
  // records it, unmeasured shapes take their neighbours' efficiency.
  std::map<OpKind, WorkInterpolator> work_interpolators_;
  // Per GEMM kind, the most FLOP per ns any of its measured shapes ran at
  // (gemmKeyFlops): the op kind's fit extrapolates no faster than that.
  std::map<OpKind, double> fastest_flop_per_ns_;
  // Lookups over the measured shapes, remembered per question: a plan asks
  // the same of every layer, and a simulation asks per task (a 1024-GPU
  // GPT-2 1.5B step: 2713 tasks of some 40 shapes).
  mutable std::mutex memo_mutex_;
  mutable std::unordered_map<std::string, std::optional<int64_t>> interpolated_memo_;
  mutable std::unordered_map<std::string, int> blocks_memo_;
  mutable std::unordered_map<std::string, const CostEntry*> kernel_entry_memo_;  // kernelEntry's answers
  mutable std::unordered_map<std::string, std::vector<double>> read_errors_memo_;
};

}  // namespace tandem::sim
