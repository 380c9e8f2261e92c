#include "simulator/replay/replay.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <queue>
#include <span>
#include <tuple>
#include <unordered_map>

#include "simulator/network/network.h"
#include "simulator/topology/routing.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tandem::sim {
namespace {

enum class EventType : uint8_t { TaskDone, PhaseStart, CollectiveDone, CollectiveReady, CollectiveArrive, LastRound };

// Events are processed in (time, insertion order): deterministic.
struct Event {
  int64_t time = 0;
  EventType type = EventType::TaskDone;
  int a = 0, b = 0;
};

// What every rank of one program shares: the stream queues' task lists and
// the recorder of each event. Kept once per program, not once per rank, so
// the per-rank state touched by each task stays small at thousands of ranks.
struct ProgramQueues {
  bool built = false;
  std::vector<std::vector<int>> stream_tasks;  // task indices of each stream, plan order
  std::vector<int> event_recorder;             // task index recording each event, -1 none
  // Overlapped tensor-parallel collectives (attrs.overlapped) -> the GEMM
  // each is pipelined with: an all-gather's first reader, a reduce-scatter's
  // input's writer (engine/passes/tp_comm_overlap.h).
  std::unordered_map<int, int> pipeline_partner;
};

// The event queue, ordered by (time, insertion order). Events of one time
// sit in one FIFO bucket (appending keeps insertion order), and a binary heap
// orders only the distinct times. Thousands of ranks doing the same thing
// finish their tasks at the same few times, so the heap stays tiny and the
// buckets are read and written in sequence, where a heap of every event
// would sift through a structure as large as the rank count for each one.
class EventQueue {
 public:
  bool empty() const { return times_.empty(); }
  int64_t topTime() const { return times_.front(); }
  Event top() const {
    const Bucket& b = buckets_[size_t(current_)];
    const Item& i = b.events[b.read];
    return Event{times_.front(), i.type, i.a, i.b};
  }
  void push(const Event& e) {
    // Runs of pushes for one time (every rank finishing alike) skip the lookup.
    if (last_bucket_ < 0 || e.time != last_time_) {
      auto [it, inserted] = bucket_of_.try_emplace(e.time, -1);
      if (inserted) {
        if (free_.empty()) {
          it->second = int(buckets_.size());
          buckets_.emplace_back();
        } else {
          it->second = free_.back();
          free_.pop_back();
        }
        times_.push_back(e.time);
        std::push_heap(times_.begin(), times_.end(), std::greater<int64_t>());
        if (times_.front() == e.time) current_ = it->second;
      }
      last_time_ = e.time;
      last_bucket_ = it->second;
    }
    buckets_[size_t(last_bucket_)].events.push_back(Item{e.a, e.b, e.type});
  }
  void pop() {
    Bucket& b = buckets_[size_t(current_)];
    if (++b.read < b.events.size()) return;
    b.events.clear();
    b.read = 0;
    free_.push_back(current_);
    if (last_bucket_ == current_) last_bucket_ = -1;
    bucket_of_.erase(times_.front());
    std::pop_heap(times_.begin(), times_.end(), std::greater<int64_t>());
    times_.pop_back();
    current_ = times_.empty() ? -1 : bucket_of_.find(times_.front())->second;
  }

 private:
  struct Item {  // an event without its time (the bucket's)
    int a, b;
    EventType type;
  };
  struct Bucket {
    std::vector<Item> events;   // insertion order
    size_t read = 0;            // events before this one were popped
  };
  std::vector<int64_t> times_;  // min-heap of the distinct times queued
  std::unordered_map<int64_t, int> bucket_of_;
  std::vector<Bucket> buckets_;
  std::vector<int> free_;       // emptied buckets, reused (their capacity too)
  int current_ = -1;            // bucket of times_.front()
  int64_t last_time_ = 0;       // the last push's time and bucket (-1: none)
  int last_bucket_ = -1;
};

// StreamState::sharing: set for a running kernel that does not hold the GPU,
// and for a task's trailing kernels (CostModel::trailingNs) once its main
// kernel is done; kCoResident while every kernel sharing the GPU has small
// blocks (rateDivisor); the low bits count the kernels that share the GPU.
constexpr uint8_t kNotHolder = 0x80;
constexpr uint8_t kTrailing = 0x40;
constexpr uint8_t kCoResident = 0x20;
constexpr uint8_t kSharingCount = 0x1f;
// StreamState::done_ns of a running kernel that makes no progress for now.
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// One cache line (fields ordered so that no padding is left inside): every
// simulated rank's streams sit together, and at thousands of ranks their
// total is what decides whether the per-task state stays in the CPU's cache;
// aligned, a stream's state is one line, not parts of two.
struct alignas(64) StreamState {
  const std::vector<int>* tasks = nullptr;  // the program's list for this stream
  int64_t started_ns = 0;
  // A running kernel: the work left (ns at full speed) as of `updated_ns`,
  // whether it runs slowed (a collective is resident on the rank), and the
  // time its completion event is for (older events for it are stale).
  double work_left_ns = 0;
  int64_t updated_ns = 0;
  int64_t done_ns = -1;
  uint32_t head = 0;  // next task's position in *tasks
  bool busy = false;
  bool kernel = false;
  bool slowed = false;
  // A running kernel that shares the GPU with the rank's other running
  // kernels (one per compute stream; fused tasks launch nothing and do not
  // count): how many ran, itself included, when its rate was last set, with
  // kNotHolder added when another of them held the GPU
  // (KernelSharing::FirstHolds) and kTrailing in the task's trailing kernels.
  // 0 for anything else.
  uint8_t sharing = 0;
  // When the running kernel (or its task's trailing kernels) first got SMs:
  // the start of its record (-1: not yet); and the room and spare share
  // beside the holder its rate was last set with (rateDivisor).
  int64_t record_start_ns = -1;
  float rate_spare = -1.0f;
  SmRoom rate_room = SmRoom::Unknown;
  // The running kernel is in its last round of tiles (CostModel::lastRound):
  // as the GPU's holder it leaves that round's spare SMs to the others.
  bool last_round = false;
};
static_assert(sizeof(StreamState) == 64);

struct RankState {
  // What every task touches comes first, in the first 64 bytes (plan, the
  // two slices, the activity cursor, the durations, the residency count);
  // what only collectives or errors read follows.
  const RankPlan* plan = nullptr;
  // The rank's stream states and recorded events (one bit each) are slices
  // of two engine-wide arrays, rank after rank, not allocations of their
  // own: thousands of ranks doing the same thing are visited in rank order
  // at each time, so these are read in sequence, where separate blocks,
  // allocated between the ranks' large activity buffers, put every rank's
  // state on a page of its own.
  std::span<StreamState> streams;
  std::span<uint64_t> event_bits;
  // Where the rank's next activity goes: its slice of the run's activity
  // block (Replay::activities_), one record per task of its program. A rank
  // ends when its last task does (time only moves forward), so its end time
  // is the last record's and needs no field of its own.
  SimActivityRecord* out = nullptr;
  // The program's task durations on this rank's kind of device (-1 until a
  // task first runs), shared by every rank of the program on such devices:
  // a task's duration depends on the task and the device's figures only
  // (CostModel), so it is computed once, not once per rank, and no rank
  // reads its own device record for it.
  int64_t* durations = nullptr;
  int active_comm = 0;
  int running_kernels = 0;  // kernels that share the SMs now (StreamState::sharing)
  int device = 0;
  int rank = 0;
  int program = 0;
  SimActivityRecord* first = nullptr;  // start of the rank's slice
  SimActivityRecord* slice_end = nullptr;  // its end (checked in debug builds)
  // Per task of the program, like durations: room for other kernels beside
  // its main kernel (CostModel::smRoomBeside).
  SmRoom* sm_room = nullptr;
  float* spare = nullptr;  // and the share of the SMs it leaves, where known (CostModel::spareSmShare), else -1
  LastRound* last_round = nullptr;  // and its last round of tiles (CostModel::lastRound)
  uint8_t* fixed_grid = nullptr;    // and whether its work is split over a fixed grid (CostModel::fixedGrid)
  bool eventDone(int e) const { return (event_bits[size_t(e) >> 6] >> (e & 63)) & 1; }
  const std::vector<int>* event_recorder = nullptr;  // the program's
  const std::unordered_map<int, int>* pipeline_partner = nullptr;  // the program's (ProgramQueues)
  std::map<int, int64_t> group_seq;  // per group index: collectives reached
  std::map<std::pair<int, int>, int64_t> p2p_seq;  // (group, direction) -> sends/recvs reached
};

struct Arrival {
  int rank_state = 0;  // index into ranks_
  int task = 0;
  int64_t time = 0;
};

struct Pending {
  CollectiveOp op = CollectiveOp::AllReduce;
  int64_t bytes = 0;
  std::vector<Arrival> arrivals;
  size_t expected = 0;
  int src = -1, dst = -1;  // send/recv: ranks
};

struct Instance {
  std::shared_ptr<const CollectiveSchedule> schedule;
  size_t phase = 0;
  int flows_left = 0;
  int64_t start_ns = 0;
  std::vector<Arrival> members;
  int record = -1;  // index into result collectives; -1 for a shadow (below)
  // A representatives' transfer ends when the transfers its members stand
  // for have ended too (the slowest of them holds the members it stands
  // for, as the slowest member holds a collective): its shadows still
  // running, and whether its own flows are done; a shadow's own instance.
  int shadows_running = 0;
  bool waits_for_shadows = false;
  int real = -1;
};

// Storage for `count` activity records, uninitialized (every record is
// written before a list refers to it). Large blocks are aligned to the 2 MiB
// huge page of x86-64 and Linux and advised to the kernel as huge-page
// memory: the ranks write their records at thousands of places at once (one
// slice per rank), and with 4 KiB pages each of those places is a page of its
// own in the TLB. Small blocks are aligned to a cache line.
SimActivityRecord* allocateRecords(size_t count) {
  constexpr size_t kHugePage = size_t(2) << 20;
  constexpr size_t kLine = 64;
  const size_t bytes = std::max<size_t>(count, 1) * sizeof(SimActivityRecord);
  const size_t align = bytes >= kHugePage ? kHugePage : kLine;
  const size_t size = (bytes + align - 1) / align * align;  // aligned_alloc wants a multiple
  void* p = std::aligned_alloc(align, size);
  if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // A hint: without transparent huge pages (or with them off) it does nothing.
  if (align == kHugePage) (void)madvise(p, size, MADV_HUGEPAGE);
#endif
  return static_cast<SimActivityRecord*>(p);
}

// What a run's activity lists share: the record block and, per program, the
// plan's fields of each task as a SimActivity (times zero), which the lists
// join with the records. One table per program, not per rank, so the copy
// costs the program's task count once, however many ranks run it.
struct ActivityStore {
  struct Free {
    void operator()(SimActivityRecord* p) const { std::free(p); }
  };
  std::unique_ptr<SimActivityRecord, Free> records;
  std::vector<std::vector<SimActivity>> facts;  // per program; empty when no rank of it is simulated
  std::vector<SimLongActivity> long_activities;  // sorted by record at the end of the run
};

// A kernel that shares the GPU's SMs with the rank's other running kernels:
// one that launches something (not fused into another task's GEMM), on a
// compute stream (collectives' kernels are modelled apart).
bool sharesSms(const RankPlan& rp, const Task& t) {
  return t.kind == TaskKind::Kernel && t.fused_into < 0 && t.stream >= 0 && t.stream < int(rp.streams.size()) &&
         rp.streams[size_t(t.stream)].kind == StreamKind::Compute;
}

// Two entries per task: the task's, then (all after the tasks') its trailing
// kernels', whose flops and bytes the first entry already counts.
std::vector<SimActivity> taskFacts(const RankPlan& rp) {
  std::vector<SimActivity> out;
  out.reserve(2 * rp.tasks.size());
  for (size_t i = 0; i < rp.tasks.size(); ++i) {
    const Task& t = rp.tasks[i];
    SimActivity a;
    a.task = int(i);
    a.task_id = t.id;
    a.stream = t.stream;
    a.kind = t.kind;
    a.phase = t.phase;
    a.layer = t.layer;
    a.micro_batch = t.micro_batch;
    a.flops = t.flops;
    a.bytes = t.collective ? t.collective->bytes : t.bytes_read + t.bytes_written;
    out.push_back(a);
  }
  for (size_t i = 0; i < rp.tasks.size(); ++i) {
    SimActivity a = out[i];
    a.trailing = true;
    a.flops = 0;
    a.bytes = 0;
    out.push_back(a);
  }
  return out;
}

// Pairs each overlapped collective of the plan with its GEMM, in one pass.
void findPipelinePartners(ProgramQueues& q, const RankPlan& plan) {
  std::unordered_map<int, int> last_writer, gathered_by;  // buffer -> task
  for (int i = 0; i < int(plan.tasks.size()); ++i) {
    const Task& t = plan.tasks[size_t(i)];
    for (int b : t.reads)
      if (auto g = gathered_by.find(b); g != gathered_by.end()) {
        q.pipeline_partner[g->second] = i;
        gathered_by.erase(g);
      }
    if (t.attrs.overlapped && t.op == OpKind::ReduceScatter && !t.reads.empty())
      if (auto w = last_writer.find(t.reads[0]); w != last_writer.end()) q.pipeline_partner[i] = w->second;
    for (int b : t.writes) last_writer[b] = i;
    if (t.attrs.overlapped && t.op == OpKind::AllGather && !t.writes.empty()) gathered_by[t.writes[0]] = i;
  }
}

// Fills a program's shared queues from its plan: each stream's tasks and
// each event's recorder, checking the streams and events the tasks name.
// Checked once per program; errors name its first simulated rank.
void buildProgramQueues(ProgramQueues& q, const RankPlan& plan, int r, size_t num_events) {
  q.built = true;
  q.stream_tasks.resize(plan.streams.size());
  q.event_recorder.assign(num_events, -1);
  for (int i = 0; i < int(plan.tasks.size()); ++i) {
    const Task& t = plan.tasks[size_t(i)];
    if (t.stream < 0 || t.stream >= int(q.stream_tasks.size()))
      throw SimulationError("rank " + std::to_string(r) + " task " + std::to_string(t.id) + " '" + t.name +
                            "': stream " + std::to_string(t.stream) + " does not exist");
    q.stream_tasks[size_t(t.stream)].push_back(i);
    for (int e : t.wait_events)
      if (e < 0 || e >= int(num_events))
        throw SimulationError("rank " + std::to_string(r) + " task " + std::to_string(t.id) + " '" + t.name +
                              "' waits on event " + std::to_string(e) + " but the program has " +
                              std::to_string(num_events) + " events");
    if (t.record_event >= int(num_events))
      throw SimulationError("rank " + std::to_string(r) + " task " + std::to_string(t.id) + " records event " +
                            std::to_string(t.record_event) + " beyond num_events");
    if (t.record_event >= 0) q.event_recorder[size_t(t.record_event)] = i;
  }
  findPipelinePartners(q, plan);
}

class Replay {
 public:
  Replay(const Plan& plan, const Topology& topo, const CostModel& cost, const SimOptions& options)
      : plan_(plan), topo_(topo), cost_(cost), options_(options), router_(topo),
        builder_(router_, options.nccl, options.collective_calibration), net_(linkCapacities(topo)),
        last_rounds_(cost.hasLastRounds()),
        fixed_grid_beside_spare_(cost.fixedGridBesideSpareSms()) {}

