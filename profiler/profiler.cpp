// Profiler: the calls the executor makes (through its TaskObserver), clock
// anchors, host-side rows (steps, ranges, memory counters), and finish().
#include "profiler/profiler.h"

#include <cuda_runtime_api.h>
#include <cupti.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtCudaRt.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include "profiler/profiler_impl.h"
#include "traces/trackers/stats.h"

namespace tandem::profiler {

namespace {

int64_t clockNs(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

uint64_t cuptiNow() {
  uint64_t t = 0;
  cuptiGetTimestamp(&t);
  return t;
}

// Lets CUPTI see NVTX ranges of other code (MARKER records): NVTX loads the
// library named here at its first call. Left alone when a tool set it.
void pointNvtxAtCupti() {
  if (std::getenv("NVTX_INJECTION64_PATH")) return;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuptiSubscribe), &info) && info.dli_fname)
    setenv("NVTX_INJECTION64_PATH", info.dli_fname, 0);
}

nvtxDomainHandle_t domainOf(void* d) { return static_cast<nvtxDomainHandle_t>(d); }

// The task the current thread is inside (taskBegin .. taskEnd) and when it
// began: per thread, as ranks sharing the process issue tasks at once.
struct ThreadTask {
  bool in_task = false;
  uint64_t start_cupti = 0;
};
ThreadTask& threadTask() {
  thread_local ThreadTask t;
  return t;
}

nvtxEventAttributes_t rangeAttributes(const char* name) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  return a;
}

void pushRange(void* domain, const char* name) {
  const nvtxEventAttributes_t a = rangeAttributes(name);
  nvtxDomainRangePushEx(domainOf(domain), &a);
}

}  // namespace

// Two CUPTI readings around the host clocks: the midpoint pairs them to
// within half the bracket (well under a microsecond).
Clock readClocks() {
  Clock c;
  const uint64_t a = cuptiNow();
  c.realtime_ns = clockNs(CLOCK_REALTIME);
  c.monotonic_ns = clockNs(CLOCK_MONOTONIC);
  const uint64_t b = cuptiNow();
  c.cupti_ns = a + (b - a) / 2;
  return c;
}

Profiler::Impl::Impl(const ProfilerOptions& o) : opt(o) {
  if (opt.path.empty()) throw ProfilerError("profiler: no trace file given");
  if (opt.buffer_bytes < (1 << 20)) throw ProfilerError("profiler: buffer_bytes must be at least 1 MiB");
  if (opt.buffers < 1) throw ProfilerError("profiler: buffers must be at least 1");
  if (opt.ranks < 1) throw ProfilerError("profiler: ranks must be at least 1");
  // Checked before the file is touched, so a refused profiler adds no empty run.
  if (g_active.load() != nullptr)
    throw ProfilerError("profiler: a profiler is already active in this process (CUPTI allows one)");
  if (opt.nvtx_ranges) pointNvtxAtCupti();
  try {
    writer = std::make_unique<traces::TraceWriter>(opt.path);
  } catch (const std::exception& e) {
    throw ProfilerError(fmt::format("profiler: cannot open trace file {}: {}", opt.path, e.what()));
  }
  traces::RunInfo run = opt.run;
  run.kind = traces::RunKind::Real;
  if (run.created_unix_ns == 0) run.created_unix_ns = clockNs(CLOCK_REALTIME);
  writer->beginRun(run);
  if (!opt.plan_facts.empty()) writer->setPlanFacts(opt.plan_facts);
  start();  // after the file: a CUPTI failure leaves an empty run, never a half one
  start_clock = readClocks();
  // Run time is CLOCK_REALTIME: ranks on one host share it exactly; across
  // hosts the ClockRow offsets correct it (see docs/profiler.md).
  offset_ns = start_clock.realtime_ns - int64_t(start_clock.cupti_ns);
  writer->addClock({opt.rank, "cupti", int64_t(start_clock.cupti_ns), start_clock.realtime_ns,
                    start_clock.monotonic_ns, 0});
  writer->flush();
  if (opt.nvtx_ranges) nvtx_domain = nvtxDomainCreateA("tandem");
  if (opt.power_sample_ms > 0) {
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, int(sizeof bus), opt.device) == cudaSuccess) {
      power = std::make_unique<PowerSampler>(bus, opt.power_sample_ms, [] { return cuptiNow(); });
      summary.power_note = power->note();
    } else {
      summary.power_note = "no PCI bus id for the CUDA device: no power or clock samples";
    }
  }
}

