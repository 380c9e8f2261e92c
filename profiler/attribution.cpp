// Decoded CUPTI records -> trace rows, each GPU record tagged with its plan
// task: graph replays through the graph node id recorded at capture, eager
// launches through the external correlation id pushed around the task.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "profiler/profiler_impl.h"

namespace tandem::profiler {

namespace {

// Eager kernels can arrive before the API record that carries their task id
// (different CUPTI buffers): keep them this many completed buffers before
// writing them unattributed.
constexpr int kMaxPendingAge = 4;

traces::ActivityKind activityKind(RecordKind k) {
  switch (k) {
    case RecordKind::Memcpy: return traces::ActivityKind::Memcpy;
    case RecordKind::Memset: return traces::ActivityKind::Memset;
    case RecordKind::Sync: return traces::ActivityKind::Sync;
    default: return traces::ActivityKind::Kernel;
  }
}

}  // namespace

bool Profiler::Impl::attribute(const Record& r, int64_t& task) const {
  if (r.graph_node != 0) {
    auto it = node_task.find(r.graph_node);
    if (it == node_task.end()) return false;
    task = it->second;
    return true;
  }
  if (auto it = launch_task.find(r.correlation); it != launch_task.end()) {
    task = it->second;
    return true;
  }
  auto it = ext_task.find(r.correlation);
  if (it == ext_task.end()) return false;
  task = it->second;
  return true;
}

void Profiler::Impl::ensureStream(int stream, StreamKind kind, const std::string& name) {
  if (!streams_written.insert(stream).second) return;
  traces::StreamRow row;
  row.rank = rankOfStream(stream);
  row.stream = streamOfKey(stream);
  row.kind = kind;
  row.name = name;
  row.device = opt.device;
  writer->addStream(row);
}

void Profiler::Impl::writeDeviceRecord(const Record& r, int64_t task) {
  const TaskInfo* info = nullptr;
  if (task >= 0) {
    auto it = tasks.find(task);
    if (it != tasks.end()) info = &it->second;
  }
  traces::ActivityRow row;
  row.device = int(r.device);
  row.start_ns = toRunNs(r.start);
  row.end_ns = std::max(row.start_ns, toRunNs(r.end));
  row.kind = activityKind(r.kind);
  row.name = r.name;
  row.correlation_id = r.correlation;
  row.bytes = int64_t(r.bytes);
  if (r.kind == RecordKind::Kernel) row.geometry = r.geometry;

  // The clock measurement's own work (NCCL ping-pong and connection set-up,
  // copies of its readings, the polling of its stream).
  const bool clock_sync = !info && task == -1 && !(r.kind == RecordKind::Sync && r.stream == 0xffffffffu) &&
                          inClockSync(r.start);
  // The executor's set-up work before the first step (kernel set-up, GEMM
  // algorithm timing).
  const bool setup_work = !clock_sync && !info && task == -1 &&
                          !(r.kind == RecordKind::Sync && r.stream == 0xffffffffu) && inSetupWork(r.start);

  // Stream: the task's plan stream; else what an earlier attributed record
  // taught us about this CUDA stream; else a track of its own.
  int stream = -1;
  if (info) {
    stream = streamKey(info->rank, info->stream);
    cupti_stream_to_plan.emplace(r.stream, stream);
  } else if (setup_work) {
    stream = kSetupStream;
  } else if (r.kind == RecordKind::Sync && r.stream == 0xffffffffu) {
    stream = kHostSyncStream;
  } else if (const int rank = manyRanks() && task == kStepWork ? stepWorkRank(r) : -1; rank >= 0) {
    // Ranks sharing the process: the step work of the rank that issued it,
    // on its first stream (the executor issues it there).
    stream = streamKey(rank, 0);
  } else if (auto it = cupti_stream_to_plan.find(r.stream); it != cupti_stream_to_plan.end()) {
    stream = it->second;
  } else {
    stream = unknown_stream_tracks.idOf(int64_t(r.stream));
  }
  auto ps = plan_streams.find(stream);
  if (ps != plan_streams.end())
    ensureStream(stream, ps->second.first, ps->second.second);
  else if (stream == kHostSyncStream)
    ensureStream(stream, StreamKind::Host, "host synchronization");
  else if (clock_sync)
    ensureStream(stream, StreamKind::Comm, "clock offset measurement");
  else if (setup_work)
    ensureStream(stream, StreamKind::Compute, std::string(traces::kSetupStreamName));
  else
    ensureStream(stream, r.kind == RecordKind::Kernel ? StreamKind::Compute : StreamKind::Copy,
                 fmt::format("cuda stream {}", r.stream));
  row.rank = rankOfStream(stream);
  row.stream = streamOfKey(stream);

  if (info) {
    row.task_id = info->task_id;
    row.phase = info->phase;
    row.layer = info->layer;
    row.micro_batch = info->micro_batch;
    // The memory plan's live arena bytes, sampled at the first record of each
    // task (so over the first profiled step).
    if (info->arena_live_bytes >= 0 && arena_counter_written.insert(task).second)
      writer->addCounter({info->rank, "memory.arena_live_bytes", row.start_ns, double(info->arena_live_bytes)});
  }
  writer->addActivity(row);
  // The step's GPU extent: a graph replay's records share its launch's
  // correlation, and the executor's copies around the replay (or around an
  // eager step's tasks, which bracket them) are launches too; the launch
  // callback noted each launch's step (stepOf).
  if (!clock_sync && !setup_work && (r.graph_node != 0 || task == kStepWork || task == -1) &&
      r.kind != RecordKind::Sync) {
    auto [it, fresh] = corr_extent.try_emplace(r.correlation, r.start, r.end);
    if (!fresh) it->second = {std::min(it->second.first, r.start), std::max(it->second.second, r.end)};
  }

  const bool nccl = r.kind == RecordKind::Kernel && isNcclKernel(r.name);
  if (clock_sync) {
    ++summary.clock_sync_records;
    return;
  }
  if (setup_work) {
    ++summary.setup_records;
    return;
  }
  if (r.kind == RecordKind::Kernel) {
    if (r.graph_node != 0) ++summary.graph_kernels;
    const bool attributed = info != nullptr;
    if (task == kStepWork) {
      ++summary.step_work_kernels;
      if (nccl) ++summary.nccl_step_work;
    }
    if (nccl) {
      ++summary.nccl_kernels;
      if (attributed) ++summary.nccl_attributed;
      if (ps != plan_streams.end() && ps->second.first == StreamKind::Comm) ++summary.nccl_on_comm_stream;
    } else {
      ++summary.kernels;
      if (attributed) ++summary.kernels_attributed;
    }
    if (!attributed && task != kStepWork && unattributed_names.size() < 20) unattributed_names.insert(r.name);
  } else if (r.kind == RecordKind::Memcpy || r.kind == RecordKind::Memset) {
    ++summary.memcpys;
    if (info) ++summary.memcpys_attributed;
  }
  if (nccl && info && !info->collective_op.empty()) {
    traces::CollectiveRow c;
    c.rank = info->rank;
    c.task_id = info->task_id;
    c.op = info->collective_op;
    c.group = info->group;
    c.bytes = info->collective_bytes;
    c.start_ns = row.start_ns;
    c.end_ns = row.end_ns;
    writer->addCollective(c);
  }
}

void Profiler::Impl::consume(std::vector<Record>& records, bool final) {
  // Correlations first: a buffer may hold a kernel and the API record of its launch.
  for (const Record& r : records)
    if (r.kind == RecordKind::ExternalCorrelation && ++ext_records) {
      if (r.external_id >= kStepExternalBase) {
        ext_task[r.correlation] = kStepWork;
        ext_step[r.correlation] = int(r.external_id - kStepExternalBase);
      } else {
        ext_task[r.correlation] = int64_t(r.external_id);
      }
    }

  std::vector<Pending> still;
  auto handle = [&](const Record& r, int age) {
    int64_t task = -1;
    bool known = false;
    {
      std::lock_guard<std::mutex> lock(node_mu);
      known = attribute(r, task);
    }
    if (!known && r.graph_node == 0 && r.kind != RecordKind::Sync && !final && age < kMaxPendingAge) {
      still.push_back({r, age + 1});
      return;
    }
    writeDeviceRecord(r, known ? task : -1);
  };
  for (const Pending& p : pending) handle(p.record, p.age);
  for (const Record& r : records) {
    switch (r.kind) {
      case RecordKind::Kernel:
        if (!collective_order.empty() && isNcclKernel(r.name)) {
          nccl_waiting.push_back(r);
          break;
        }
        handle(r, 0);
        break;
      case RecordKind::Memcpy:
      case RecordKind::Memset:
      case RecordKind::Sync:
        handle(r, 0);
        break;
      case RecordKind::Marker: {
        // Our own ranges are written from the host calls; keep other domains'.
        if (r.domain == "tandem") break;
        if (r.marker_flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
          open_markers[r.marker_id] = r;
        } else if (r.marker_flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
          auto it = open_markers.find(r.marker_id);
          if (it == open_markers.end()) break;
          writer->addRange(
              {opt.rank, toRunNs(it->second.start), toRunNs(r.start), it->second.name, 0, it->second.domain});
          ++summary.ranges;
          open_markers.erase(it);
        } else {
          writer->addRange({opt.rank, toRunNs(r.start), toRunNs(r.start), r.name, 0, r.domain});
          ++summary.ranges;
        }
        break;
      }
      default:
        break;
    }
  }
  pending.swap(still);
  resolveNccl(final);
  if (final) {
    for (const Pending& p : pending) writeDeviceRecord(p.record, -1);
    pending.clear();
  }
}

uint64_t Profiler::Impl::settleNs() const {
  return uint64_t(std::max<uint32_t>(opt.flush_period_ms, 100)) * 3000000ull;
}

// NCCL kernels are tagged by issue order, not by the launching thread: a
// non-blocking communicator may launch an operation later, from another NCCL
// call or another thread, so the thread's current task can name the wrong
// task. One communicator's kernels run in the order the operations were
// issued, so within a step the i-th NCCL kernel (by GPU start) belongs to the
// i-th collective task issued; kernels beyond them are the executor's own
// step work (its loss all-reduce). A replay's kernels name their step through
// the launch's correlation (steps may be queued ahead); an eager step's are
// found by the host window they started in. A step's kernels are assigned
// once it ended three flush periods ago (all its records have arrived).
void Profiler::Impl::resolveNccl(bool final) {
  if (nccl_waiting.empty()) return;
  std::vector<int64_t> order;
  std::vector<StepWindow> windows;
  {
    std::lock_guard<std::mutex> lock(host_mu);
    order = collective_order;
    windows = step_windows;
  }
  std::map<int, size_t> window_of_step;
  for (size_t w = 0; w < windows.size(); ++w) window_of_step[windows[w].step] = w;
  uint64_t now = 0;
  cuptiGetTimestamp(&now);
  const uint64_t settle_ns = settleNs();
  std::map<size_t, std::vector<Record>> by_window;
  std::vector<Record> keep;
  for (Record& r : nccl_waiting) {
    size_t w = windows.size();
    if (const int step = stepOf(r.correlation); step >= 0) {
      // Its launch named the step (a graph replay's kernel, or an eager one).
      if (auto it = window_of_step.find(step); it != window_of_step.end()) w = it->second;
    } else if (r.graph_node == 0) {
      // Launched outside the step's thread (NCCL may do that): the host
      // window it started in (eager steps do not overlap). A replay's kernel
      // always has its launch's step.
      auto it = std::upper_bound(windows.begin(), windows.end(), r.start,
                                 [](uint64_t t, const StepWindow& win) { return t < win.begin; });
      if (it != windows.begin() && r.start <= std::prev(it)->end) w = size_t(std::prev(it) - windows.begin());
    }
    if (w < windows.size() && (final || now > windows[w].end + settle_ns))
      by_window[w].push_back(std::move(r));
    else if (w == windows.size() && final)
      writeDeviceRecord(r, -1);  // outside every step
    else
      keep.push_back(std::move(r));
  }
  nccl_waiting.swap(keep);
  for (auto& [w, recs] : by_window) {
    std::sort(recs.begin(), recs.end(), [](const Record& a, const Record& b) { return a.start < b.start; });
    for (size_t i = 0; i < recs.size(); ++i) writeDeviceRecord(recs[i], i < order.size() ? order[i] : kStepWork);
  }
}

// A step's row spans its GPU work (first start to last end of the records
// whose launches named it), so queued steps never overlap; a step with no
// such record keeps the host's window.
void Profiler::Impl::writeSettledSteps(bool final) {
  for (auto it = corr_extent.begin(); it != corr_extent.end();) {
    const int step = stepOf(it->first);
    if (step < 0) {
      ++it;
      continue;
    }
    auto [g, fresh] = step_gpu.try_emplace(step, it->second);
    if (!fresh)
      g->second = {std::min(g->second.first, it->second.first), std::max(g->second.second, it->second.second)};
    it = corr_extent.erase(it);
  }
  uint64_t now = 0;
  cuptiGetTimestamp(&now);
  std::vector<EndedStep> ready;
  {
    std::lock_guard<std::mutex> lock(host_mu);
    std::vector<EndedStep> wait;
    for (const EndedStep& e : ended_steps) (final || now > e.end + settleNs() ? ready : wait).push_back(e);
    ended_steps.swap(wait);
  }
  for (const EndedStep& e : ready) {
    traces::StepRow row{opt.rank, e.step, toRunNs(e.begin), toRunNs(e.end)};
    if (auto g = step_gpu.find(e.step); g != step_gpu.end()) {
      row.start_ns = toRunNs(g->second.first);
      row.end_ns = std::max(row.start_ns, toRunNs(g->second.second));
      step_gpu.erase(g);
    }
    // Ranks sharing the process run each step together: the same span each.
    if (manyRanks())
      for (int r = 0; r < opt.ranks; ++r) writer->addStep({r, row.step, row.start_ns, row.end_ns});
    else
      writer->addStep(row);
    ++summary.steps;
  }
  if (final) corr_extent.clear();
}

void Profiler::Impl::drainHostRows(bool final) {
  std::vector<traces::RangeRow> ranges;
  std::vector<traces::CounterRow> counters;
  {
    std::lock_guard<std::mutex> lock(host_mu);
    ranges.swap(host_ranges);
    counters.swap(host_counters);
  }
  for (const auto& r : ranges) writer->addRange(r);
  for (const auto& c : counters) writer->addCounter(c);
  summary.ranges += int64_t(ranges.size());
  writeSettledSteps(final);
}

}  // namespace tandem::profiler
