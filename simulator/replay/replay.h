#pragma once
// The discrete-event replay of a Plan on a Topology (see docs/simulator.md).
//
// Time is integer ns from 0 (the start of the step). Each simulated rank has
// one FIFO queue per stream holding the stream's tasks in plan order; a task
// starts when it heads its queue and every event it waits on has been
// recorded; a collective additionally waits until every member of its group
// has reached the same collective (the k-th collective of a group on one rank
// matches the k-th on every other member); a send matches the receive of the
// same order between the same two ranks. The task's record_event fires when
// it ends. Compute durations come from a CostModel, communication from the
// collective builder and the flow network. Same inputs give identical results.

#include <cstddef>
#include <algorithm>
#include <compare>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/plan/plan.h"
#include "simulator/cost/cost_model.h"
#include "simulator/network/collectives.h"
#include "simulator/network/nccl_model.h"
#include "simulator/topology/topology.h"

namespace tandem::sim {

// Deadlocks, mismatched collectives, plans that do not fit the topology.
class SimulationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class SymmetryMode {
  Off,   // simulate every rank
  Auto,  // one representative per program when the check passes, else every rank
  On,    // one representative per program; SimulationError when the check fails
};

struct SimOptions {
  NcclParams nccl;
  std::vector<CollectiveCalibration> collective_calibration;
  SymmetryMode symmetry = SymmetryMode::Auto;
  // Device of each rank (node ids of the topology); empty: rank r on device r.
  std::vector<int> rank_device;
};

// One task as it ran, as consumers read it. Only start_ns and end_ns (and
// which task) are decided by the simulation; the rest is the plan task's
// (SimActivityList puts the two together). The name stays in the plan
// (SimRank::program indexes Plan::programs).
//
// A task with trailing kernels (CostModel::trailingNs: a weight gradient's
// bias sums after its GEMM) has two activities, as in a trace, where each
// kernel is one: its main kernel's, then the trailing kernels' (`trailing`,
// no flops or bytes of its own), which starts when they first get SMs, not
// when they were launched (a trace's kernel starts when its first block
// runs).
struct SimActivity {
  int task = -1;  // index in the program's task list (== Task::id for planner plans)
  int task_id = -1;
  int stream = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  TaskKind kind = TaskKind::Kernel;
  Phase phase = Phase::Forward;
  bool trailing = false;
  int layer = -1;
  int micro_batch = -1;
  double flops = 0;
  int64_t bytes = 0;
};

// What the engine stores per simulated task: the task index, start and
// duration, 16 bytes, where a full SimActivity is 64. With every rank of
// thousands simulated, writing the records is most of the memory traffic
// that grows with the rank count (docs/benchmarks.md). A duration of 2^32 - 1
// ns (4.3 s) or more does not fit: the record says kLongDuration and the
// end is in the run's table of long activities (SimLongActivity).
struct SimActivityRecord {
  static constexpr uint32_t kLongDuration = UINT32_MAX;
  int64_t start_ns = 0;
  // Index in the program's task list; plus the list's size for a task's
  // trailing kernels (an index into the facts table of SimActivityList).
  int32_t task = -1;
  uint32_t duration_ns = 0;   // end - start, or kLongDuration
};
static_assert(sizeof(SimActivityRecord) == 16);

// The end of a record whose duration is kLongDuration; a run's table is
// sorted by record address.
struct SimLongActivity {
  const SimActivityRecord* record = nullptr;
  int64_t end_ns = 0;
};

// The end time of `r`, a record of a run whose long activities are
// [long_first, long_last).
inline int64_t activityEndNs(const SimActivityRecord& r, const SimLongActivity* long_first,
                             const SimLongActivity* long_last) {
  if (r.duration_ns != SimActivityRecord::kLongDuration) return r.start_ns + int64_t(r.duration_ns);
  const SimLongActivity* it =
      std::lower_bound(long_first, long_last, &r, [](const SimLongActivity& l, const SimActivityRecord* p) {
        return std::less<const SimActivityRecord*>()(l.record, p);
      });
  return it->end_ns;  // the engine puts every long record in the table
}

// One rank's activities, read-only: a view into a block that holds the
// records of every simulated rank of a run (rank after rank), and into a
// table with two SimActivity entries per task of the rank's program holding
// the plan's fields (times zero): the task's, then, after all of those, its
// trailing kernels'. Element i is the table's entry for record i's
// task with the record's times, returned by value. The table is a copy of
// the plan's fields made once per program, not a pointer into the Plan, so a
// result stays valid after the Plan it was simulated from is gone (callers
// pass temporaries). Copies of a list share the block and the tables; they
// are freed with the last list that refers to them.
//
// Why one block and not a vector per rank: with every rank of thousands
// simulated, each task's record goes to a different rank's buffer, so each
// rank's buffer had its own current 4 KiB page, more pages than the CPU's
// address cache (TLB) holds at 4096 ranks (a page walk per record). The
// engine sizes the block exactly (one record per task, two for a task with
// trailing kernels) and asks for huge pages for it (engine.cpp).
class SimActivityList {
 public:
  using value_type = SimActivity;