void Profiler::Impl::addPowerSamples(std::vector<PowerSample> samples) {
  summary.power_samples = int64_t(samples.size());
  if (samples.empty()) return;
  std::lock_guard<std::mutex> lock(host_mu);
  uint64_t lo = 0, hi = 0;
  for (const StepWindow& w : step_windows) {
    lo = lo == 0 ? w.begin : std::min(lo, w.begin);
    hi = std::max(hi, w.end);
  }
  std::vector<double> watts, mhz;
  int64_t capped = 0, with_reasons = 0;
  const PowerSample* first_e = nullptr;  // energy readings at the ends of the steps' span
  const PowerSample* last_e = nullptr;
  const double e0 = samples.front().energy_mj;
  for (const PowerSample& s : samples) {
    const int64_t t = toRunNs(s.ts);
    if (s.power_w >= 0) host_counters.push_back({opt.rank, "gpu.power_w", t, s.power_w});
    if (s.sm_clock_mhz >= 0) host_counters.push_back({opt.rank, "gpu.sm_clock_mhz", t, s.sm_clock_mhz});
    if (s.limit_reasons >= 0)
      host_counters.push_back({opt.rank, "gpu.clock_limit_reasons", t, double(s.limit_reasons)});
    if (s.energy_mj >= 0 && e0 >= 0) host_counters.push_back({opt.rank, "gpu.energy_mj", t, s.energy_mj - e0});
    if (s.ts < lo || s.ts > hi) continue;
    if (s.energy_mj >= 0) {
      if (!first_e) first_e = &s;
      last_e = &s;
    }
    if (s.power_w >= 0) watts.push_back(s.power_w);
    summary.power_instant = summary.power_instant || s.power_instant;
    if (s.sm_clock_mhz >= 0) mhz.push_back(s.sm_clock_mhz);
    if (s.limit_reasons >= 0) {
      ++with_reasons;
      capped += (s.limit_reasons & kPowerCapReason) != 0;
    }
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return -1.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  summary.power_w_median = median(watts);
  summary.sm_clock_mhz_median = median(mhz);
  summary.power_capped_share = with_reasons ? double(capped) / double(with_reasons) : -1.0;
  // The counter's mean power over the steps' span, times the span, per step
  // ended: between the counter's moves where it moved twice or more inside
  // the span (meanPowerFromEnergy), else between the first and last readings
  // (a span shorter than about 200 ms: less exact).
  double watts_mean = meanPowerFromEnergy(samples, lo, hi);
  if (watts_mean < 0 && first_e && last_e && last_e->ts > first_e->ts && last_e->energy_mj > first_e->energy_mj)
    watts_mean = (last_e->energy_mj - first_e->energy_mj) * 1e-3 / (double(last_e->ts - first_e->ts) * 1e-9);
  if (watts_mean > 0 && !step_windows.empty()) {
    summary.energy_power_w = watts_mean;
    summary.energy_per_step_j = watts_mean * double(hi - lo) * 1e-9 / double(step_windows.size());
  }
}

Profiler::Impl::~Impl() {
  if (started) {
    try {
      stop();
    } catch (...) {
    }
  }
  Impl* self = this;
  g_active.compare_exchange_strong(self, nullptr);
  for (uint8_t* b : all_buffers) std::free(b);
}

Profiler::Profiler(const ProfilerOptions& options) : impl_(std::make_unique<Impl>(options)) {}

Profiler::~Profiler() {
  try {
    finish();
  } catch (...) {
  }
}

const std::string& Profiler::path() const { return impl_->opt.path; }

void Profiler::Impl::checkRank(int rank) const {
  if (manyRanks() && (rank < 0 || rank >= opt.ranks))
    throw ProfilerError(fmt::format("profiler: rank {} is not among the {} ranks of this process", rank, opt.ranks));
}

void Profiler::addTasks(const std::vector<TaskInfo>& tasks) {
  Impl& p = *impl_;
  std::lock_guard<std::mutex> lock(p.write_mu);
  for (const TaskInfo& t : tasks) {
    const int rank = p.manyRanks() ? t.rank : p.opt.rank;
    p.checkRank(rank);
    TaskInfo& kept = p.tasks[p.taskKey(rank, t.task_id)] = t;
    kept.rank = rank;
    p.writer->addPlanTask(kept);  // the stored part
  }
}

void Profiler::nameStream(int plan_stream, cudaStream_t stream, StreamKind kind, const std::string& name, int rank) {
  Impl& p = *impl_;
  p.checkRank(rank);
  const int key = p.streamKey(rank, plan_stream);
  {
    std::lock_guard<std::mutex> lock(p.write_mu);
    p.plan_streams[key] = {kind, name};
    p.cuda_stream_to_plan[stream] = key;
    uint32_t id = 0;
    if (stream && cuptiGetStreamIdEx(nullptr, stream, 0, &id) == CUPTI_SUCCESS) p.cupti_stream_to_plan[id] = key;
    p.ensureStream(key, kind, name);
  }
  if (p.opt.nvtx_ranges && stream) nvtxNameCudaStreamA(stream, name.c_str());
}

void Profiler::stepBegin(int step, int rank) {
  Impl& p = *impl_;
  p.current_step = step;
  if (p.manyRanks()) currentRank() = rank;
  const uint64_t begin = cuptiNow();
  currentTask() = kStepWork;
  currentStep() = step;
  cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, kStepExternalBase + uint64_t(step));
  std::lock_guard<std::mutex> lock(p.host_mu);
  Impl::OpenStep& open = p.open_steps[step];
  // The first rank to begin it (the only one, unless ranks share the process).
  if (open.ranks_in++ > 0) return;
  open.begin = begin;
  // A start/end range, not push/pop: with steps queued ahead step k + 1's
  // range begins before step k's ends.
  if (p.nvtx_domain) {
    const std::string name = fmt::format("step {}", step);
    const nvtxEventAttributes_t a = rangeAttributes(name.c_str());
    open.range = nvtxDomainRangeStartEx(domainOf(p.nvtx_domain), &a);
  }
}