  SimResult run();

 private:
  static std::vector<double> linkCapacities(const Topology& topo) {
    std::vector<double> caps;
    caps.reserve(topo.links.size());
    for (const Link& l : topo.links) caps.push_back(l.gbps);
    return caps;
  }
  void setup();
  // Per simulated rank (in ranks_ order), its share of the engine-wide
  // arrays: stream states, event words and activity records.
  struct RankSlices {
    std::vector<size_t> streams, events, records;
  };
  // setup's steps, in order.
  void assignRanks();
  void chooseSymmetry();
  void classifyDevices();
  void findRepresentatives();
  void addRankState(int r, RankSlices& slices);
  void attachTaskTables(RankState& st, RankSlices& slices);
  void sliceArrays(const RankSlices& slices);
  void indexGroupMembers();
  void findShadowGroups();
  void launchShadow(int real_instance, int shadow_group, const ProcessGroup& real, CollectiveOp op, int64_t bytes,
                    int src, int dst);
  void finishTransfer(int ii);
  std::shared_ptr<const CollectiveSchedule> scheduleFor(int g, CollectiveOp op, int64_t bytes, int src, int dst);
  void push(int64_t t, EventType type, int a, int b = 0) { queue_.push(Event{t, type, a, b}); }
  void tryStart(int ri, int stream);
  // How many times longer than alone a running kernel of task t takes:
  // slowed by a resident collective, and sharing the SMs with other kernels
  // as its `sharing` code says (StreamState::sharing). Infinite for a kernel
  // that makes no progress while another holds the GPU.
  // holder_room: room beside the kernel that holds the GPU (roomBeside).
  // holder_spare: the share of the SMs it leaves, where known (spareBeside),
  // else -1.
  double rateDivisor(const Task& t, bool slowed, int sharing, SmRoom holder_room, float holder_spare) const;
  float spareBeside(const RankState& r, int holder) const;
  SmRoom roomBeside(const RankState& r, int holder) const;
  // Whether every kernel sharing r's GPU now has small blocks: trailing
  // kernels, and main kernels with room beside them but no share of whole
  // SMs to give (memory-bound kinds, in a calibration with launch geometry).
  bool allBlocksSmall(const RankState& r) const;
  // Whether every kernel sharing the GPU besides the holder's is the main
  // kernel of a fixed grid (the ones that only land on its spare SMs).
  bool onlyFixedGridGuests(const RankState& r, int holder) const;
  // Queues the moment stream si's running kernel enters its last round of
  // tiles at its current rate (none for a kernel without one, or in it).
  void scheduleLastRound(int ri, int si);
  // The work left (ns alone) when task ti's running main kernel enters its
  // last round: the rounds split its work evenly.
  double lastRoundWork(const RankState& r, const StreamState& s, int ti) const;
  void enterLastRound(int ri, int ti);
  // KernelSharing::FirstHolds: the stream whose running kernel holds the
  // GPU (-1 when no sharing kernel runs).
  int holderOf(const RankState& r) const;
  // The trailing part of task ti's duration on rank r (CostModel::trailingNs).
  int64_t trailingOf(const RankState& r, int ti) const;
  // Writes the record of task ti's activity (record_index: ti, or ti plus
  // the task count for its trailing kernels) from start_ns to now.
  void writeRecord(RankState& r, int record_index, int64_t start_ns);
  // How many of r's tasks may have trailing kernels on its device.
  size_t countTrailing(const RankState& r) const;
  // When work_ns of work ends at `divisor` times its time alone, from now;
  // kNever when that is beyond any simulation.
  int64_t completionAt(double work_ns, double divisor) const;
  void rescheduleKernels(int ri);
  bool isCurrentCompletion(int ri, int ti) const;
  void tryStartAll(int ri) {
    for (int s = 0; s < int(ranks_[size_t(ri)].streams.size()); ++s) tryStart(ri, s);
  }
  void arrive(int ri, int task_index);
  void launch(Pending&& p, int group);
  void startPhase(int inst);
  void phaseFlowsStart(int inst);
  void phaseDone(int inst);
  // The task role (taskRole) of the kernels that ran beside a collective the
  // longest on its members, from its start until now; "" when none did.
  std::string dominantRoleBeside(const Instance& inst) const;
  int64_t pipelineFillNs(const Instance& inst) const;
  void finishTask(int ri, int task_index);
  [[noreturn]] void reportDeadlock();
  std::string describeTask(const RankState& r, int task_index) const;
  int groupIndex(const std::string& name, const RankState& r, int task_index) const;

