#include "traces/trackers/stats.h"

#include <charconv>

namespace tandem::traces::stats {

namespace {
using enum NameForm;
using S = Severity;
}  // namespace

// clang-format off
// name, form, severity, zero_is_info, merge rule, description
const StatDecl kCuptiDroppedRecords{"cupti.dropped_records", Plain, S::DataLoss, true, MergeRule::Sum,
    "activity records CUPTI dropped (buffers full)"};
const StatDecl kCuptiRecords{"cupti.records", Plain, S::Info, false, MergeRule::Sum, "activity records read"};
const StatDecl kCuptiBuffersGrown{"cupti.buffers_grown", Plain, S::Info, false, MergeRule::Sum,
    "activity buffers allocated beyond the pre-allocated pool"};
const StatDecl kCuptiExternalCorrelationRecords{"cupti.external_correlation_records", Plain, S::Info, false,
    MergeRule::Sum, "external correlation records (task ids pushed around launches)"};
const StatDecl kProfilerKernels{"profiler.kernels", Plain, S::Info, false, MergeRule::Sum,
    "compute kernels (not NCCL)"};
const StatDecl kProfilerKernelsAttributed{"profiler.kernels_attributed", Plain, S::Info, false, MergeRule::Sum,
    "compute kernels tagged with a plan task (or the executor's step work)"};
const StatDecl kProfilerNcclKernels{"profiler.nccl_kernels", Plain, S::Info, false, MergeRule::Sum, "NCCL kernels"};
const StatDecl kProfilerNcclAttributed{"profiler.nccl_attributed", Plain, S::Info, false, MergeRule::Sum,
    "NCCL kernels tagged"};
const StatDecl kProfilerGraphKernels{"profiler.graph_kernels", Plain, S::Info, false, MergeRule::Sum,
    "kernels run by CUDA Graph replays"};
const StatDecl kProfilerSetupRecords{"profiler.setup_records", Plain, S::Info, false, MergeRule::Sum,
    "GPU records of the executor's set-up before the first step (GEMM algorithm timing)"};
const StatDecl kProfilerStepWorkKernels{"profiler.step_work_kernels", Plain, S::Info, false, MergeRule::Sum,
    "kernels the executor issued in a step outside every plan task (its loss all-reduce)"};
const StatDecl kProfilerKernelsUnattributed{"profiler.kernels_unattributed", Plain, S::Warning, true, MergeRule::Sum,
    "kernels with no plan task"};
const StatDecl kProfilerClockSyncRecords{"profiler.clock_sync_records", Plain, S::Info, false, MergeRule::Sum,
    "GPU records of the clock-offset measurement (not plan work)"};
const StatDecl kProfilerWriteErrors{"profiler.write_errors", Plain, S::DataLoss, false, MergeRule::Sum,
    "activity records lost because the trace file could not be written"};
// Per rank: merging rank files keeps each rank's own.
const StatDecl kClockDriftNs{"clock.drift_ns.rank", PerRank, S::Info, false, MergeRule::Sum,
    "CUPTI clock drift against CLOCK_REALTIME over the run"};
const StatDecl kClockOffsetNs{"clock.offset_ns.rank", PerRank, S::Info, false, MergeRule::Sum,
    "add to this rank's time to get rank 0's, measured at start (NCCL ping-pong)"};
const StatDecl kClockOffsetRttNs{"clock.offset_rtt_ns.rank", PerRank, S::Info, false, MergeRule::Sum,
    "round trip of the start measurement (the offset is right within half of it)"};
const StatDecl kClockOffsetEndNs{"clock.offset_end_ns.rank", PerRank, S::Info, false, MergeRule::Sum,
    "the same offset measured at the end of the run"};
const StatDecl kClockOffsetEndRttNs{"clock.offset_end_rtt_ns.rank", PerRank, S::Info, false, MergeRule::Sum,
    "round trip of the end measurement"};
const StatDecl kClockOffsetDriftPpb{"clock.offset_drift_ppb.rank", PerRank, S::Info, false, MergeRule::Sum,
    "drift of this rank's clock against rank 0's (ns per s), applied by merge"};
const StatDecl kGpuPowerSamples{"gpu.power_samples.rank", PerRank, S::Info, false, MergeRule::Sum,
    "NVML samples of power, SM clock and clock-limit reasons (counters gpu.*)"};
const StatDecl kGpuPowerInstant{"gpu.power_instant.rank", PerRank, S::Info, false, MergeRule::Sum,
    "1: gpu.power_w is NVML's instantaneous power; 0: its one-second average"};
const StatDecl kGpuPowerWMedian{"gpu.power_w_median.rank", PerRank, S::Info, false, MergeRule::Sum,
    "median board power (W) from the first step's start to the last step's end"};
const StatDecl kGpuSmClockMhzMedian{"gpu.sm_clock_mhz_median.rank", PerRank, S::Info, false, MergeRule::Sum,
    "median SM clock (MHz) over the same span"};
const StatDecl kGpuPowerCappedPct{"gpu.power_capped_pct.rank", PerRank, S::Info, false, MergeRule::Sum,
    "share of those samples with the clock held by the software power cap (%)"};
const StatDecl kGpuEnergyPerStepMj{"gpu.energy_per_step_mj.rank", PerRank, S::Info, false, MergeRule::Sum,
    "board energy per step (mJ) from the energy counter over the steps' span"};
const StatDecl kGpuEnergyPowerW{"gpu.energy_power_w.rank", PerRank, S::Info, false, MergeRule::Sum,
    "mean board power (W) over the steps from the energy counter"};

// A real run's figures, each rank writing the run's own: merge keeps one.
const StatDecl kTokensPerSecond{"tokens_per_second", Plain, S::Info, false, MergeRule::Max,
    "median over measured steps"};
const StatDecl kMfuPpm{"mfu_ppm", Plain, S::Info, false, MergeRule::Max,
    "PaLM model FLOPs utilisation, parts per million"};
const StatDecl kPlannedArenaBytes{"planned_arena_bytes", Plain, S::Info, false, MergeRule::Max, "memory plan peak"};
const StatDecl kPlannedExecutorBytes{"planned_executor_bytes", Plain, S::Info, false, MergeRule::Max,
    "executor buffers beyond the arena, as counted from the plan"};
const StatDecl kAllocatedBytes{"allocated_bytes", Plain, S::Info, false, MergeRule::Max,
    "arena + workspace + scratch"};
const StatDecl kDeviceUsedBytes{"device_used_bytes", Plain, S::Info, false, MergeRule::Max,
    "after setup, incl. context and NCCL"};
// The map every rank applied alike: merge keeps one.
const StatDecl kPlacementApplied{"placement.applied", Plain, S::Info, false, MergeRule::Max,
    "1: each rank's GPU came from tandem run --placement (the description names the map)"};
const StatDecl kPlacementDevice{"placement.device.rank", PerRank, S::Info, false, MergeRule::Max,
    "the CUDA device (index among its host's GPUs, PCI bus order) the placement gave this rank"};

const StatDecl kMergeInputs{"merge.inputs", Plain, S::Info, false, MergeRule::Sum,
    "per-rank files merged into this run"};
const StatDecl kClockAppliedOffsetNs{"clock.applied_offset_ns.rank", PerRank, S::Info, false, MergeRule::Sum,
    "offset merge added to this rank's times at its first clock measurement"};
const StatDecl kClockAppliedDriftPpb{"clock.applied_drift_ppb.rank", PerRank, S::Info, false, MergeRule::Sum,
    "drift merge applied to this rank's times (ns per s)"};

const StatDecl kSimEvents{"sim.events", Plain, S::Info, false, MergeRule::Sum, "discrete events processed"};
const StatDecl kSimFlows{"sim.flows", Plain, S::Info, false, MergeRule::Sum, "network flows simulated"};
const StatDecl kSimCollectives{"sim.collectives", Plain, S::Info, false, MergeRule::Sum, "collectives simulated"};
const StatDecl kSimSimulatedRanks{"sim.simulated_ranks", Plain, S::Info, false, MergeRule::Sum,
    "ranks simulated (the others share a representative's timeline)"};
const StatDecl kSimRanksNotWritten{"sim.ranks_not_written", Plain, S::Info, false, MergeRule::Sum,
    "ranks that share a representative's timeline and were not copied"};
const StatDecl kSimCalibrationGpuMismatch{"sim.calibration_gpu_mismatch", Plain, S::Warning, false, MergeRule::Sum,
    "the calibration was measured on another GPU than the topology's"};
const StatDecl kSimCalibrationUnmeasuredTasks{"sim.calibration_unmeasured_tasks", Plain, S::Warning, false,
    MergeRule::Sum, "kernel tasks outside the shapes the calibration measured"};
const StatDecl kSimCalibrationStaleKernels{"sim.calibration_stale_kernels", Plain, S::Warning, false,
    MergeRule::Sum, "kernel tasks whose op kind the calibration measured at an older kernel revision"};
const StatDecl kSimMemoryShortMib{"sim.memory_short_mib", Plain, S::Warning, false, MergeRule::Sum,
    "MiB the plan lacks on the topology's GPUs, as tandem run counts before it allocates"};

const StatDecl kKinetoSkippedPhase{"import.kineto.skipped_phase.", Family, S::Info, false, MergeRule::Sum,
    "events of this phase type are not imported (flows, instants, counters)"};
const StatDecl kKinetoSkippedCategory{"import.kineto.skipped_category.", Family, S::Info, false, MergeRule::Sum,
    "complete events of this category are not imported"};
const StatDecl kNsysNoSchemaVersion{"import.nsys.no_schema_version", Plain, S::Warning, false, MergeRule::Sum,
    "no EXPORT_SCHEMA_VERSION found; columns were resolved by name"};
const StatDecl kNsysTablesNotImported{"import.nsys.tables_not_imported", Plain, S::Info, false, MergeRule::Sum,
    "activity tables of the export that tandem does not read"};
const StatDecl kNsysUnknownStringId{"import.nsys.unknown_string_id", Plain, S::Warning, false, MergeRule::Sum,
    "name ids missing from StringIds"};
const StatDecl kNsysNoTimestamp{"import.nsys.no_timestamp", Plain, S::DataLoss, false, MergeRule::Sum,
    "GPU records without timestamps"};
const StatDecl kNsysNegativeDuration{"import.nsys.negative_duration", Plain, S::Error, false, MergeRule::Sum,
    "GPU records ending before they start"};
const StatDecl kNsysNvtxSkippedEventType{"import.nsys.nvtx_skipped_event_type.", Family, S::Info, false,
    MergeRule::Sum, "NVTX events other than ranges (marks, names, domains)"};
const StatDecl kNsysNvtxUnterminatedRange{"import.nsys.nvtx_unterminated_range", Plain, S::Warning, false,
    MergeRule::Sum, "NVTX ranges without an end"};
// clang-format on

std::string StatDecl::nameOf() const { return std::string(name); }
std::string StatDecl::nameOf(int rank) const { return std::string(name) + std::to_string(rank); }
std::string StatDecl::nameOf(std::string_view what) const { return std::string(name) + std::string(what); }

Severity StatDecl::severityOf(int64_t value) const { return zero_is_info && value == 0 ? Severity::Info : severity; }

StatRow StatDecl::row(int64_t value, std::string_view d) const {
  return {nameOf(), value, severityOf(value), std::string(d.empty() ? description : d)};
}
StatRow StatDecl::row(int rank, int64_t value, std::string_view d) const {
  return {nameOf(rank), value, severityOf(value), std::string(d.empty() ? description : d)};
}
StatRow StatDecl::row(std::string_view what, int64_t value, std::string_view d) const {
  return {nameOf(what), value, severityOf(value), std::string(d.empty() ? description : d)};
}

const std::vector<const StatDecl*>& all() {
  static const std::vector<const StatDecl*> list = {
      &kCuptiDroppedRecords, &kCuptiRecords, &kCuptiBuffersGrown, &kCuptiExternalCorrelationRecords,
      &kProfilerKernels, &kProfilerKernelsAttributed, &kProfilerNcclKernels, &kProfilerNcclAttributed,
      &kProfilerGraphKernels, &kProfilerSetupRecords, &kProfilerStepWorkKernels, &kProfilerKernelsUnattributed,
      &kProfilerClockSyncRecords, &kProfilerWriteErrors, &kClockDriftNs, &kClockOffsetNs, &kClockOffsetRttNs,
      &kClockOffsetEndNs, &kClockOffsetEndRttNs, &kClockOffsetDriftPpb, &kGpuPowerSamples, &kGpuPowerInstant,
      &kGpuPowerWMedian, &kGpuSmClockMhzMedian, &kGpuPowerCappedPct, &kGpuEnergyPerStepMj, &kGpuEnergyPowerW,
      &kTokensPerSecond, &kMfuPpm, &kPlannedArenaBytes, &kPlannedExecutorBytes, &kAllocatedBytes,
      &kDeviceUsedBytes, &kPlacementApplied, &kPlacementDevice, &kMergeInputs, &kClockAppliedOffsetNs, &kClockAppliedDriftPpb, &kSimEvents, &kSimFlows,
      &kSimCollectives, &kSimSimulatedRanks, &kSimRanksNotWritten, &kSimCalibrationGpuMismatch,
      &kSimCalibrationUnmeasuredTasks, &kSimCalibrationStaleKernels, &kSimMemoryShortMib, &kKinetoSkippedPhase,
      &kKinetoSkippedCategory,
      &kNsysNoSchemaVersion, &kNsysTablesNotImported, &kNsysUnknownStringId, &kNsysNoTimestamp,
      &kNsysNegativeDuration, &kNsysNvtxSkippedEventType, &kNsysNvtxUnterminatedRange};
  return list;
}

int rankOf(const StatDecl& decl, std::string_view stored) {
  if (decl.form != NameForm::PerRank || stored.size() <= decl.name.size() || stored.substr(0, decl.name.size()) != decl.name)
    return -1;
  const std::string_view digits = stored.substr(decl.name.size());
  int rank = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
  return ec == std::errc() && end == digits.data() + digits.size() && rank >= 0 ? rank : -1;
}

const StatDecl* find(std::string_view stored) {
  for (const StatDecl* d : all()) {
    switch (d->form) {
      case NameForm::Plain:
        if (stored == d->name) return d;
        break;
      case NameForm::PerRank:
        if (rankOf(*d, stored) >= 0) return d;
        break;
      case NameForm::Family:
        if (stored.size() > d->name.size() && stored.substr(0, d->name.size()) == d->name) return d;
        break;
    }
  }
  return nullptr;
}

}  // namespace tandem::traces::stats