void Profiler::stepEnd(int step) {
  Impl& p = *impl_;
  uint64_t begin = 0, range = 0;
  bool last = false, others_open = false;
  {
    std::lock_guard<std::mutex> lock(p.host_mu);
    auto it = p.open_steps.find(step);
    if (it == p.open_steps.end()) return;
    begin = it->second.begin;
    range = it->second.range;
    last = --it->second.ranks_in == 0;
    if (last) p.open_steps.erase(it);
    // Other steps this thread has begun (queued ahead).
    others_open = p.open_steps.size() > (last ? 0u : 1u);
  }
  // The pushes of queued steps stack up; every step pops one, so the stack
  // is empty once the last step ended, and a launch always sees the id of
  // the step it belongs to (pushed just before it).
  uint64_t popped = 0;
  cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &popped);
  currentTask() = others_open ? kStepWork : -1;
  currentStep() = others_open ? p.current_step : -1;
  if (!last) return;  // the other ranks sharing the process are still in it
  if (p.nvtx_domain) nvtxDomainRangeEnd(domainOf(p.nvtx_domain), range);
  const uint64_t end = cuptiNow();
  size_t free_b = 0, total_b = 0;
  const bool mem = cudaMemGetInfo(&free_b, &total_b) == cudaSuccess;
  std::lock_guard<std::mutex> lock(p.host_mu);
  p.ended_steps.push_back({step, begin, end});
  p.step_windows.push_back({step, begin, end});
  p.host_ranges.push_back({p.opt.rank, p.toRunNs(begin), p.toRunNs(end), fmt::format("step {}", step), 0, "tandem"});
  if (mem)
    p.host_counters.push_back({p.opt.rank, "memory.device_in_use_bytes", p.toRunNs(end), double(total_b - free_b)});
  if (p.opt.arena_bytes > 0) {
    p.host_counters.push_back({p.opt.rank, "memory.arena_bytes", p.toRunNs(begin), double(p.opt.arena_bytes)});
    if (p.opt.arena_peak_bytes > 0)
      p.host_counters.push_back(
          {p.opt.rank, "memory.arena_peak_bytes", p.toRunNs(begin), double(p.opt.arena_peak_bytes)});
  }
}

void Profiler::taskBegin(int64_t local_id, cudaStream_t, int rank) {
  Impl& p = *impl_;
  const int64_t task_id = p.taskKey(rank, local_id);
  currentTask() = task_id;
  cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, uint64_t(task_id));
  threadTask() = {true, cuptiNow()};
  // The issue order of collective tasks in the first step that has any
  // (NCCL's kernels are matched by it; ranks sharing the process have none).
  if (auto it = p.tasks.find(task_id); !p.manyRanks() && it != p.tasks.end() && !it->second.collective_op.empty()) {
    if (p.order_step == -1) p.order_step = p.current_step;
    if (p.order_step == p.current_step) {
      std::lock_guard<std::mutex> lock(p.host_mu);
      p.collective_order.push_back(task_id);
    }
  }
  if (p.nvtx_domain) {
    auto it = p.tasks.find(task_id);
    pushRange(p.nvtx_domain, it != p.tasks.end() ? it->second.name.c_str() : "task");
  }
}

