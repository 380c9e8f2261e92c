// bench_energy_by_op: where a GPT-2 124M step's energy goes, by kind of work
// (micro-batch 16, sequence 1024, bf16, AdamW, the default plan), on one GPU.
// At the power cap a step takes the energy it needs divided by the cap
// (docs/benchmarks.md), so the joules of each kind of work, not its time
// alone, say what a faster kernel would buy.
//
// First whole steps (CUDA Graph, queued ahead) for about --seconds, then
// each kind of task (matmul, attention_bwd, ...) replayed alone, its step's
// worth of tasks over and over for about --seconds (CudaExecutor::
// replayTasks, eager launches without the plan's events), then the idle GPU.
// Power comes from NVML's energy counter between its updates (about every
// 100 ms), so each window spans several; time from the host's clock around
// each window, which ends when the GPU is done. Per kind: ms per step's worth, mean power, joules per step and the
// joules above the idle power. One JSON object per line; the last line
// compares the kinds' sum with the whole step.
//
// A kind replayed alone runs at the clock its own power allows (below the
// cap, the top clock), so its joules are those of that clock; they rank the
// kinds, they do not add up to a capped step exactly.
//
// --kind NAME (repeatable) replays only those kinds (the names it prints:
// matmul, attention_bwd, ...) and --rounds N replays them N times in turns,
// each printed with its round: a kernel change measured on the kinds it
// touches, a few seconds per round instead of the whole list.
//
//   bench_energy_by_op [--seconds S] [--kind NAME]... [--rounds N] [--set KEY=VALUE]...
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_args.h"
#include "bench/gpu_bench.h"
#include "engine/spec/resources.h"

#ifdef TANDEM_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/cuda/executor.h"
#include "engine/plan/planner.h"
#include "profiler/power_sampler.h"
#endif