  const Plan& plan_;
  const Topology& topo_;
  const CostModel& cost_;
  const SimOptions& options_;
  Router router_;
  CollectiveBuilder builder_;
  FlowNetwork net_;
  // Whether any kernel may have a last round of tiles (CostModel::lastRound):
  // without, no task's table entry is read (the cost of a task start stays
  // as it was at thousands of ranks).
  const bool last_rounds_;
  // Whether a fixed grid gains nothing on a holder's spare SMs too
  // (CostModel::fixedGridBesideSpareSms), not only in its last round.
  const bool fixed_grid_beside_spare_;

  std::vector<ProgramQueues> queues_;     // per program
  // Task durations per (program, device class); a device class is the set of
  // devices with the same figures (DeviceSpec without name and host).
  std::vector<std::vector<int64_t>> duration_tables_;
  std::vector<std::vector<SmRoom>> sm_room_tables_;  // RankState::sm_room, alongside
  std::map<std::pair<int, int>, size_t> duration_table_of_;
  // Per duration table: how many of its program's tasks may have trailing
  // kernels on that device class (each has a second record).
  std::vector<size_t> trailing_tasks_;
  std::vector<int> device_class_;  // per topology device
  std::vector<RankState> ranks_;          // simulated ranks
  std::vector<StreamState> stream_states_;  // every simulated rank's streams, rank after rank
  std::vector<std::vector<float>> spare_tables_;  // RankState::spare, alongside the durations
  std::vector<std::vector<LastRound>> last_round_tables_;  // RankState::last_round, likewise
  std::vector<std::vector<uint8_t>> fixed_grid_tables_;    // RankState::fixed_grid, likewise
  std::shared_ptr<ActivityStore> activities_;  // every simulated rank's records, rank after rank; task tables
  std::vector<uint64_t> event_words_;       // every simulated rank's recorded-event bits, likewise
  std::vector<int> rank_state_of_;        // world rank -> index in ranks_, -1 when represented
  std::vector<int> rank_device_;
  std::vector<int> program_of_;
  std::vector<int> program_min_rank_;     // per program: its lowest rank (the representative)
  // Group name -> the plan's groups of that name (they partition ranks: a
  // rank's collective runs in the one containing it).
  std::map<std::string, std::vector<int>> group_index_;
  std::vector<std::vector<int>> simulated_members_;  // per group: simulated member ranks
  // Symmetric simulation: per group of representatives, the groups of the
  // same name whose ranks they stand for and whose transfers would share a
  // NIC with the representatives' (findShadowGroups).
  std::vector<std::vector<int>> shadow_groups_;
  std::vector<std::vector<char>> group_member_;      // per group, per world rank: member?
  std::map<std::tuple<int, int, int64_t>, Pending> pending_;  // (group, direction or -1, seq)
  std::map<std::tuple<int, int, int64_t, int, int>, std::shared_ptr<const CollectiveSchedule>> schedules_;
  std::vector<Instance> instances_;
  EventQueue queue_;
  int64_t now_ = 0;
  SimResult result_;
  bool symmetric_ = false;
};

void Replay::setup() {
  assignRanks();
  chooseSymmetry();
  classifyDevices();
  rank_state_of_.assign(size_t(plan_.world_size), -1);
  queues_.resize(plan_.programs.size());
  findRepresentatives();
  RankSlices slices;
  for (int r = 0; r < plan_.world_size; ++r) {
    const int p = program_of_[size_t(r)];
    if (symmetric_ && program_min_rank_[size_t(p)] != r) continue;
    addRankState(r, slices);
  }
  sliceArrays(slices);
  indexGroupMembers();
  findShadowGroups();
  result_.stats.simulated_ranks = int(ranks_.size());
}

// Each rank's device and program, checked against the topology and the
// world; and the plan's groups by name.
void Replay::assignRanks() {
  const int world = plan_.world_size;
  rank_device_ = options_.rank_device;
  if (rank_device_.empty()) {
    if (world > int(topo_.devices.size()))
      throw SimulationError("the plan has " + std::to_string(world) + " ranks but topology '" + topo_.name +
                            "' has only " + std::to_string(topo_.devices.size()) + " devices");
    for (int r = 0; r < world; ++r) rank_device_.push_back(r);
  }
  if (int(rank_device_.size()) != world) throw SimulationError("rank_device must name one device per rank");
  program_of_.assign(size_t(world), -1);
  for (int p = 0; p < int(plan_.programs.size()); ++p)
    for (int r : plan_.programs[size_t(p)].ranks) {
      if (r < 0 || r >= world)
        throw SimulationError("program " + std::to_string(p) + " names rank " + std::to_string(r) +
                              " outside the world");
      program_of_[size_t(r)] = p;
    }
  for (int r = 0; r < world; ++r)
    if (program_of_[size_t(r)] < 0) throw SimulationError("rank " + std::to_string(r) + " has no program in the plan");
  // FP8 GEMMs need FP8 tensor cores on every rank's GPU (DeviceSpec::fp8_flops).
  if (plan_.job.training.precision == Precision::FP8)
    for (int r = 0; r < world; ++r) {
      const DeviceSpec& d = topo_.devices.at(size_t(rank_device_[size_t(r)]));
      if (d.fp8_flops <= 0)
        throw SimulationError("the plan's GEMMs run in FP8 (training.precision fp8), but rank " + std::to_string(r) +
                              "'s GPU " + d.name + " (" + (d.model.empty() ? "no model" : d.model) +
                              ") has no FP8 tensor cores (fp8_flops 0 in topology '" + topo_.name +
                              "'); simulate it as bf16, or on H100/H200-class GPUs");
    }
  for (int g = 0; g < int(plan_.groups.size()); ++g) group_index_[plan_.groups[size_t(g)].name].push_back(g);
}

// Symmetry: one representative (the lowest rank) per program.
void Replay::chooseSymmetry() {
  std::string problem;
  if (options_.symmetry != SymmetryMode::Off) {
    problem = symmetryProblem(plan_, topo_, rank_device_);
    if (!problem.empty() && options_.symmetry == SymmetryMode::On)
      throw SimulationError("symmetric simulation refused: " + problem);
    symmetric_ = problem.empty();
  }
  result_.stats.symmetric = symmetric_;
  result_.stats.symmetry_note = options_.symmetry == SymmetryMode::Off ? "off"
                                : symmetric_ ? "one representative per program"
                                             : "every rank simulated: " + problem;
}

// Device classes: the cost model sees a device's figures, never its name or host.
void Replay::classifyDevices() {
  using Figures = std::tuple<std::string, double, double, double, double, int64_t, int, double, std::string, double>;
  std::map<Figures, int> class_of;
  device_class_.clear();
  for (const DeviceSpec& d : topo_.devices) {
    const Figures f{d.model,     d.bf16_flops,  d.fp32_flops, d.fp8_flops, d.hbm_gbps, d.memory_bytes,
                    d.sm_count, d.mig_fraction, d.mig_profile, d.speed};
    device_class_.push_back(class_of.try_emplace(f, int(class_of.size())).first->second);
  }
}

// Each program's lowest rank, its representative in a symmetric simulation.
void Replay::findRepresentatives() {
  program_min_rank_.assign(plan_.programs.size(), -1);
  for (int p = 0; p < int(plan_.programs.size()); ++p) {
    const auto& pranks = plan_.programs[size_t(p)].ranks;
    if (!pranks.empty()) program_min_rank_[size_t(p)] = *std::min_element(pranks.begin(), pranks.end());
  }
}

// Adds simulated rank r to ranks_ (building its program's queues when it is
// the program's first), and its sizes to slices.
void Replay::addRankState(int r, RankSlices& slices) {
  const int p = program_of_[size_t(r)];
  RankState st;
  st.rank = r;
  st.program = p;
  st.device = rank_device_[size_t(r)];
  st.plan = &plan_.programs[size_t(p)];
  const size_t num_events = size_t(std::max(0, st.plan->num_events));
  ProgramQueues& q = queues_[size_t(p)];
  if (!q.built) buildProgramQueues(q, *st.plan, r, num_events);
  slices.streams.push_back(q.stream_tasks.size());
  slices.events.push_back((num_events + 63) / 64);
  st.event_recorder = &q.event_recorder;
  st.pipeline_partner = &q.pipeline_partner;
  if (st.device < 0 || st.device >= int(device_class_.size()))
    throw SimulationError("rank " + std::to_string(r) + " is placed on device " + std::to_string(st.device) +
                          " but topology '" + topo_.name + "' has " + std::to_string(topo_.devices.size()));
  attachTaskTables(st, slices);
  rank_state_of_[size_t(r)] = int(ranks_.size());
  ranks_.push_back(std::move(st));
}

// Points the rank at the per-task tables of its (program, device class),
// created on first use, and adds its record slots to slices.
void Replay::attachTaskTables(RankState& st, RankSlices& slices) {
  const auto key = std::make_pair(st.program, device_class_[size_t(st.device)]);
  auto [it, fresh] = duration_table_of_.try_emplace(key, duration_tables_.size());
  if (fresh) {
    duration_tables_.emplace_back(st.plan->tasks.size(), int64_t(-1));
    sm_room_tables_.emplace_back(st.plan->tasks.size(), SmRoom::Unknown);
    spare_tables_.emplace_back(st.plan->tasks.size(), -1.0f);
    last_round_tables_.emplace_back(st.plan->tasks.size(), LastRound{});
    fixed_grid_tables_.emplace_back(st.plan->tasks.size(), uint8_t(0));
    trailing_tasks_.push_back(countTrailing(st));
  }
  st.durations = duration_tables_[it->second].data();  // inner buffers never move
  st.sm_room = sm_room_tables_[it->second].data();
  st.spare = spare_tables_[it->second].data();
  st.last_round = last_round_tables_[it->second].data();
  st.fixed_grid = fixed_grid_tables_[it->second].data();
  slices.records.push_back(st.plan->tasks.size() + trailing_tasks_[it->second]);
}

// The slices, now that every rank's sizes are known (the arrays are not
// resized after this, so the spans stay valid).
void Replay::sliceArrays(const RankSlices& slices) {
  size_t total_streams = 0, total_words = 0, total_tasks = 0;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    total_streams += slices.streams[i];
    total_words += slices.events[i];
    total_tasks += slices.records[i];
  }
  activities_ = std::make_shared<ActivityStore>();
  activities_->records.reset(allocateRecords(total_tasks));
  activities_->facts.resize(plan_.programs.size());
  total_tasks = 0;
  stream_states_.assign(total_streams, StreamState{});
  event_words_.assign(total_words, 0);
  total_streams = total_words = 0;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    RankState& st = ranks_[i];
    st.streams = std::span<StreamState>(stream_states_.data() + total_streams, slices.streams[i]);
    st.event_bits = std::span<uint64_t>(event_words_.data() + total_words, slices.events[i]);
    total_streams += slices.streams[i];
    total_words += slices.events[i];
    // Each task ends once and its main kernel before that: at most the
    // program's count plus its tasks with trailing kernels.
    st.first = st.out = activities_->records.get() + total_tasks;
    total_tasks += slices.records[i];
    st.slice_end = activities_->records.get() + total_tasks;
    std::vector<SimActivity>& facts = activities_->facts[size_t(st.program)];
    if (facts.empty()) facts = taskFacts(*st.plan);
    const ProgramQueues& q = queues_[size_t(st.program)];
    for (size_t si = 0; si < st.streams.size(); ++si) st.streams[si].tasks = &q.stream_tasks[si];
  }
}