void Profiler::taskEnd(int64_t local_id, int rank) {
  Impl& p = *impl_;
  ThreadTask& mine = threadTask();
  if (!mine.in_task) return;
  const int64_t task_id = p.taskKey(rank, local_id);
  uint64_t popped = 0;
  cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &popped);
  bool in_step = false;
  {
    std::lock_guard<std::mutex> lock(p.host_mu);
    in_step = !p.open_steps.empty();
  }
  currentTask() = in_step ? kStepWork : -1;
  mine.in_task = false;
  if (p.nvtx_domain) nvtxDomainRangePop(domainOf(p.nvtx_domain));
  const uint64_t end = cuptiNow();
  auto it = p.tasks.find(task_id);
  std::lock_guard<std::mutex> lock(p.host_mu);
  p.host_ranges.push_back({it != p.tasks.end() ? it->second.rank : p.opt.rank, p.toRunNs(mine.start_cupti),
                           p.toRunNs(end), it != p.tasks.end() ? it->second.name : fmt::format("task {}", local_id), 1,
                           "tandem"});
}

void Profiler::captureBegin() {
  Impl& p = *impl_;
  std::lock_guard<std::mutex> lock(p.host_mu);
  const uint64_t t = cuptiNow();
  p.host_ranges.push_back({p.opt.rank, p.toRunNs(t), p.toRunNs(t), "graph capture begin", 1, "tandem"});
}

void Profiler::captureEnd() {
  Impl& p = *impl_;
  std::lock_guard<std::mutex> lock(p.host_mu);
  const uint64_t t = cuptiNow();
  p.host_ranges.push_back({p.opt.rank, p.toRunNs(t), p.toRunNs(t), "graph capture end", 1, "tandem"});
}

int64_t Profiler::nowNs() const { return impl_->toRunNs(cuptiNow()); }

void Profiler::clockSyncBegin() {
  Impl& p = *impl_;
  std::lock_guard<std::mutex> lock(p.host_mu);
  p.clock_sync_windows.push_back({cuptiNow(), 0});
}

void Profiler::clockSyncEnd(const ClockOffsetSample& sample, bool at_end) {
  Impl& p = *impl_;
  const uint64_t end = cuptiNow();
  {
    std::lock_guard<std::mutex> lock(p.host_mu);
    if (!p.clock_sync_windows.empty() && p.clock_sync_windows.back().second == 0)
      p.clock_sync_windows.back().second = end;
    p.have_offset[at_end] = true;
    p.offsets[at_end] = sample;
  }
  // The row carries the rank's clocks at the measurement: realtime_ns is its
  // run clock (the clock of its rows), cupti_ns and monotonic_ns follow from
  // the start anchor.
  std::lock_guard<std::mutex> lock(p.write_mu);
  if (!p.writer) return;
  p.writer->addClock({p.opt.rank, at_end ? "rank0-end" : "rank0-start", sample.local_ns - p.offset_ns,
                      sample.local_ns,
                      sample.local_ns - (p.start_clock.realtime_ns - p.start_clock.monotonic_ns), sample.offset_ns});
  p.writer->flush();
}

namespace {
bool inWindows(const std::vector<std::pair<uint64_t, uint64_t>>& windows, uint64_t cupti) {
  for (const auto& [b, e] : windows)
    if (cupti >= b && (e == 0 || cupti <= e)) return true;
  return false;
}
}  // namespace

bool Profiler::Impl::inClockSync(uint64_t cupti) {
  std::lock_guard<std::mutex> lock(host_mu);
  return inWindows(clock_sync_windows, cupti);
}

bool Profiler::Impl::inSetupWork(uint64_t cupti) {
  std::lock_guard<std::mutex> lock(host_mu);
  return inWindows(setup_windows, cupti);
}

void Profiler::setupWorkBegin() {
  Impl& p = *impl_;
  std::lock_guard<std::mutex> lock(p.host_mu);
  p.setup_windows.push_back({cuptiNow(), 0});
}

