#pragma once
// The timeline's in-memory model of one run: index-based, struct-of-arrays,
// every track sorted by start time. Nothing here knows Qt, so the model can be
// filled by the trace reader, a generator or a test and checked without
// pixels. The view only ever asks "which indices are visible" and "what is
// slice i", never iterates a whole track per frame.

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/ir/types.h"

namespace tandem::gui {

// Stride of the sampled start index kept beside each lane (see coalesce()).
inline constexpr size_t kSampleStride = 64;
// start_sample[k] = start_ns[k * kSampleStride].
std::vector<int64_t> sampleStarts(const std::vector<int64_t>& start_ns);

// Facts of one plan task, shared by every occurrence of that task (one per
// step). Kept apart from the per-slice arrays so 10M slices stay small.
struct TaskFacts {
  OpKind op = OpKind::Add;
  double flops = 0;
  int64_t bytes = 0;  // read + written
  bool has_op = false;
  int32_t name_id = -1;  // the plan task's name in TimelineData::names (-1: the run has no plan rows)
};

// One lane of slices: a rank's stream. Slices are sorted by start; on a GPU
// stream they do not overlap, but imported traces may nest, so hit-testing
// relies on the running maximum of end times rather than on disjointness.
struct Track {
  int rank = 0;
  int stream = 0;
  StreamKind kind = StreamKind::Compute;
  std::string label;  // "compute", "comm 0", "copy"

  std::vector<int64_t> start_ns;
  std::vector<int64_t> end_ns;
  std::vector<int32_t> name_id;   // index into TimelineData::names
  std::vector<int32_t> task_id;   // plan task id, -1 when unknown
  std::vector<uint8_t> task_kind; // TaskKind
  std::vector<uint8_t> phase;     // Phase
  std::vector<int16_t> layer;     // -1 outside transformer blocks
  std::vector<int16_t> micro_batch;
  // Per slice, a PaintClass replacing the phase's colour (two runs
  // coloured by their difference); empty: by phase.
  std::vector<uint8_t> paint;
  // max_end_ns[i] = max(end_ns[0..i]); filled by finalize().
  std::vector<int64_t> max_end_ns;
  std::vector<int64_t> start_sample;  // filled by finalize()

