// The profiler's collector on its own, without the executor: a few kernels,
// a device copy and a memset, issued as plan "tasks" once eagerly and then as
// a captured CUDA Graph replayed three times. Every record must come back
// tagged with the task that launched it (external correlation when eager,
// graph node ids when replayed), on the task's stream, inside the run's
// clock anchors; work outside any task must stay untagged.
#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "engine/cuda/kernels.h"
#include "profiler/power_sampler.h"
#include "profiler/profiler.h"
#include "tests/gpu/gpu_test.h"
#include "traces/store/trace_reader.h"

using namespace tandem;
using namespace tandem::gputest;
using tandem::cuda::addForward;
using tandem::cuda::geluForward;
namespace tr = tandem::traces;

namespace {

#define CHECK_CUDA(x)                                                              \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      fmt::print("FAIL {}: {}\n", #x, cudaGetErrorString(e_));                     \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

constexpr int64_t kN = 1 << 22;  // 16 MiB of floats per buffer: kernels of tens of microseconds

struct Buffers {
  float* a = nullptr;
  float* b = nullptr;
  float* c = nullptr;
  float* d = nullptr;
};

// The four "tasks" of one step, all on stream s.
void issueStep(profiler::Profiler& p, const Buffers& m, cudaStream_t s) {
  p.taskBegin(10, s);
  addForward(m.c, m.a, m.b, kN, DType::F32, s);
  p.taskEnd(10);
  p.taskBegin(11, s);
  geluForward(m.d, m.c, kN, DType::F32, s);
  p.taskEnd(11);
  p.taskBegin(12, s);
  CHECK_CUDA(cudaMemcpyAsync(m.a, m.d, kN * 4, cudaMemcpyDeviceToDevice, s));
  p.taskEnd(12);
  p.taskBegin(13, s);
  CHECK_CUDA(cudaMemsetAsync(m.b, 0, kN * 4, s));
  p.taskEnd(13);
}

// Four device buffers of kN floats, a and b filled with the same random values.
Buffers makeBuffers() {
  Buffers m;
  for (float** q : {&m.a, &m.b, &m.c, &m.d}) CHECK_CUDA(cudaMalloc(q, kN * 4));
  std::mt19937 rng(7);
  const std::vector<float> init = randomVector(size_t(kN), rng);
  CHECK_CUDA(cudaMemcpy(m.a, init.data(), kN * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(m.b, init.data(), kN * 4, cudaMemcpyHostToDevice));
  return m;
}

// One profiler per process: a second one, while the first lives, is refused.
void expectSecondProfilerRefused(const profiler::ProfilerOptions& o) {
  bool second_refused = false;
  try {
    profiler::Profiler again(o);
  } catch (const profiler::ProfilerError& e) {
    second_refused = true;
    fmt::print("     second profiler: {}\n", e.what());
  }
  expectTrue("a second profiler in the same process is refused", second_refused);
}

// The plan's four tasks (ids 10 to 13), on plan stream 3.
std::vector<profiler::TaskInfo> stepTasks() {
  std::vector<profiler::TaskInfo> tasks;
  const char* names[] = {"add.fwd", "gelu.fwd", "copy.d2d", "zero.b"};
  for (int i = 0; i < 4; ++i) {
    profiler::TaskInfo t;
    t.task_id = 10 + i;
    t.name = names[i];
    t.op = names[i];
    t.phase = tr::Phase::Forward;
    t.layer = i;
    t.stream = 3;  // a plan stream index that is not 0, to see it carried
    tasks.push_back(t);
  }
  return tasks;
}

struct CapturedStep {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
};

// Steps 1 to 3: the step captured as a CUDA Graph (in step 1) and replayed
// once per step. The graph is destroyed by the caller, after the profiler's
// finish().
CapturedStep captureAndReplay(profiler::Profiler& p, const Buffers& m, cudaStream_t s) {
  CapturedStep c;
  p.stepBegin(1);
  p.captureBegin();
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  issueStep(p, m, s);
  CHECK_CUDA(cudaStreamEndCapture(s, &c.graph));
  p.captureEnd();
  CHECK_CUDA(cudaGraphInstantiate(&c.exec, c.graph, 0));
  for (int step = 1; step <= 3; ++step) {
    if (step > 1) p.stepBegin(step);
    CHECK_CUDA(cudaGraphLaunch(c.exec, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    p.stepEnd(step);
  }
  return c;
}

// Profiles one kernel outside any task, an eager step (step 0) and three
// graph replays into o.path; returns the profiler's summary.
profiler::ProfileSummary profileSteps(const profiler::ProfilerOptions& o, const Buffers& m, cudaStream_t s) {
  profiler::Profiler p(o);
  expectSecondProfilerRefused(o);
  p.addTasks(stepTasks());
  p.nameStream(3, s, tr::StreamKind::Compute, "compute");

  // Work outside any step and task: must stay unattributed.
  addForward(m.c, m.a, m.b, kN, DType::F32, s);

  p.stepBegin(0);
  issueStep(p, m, s);
  CHECK_CUDA(cudaStreamSynchronize(s));
  p.stepEnd(0);

  const CapturedStep captured = captureAndReplay(p, m, s);
  CHECK_CUDA(cudaGetLastError());
  const profiler::ProfileSummary summary = p.finish();
  fmt::print("     {}\n", profiler::formatSummary(summary));
  CHECK_CUDA(cudaGraphExecDestroy(captured.exec));
  CHECK_CUDA(cudaGraphDestroy(captured.graph));
  return summary;
}

// The stored activities: inside the clock anchors, each task's records
// tagged with it and its stream and layer, the one kernel outside any task
// untagged.
void checkActivities(tr::TraceReader& reader, int64_t run, const profiler::ProfileSummary& summary) {
  std::map<int64_t, int> per_task;
  std::map<int64_t, std::set<int>> streams_of_task;
  int unattributed_kernels = 0, rows = 0, kernels = 0, with_resources = 0;
  bool bad_time = false, layer_carried = true;
  const std::vector<tr::ClockRow> clocks = reader.clocks(run);
  expectTrue("two clock anchors (start, end)", clocks.size() == 2);
  const int64_t t0 = clocks.empty() ? 0 : clocks.front().realtime_ns;
  const int64_t t1 = clocks.empty() ? 0 : clocks.back().realtime_ns;
  reader.forEachActivity(run, [&](const tr::ActivityRow& a) {
    ++rows;
    if (a.start_ns < t0 || a.end_ns > t1 || a.end_ns < a.start_ns) bad_time = true;
    if (a.kind == tr::ActivityKind::Kernel) {
      ++kernels;
      // Every kernel uses registers; its geometry says how many, and its shared memory.
      with_resources += a.geometry && a.geometry->registers_per_thread > 0 && a.geometry->shared_memory_bytes >= 0;
    }
    if (a.task_id >= 0) {
      ++per_task[a.task_id];
      streams_of_task[a.task_id].insert(a.stream);
      if (a.layer != int(a.task_id - 10)) layer_carried = false;
    } else if (a.kind == tr::ActivityKind::Kernel) {
      ++unattributed_kernels;
    }
  });
  fmt::print("     {} activity rows; per task:", rows);
  for (auto [t, n] : per_task) fmt::print(" {}:{}", t, n);
  fmt::print("\n");
  for (int64_t t = 10; t <= 13; ++t)
    expectTrue(fmt::format("task {}: 1 eager + 3 replayed records attributed (got {})", t, per_task[t]),
               per_task[t] == 4);
  expectTrue("every attributed record is on the task's plan stream (3)",
             streams_of_task[10] == std::set<int>{3} && streams_of_task[11] == std::set<int>{3});
  expectTrue("task layer carried into the rows", layer_carried);
  expectTrue(fmt::format("exactly one kernel outside any task stays unattributed (got {})", unattributed_kernels),
             unattributed_kernels == 1);
  expectTrue(fmt::format("graph replays: 6 kernels seen with graph node ids (got {})", summary.graph_kernels),
             summary.graph_kernels == 6);
  expectTrue("every record lies between the start and end clock anchors", !bad_time);
  expectTrue(fmt::format("every kernel's registers and shared memory per block stored ({} of {})", with_resources,
                         kernels),
             kernels > 0 && with_resources == kernels);
  expectTrue("no dropped records", summary.dropped_records == 0);
}

// The run's other records: steps, task ranges, the dropped-record stat and
// the plan's tasks.
void checkRunRecords(tr::TraceReader& reader, int64_t run) {
  const auto steps = reader.steps(run);
  expectTrue(fmt::format("4 steps stored (got {})", steps.size()), steps.size() == 4);
  int task_ranges = 0;
  for (const auto& r : reader.ranges(run))
    if (r.depth == 1 && r.name == "gelu.fwd") ++task_ranges;
  expectTrue(fmt::format("task ranges: gelu.fwd issued twice (eager, capture) (got {})", task_ranges),
             task_ranges == 2);
  bool dropped_stat = false;
  for (const auto& st : reader.stats(run))
    if (st.name == "cupti.dropped_records") dropped_stat = st.value == 0;
  expectTrue("dropped-record stat stored (0)", dropped_stat);
  expectTrue("plan tasks stored", reader.planTasks(run).size() == 4);
}

// Power and SM clock through NVML (profiler/power_sampler.h): counters in
// the trace with plausible values, or a note saying why there are none.
void checkPowerCounters(tr::TraceReader& reader, int64_t run, const profiler::ProfileSummary& summary) {
  if (summary.power_note.empty()) {
    int watts = 0, clocks_mhz = 0;
    bool plausible = true;
    for (const auto& c : reader.counters(run)) {
      if (c.name == "gpu.power_w") ++watts, plausible = plausible && c.value > 0 && c.value < 2000;
      if (c.name == "gpu.sm_clock_mhz") ++clocks_mhz, plausible = plausible && c.value > 0 && c.value < 5000;
    }
    expectTrue(fmt::format("power and SM clock counters stored ({} and {}), values plausible", watts, clocks_mhz),
               watts >= 1 && clocks_mhz >= 1 && plausible);
  } else {
    fmt::print("SKIP power counters: {}\n", summary.power_note);
  }
}

// The power sampler on its own: on a GPU that does not exist, and on
// device 0 for 60 ms.
void checkPowerSampler() {
  // A bus id no GPU has: nothing sampled, and a note that says why.
  profiler::PowerSampler none("0000:ff:1f.7", 2, [] { return uint64_t(0); });
  expectTrue("a sampler for a GPU that does not exist samples nothing and says why",
             !none.active() && !none.note().empty() && none.stop().empty());
  char bus[32] = {};
  CHECK_CUDA(cudaDeviceGetPCIBusId(bus, int(sizeof bus), 0));
  uint64_t tick = 0;
  profiler::PowerSampler sampler(bus, 2, [&tick] { return ++tick; });
  if (sampler.active()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    const std::vector<profiler::PowerSample> got = sampler.stop();
    bool ordered = true, plausible = true;
    for (size_t i = 0; i < got.size(); ++i) {
      ordered = ordered && (i == 0 || got[i].ts > got[i - 1].ts);
      plausible = plausible && got[i].power_w > 0 && got[i].sm_clock_mhz > 0 &&
                  (i == 0 || got[i].energy_mj < 0 || got[i].energy_mj >= got[i - 1].energy_mj);
    }
    // Each sample is four NVML calls (about 6 ms on an H200), so fewer
    // than 30 arrive.
    expectTrue(fmt::format("sampling every 2 ms for 60 ms: {} samples (at least 5), in order", got.size()),
               got.size() >= 5 && ordered);
    expectTrue("every sample has power and clock, and the energy counter never falls", plausible);
    expectTrue("stop() a second time hands over nothing more", sampler.stop().empty());
  } else {
    fmt::print("SKIP power sampler: {}\n", sampler.note());
  }
}

}  // namespace

int main() {
  requireGpus(1);
  const std::string path = (std::filesystem::temp_directory_path() /
                            fmt::format("tandem_profiler_collector_{}.sqlite", getpid())).string();
  std::filesystem::remove(path);

  CHECK_CUDA(cudaSetDevice(0));
  const Buffers m = makeBuffers();
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  profiler::ProfilerOptions o;
  o.path = path;
  o.run.name = "collector test";
  o.buffer_bytes = 4 << 20;
  o.buffers = 4;
  const profiler::ProfileSummary summary = profileSteps(o, m, s);

  tr::TraceReader reader(path);
  const int64_t run = reader.defaultRunId();
  checkActivities(reader, run, summary);
  checkRunRecords(reader, run);
  checkPowerCounters(reader, run, summary);
  checkPowerSampler();

  for (float* q : {m.a, m.b, m.c, m.d}) cudaFree(q);
  cudaStreamDestroy(s);
  std::filesystem::remove(path);
  return finish();
}