// Per group: which world ranks are members and which members are simulated.
void Replay::indexGroupMembers() {
  const int world = plan_.world_size;
  simulated_members_.resize(plan_.groups.size());
  group_member_.assign(plan_.groups.size(), std::vector<char>(size_t(world), 0));
  for (size_t g = 0; g < plan_.groups.size(); ++g)
    for (int r : plan_.groups[g].ranks) {
      if (r < 0 || r >= world)
        throw SimulationError("group '" + plan_.groups[g].name + "' names rank " + std::to_string(r) +
                              " outside the world");
      group_member_[g][size_t(r)] = 1;
      if (rank_state_of_[size_t(r)] >= 0) simulated_members_[g].push_back(r);
    }
}

int Replay::groupIndex(const std::string& name, const RankState& r, int task_index) const {
  auto it = group_index_.find(name);
  if (it == group_index_.end())
    throw SimulationError("rank " + std::to_string(r.rank) + " " + describeTask(r, task_index) +
                          ": unknown process group '" + name + "'");
  for (int g : it->second)
    if (group_member_[size_t(g)][size_t(r.rank)]) return g;
  return it->second.front();  // arrive() reports that it does not contain the rank
}

std::string Replay::describeTask(const RankState& r, int task_index) const {
  const Task& t = r.plan->tasks[size_t(task_index)];
  const StreamInfo* s = t.stream < int(r.plan->streams.size()) ? &r.plan->streams[size_t(t.stream)] : nullptr;
  return "task " + std::to_string(t.id) + " '" + t.name + "' on stream " + std::to_string(t.stream) +
         (s && !s->name.empty() ? " (" + s->name + ")" : "");
}

void Replay::tryStart(int ri, int stream) {
  RankState& r = ranks_[size_t(ri)];
  StreamState& s = r.streams[size_t(stream)];
  if (s.busy || s.head >= s.tasks->size()) return;
  const int ti = (*s.tasks)[s.head];
  const Task& t = r.plan->tasks[size_t(ti)];
  for (int e : t.wait_events)
    if (!r.eventDone(e)) return;
  s.busy = true;
  s.started_ns = now_;
  if (t.kind == TaskKind::Collective || t.kind == TaskKind::SendRecv) {
    // Not a kernel: the flags may still describe the stream's previous task,
    // and rescheduleKernels (called from arrive) would otherwise reschedule
    // the collective as a slowed kernel and end it a second time.
    s.kernel = false;
    s.slowed = false;
    s.sharing = 0;
    // NCCL's kernel gets the SMs only as the kernels beside it retire
    // (calibrated; 0 by default): decided once the tasks this one's inputs
    // released have started, by an event at the same time.
    if (cost_.collectiveStartWait() > 0) {
      push(now_, EventType::CollectiveReady, ri, ti);
      return;
    }
    arrive(ri, ti);
    return;
  }
  int64_t& cached = r.durations[size_t(ti)];
  if (cached < 0) {
    const DeviceSpec& device = topo_.devices[size_t(r.device)];
    cached = cost_.taskNs(t, device, plan_.job.training.precision);
    if (t.kind == TaskKind::Kernel && device.speed != 1.0)
      cached = int64_t(std::llround(double(cached) / device.speed));
    // Kernels start later in multi-process runs (calibrated; 0 by default).
    if (plan_.world_size > 1 && t.kind == TaskKind::Kernel && t.fused_into < 0) cached += cost_.multiRankLaunchNs();
    if (t.kind == TaskKind::Kernel) {
      r.sm_room[size_t(ti)] = cost_.smRoomBeside(t, device);
      r.spare[size_t(ti)] = float(cost_.spareSmShare(t, device));
      if (last_rounds_) r.last_round[size_t(ti)] = cost_.lastRound(t, device);
      r.fixed_grid[size_t(ti)] = cost_.fixedGrid(t, device);
    }
  }
  const int64_t d = cached;
  s.kernel = t.kind == TaskKind::Kernel;
  s.slowed = s.kernel && r.active_comm > 0;
  const bool shares = sharesSms(*r.plan, t);
  if (shares) ++r.running_kernels;
  // Alone it holds the GPU; beside others rescheduleKernels decides.
  s.sharing = !shares ? 0 : r.running_kernels == 1 ? 1 : uint8_t(kNotHolder | 1);
  // A task with trailing kernels runs its main kernel first (finishTask
  // starts the rest).
  s.work_left_ns = double(d - (shares ? trailingOf(r, ti) : 0));
  s.updated_ns = now_;
  s.rate_room = SmRoom::Unknown;
  s.rate_spare = -1.0f;
  s.last_round = false;
  const double div = rateDivisor(t, s.slowed, s.sharing, s.rate_room, s.rate_spare);
  s.done_ns = completionAt(s.work_left_ns, div);
  if (s.done_ns != kNever) push(s.done_ns, EventType::TaskDone, ri, ti);
  scheduleLastRound(ri, stream);
  s.record_start_ns = -1;
  if (shares && r.running_kernels > 1) rescheduleKernels(ri);  // the others now share with it
  // Its record starts when it first gets SMs: now, or when
  // rescheduleKernels first gives it a rate.
  if (s.done_ns != kNever && s.record_start_ns < 0) s.record_start_ns = now_;
}

int64_t Replay::trailingOf(const RankState& r, int ti) const {
  const int64_t d = r.durations[size_t(ti)];
  const DeviceSpec& device = topo_.devices[size_t(r.device)];
  int64_t tail = cost_.trailingNs(r.plan->tasks[size_t(ti)], device, plan_.job.training.precision);
  if (device.speed != 1.0) tail = int64_t(std::llround(double(tail) / device.speed));
  return std::min(tail, d / 2);  // a calibrated total may be shorter than the estimate
}

size_t Replay::countTrailing(const RankState& r) const {
  const DeviceSpec& device = topo_.devices[size_t(r.device)];
  size_t n = 0;
  for (const Task& t : r.plan->tasks) {
    if (sharesSms(*r.plan, t) && cost_.trailingNs(t, device, plan_.job.training.precision) > 0) ++n;
  }
  return n;
}

void Replay::writeRecord(RankState& r, int record_index, int64_t start_ns) {
  // The slice holds a record per task and one more per task that may have
  // trailing kernels, and a task ends once (isCurrentCompletion drops stale
  // events; the test of one activity per task guards it): no bounds check
  // on this path, only in debug builds.
  assert(r.out < r.slice_end);
  const int64_t duration = now_ - start_ns;
  if (duration < int64_t(SimActivityRecord::kLongDuration)) {
    *r.out = SimActivityRecord{start_ns, record_index, uint32_t(duration)};
  } else {
    *r.out = SimActivityRecord{start_ns, record_index, SimActivityRecord::kLongDuration};
    activities_->long_activities.push_back(SimLongActivity{r.out, now_});
  }
  ++r.out;
}

int64_t Replay::completionAt(double work_ns, double divisor) const {
  if (divisor == 1.0) return now_ + int64_t(std::llround(work_ns));
  const double ns = work_ns * divisor;
  // A kernel that makes (next to) no progress while another holds the GPU
  // ends only after a reschedule: no event for it now.
  if (!(ns < 1e17)) return kNever;
  return now_ + int64_t(std::llround(ns));
}