namespace {

uint64_t hostNs() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

#ifdef TANDEM_HAVE_CUDA
double medianClock(const std::vector<tandem::profiler::PowerSample>& samples, uint64_t t0, uint64_t t1) {
  std::vector<double> mhz;
  for (const auto& s : samples)
    if (s.ts >= t0 && s.ts <= t1 && s.sm_clock_mhz > 0) mhz.push_back(s.sm_clock_mhz);
  if (mhz.empty()) return -1;
  std::sort(mhz.begin(), mhz.end());
  return mhz[mhz.size() / 2];
}

struct Window {
  std::string kind;
  uint64_t t0 = 0, t1 = 0;
  double gpu_ms = 0;  // per step's worth
  int reps = 0;
  int round = 0;
};

// Each kind of task that issues work (a task fused into a GEMM's
// epilogue issues none: its work is the GEMM's), and how many per step.
std::map<tandem::OpKind, int> kindsOfWork(const tandem::Plan& plan, const tandem::cuda::CudaExecutor& ex) {
  using tandem::OpKind;
  std::map<OpKind, int> kinds;
  const auto& tasks = plan.programs[0].tasks;
  for (size_t i = 0; i < tasks.size(); ++i)
    if (tasks[i].op != OpKind::LoadBatch && !tasks[i].collective && ex.issuesWork(int(i))) ++kinds[tasks[i].op];
  return kinds;
}

// False, having named the kinds there are, when a --kind is not one of them.
bool knownKinds(const std::vector<std::string>& only, const std::map<tandem::OpKind, int>& kinds) {
  for (const std::string& name : only) {
    const bool known = std::any_of(kinds.begin(), kinds.end(),
                                   [&](const auto& k) { return tandem::toString(k.first) == name; });
    if (!known) {
      std::string names;
      for (const auto& k : kinds) names += (names.empty() ? "" : ", ") + std::string(tandem::toString(k.first));
      fmt::print(stderr, "bench_energy_by_op: --kind {}: this plan has no such kind of work (it has {})\n", name,
                 names);
      return false;
    }
  }
  return true;
}

// Whole steps: a first short run finds the step time, then enough steps
// for the window; the clock is at the cap after the first ~0.1 s.
Window wholeSteps(tandem::cuda::CudaExecutor& ex, double seconds) {
  ex.run(20);
  const uint64_t probe0 = hostNs();
  ex.run(10);
  const double step_s = double(hostNs() - probe0) * 1e-9 / 10;
  const int steps = std::max(10, int(seconds / step_s));
  Window w{"whole step", hostNs()};
  ex.run(steps);
  w.t1 = hostNs();
  w.reps = steps;
  w.gpu_ms = double(w.t1 - w.t0) * 1e-6 / steps;  // wall between step ends: the GPU is never idle
  return w;
}

// One kind of task alone, a step's worth of its tasks over and over.
Window replayAlone(tandem::cuda::CudaExecutor& ex, tandem::OpKind op, int count, int round, double seconds) {
  using tandem::OpKind;
  // Kernels that index with the batch's tokens or targets get the batch
  // loaded again before them: by the step's end the arena has reused
  // those buffers.
  const bool indexes = op == OpKind::Embedding || op == OpKind::EmbeddingBwd || op == OpKind::CrossEntropy ||
                       op == OpKind::CrossEntropyBwd;
  auto pick = [op, indexes](const tandem::Task& t) { return t.op == op || (indexes && t.op == OpKind::LoadBatch); };
  // A step's worth once to warm up, three times to size the window.
  ex.replayTasks(pick, 1);
  const uint64_t w0 = hostNs();
  ex.replayTasks(pick, 3);
  const double one_s = std::max(1e-6, double(hostNs() - w0) * 1e-9 / 3);
  const int reps = std::max(3, int(seconds / one_s));
  // Time per step's worth is the window's wall time (replayTasks waits
  // for the GPU at both ends); where launches are slower than the
  // kernels it includes the gaps, at idle power.
  Window w{std::string(tandem::toString(op)), hostNs()};
  ex.replayTasks(pick, reps);
  w.t1 = hostNs();
  w.reps = reps;
  w.round = round;
  w.gpu_ms = double(w.t1 - w.t0) * 1e-6 / reps;
  fmt::print(stderr, "bench_energy_by_op: {} ({} tasks per step) {} times\n", w.kind, count, reps);
  return w;
}

// The idle GPU.
Window idle(double seconds) {
  Window w{"idle", hostNs()};
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  w.t1 = hostNs();
  return w;
}

// One JSON line per window (the idle one, the last, gives the idle power);
// with every kind replayed, the kinds' sum against the whole step.
void printWindows(const std::vector<Window>& windows, const std::vector<tandem::profiler::PowerSample>& samples,
                  int rounds, bool every_kind) {
  const double idle_w = tandem::profiler::meanPowerFromEnergy(samples, windows.back().t0, windows.back().t1);
  double sum_j = 0, sum_ms = 0, step_j = 0, step_ms = 0;
  for (const Window& w : windows) {
    const double watts = tandem::profiler::meanPowerFromEnergy(samples, w.t0, w.t1);
    const double mhz = medianClock(samples, w.t0, w.t1);
    if (w.kind == "idle") {
      fmt::print("{{\"bench\":\"energy_by_op\",\"kind\":\"idle\",\"power_w\":{:.1f},\"sm_clock_mhz\":{:.0f}}}\n",
                 watts, mhz);
      continue;
    }
    const double joules = watts > 0 ? watts * w.gpu_ms * 1e-3 : -1;
    const double above_idle = watts > 0 && idle_w > 0 ? (watts - idle_w) * w.gpu_ms * 1e-3 : -1;
    const std::string round = rounds > 1 && w.round > 0 ? fmt::format(",\"round\":{}", w.round) : "";
    fmt::print("{{\"bench\":\"energy_by_op\",\"kind\":\"{}\",\"ms_per_step\":{:.3f},\"power_w\":{:.1f},"
               "\"j_per_step\":{:.3f},\"j_above_idle\":{:.3f},\"sm_clock_mhz\":{:.0f},\"reps\":{}{}}}\n",
               w.kind, w.gpu_ms, watts, joules, above_idle, mhz, w.reps, round);
    if (w.kind == "whole step") {
      step_j = joules, step_ms = w.gpu_ms;
    } else if (joules > 0 && w.round == 1) {
      sum_j += joules, sum_ms += w.gpu_ms;
    }
  }
  // The sum over the kinds (of the first round) is the step's only when
  // every kind was replayed.
  if (every_kind)
    fmt::print("{{\"bench\":\"energy_by_op\",\"summary\":\"kinds alone against the whole step\",\"step_ms\":{:.3f},"
               "\"step_j\":{:.3f},\"kinds_ms\":{:.3f},\"kinds_j\":{:.3f},\"idle_w\":{:.1f}}}\n",
               step_ms, step_j, sum_ms, sum_j, idle_w);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  using namespace tandem;
  double seconds = 1.0;
  int rounds = 1;
  std::vector<std::string> sets, only;
  bench::ArgReader args("bench_energy_by_op", "[--seconds S] [--kind NAME]... [--rounds N] [--set KEY=VALUE]...",
                        argc, argv);
  while (args.next()) {
    if (args.is("--seconds")) seconds = args.number(0.3, 60);
    else if (args.is("--kind")) only.push_back(args.text());
    else if (args.is("--rounds")) rounds = int(args.integer(1, 100));
    else if (args.is("--set")) sets.push_back(args.text());
    else args.unknown();
  }
  if (!bench::gpusPresent("energy_by_op")) return 0;
#ifndef TANDEM_HAVE_CUDA
  (void)seconds, (void)rounds;
#else
  try {
    std::vector<std::string> all = {"parallel.data_parallel=1", "training.micro_batch=16", "training.precision=bf16",
                                    "training.steps=100000"};
    all.insert(all.end(), sets.begin(), sets.end());
    const JobSpec job = loadJobFile(tandem::resourceDir() + "/jobs/gpt2-124m-dp8.yaml", all);
    const Plan plan = buildPlan(job);
    cuda::CudaExecutor ex(plan, cuda::ExecutorOptions{});
    char bus[32] = {};
    TANDEM_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), 0));
    profiler::PowerSampler sampler(bus, 2, hostNs);
    if (!sampler.active()) {
      bench::printSkipped("energy_by_op", "no NVML energy counter: " + sampler.note());
      return 0;
    }
    const std::map<OpKind, int> kinds = kindsOfWork(plan, ex);
    if (!knownKinds(only, kinds)) return 2;
    auto selected = [&](OpKind op) {
      return only.empty() || std::find(only.begin(), only.end(), std::string(toString(op))) != only.end();
    };

    std::vector<Window> windows;
    windows.push_back(wholeSteps(ex, seconds));
    for (int round = 1; round <= rounds; ++round) {
      for (const auto& [op, count] : kinds)
        if (selected(op)) windows.push_back(replayAlone(ex, op, count, round, seconds));
    }
    windows.push_back(idle(seconds));
    const std::vector<profiler::PowerSample> samples = sampler.stop();
    printWindows(windows, samples, rounds, only.empty());
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_energy_by_op: {}\n", e.what());
    return 1;
  }
#endif
  return 0;
}
