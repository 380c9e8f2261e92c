#pragma once
// Every stat a producer writes into a run (the profiler, the importers, the
// simulator, the rank runner, merge), declared once: its name, severity,
// description and how `tandem merge` combines it over rank files. Producers
// build their rows from these declarations (Perfetto's stats table works the
// same way), so a name cannot drift between the writer and the reader, and
// `tandem report` and the GUI find every stat a run can carry in one list
// (docs/trace-schema.md, stats).
//
//   w.setStat(stats::kSimEvents.row(result.stats.events));
//   w.setStat(stats::kClockOffsetNs.row(rank, offset_ns));        // "clock.offset_ns.rank3"
//   w.incrementStat(stats::kKinetoSkippedCategory.row("cuda_runtime", 1));  // "...skipped_category.cuda_runtime"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "traces/store/trace_model.h"

namespace tandem::traces::stats {

// How a stat's name is formed.
enum class NameForm : uint8_t {
  Plain,    // the name itself
  PerRank,  // name + "<rank>" ("clock.offset_ns.rank" -> "clock.offset_ns.rank3"): one per rank of a run
  Family,   // name + "<what>" ("import.kineto.skipped_phase." + "i"): one per kind of thing counted
};

// What `tandem merge` does with the same stat of several rank files.
enum class MergeRule : uint8_t {
  Sum,  // counts add up (records, kernels, dropped records)
  Max,  // a run-level figure each rank wrote alike: the largest is kept
};

struct StatDecl {
  std::string_view name;
  NameForm form = NameForm::Plain;
  Severity severity = Severity::Info;
  // The severity applies only to a non-zero value (zero dropped records is
  // no data loss); a zero is Info.
  bool zero_is_info = false;
  MergeRule merge = MergeRule::Sum;
  std::string_view description;

  // The full name of a Plain stat, of rank `rank`'s PerRank stat, or of the
  // Family member `what`.
  std::string nameOf() const;
  std::string nameOf(int rank) const;
  std::string nameOf(std::string_view what) const;
  Severity severityOf(int64_t value) const;
  // A row with the declared severity and description (or `description`,
  // where the producer knows better words: a warning's whole line).
  StatRow row(int64_t value, std::string_view description = {}) const;
  StatRow row(int rank, int64_t value, std::string_view description = {}) const;
  StatRow row(std::string_view what, int64_t value, std::string_view description = {}) const;
};

// ---- the profiler (CUPTI, NVTX, NVML)
extern const StatDecl kCuptiDroppedRecords, kCuptiRecords, kCuptiBuffersGrown, kCuptiExternalCorrelationRecords;
extern const StatDecl kProfilerKernels, kProfilerKernelsAttributed, kProfilerNcclKernels, kProfilerNcclAttributed;
extern const StatDecl kProfilerGraphKernels, kProfilerSetupRecords, kProfilerStepWorkKernels;
extern const StatDecl kProfilerKernelsUnattributed, kProfilerClockSyncRecords, kProfilerWriteErrors;
extern const StatDecl kClockDriftNs, kClockOffsetNs, kClockOffsetRttNs, kClockOffsetEndNs, kClockOffsetEndRttNs;
extern const StatDecl kClockOffsetDriftPpb;
extern const StatDecl kGpuPowerSamples, kGpuPowerInstant, kGpuPowerWMedian, kGpuSmClockMhzMedian;
extern const StatDecl kGpuPowerCappedPct, kGpuEnergyPerStepMj, kGpuEnergyPowerW;
// ---- a real run's summary (the rank runner)
extern const StatDecl kTokensPerSecond, kMfuPpm, kPlannedArenaBytes, kPlannedExecutorBytes, kAllocatedBytes;
extern const StatDecl kDeviceUsedBytes;
// ---- a real run's placement (`tandem run --placement`)
extern const StatDecl kPlacementApplied, kPlacementDevice;
// ---- merge
extern const StatDecl kMergeInputs, kClockAppliedOffsetNs, kClockAppliedDriftPpb;
// ---- the simulator
extern const StatDecl kSimEvents, kSimFlows, kSimCollectives, kSimSimulatedRanks, kSimRanksNotWritten;
extern const StatDecl kSimCalibrationGpuMismatch, kSimCalibrationUnmeasuredTasks, kSimCalibrationStaleKernels,
    kSimMemoryShortMib;
// ---- the importers
extern const StatDecl kKinetoSkippedPhase, kKinetoSkippedCategory;
extern const StatDecl kNsysNoSchemaVersion, kNsysTablesNotImported, kNsysUnknownStringId, kNsysNoTimestamp;
extern const StatDecl kNsysNegativeDuration, kNsysNvtxSkippedEventType, kNsysNvtxUnterminatedRange;

// Every declaration, in the order above.
const std::vector<const StatDecl*>& all();

// The declaration a stored name belongs to (its Plain name, or a PerRank or
// Family prefix); null for a name no producer of this version writes (an
// older file's, or a test's).
const StatDecl* find(std::string_view stored_name);

// The rank of a PerRank stat's stored name ("clock.offset_ns.rank3" with
// kClockOffsetNs: 3), or -1 when the name is not one of `decl`'s.
int rankOf(const StatDecl& decl, std::string_view stored_name);

}  // namespace tandem::traces::stats