void Profiler::setupWorkEnd() {
  Impl& p = *impl_;
  std::lock_guard<std::mutex> lock(p.host_mu);
  // The latest window still open: ranks sharing the process set up at once.
  for (auto w = p.setup_windows.rbegin(); w != p.setup_windows.rend(); ++w)
    if (w->second == 0) {
      w->second = cuptiNow();
      break;
    }
}

void Profiler::setStat(const traces::StatRow& stat) {
  std::lock_guard<std::mutex> lock(impl_->host_mu);
  impl_->extra_stats.push_back(stat);
}

ProfileSummary Profiler::finish() {
  Impl& p = *impl_;
  if (p.finished) return p.summary;
  p.stop();  // forced flush: every record reaches bufferDone
  if (p.power) p.addPowerSamples(p.power->stop());
  const Clock end = readClocks();
  std::lock_guard<std::mutex> lock(p.write_mu);
  std::vector<Record> none;
  p.consume(none, true);
  p.drainHostRows(true);
  p.summary.dropped_records = p.dropped.load();
  p.summary.buffers_grown = p.grown.load();
  p.summary.unattributed.assign(p.unattributed_names.begin(), p.unattributed_names.end());
  p.summary.path = p.opt.path;
  // End anchor: the drift of CUPTI's clock against CLOCK_REALTIME over the run
  // is end.offset - start.offset (stored, not applied).
  p.writer->addClock({p.opt.rank, "cupti", int64_t(end.cupti_ns), end.realtime_ns, end.monotonic_ns, 0});
  using traces::Severity;
  const ProfileSummary& s = p.summary;
  namespace st = traces::stats;
  p.writer->setStat(st::kCuptiDroppedRecords.row(s.dropped_records));
  p.writer->setStat(st::kCuptiRecords.row(s.records));
  p.writer->setStat(st::kCuptiBuffersGrown.row(s.buffers_grown));
  p.writer->setStat(st::kProfilerKernels.row(s.kernels));
  p.writer->setStat(st::kProfilerKernelsAttributed.row(s.kernels_attributed));
  p.writer->setStat(st::kProfilerNcclKernels.row(s.nccl_kernels));
  p.writer->setStat(st::kProfilerNcclAttributed.row(s.nccl_attributed));
  p.writer->setStat(st::kCuptiExternalCorrelationRecords.row(p.ext_records));
  p.writer->setStat(st::kProfilerGraphKernels.row(s.graph_kernels));
  p.writer->setStat(st::kProfilerSetupRecords.row(s.setup_records));
  const int64_t unattributed =
      (s.kernels - s.kernels_attributed) + (s.nccl_kernels - s.nccl_attributed) - s.step_work_kernels;
  p.writer->setStat(st::kProfilerStepWorkKernels.row(s.step_work_kernels));
  p.writer->setStat(st::kProfilerKernelsUnattributed.row(unattributed));
  // Named per rank: merging rank files adds stats of the same name.
  p.writer->setStat(st::kClockDriftNs.row(p.opt.rank, (end.realtime_ns - int64_t(end.cupti_ns)) - p.offset_ns));
  p.writer->setStat(st::kProfilerClockSyncRecords.row(s.clock_sync_records));
  // Per-rank names: `tandem merge` sums stats of the same name over its inputs.
  {
    std::lock_guard<std::mutex> host_lock(p.host_mu);
    const int r = p.opt.rank;
    if (p.have_offset[0]) {
      const ClockOffsetSample& a = p.offsets[0];
      p.writer->setStat(st::kClockOffsetNs.row(r, a.offset_ns));
      p.writer->setStat(st::kClockOffsetRttNs.row(r, a.rtt_ns));
    }
    if (p.have_offset[1]) {
      const ClockOffsetSample& b = p.offsets[1];
      p.writer->setStat(st::kClockOffsetEndNs.row(r, b.offset_ns));
      p.writer->setStat(st::kClockOffsetEndRttNs.row(r, b.rtt_ns));
    }
    if (p.have_offset[0] && p.have_offset[1] && p.offsets[1].local_ns > p.offsets[0].local_ns) {
      const double drift = double(p.offsets[1].offset_ns - p.offsets[0].offset_ns) /
                           double(p.offsets[1].local_ns - p.offsets[0].local_ns);
      p.writer->setStat(st::kClockOffsetDriftPpb.row(r, int64_t(std::llround(drift * 1e9))));
    }
  }
  if (s.power_samples > 0) {
    // Per rank (merge sums stats of one name); whole watts and MHz, the
    // capped share in percent.
    const int r = p.opt.rank;
    p.writer->setStat(st::kGpuPowerSamples.row(r, s.power_samples));
    p.writer->setStat(st::kGpuPowerInstant.row(r, s.power_instant ? 1 : 0));
    if (s.power_w_median >= 0) p.writer->setStat(st::kGpuPowerWMedian.row(r, int64_t(std::llround(s.power_w_median))));
    if (s.sm_clock_mhz_median >= 0)
      p.writer->setStat(st::kGpuSmClockMhzMedian.row(r, int64_t(std::llround(s.sm_clock_mhz_median))));
    if (s.power_capped_share >= 0)
      p.writer->setStat(st::kGpuPowerCappedPct.row(r, int64_t(std::llround(100 * s.power_capped_share))));
    if (s.energy_per_step_j >= 0) {
      p.writer->setStat(st::kGpuEnergyPerStepMj.row(r, int64_t(std::llround(1e3 * s.energy_per_step_j))));
      p.writer->setStat(st::kGpuEnergyPowerW.row(r, int64_t(std::llround(s.energy_power_w))));
    }
  } else if (!s.power_note.empty()) {
    p.writer->setStat(st::kGpuPowerSamples.row(p.opt.rank, 0, s.power_note));
  }
  {
    std::lock_guard<std::mutex> host_lock(p.host_mu);
    for (const auto& st : p.extra_stats) p.writer->setStat(st);
  }
  p.writer->flush();
  p.finished = true;
  p.writer.reset();
  // CUPTI is detached: another profiler may start in this process now.
  Impl* self = &p;
  g_active.compare_exchange_strong(self, nullptr);
  return p.summary;
}