int Replay::holderOf(const RankState& r) const {
  // The kernel that holds the GPU keeps it; when none does (it ended), the
  // oldest of the others takes it, a task's trailing kernels after every
  // main kernel; of kernels started at the same time, the one the host
  // launched first, the plan's earlier task (a layer's data-gradient GEMM
  // before its weight-gradient GEMM: in every one of the 2962 such pairs of
  // the held-out traces on H100 and H200; docs/accuracy.md).
  auto before = [&](int a, int b) {
    const StreamState &x = r.streams[size_t(a)], &y = r.streams[size_t(b)];
    // Trailing kernels were launched last, whenever their task started.
    const bool xt = x.sharing & kTrailing, yt = y.sharing & kTrailing;
    if (xt != yt) return yt;
    if (x.started_ns != y.started_ns) return x.started_ns < y.started_ns;
    return (*x.tasks)[x.head] < (*y.tasks)[y.head];
  };
  int holder = -1, oldest = -1;
  for (int i = 0; i < int(r.streams.size()); ++i) {
    const StreamState& x = r.streams[size_t(i)];
    if (!x.busy || !x.kernel || x.sharing == 0) continue;
    if (!(x.sharing & kNotHolder)) holder = i;
    if (oldest < 0 || before(i, oldest)) oldest = i;
  }
  if (holder < 0) return oldest;
  // A kernel started with the holder and launched before it takes over.
  const StreamState &o = r.streams[size_t(oldest)], &h = r.streams[size_t(holder)];
  if (oldest != holder && o.started_ns == h.started_ns && (o.sharing & kTrailing) == (h.sharing & kTrailing) &&
      before(oldest, holder))
    return oldest;
  return holder;
}

SmRoom Replay::roomBeside(const RankState& r, int holder) const {
  if (holder < 0) return SmRoom::Unknown;
  const StreamState& h = r.streams[size_t(holder)];
  // The calibrated geometry is the task's main kernel's, not its trailing
  // ones'.
  if (h.sharing & kTrailing) return SmRoom::Unknown;
  if (h.last_round) return SmRoom::Some;  // its last round leaves SMs (CostModel::lastRound)
  return r.sm_room[size_t((*h.tasks)[h.head])];
}

float Replay::spareBeside(const RankState& r, int holder) const {
  if (holder < 0) return -1.0f;
  const StreamState& h = r.streams[size_t(holder)];
  if (h.sharing & kTrailing) return -1.0f;
  const int ti = (*h.tasks)[h.head];
  if (h.last_round) return r.last_round[size_t(ti)].spare;
  return r.spare[size_t(ti)];
}

bool Replay::onlyFixedGridGuests(const RankState& r, int holder) const {
  for (int si = 0; si < int(r.streams.size()); ++si) {
    const StreamState& x = r.streams[size_t(si)];
    if (si == holder || !x.busy || !x.kernel || x.sharing == 0) continue;
    if ((x.sharing & kTrailing) || !r.fixed_grid[size_t((*x.tasks)[x.head])]) return false;
  }
  return true;
}

bool Replay::allBlocksSmall(const RankState& r) const {
  for (const StreamState& x : r.streams) {
    if (!x.busy || !x.kernel || x.sharing == 0 || (x.sharing & kTrailing)) continue;
    const int ti = (*x.tasks)[x.head];
    if (r.sm_room[size_t(ti)] != SmRoom::Some || r.spare[size_t(ti)] >= 0) return false;
  }
  return true;
}

void Replay::scheduleLastRound(int ri, int si) {
  if (!last_rounds_) return;
  RankState& r = ranks_[size_t(ri)];
  const StreamState& s = r.streams[size_t(si)];
  if (!s.busy || !s.kernel || s.last_round || (s.sharing & kTrailing) || s.done_ns == kNever) return;
  const int ti = (*s.tasks)[s.head];
  const LastRound& lr = r.last_round[size_t(ti)];
  if (lr.share <= 0) return;
  const double ahead = s.work_left_ns - lastRoundWork(r, s, ti);
  const Task& t = r.plan->tasks[size_t(ti)];
  const double div = rateDivisor(t, s.slowed, s.sharing, s.rate_room, s.rate_spare);
  const int64_t at = ahead <= 0 ? now_ : s.updated_ns + int64_t(std::llround(ahead * div));
  push(std::max(at, now_), EventType::LastRound, ri, ti);
}

double Replay::lastRoundWork(const RankState& r, const StreamState& s, int ti) const {
  const int64_t main_ns = r.durations[size_t(ti)] - (s.sharing ? trailingOf(r, ti) : 0);
  return double(r.last_round[size_t(ti)].share) * double(main_ns);
}

void Replay::enterLastRound(int ri, int ti) {
  RankState& r = ranks_[size_t(ri)];
  StreamState& s = r.streams[size_t(r.plan->tasks[size_t(ti)].stream)];
  if (!s.busy || !s.kernel || s.head >= s.tasks->size() || (*s.tasks)[s.head] != ti || s.last_round ||
      (s.sharing & kTrailing) || s.done_ns == kNever)
    return;
  const Task& t = r.plan->tasks[size_t(ti)];
  const double div = rateDivisor(t, s.slowed, s.sharing, s.rate_room, s.rate_spare);
  const double left = std::max(0.0, s.work_left_ns - double(now_ - s.updated_ns) / div);
  if (left > lastRoundWork(r, s, ti) + 1.0) return;  // queued before its rate fell: a stale event
  s.work_left_ns = left;
  s.updated_ns = now_;
  s.last_round = true;
  if (s.sharing) rescheduleKernels(ri);  // the others get the round's spare SMs if it holds the GPU
}

double Replay::rateDivisor(const Task& t, bool slowed, int sharing, SmRoom holder_room, float holder_spare) const {
  double div = slowed ? cost_.commSlowdown(t) : 1.0;
  const int n = sharing & kSharingCount;
  if (n <= 1) return div;
  const double e = cost_.kernelOverlapEfficiency();
  // Kernels of small blocks (memory-bound kinds, a weight gradient's bias
  // kernels) fit on the SMs together and share them and the memory as
  // processor sharing does, whichever came first (the traces: a layernorm
  // backward and the bias kernels launched after it run together).
  if (cost_.kernelSharing() == KernelSharing::Fair || (sharing & kCoResident))
    return div * std::max(1.0, double(n) / e);
  // FirstHolds. A holder whose blocks leave a known share s of the SMs (a
  // weight gradient's 120 blocks on 132 SMs: 9%): the others split s, the
  // holder gets what is left of e (the traces: such a GEMM runs 4-14% slower
  // while a layernorm backward runs on its spare SMs at about 9% of its
  // speed).
  if (holder_spare > 0) {
    if (!(sharing & kNotHolder)) return div / std::clamp(e - double(holder_spare), 0.05, 1.0);
    return div * double(n - 1) / double(holder_spare);
  }
  // Otherwise the holder gets min(1, e) of the GPU, the other main kernels
  // split what is left of e.
  if (!(sharing & kNotHolder)) return e >= 1.0 ? div : div / e;
  // Except beside a holder with a block on every SM (a GEMM of 132 blocks
  // on an H200's 132 SMs): nothing runs beside it until its last blocks
  // retire (docs/simulator.md, kernel sharing).
  if (holder_room == SmRoom::None) return std::numeric_limits<double>::infinity();
  // A task's trailing kernels, launched after the holder took the SMs, get
  // none until it ends, unless the holder is known to leave room (the
  // traces: a weight gradient's bias kernels wait for the data-gradient GEMM
  // and the attention backward beside them, and run beside a layernorm).
  if ((sharing & kTrailing) && holder_room != SmRoom::Some) return std::numeric_limits<double>::infinity();
  const double rate = (e - 1.0) / double(n - 1);
  return rate > 0 ? div / rate : std::numeric_limits<double>::infinity();
}