  // Random access over the records, yielding SimActivity values (so a
  // `const SimActivity&` bound to an element binds to a temporary).
  class const_iterator {
   public:
    using iterator_concept = std::random_access_iterator_tag;
    using iterator_category = std::input_iterator_tag;  // elements are values, not references
    using value_type = SimActivity;
    using difference_type = std::ptrdiff_t;
    using reference = SimActivity;
    using pointer = void;

    const_iterator() = default;
    const_iterator(const SimActivityRecord* rec, const SimActivityList* list) : rec_(rec), list_(list) {}
    SimActivity operator*() const { return list_->join(*rec_); }
    SimActivity operator[](difference_type n) const { return list_->join(rec_[n]); }
    const_iterator& operator++() { ++rec_; return *this; }
    const_iterator operator++(int) { const_iterator t = *this; ++rec_; return t; }
    const_iterator& operator--() { --rec_; return *this; }
    const_iterator operator--(int) { const_iterator t = *this; --rec_; return t; }
    const_iterator& operator+=(difference_type n) { rec_ += n; return *this; }
    const_iterator& operator-=(difference_type n) { rec_ -= n; return *this; }
    friend const_iterator operator+(const_iterator i, difference_type n) { return i += n; }
    friend const_iterator operator+(difference_type n, const_iterator i) { return i += n; }
    friend const_iterator operator-(const_iterator i, difference_type n) { return i -= n; }
    friend difference_type operator-(const const_iterator& a, const const_iterator& b) { return a.rec_ - b.rec_; }
    friend bool operator==(const const_iterator& a, const const_iterator& b) { return a.rec_ == b.rec_; }
    friend auto operator<=>(const const_iterator& a, const const_iterator& b) { return a.rec_ <=> b.rec_; }

   private:
    const SimActivityRecord* rec_ = nullptr;
    const SimActivityList* list_ = nullptr;
  };
  using iterator = const_iterator;

  SimActivityList() = default;
  // `first` points into the record block, `facts` (two entries per task of
  // the rank's program) into a table and [long_first, long_last) is the
  // run's table of long activities, all kept alive by `owner`.
  SimActivityList(std::shared_ptr<const void> owner, const SimActivityRecord* first, size_t size,
                  const SimActivity* facts, const SimLongActivity* long_first, const SimLongActivity* long_last)
      : owner_(std::move(owner)), first_(first), facts_(facts), long_first_(long_first), long_last_(long_last),
        size_(size) {}

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The records as the engine wrote them (task index, start, duration);
  // endNs gives a record's end.
  const SimActivityRecord* records() const { return first_; }
  int64_t endNs(const SimActivityRecord& r) const { return activityEndNs(r, long_first_, long_last_); }
  // A copy's iterators point to the copy: iterate a list that outlives them.
  const_iterator begin() const { return const_iterator(first_, this); }
  const_iterator end() const { return const_iterator(first_ + size_, this); }
  SimActivity operator[](size_t i) const { return join(first_[i]); }
  SimActivity at(size_t i) const {
    if (i >= size_)
      throw std::out_of_range("SimActivityList::at: " + std::to_string(i) + " >= " + std::to_string(size_));
    return (*this)[i];
  }
  SimActivity front() const { return (*this)[0]; }
  SimActivity back() const { return (*this)[size_ - 1]; }