std::string formatSummary(const ProfileSummary& s) {
  auto pct = [](int64_t a, int64_t b) { return b ? 100.0 * double(a) / double(b) : 100.0; };
  // Shares are of the kernels that belong to plan tasks: the executor's own
  // step work is counted apart.
  const int64_t compute_tasks = s.kernels - (s.step_work_kernels - s.nccl_step_work);
  const int64_t nccl_tasks = s.nccl_kernels - s.nccl_step_work;
  std::string out = fmt::format(
      "profile {}: compute kernels attributed {:.1f}% ({}/{}), NCCL kernels attributed {:.1f}% ({}/{}), "
      "memcpy/memset attributed {:.1f}% ({}/{}), executor step-work kernels {}, graph-replayed kernels {}, "
      "dropped records {}, steps {}",
      s.path, pct(s.kernels_attributed, compute_tasks), s.kernels_attributed, compute_tasks,
      pct(s.nccl_attributed, nccl_tasks), s.nccl_attributed, nccl_tasks,
      pct(s.memcpys_attributed, s.memcpys), s.memcpys_attributed, s.memcpys,
      s.step_work_kernels, s.graph_kernels, s.dropped_records, s.steps);
  if (s.clock_sync_records > 0) out += fmt::format(", clock-offset measurement records {}", s.clock_sync_records);
  if (s.setup_records > 0) out += fmt::format(", executor set-up records (GEMM algorithm timing) {}", s.setup_records);
  if (s.power_samples > 0 && s.energy_per_step_j >= 0)
    out += fmt::format(", {:.1f} J per step at {:.0f} W (energy counter), SM clock median {:.0f} MHz ({} samples{})",
                       s.energy_per_step_j, s.energy_power_w, s.sm_clock_mhz_median, s.power_samples,
                       s.power_capped_share >= 0 ? fmt::format(", {:.0f}% at the power cap", 100 * s.power_capped_share)
                                                 : std::string());
  else if (s.power_samples > 0 && s.power_w_median >= 0)
    out += fmt::format(", power {:.0f} W (NVML's 1 s average) and SM clock {:.0f} MHz "
                       "(medians over the steps, {} samples{})",
                       s.power_w_median, s.sm_clock_mhz_median, s.power_samples,
                       s.power_capped_share >= 0 ? fmt::format(", {:.0f}% at the power cap", 100 * s.power_capped_share)
                                                 : std::string());
  else if (!s.power_note.empty())
    out += ", " + s.power_note;
  if (!s.unattributed.empty()) {
    out += "\n  unattributed kernels:";
    for (const auto& n : s.unattributed) out += " " + n + ";";
  }
  return out;
}

}  // namespace tandem::profiler