// A kernel runs commSlowdown(task) times slower for as long as a collective
// is resident on its rank (from the rank's arrival until the collective ends
// for it: NCCL's kernels share the SMs and the memory with it), and shares
// the GPU with the other kernels of the rank's compute streams as the cost
// model's kernel sharing says (rateDivisor). When either changes, the running
// kernels' remaining work is rescheduled at the new rate (a kernel whose rate
// stays keeps its completion event).
void Replay::rescheduleKernels(int ri) {
  RankState& r = ranks_[size_t(ri)];
  const bool slowed = r.active_comm > 0;
  const uint8_t n = uint8_t(std::min(r.running_kernels, int(kSharingCount)));
  const bool fair = cost_.kernelSharing() == KernelSharing::Fair;
  const int holder = fair ? -1 : holderOf(r);
  const SmRoom holder_room = roomBeside(r, holder);
  const float holder_spare = fair ? -1.0f : spareBeside(r, holder);
  const bool holder_last_round =
      holder >= 0 && r.streams[size_t(holder)].last_round && !(r.streams[size_t(holder)].sharing & kTrailing);
  // (The holder's own blocks first: most reschedules stop there.)
  const bool holder_small =
      holder >= 0 && ((r.streams[size_t(holder)].sharing & kTrailing) || (holder_room == SmRoom::Some && holder_spare < 0));
  const uint8_t co_resident = !fair && n > 1 && holder_small && allBlocksSmall(r) ? kCoResident : 0;
  // A holder whose spare SMs only fixed grids land on (below) loses nothing
  // to them: it runs as beside a kernel that waits (the traces: a weight
  // gradient of 120 blocks beside a layernorm backward that does no work
  // there ran 1.03x its time alone, not the 1.1x a shared spare gives).
  const bool spare_unused =
      holder_spare > 0 && fixed_grid_beside_spare_ && !holder_last_round && onlyFixedGridGuests(r, holder);
  for (int si = 0; si < int(r.streams.size()); ++si) {
    StreamState& s = r.streams[size_t(si)];
    if (!s.busy || !s.kernel) continue;
    const uint8_t phase = s.sharing & kTrailing;
    const uint8_t sharing =
        s.sharing == 0 ? 0 : uint8_t(phase | co_resident | (fair || si == holder ? n : uint8_t(n | kNotHolder)));
    // The holder's last round runs at its own speed beside the kernels on
    // the SMs it left (its blocks are on theirs already).
    const bool own_round = si == holder && s.last_round;
    // A kernel of a fixed grid (CostModel::fixedGrid: a persistent GEMM, a
    // norm's backward of two blocks per SM) whose blocks land on the SMs the
    // holder leaves (its spare SMs, its last round's) starts its record
    // there but gains no time: each block has its fixed share of the work,
    // so it ends when the blocks that land as the holder ends are through
    // theirs (the traces: a weight-gradient GEMM that starts 27 us before
    // its data-gradient GEMM ends runs no shorter after that end than alone;
    // a layernorm backward beside a weight-gradient GEMM of 120 blocks ends
    // about its time alone after the GEMM). Other kernels' blocks progress
    // there.
    const bool lands_only = (holder_last_round || (holder_spare > 0 && fixed_grid_beside_spare_)) &&
                            (sharing & kNotHolder) && !phase && r.fixed_grid[size_t((*s.tasks)[s.head])];
    const SmRoom room_before = s.rate_room,
                 room_after = sharing == 0 ? SmRoom::Unknown : lands_only ? SmRoom::None : holder_room;
    const float spare_before = s.rate_spare,
                spare_after = sharing == 0 || own_round || lands_only || (si == holder && spare_unused) ? -1.0f
                                                                                                : holder_spare;
    if (lands_only && s.record_start_ns < 0) s.record_start_ns = now_;
    if (s.slowed == slowed && s.sharing == sharing && room_before == room_after && spare_before == spare_after)
      continue;
    const Task& t = r.plan->tasks[size_t((*s.tasks)[s.head])];
    const double before = rateDivisor(t, s.slowed, s.sharing, room_before, spare_before),
                 after = rateDivisor(t, slowed, sharing, room_after, spare_after);
    const double elapsed = double(now_ - s.updated_ns);
    if (!std::isinf(before)) s.work_left_ns = std::max(0.0, s.work_left_ns - elapsed / before);
    // A kernel that gets SMs for the first time starts its record; one that
    // loses them the moment it got them (it started with the holder) has
    // not started, unless its blocks landed beside the holder.
    if (std::isinf(before) && !std::isinf(after) && s.record_start_ns < 0) s.record_start_ns = now_;
    if (!lands_only && !std::isinf(before) && std::isinf(after) && s.record_start_ns == now_) s.record_start_ns = -1;
    s.rate_room = room_after;
    s.rate_spare = spare_after;
    s.slowed = slowed;
    s.sharing = sharing;
    s.updated_ns = now_;
    if (after == before) continue;
    s.done_ns = completionAt(s.work_left_ns, after);  // a pending completion event is now stale
    if (s.done_ns != kNever) push(s.done_ns, EventType::TaskDone, ri, (*s.tasks)[s.head]);
    scheduleLastRound(ri, si);
  }
}

bool Replay::isCurrentCompletion(int ri, int ti) const {
  const RankState& r = ranks_[size_t(ri)];
  const Task& t = r.plan->tasks[size_t(ti)];
  const StreamState& s = r.streams[size_t(t.stream)];
  return s.busy && s.done_ns == now_ && s.head < s.tasks->size() && (*s.tasks)[s.head] == ti;
}

void Replay::arrive(int ri, int ti) {
  RankState& r = ranks_[size_t(ri)];
  const Task& t = r.plan->tasks[size_t(ti)];
  if (!t.collective)
    throw SimulationError("rank " + std::to_string(r.rank) + " " + describeTask(r, ti) +
                          " is a collective without collective info");
  const CollectiveInfo& ci = *t.collective;
  const int g = groupIndex(ci.group, r, ti);
  const ProcessGroup& group = plan_.groups[size_t(g)];
  if (!group_member_[size_t(g)][size_t(r.rank)])
    throw SimulationError("rank " + std::to_string(r.rank) + " " + describeTask(r, ti) + " uses group '" +
                          group.name + "' which does not contain it");
  const bool p2p = ci.op == CollectiveOp::Send || ci.op == CollectiveOp::Recv;
  // Compute runs slower beside a collective from its arrival (NCCL's kernel
  // is launched and holds SMs and memory bandwidth while it waits for the
  // group), beside a send or receive only once both peers have arrived and
  // data moves (launch): a pipeline stage's receive posted ahead mostly
  // waits on one flag, and the fitted slowdown is an all-reduce's.
  if (!p2p && ++r.active_comm == 1) rescheduleKernels(ri);
  std::tuple<int, int, int64_t> key;
  int src = -1, dst = -1;
  if (p2p) {
    if (group.ranks.size() != 2)
      throw SimulationError("rank " + std::to_string(r.rank) + " " + describeTask(r, ti) + ": send/recv group '" +
                            group.name + "' must have exactly 2 ranks, has " + std::to_string(group.ranks.size()));
    const int peer = group.ranks[0] == r.rank ? group.ranks[1] : group.ranks[0];
    src = ci.op == CollectiveOp::Send ? r.rank : peer;
    dst = ci.op == CollectiveOp::Send ? peer : r.rank;
    const int direction = src == group.ranks[0] ? 0 : 1;
    key = {g, direction, r.p2p_seq[{g, direction}]++};
  } else {
    key = {g, -1, r.group_seq[g]++};
  }
  Pending& p = pending_[key];
  if (p.arrivals.empty()) {
    p.op = p2p ? CollectiveOp::Send : ci.op;
    p.bytes = ci.bytes;
    p.src = src;
    p.dst = dst;
    if (p2p) {
      p.expected = size_t(rank_state_of_[size_t(src)] >= 0) + size_t(rank_state_of_[size_t(dst)] >= 0);
    } else {
      p.expected = simulated_members_[size_t(g)].size();
    }
  } else {
    const Arrival& first = p.arrivals.front();
    const RankState& fr = ranks_[size_t(first.rank_state)];
    const Task& ft = fr.plan->tasks[size_t(first.task)];
    const CollectiveOp op = p2p ? CollectiveOp::Send : ci.op;
    if (op != p.op || ci.bytes != p.bytes)
      throw SimulationError("mismatched collective #" + std::to_string(std::get<2>(key)) + " of group '" + group.name +
                            "': rank " + std::to_string(r.rank) + " " + describeTask(r, ti) + " is " +
                            std::string(toString(ci.op)) + " of " + std::to_string(ci.bytes) + " bytes, rank " +
                            std::to_string(fr.rank) + " " + describeTask(fr, first.task) + " is " +
                            std::string(toString(ft.collective->op)) + " of " + std::to_string(ft.collective->bytes) +
                            " bytes");
  }
  p.arrivals.push_back(Arrival{ri, ti, now_});
  if (p.arrivals.size() >= p.expected) {
    Pending done = std::move(p);
    pending_.erase(key);
    launch(std::move(done), g);
  }
}

void Replay::launch(Pending&& p, int g) {
  const ProcessGroup& group = plan_.groups[size_t(g)];
  const bool p2p = p.src >= 0;
  const RankState& first = ranks_[size_t(p.arrivals.front().rank_state)];
  const Task& t = first.plan->tasks[size_t(p.arrivals.front().task)];
  const CollectiveOp op = p2p ? CollectiveOp::Send : t.collective->op;
  Instance inst;
  inst.schedule = scheduleFor(g, op, p.bytes, p.src, p.dst);
  inst.start_ns = now_;
  inst.members = std::move(p.arrivals);
  if (p2p)  // see arrive(): from here the transfer moves data
    for (const Arrival& m : inst.members)
      if (++ranks_[size_t(m.rank_state)].active_comm == 1) rescheduleKernels(m.rank_state);
  SimCollective rec;
  rec.group = g;
  rec.op = op;
  rec.bytes = p.bytes;
  rec.start_ns = now_;
  rec.algorithm = inst.schedule->choice.algorithm;
  rec.protocol = inst.schedule->choice.protocol;
  inst.record = int(result_.collectives.size());
  result_.collectives.push_back(rec);
  ++result_.stats.collectives;
  instances_.push_back(std::move(inst));
  const int real = int(instances_.size()) - 1;
  if (symmetric_)
    for (int h : shadow_groups_[size_t(g)]) launchShadow(real, h, group, op, p.bytes, p.src, p.dst);
  startPhase(real);
}