  size_t size() const { return start_ns.size(); }
  // Index of the first slice starting at or after t_ns.
  size_t lowerBoundStart(int64_t t_ns) const {
    return size_t(std::lower_bound(start_ns.begin(), start_ns.end(), t_ns) - start_ns.begin());
  }
  void reserve(size_t n);
  void append(int64_t start, int64_t end, int32_t name, int32_t task, TaskKind kind, Phase ph,
              int layer_index, int mb);
  // Sorts by start (stable) when needed and builds max_end_ns.
  void finalize();
};

// A derived lane of disjoint, sorted intervals each carrying one small code:
// the overlap lane (hidden / exposed communication) and the phase lane.
struct IntervalLane {
  std::vector<int64_t> start_ns;
  std::vector<int64_t> end_ns;
  std::vector<uint8_t> code;
  // nonzero_prefix_ns[i] = total length of intervals [0, i) whose code is not
  // 0, so a folded box can be coloured by the code covering most of it in
  // O(1). Filled by finalize().
  std::vector<int64_t> nonzero_prefix_ns;
  std::vector<int64_t> length_prefix_ns;  // same, over every interval
  std::vector<int64_t> start_sample;      // see sampleStarts()
  size_t size() const { return start_ns.size(); }
  void finalize();
  // Length of intervals [first, first + count) with code != 0, and in total.
  int64_t nonzeroLength(size_t first, size_t count) const;
  int64_t totalLength(size_t first, size_t count) const;
};

enum class OverlapCode : uint8_t { Hidden = 0, Exposed = 1 };

// A sampled quantity of one rank over time (GPU power, SM clock: the
// profiler samples them every 10-16 ms), drawn as a line under the rank's
// lanes. A training step at the power limit shows its clock falling
// here while the kernels stretch above.
struct CounterLane {
  std::string name;   // as stored, e.g. "gpu.power_w"
  std::string label;  // shown, e.g. "power W"
  std::vector<int64_t> t_ns;
  std::vector<double> value;
  double min = 0, max = 0;  // over all samples; filled by finalize()
  size_t size() const { return t_ns.size(); }
  // Sorts by time (stable) and sets min and max.
  void finalize();
  // Index range [first, last) of the samples to draw for [start, end): one
  // sample either side of the window as well, so the line reaches its edges.
  std::pair<size_t, size_t> visible(int64_t start_ns, int64_t end_ns) const;
};

// One slice: track index into TimelineData::tracks, index on the track.
struct SliceRef {
  int track = -1;
  int64_t index = -1;
  bool valid() const { return track >= 0 && index >= 0; }
  bool operator==(const SliceRef&) const = default;
};

struct RankLanes {
  int rank = 0;
  std::string title;        // the header's name when not "rank N" (two runs side by side)
  std::vector<int> tracks;  // indices into TimelineData::tracks, display order
  IntervalLane overlap;     // OverlapCode per interval
  IntervalLane phases;      // Phase per interval (compute stream)
  std::vector<CounterLane> counters;  // profiled runs: power, SM clock
  // Totals of the overlap sweep, in ns.
  bool totals_in_steps = false;  // the totals below cover the recorded steps (else the whole run)
  int64_t compute_ns = 0;   // union of compute busy time
  int64_t comm_ns = 0;      // union of communication busy time
  int64_t hidden_ns = 0;    // communication under compute
  int64_t exposed_ns = 0;   // communication with no compute beside it
  int64_t span_ns = 0;      // first start to last end over all streams
};

struct StepMark {
  int step = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// Index into `steps` (sorted by start) of the step holding time t, or -1.
int stepIndexAt(const std::vector<StepMark>& steps, int64_t t_ns);

struct TimelineData {
  std::string run_label;  // "run 3 · simulated · gpt2-124m"
  // Names as shown: kernel symbols in their compact demangled form
  // (traces/analysis/kernel_names.h); `symbols` holds the trace's strings as
  // recorded, at the same indices (names interned later have none).
  std::vector<std::string> names;
  std::vector<std::string> symbols;
  std::vector<Track> tracks;
  std::vector<RankLanes> ranks;
  std::vector<StepMark> steps;
  // Per rank, indexed by task id; empty when the run carries no plan facts.
  std::vector<std::vector<TaskFacts>> task_facts;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;

  size_t sliceCount() const;
  const TaskFacts* factsFor(int rank, int task) const;
  // Slice i of track t's task name, as an index into names: the plan task's
  // where the run has plan rows (a real run's kernels carry their own
  // names), else the slice's.
  int32_t taskNameId(const Track& t, size_t i) const;
  // Step index holding time t (-1 when outside every step).
  int stepAt(int64_t t_ns) const;
  // Index into steps of the step of median duration (the lower median; the
  // first such), and of the longest; -1 without steps.
  int medianStep() const;
  int slowestStep() const;
  // [first step's start, last step's end], or [begin, end] without steps:
  // what statistics describe by default.
  std::pair<int64_t, int64_t> stepsSpan() const;
  // Finalizes tracks, groups them per rank (compute, comm, copy order), and
  // computes the phase lanes, the time bounds and (unless the caller fills
  // them from the trace store's analysis) the overlap lanes.
  void finalize(bool compute_overlap = true);
};

// Interns strings into TimelineData::names.
class NameTable {
 public:
  explicit NameTable(std::vector<std::string>& names);
  int32_t intern(const std::string& name);

 private:
  std::vector<std::string>& names_;
  std::unordered_map<std::string, int32_t> index_;
};

}  // namespace tandem::gui