 private:
  SimActivity join(const SimActivityRecord& r) const {
    SimActivity a = facts_[r.task];
    a.start_ns = r.start_ns;
    a.end_ns = endNs(r);
    return a;
  }

  std::shared_ptr<const void> owner_;
  const SimActivityRecord* first_ = nullptr;
  const SimActivity* facts_ = nullptr;
  const SimLongActivity* long_first_ = nullptr;
  const SimLongActivity* long_last_ = nullptr;
  size_t size_ = 0;
};

struct SimRank {
  int rank = 0;
  int program = 0;
  int device = 0;            // node id in the topology
  int represented_by = -1;   // -1: simulated itself; else the rank whose timeline it shares
  int64_t end_ns = 0;
  int64_t peak_memory_bytes = 0;
  SimActivityList activities;  // in completion order
};

struct SimCollective {
  int group = 0;           // index into Plan::groups
  int64_t sequence = 0;    // k-th collective of the group
  CollectiveOp op = CollectiveOp::AllReduce;
  int64_t bytes = 0;
  int64_t start_ns = 0;    // the last member arrived
  int64_t end_ns = 0;
  Algorithm algorithm = Algorithm::Ring;
  Protocol protocol = Protocol::Simple;
};

struct SimLinkUsage {
  int link = 0;
  double bytes = 0;
  double utilization = 0;  // bytes / (capacity * step time)
};

// Per rank figures computed from the activities (interval unions, so
// concurrent streams are not double counted).
struct SimRankSummary {
  int rank = 0;
  int64_t step_ns = 0;
  int64_t compute_ns = 0;       // |U compute|
  int64_t comm_ns = 0;          // |U communication|
  int64_t overlap_ns = 0;       // |U compute ∩ U comm|
  int64_t exposed_comm_ns = 0;  // |U comm \ U compute|
  // Of that, the time only point-to-point transfers (pipeline sends and
  // receives) run, no compute and no other collective: a stage waiting for
  // its neighbour, the pipeline bubble, and the transfers' own time;
  // |U send/recv \ (U compute ∪ U other comm)|.
  int64_t exposed_p2p_ns = 0;
  int64_t idle_ns = 0;          // step - |U everything|
  double overlap_pct = 0;       // overlap / comm * 100
  // Per phase the wall time during which one of its tasks runs (kernels of
  // two compute streams side by side count once).
  int64_t forward_ns = 0, backward_ns = 0, recompute_ns = 0, optimizer_ns = 0, data_ns = 0;
  int64_t peak_memory_bytes = 0;
};

struct SimStats {
  int64_t events = 0;               // queue events and flow completions processed
  int64_t tasks = 0;                // tasks simulated (representatives only when symmetric)
  int64_t flows = 0;
  int64_t rate_recomputations = 0;
  int64_t collectives = 0;
  // Symmetric simulation: transfers of groups the representatives stand for,
  // simulated for the load they put on NICs the representatives share.
  int64_t shadow_transfers = 0;
  int simulated_ranks = 0;
  bool symmetric = false;
  std::string symmetry_note;        // why symmetry was or was not used
};

struct SimResult {
  int64_t step_ns = 0;  // the slowest rank's end
  std::vector<SimRank> ranks;  // one per rank of the world, in rank order
  std::vector<SimCollective> collectives;
  std::vector<SimLinkUsage> links;  // links that carried traffic, in link order
  SimStats stats;
};

// Runs one step of `plan`. Throws SimulationError for deadlocks and mismatched
// collectives (naming rank, task, stream and what it waits on) and when the
// world does not fit the topology.
SimResult simulatePlan(const Plan& plan, const Topology& topo, const CostModel& cost, const SimOptions& options = {});

// Interval-union summary of one rank (sim_summary.cpp). Ranks that share a
// representative's timeline get its figures.
SimRankSummary summarizeRank(const SimResult& result, int rank);
std::vector<SimRankSummary> summarizeRanks(const SimResult& result);

// Symmetry check (sim_symmetry.cpp): empty when every program's ranks are
// interchangeable (same device figures, same position in the machine, groups
// that never mix programs), else the first reason they are not.
std::string symmetryProblem(const Plan& plan, const Topology& topo, const std::vector<int>& rank_device);

}  // namespace tandem::sim