// A symmetric simulation runs the transfers of the representatives' groups
// only. The groups whose ranks they stand for make the same transfers at
// the same time, on other links, except where their cross-host traffic
// leaves through a NIC the representatives' groups use too (a pipeline
// pair's send on the NIC of a data-parallel ring's member): those groups'
// flows are simulated as shadows, which load the links but move no rank.
// Transfers inside hosts, and across hosts through other NICs, are left
// out (on the fabric beyond the NICs the representatives' flows meet
// only their own).
void Replay::findShadowGroups() {
  shadow_groups_.assign(plan_.groups.size(), {});
  if (!symmetric_) return;
  std::vector<char> representative(size_t(plan_.world_size), 0);
  for (int r : program_min_rank_)
    if (r >= 0) representative[size_t(r)] = 1;
  auto isReal = [&](const ProcessGroup& g) {
    return std::any_of(g.ranks.begin(), g.ranks.end(), [&](int r) { return representative[size_t(r)] != 0; });
  };
  // The NICs a group's transfers between hosts leave and enter through.
  auto nics = [&](const ProcessGroup& g) {
    std::vector<int> out;
    const int host = topo_.devices[size_t(rank_device_[size_t(g.ranks.front())])].host;
    const bool crosses = std::any_of(g.ranks.begin(), g.ranks.end(), [&](int r) {
      return topo_.devices[size_t(rank_device_[size_t(r)])].host != host;
    });
    if (!crosses) return out;
    for (int r : g.ranks)
      if (const int nic = router_.nicFor(rank_device_[size_t(r)]); nic >= 0) out.push_back(nic);
    return out;
  };
  std::vector<char> real_nic(size_t(topo_.nodeCount()), 0);
  for (const ProcessGroup& g : plan_.groups)
    if (!g.ranks.empty() && isReal(g))
      for (int nic : nics(g)) real_nic[size_t(nic)] = 1;
  for (const auto& [name, groups] : group_index_) {
    // A group of representatives stands for the groups of its name whose
    // ranks lie in the same programs, place by place.
    std::map<std::vector<int>, int> real_by_programs;
    auto programsOf = [&](const ProcessGroup& g) {
      std::vector<int> p;
      for (int r : g.ranks) p.push_back(program_of_[size_t(r)]);
      return p;
    };
    for (int g : groups)
      if (!plan_.groups[size_t(g)].ranks.empty() && isReal(plan_.groups[size_t(g)]))
        real_by_programs.emplace(programsOf(plan_.groups[size_t(g)]), g);
    for (int h : groups) {
      const ProcessGroup& group = plan_.groups[size_t(h)];
      if (group.ranks.empty() || isReal(group)) continue;
      const auto it = real_by_programs.find(programsOf(group));
      if (it == real_by_programs.end()) continue;
      const std::vector<int> used = nics(group);
      if (std::any_of(used.begin(), used.end(), [&](int nic) { return real_nic[size_t(nic)] != 0; }))
        shadow_groups_[size_t(it->second)].push_back(h);
    }
  }
}

// The transfers of one collective (or, src >= 0, a send from rank src to
// dst) over group g: built once per group, op, size and pair, and kept.
// Broadcast and reduce roots are the group's first rank.
std::shared_ptr<const CollectiveSchedule> Replay::scheduleFor(int g, CollectiveOp op, int64_t bytes, int src,
                                                              int dst) {
  auto key = std::make_tuple(g, int(op), bytes, src, dst);
  auto it = schedules_.find(key);
  if (it != schedules_.end()) return it->second;
  CollectiveRequest req;
  req.op = op;
  req.bytes = bytes;
  req.root = 0;
  if (src >= 0) {
    req.nodes = {rank_device_[size_t(src)], rank_device_[size_t(dst)]};
    req.peer_src = 0;
    req.peer_dst = 1;
  } else {
    for (int r : plan_.groups[size_t(g)].ranks) req.nodes.push_back(rank_device_[size_t(r)]);
  }
  return schedules_.emplace(key, std::make_shared<const CollectiveSchedule>(builder_.build(req))).first->second;
}

void Replay::launchShadow(int real_instance, int h, const ProcessGroup& real, CollectiveOp op, int64_t bytes,
                          int src, int dst) {
  const ProcessGroup& group = plan_.groups[size_t(h)];
  // A send's ends at the same places of the shadow group.
  auto mapped = [&](int rank) {
    if (rank < 0) return -1;
    const auto at = std::find(real.ranks.begin(), real.ranks.end(), rank);
    return at == real.ranks.end() ? -1 : group.ranks[size_t(at - real.ranks.begin())];
  };
  const int s = mapped(src), d = mapped(dst);
  if (src >= 0 && (s < 0 || d < 0)) return;
  Instance inst;
  inst.schedule = scheduleFor(h, op, bytes, s, d);
  inst.start_ns = now_;
  inst.real = real_instance;
  ++instances_[size_t(real_instance)].shadows_running;
  ++result_.stats.shadow_transfers;
  instances_.push_back(std::move(inst));
  startPhase(int(instances_.size()) - 1);
}

void Replay::startPhase(int ii) {
  Instance& inst = instances_[size_t(ii)];
  if (inst.phase >= inst.schedule->phases.size()) {
    phaseDone(ii);
    return;
  }
  push(now_ + inst.schedule->phases[inst.phase].latency_ns, EventType::PhaseStart, ii);
}

void Replay::phaseFlowsStart(int ii) {
  Instance& inst = instances_[size_t(ii)];
  const CollectivePhase& ph = inst.schedule->phases[inst.phase];
  inst.flows_left = 0;
  for (const FlowSpec& f : ph.flows) {
    net_.addFlow(f, ii);
    ++inst.flows_left;
    ++result_.stats.flows;
  }
  if (inst.flows_left == 0) {
    ++inst.phase;
    startPhase(ii);
  }
}

void Replay::phaseDone(int ii) {
  Instance& inst = instances_[size_t(ii)];
  if (inst.phase < inst.schedule->phases.size()) {
    ++inst.phase;
    if (inst.phase < inst.schedule->phases.size()) {
      startPhase(ii);
      return;
    }
  }
  if (inst.record < 0) {  // a shadow: its flows are done; its representatives may wait for it
    inst.schedule.reset();
    Instance& real = instances_[size_t(inst.real)];
    if (--real.shadows_running == 0 && real.waits_for_shadows) finishTransfer(inst.real);
    return;
  }
  if (inst.shadows_running > 0) {
    inst.waits_for_shadows = true;
    return;
  }
  finishTransfer(ii);
}

// The end of a representatives' transfer (and of the ones it stands for).
void Replay::finishTransfer(int ii) {
  Instance& inst = instances_[size_t(ii)];
  int64_t end = std::max(now_, inst.start_ns + inst.schedule->floor_ns) + pipelineFillNs(inst);
  if (cost_.hasCollectiveBeside()) {
    // The kernels it shared its GPUs with the longest slow it by their task
    // role's factor (calibrated, 1 or more: the calibration scales the size
    // model so that none is below 1; "" means no kernel ran beside it).
    const double f = cost_.collectiveBeside(dominantRoleBeside(inst));
    end = std::max(end, inst.start_ns + int64_t(std::llround(double(end - inst.start_ns) * f)));
  }
  push(end, EventType::CollectiveDone, ii);
}

// A collective pipelined with a GEMM moves the GEMM's work in as many chunks
// as the group has ranks: the gathered rows' last chunk is multiplied after
// it arrives, a scattered output's first chunk is computed before it can
// leave. So the pair ends a chunk's GEMM time after the transfers would
// alone (max(GEMM, transfers + GEMM / ranks)); the GEMM's own time runs
// beside it on the compute stream.
int64_t Replay::pipelineFillNs(const Instance& inst) const {
  int64_t fill = 0;
  const int64_t chunks = std::max<int64_t>(
      1, int64_t(plan_.groups[size_t(result_.collectives[size_t(inst.record)].group)].ranks.size()));
  for (const Arrival& m : inst.members) {
    const RankState& r = ranks_[size_t(m.rank_state)];
    const Task& t = r.plan->tasks[size_t(m.task)];
    if (!t.attrs.overlapped) return 0;
    const auto it = r.pipeline_partner->find(m.task);
    if (it == r.pipeline_partner->end()) continue;
    const Task& gemm = r.plan->tasks[size_t(it->second)];
    const DeviceSpec& device = topo_.devices[size_t(r.device)];
    int64_t ns = r.durations[size_t(it->second)];
    if (ns < 0) ns = int64_t(std::llround(double(cost_.taskNs(gemm, device, plan_.job.training.precision)) / device.speed));
    fill = std::max(fill, ns / chunks);
  }
  return fill;
}

std::string Replay::dominantRoleBeside(const Instance& inst) const {
  std::map<std::string, int64_t> overlap;  // by task role, summed over the members
  auto add = [&](const RankState& r, int task, int64_t a, int64_t b) {
    const Task& t = r.plan->tasks[size_t(task)];
    if (t.kind != TaskKind::Kernel || t.collective) return;
    a = std::max(a, inst.start_ns);
    b = std::min(b, now_);
    if (b > a) overlap[taskRole(t.name)] += b - a;
  };
  for (const Arrival& m : inst.members) {
    const RankState& r = ranks_[size_t(m.rank_state)];
    // Records are written as tasks end: walking back, the first one that
    // ended before the collective started ends the search.
    for (const SimActivityRecord* rec = r.out; rec != r.first;) {
      --rec;
      if (rec->duration_ns == SimActivityRecord::kLongDuration) continue;
      const int64_t rec_end = rec->start_ns + int64_t(rec->duration_ns);
      if (rec_end <= inst.start_ns) break;
      add(r, rec->task % int(r.plan->tasks.size()), rec->start_ns, rec_end);  // a trailing record's too
    }
    for (const StreamState& st : r.streams)
      if (st.busy && st.kernel && st.head < st.tasks->size()) add(r, (*st.tasks)[st.head], st.started_ns, now_);
  }
  std::string best;
  int64_t most = 0;
  for (const auto& [role, ns] : overlap)
    if (ns > most) most = ns, best = role;
  return best;
}

void Replay::finishTask(int ri, int ti) {
  RankState& r = ranks_[size_t(ri)];
  const Task& t = r.plan->tasks[size_t(ti)];
  StreamState& s = r.streams[size_t(t.stream)];
  if (s.sharing != 0 && !(s.sharing & kTrailing)) {
    if (const int64_t tail = trailingOf(r, ti); tail > 0) {
      // The main kernel is done (its record ends here): the trailing
      // kernels take the GPU anew, after whatever the other streams run now.
      writeRecord(r, ti, s.record_start_ns >= 0 ? s.record_start_ns : s.started_ns);
      s.sharing = uint8_t(kTrailing | kNotHolder | 1);
      s.last_round = false;  // the main kernel's rounds are done
      s.work_left_ns = double(tail);
      s.updated_ns = now_;
      s.rate_room = SmRoom::Unknown;
      s.rate_spare = -1.0f;
      s.done_ns = completionAt(s.work_left_ns, rateDivisor(t, s.slowed, s.sharing, s.rate_room, s.rate_spare));
      if (s.done_ns != kNever) push(s.done_ns, EventType::TaskDone, ri, ti);
      s.record_start_ns = -1;
      rescheduleKernels(ri);  // its share beside the others
      // Progressing now (else from when rescheduleKernels gives it SMs).
      if (s.done_ns != kNever && s.record_start_ns < 0) s.record_start_ns = now_;
      return;
    }
  }
  {
    // A kernel's record starts when it first got SMs (a trace's kernel
    // starts when its first block runs); the trailing kernels' record is
    // the task's second.
    int64_t& start = s.record_start_ns;
    const int index = (s.sharing & kTrailing) ? ti + int(r.plan->tasks.size()) : ti;
    writeRecord(r, index, s.sharing != 0 && start >= 0 ? start : s.started_ns);
    start = -1;
  }
  ++result_.stats.tasks;
  if (t.record_event >= 0) r.event_bits[size_t(t.record_event) >> 6] |= uint64_t(1) << (t.record_event & 63);
  s.busy = false;
  s.done_ns = -1;
  if (t.kind == TaskKind::Collective || t.kind == TaskKind::SendRecv) {
    if (--r.active_comm == 0) rescheduleKernels(ri);
  } else if (s.sharing > 0) {
    s.sharing = 0;
    if (--r.running_kernels > 0) rescheduleKernels(ri);
  }
  ++s.head;
  tryStartAll(ri);
}

SimResult Replay::run() {
  setup();
  for (int ri = 0; ri < int(ranks_.size()); ++ri) tryStartAll(ri);
  while (true) {
    const int64_t tq = queue_.empty() ? INT64_MAX : queue_.topTime();
    const int64_t tn = net_.nextCompletionNs();
    if (tq == INT64_MAX && tn == INT64_MAX) break;
    ++result_.stats.events;
    if (tn <= tq) {
      now_ = tn;
      std::vector<int> done = net_.advanceTo(tn);
      for (int id : done) {
        const int ii = int(net_.owner(id));
        if (--instances_[size_t(ii)].flows_left == 0) phaseDone(ii);
      }
      continue;
    }
    Event e = queue_.top();
    queue_.pop();
    now_ = e.time;
    net_.advanceTo(now_);  // no flow finishes before tn > tq
    switch (e.type) {
      case EventType::TaskDone:
        if (isCurrentCompletion(e.a, e.b)) finishTask(e.a, e.b);  // else rescheduled: a stale event
        break;
      case EventType::PhaseStart: phaseFlowsStart(e.a); break;
      case EventType::LastRound: enterLastRound(e.a, e.b); break;
      case EventType::CollectiveReady: {
        // Wait for the calibrated share of the remaining time of the kernels
        // now running on the rank.
        const RankState& r = ranks_[size_t(e.a)];
        // The holders' remaining time first; a kernel beside a holder then
        // ends as projected when that is sooner, else it has made
        // `rate` x the holder's time of progress and runs alone after it (its
        // projected end, at the few percent of the GPU the holder leaves it,
        // is not when it ends; taking it as such delayed collectives by up
        // to 1.6 ms in two-GPU plans with the weight-gradient stream).
        int64_t held = 0;
        for (const StreamState& other : r.streams)
          if (other.busy && other.kernel && other.done_ns != kNever && !(other.sharing & kNotHolder))
            held = std::max(held, other.done_ns - now_);
        int64_t remaining = held;
        for (const StreamState& other : r.streams) {
          if (!other.busy || !other.kernel) continue;
          if (other.done_ns == kNever) {  // no progress until the holder ends
            remaining = std::max(remaining, held + int64_t(std::llround(other.work_left_ns)));
          } else if (other.sharing & kNotHolder) {
            const double projected = double(other.done_ns - now_);
            const Task& t = r.plan->tasks[size_t((*other.tasks)[other.head])];
            const double rate =  // of its alone speed
                1.0 / rateDivisor(t, other.slowed, other.sharing, other.rate_room, other.rate_spare);
            const double end = projected <= double(held) ? projected : double(held) + rate * (projected - double(held));
            remaining = std::max(remaining, int64_t(std::llround(end)));
          }
        }
        push(now_ + int64_t(std::llround(cost_.collectiveStartWait() * double(remaining))), EventType::CollectiveArrive,
             e.a, e.b);
        break;
      }
      case EventType::CollectiveArrive: {
        // The collective's activity starts when its kernel does, as in a trace.
        RankState& r = ranks_[size_t(e.a)];
        r.streams[size_t(r.plan->tasks[size_t(e.b)].stream)].started_ns = now_;
        arrive(e.a, e.b);
        break;
      }
      case EventType::CollectiveDone: {
        Instance& inst = instances_[size_t(e.a)];
        result_.collectives[size_t(inst.record)].end_ns = now_;
        std::vector<Arrival> members = std::move(inst.members);
        inst.schedule.reset();
        for (const Arrival& m : members) finishTask(m.rank_state, m.task);
        break;
      }
    }
  }
  for (const RankState& r : ranks_)
    for (const StreamState& s : r.streams)
      if (s.head < s.tasks->size()) reportDeadlock();

  std::vector<SimLongActivity>& long_activities = activities_->long_activities;
  std::sort(long_activities.begin(), long_activities.end(), [](const SimLongActivity& a, const SimLongActivity& b) {
    return std::less<const SimActivityRecord*>()(a.record, b.record);
  });
  // Results: every world rank, represented ones sharing their program's timeline.
  result_.stats.flows = net_.flowsStarted();
  result_.stats.rate_recomputations = net_.rateRecomputations();
  const int world = plan_.world_size;
  result_.ranks.resize(size_t(world));
  for (int r = 0; r < world; ++r) {
    SimRank& out = result_.ranks[size_t(r)];
    out.rank = r;
    out.program = program_of_[size_t(r)];
    out.device = rank_device_[size_t(r)];
    out.peak_memory_bytes = plan_.programs[size_t(out.program)].memory.peak_bytes;
    const int ri = rank_state_of_[size_t(r)];
    if (ri >= 0) {
      const RankState& st = ranks_[size_t(ri)];
      out.activities = SimActivityList(activities_, st.first, size_t(st.out - st.first),
                                       activities_->facts[size_t(st.program)].data(), long_activities.data(),
                                       long_activities.data() + long_activities.size());
      out.end_ns = (st.out == st.first ? 0 : out.activities.endNs(st.out[-1])) + cost_.stepOverheadNs();
    }
  }
  for (int r = 0; r < world; ++r) {
    SimRank& out = result_.ranks[size_t(r)];
    if (rank_state_of_[size_t(r)] < 0) {
      out.represented_by = program_min_rank_[size_t(out.program)];
      out.end_ns = result_.ranks[size_t(out.represented_by)].end_ns;
    }
    result_.step_ns = std::max(result_.step_ns, out.end_ns);
  }
  const std::vector<double>& bytes = net_.linkBytes();
  for (size_t l = 0; l < bytes.size(); ++l) {
    if (bytes[l] <= 0) continue;
    SimLinkUsage u;
    u.link = int(l);
    u.bytes = bytes[l];
    u.utilization = result_.step_ns > 0 ? bytes[l] / (topo_.links[l].gbps * double(result_.step_ns)) : 0;
    result_.links.push_back(u);
  }
  return std::move(result_);
}

void Replay::reportDeadlock() {
  // The first blocked stream in rank and stream order, with what it waits on.
  for (const RankState& r : ranks_) {
    for (int si = 0; si < int(r.streams.size()); ++si) {
      const StreamState& s = r.streams[size_t(si)];
      if (s.head >= s.tasks->size()) continue;
      const int ti = (*s.tasks)[s.head];
      const Task& t = r.plan->tasks[size_t(ti)];
      std::string msg = "deadlock: rank " + std::to_string(r.rank) + " " + describeTask(r, ti);
      if (s.busy) {
        const CollectiveInfo& ci = *t.collective;
        const int g = groupIndex(ci.group, r, ti);
        const auto seq = (ci.op == CollectiveOp::Send || ci.op == CollectiveOp::Recv) ? -1 : r.group_seq.at(g) - 1;
        std::string missing;
        for (int m : plan_.groups[size_t(g)].ranks) {
          const int mi = rank_state_of_[size_t(m)];
          if (mi < 0 || mi == int(&r - ranks_.data())) continue;
          const RankState& mr = ranks_[size_t(mi)];
          auto it = mr.group_seq.find(g);
          int64_t reached = it == mr.group_seq.end() ? 0 : it->second;
          if (seq >= 0 && reached > seq) continue;
          if (!missing.empty()) missing += ", ";
          missing += std::to_string(m);
          // Say where the missing rank is stuck.
          for (const StreamState& ms : mr.streams)
            if (ms.head < ms.tasks->size()) {
              missing += " (at " + describeTask(mr, (*ms.tasks)[ms.head]) + ")";
              break;
            }
        }
        msg += " waits in " + std::string(toString(ci.op)) + " #" + std::to_string(std::max<int64_t>(seq, 0)) +
               " of group '" + ci.group + "' for rank(s) " + (missing.empty() ? std::string("?") : missing) +
               " that never reach it";
      } else {
        for (int e : t.wait_events) {
          if (r.eventDone(e)) continue;
          msg += " waits on event " + std::to_string(e);
          const int rec = (*r.event_recorder)[size_t(e)];
          if (rec < 0) msg += ", which no task records";
          else msg += ", recorded by " + describeTask(r, rec) + ", which has not run";
          break;
        }
      }
      throw SimulationError(msg);
    }
  }
  throw SimulationError("deadlock: tasks left but no stream is blocked");
}

}  // namespace

SimResult simulatePlan(const Plan& plan, const Topology& topo, const CostModel& cost, const SimOptions& options) {
  Replay replay(plan, topo, cost, options);
  return replay.run();
}

}  // namespace tandem::sim
