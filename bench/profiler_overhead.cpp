// Profiler overhead: GPT-2 124M step time with and without the CUPTI
// profiler, in one invocation on the same GPUs, for 1 and 2 GPUs (one
// process per GPU, NCCL between them, CUDA Graph mode as `tandem run`).
//
//   bench_profiler_overhead [--steps N] [--gpus 1|2|12] [--eager]
//
// For each GPU count the runs alternate plain, profiled, plain, profiled
// (each a fresh set of processes, so the profiler sees the graph captured):
// the overhead compares the medians of the pooled profiled and plain steps.
// Prints one JSON line per run and one summary line per GPU count.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "engine/spec/resources.h"

#ifdef TANDEM_HAVE_PROFILER
#include <unistd.h>

#include "engine/cuda/device.h"
#include "engine/cuda/executor.h"
#include "engine/cuda/launcher.h"
#include "engine/plan/planner.h"
#include "runner/rank_session.h"
#endif

namespace {

struct Args {
  int steps = 100;
  std::vector<int> gpus{1, 2};
  bool eager = false;
  // Child (one rank of a run) only.
  std::string child_mode;  // "plain" or "profiled"
  std::string result;      // rank 0 writes its step times here
  std::string trace;       // profiled: this rank's trace file prefix
};

Args parseArgs(int argc, char** argv) {
  Args a;
  // --child, --result and --trace are how the bench starts its own ranks.
  tandem::bench::ArgReader args("bench_profiler_overhead", "[--steps N] [--gpus 1|2|12] [--eager]", argc, argv);
  while (args.next()) {
    if (args.is("--steps")) a.steps = int(args.integer(1, 1000000));
    else if (args.is("--gpus")) {
      const std::string g = args.text();
      a.gpus.clear();
      for (char c : g) a.gpus.push_back(c - '0');
      for (int n : a.gpus)
        if (n < 1 || n > 8) args.fail("--gpus takes digits 1..8, e.g. 12 for 1 then 2, not '" + g + "'");
      if (a.gpus.empty()) args.fail("--gpus needs at least one digit");
    } else if (args.is("--eager")) a.eager = true;
    else if (args.is("--child")) a.child_mode = args.text();
    else if (args.is("--result")) a.result = args.text();
    else if (args.is("--trace")) a.trace = args.text();
    else args.unknown();
  }
  return a;
}

[[maybe_unused]] double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

#ifdef TANDEM_HAVE_PROFILER
namespace {

using namespace tandem;

// One rank of one run: warm up, time `steps` steps, rank 0 writes the GPU
// milliseconds of each step (and the profile summary) to the result file.
int runChild(const Args& a) {
  const cuda::RankEnvironment env = cuda::rankEnvironment();
  const int world = env.launched ? env.world : 1;
  const int rank = env.launched ? env.rank : 0;
  const int warmup = 10;
  const JobSpec job = loadJobFile(tandem::resourceDir() + "/jobs/gpt2-124m-dp8.yaml",
                                  {fmt::format("parallel.data_parallel={}", world), "training.micro_batch=16",
                                   "training.precision=bf16", fmt::format("training.steps={}", a.steps + warmup)});
  const Plan plan = buildPlan(job);
  // The rank as `tandem run` sets it up (runner/rank_session.h), profiled or not.
  runner::SessionOptions so;
  so.executor.rank = rank;
  so.executor.world = world;
  so.executor.device = rank;
  so.executor.use_graph = !a.eager;
  if (world > 1) so.executor.nccl_id = cuda::shareNcclId(env, 120);
  if (a.child_mode == "profiled") so.profile_path = fmt::format("{}.rank{}.sqlite", a.trace, rank);
  runner::RankSession session(plan, so);
  cuda::CudaExecutor& exec = session.executor();
  std::vector<double> gpu_ms, wall_ms;
  for (int s = 0; s < warmup + a.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    const cuda::GpuStepResult r = exec.step();
    const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s >= warmup) gpu_ms.push_back(r.ms), wall_ms.push_back(wall);
  }
  profiler::ProfileSummary ps;
  if (session.profiler()) ps = session.finishProfile();
  if (rank == 0) {
    const std::string tmp = a.result + ".tmp";
    {
      std::ofstream f(tmp);
      f << ps.dropped_records << ' ' << ps.kernels << ' ' << ps.kernels_attributed << ' ' << ps.nccl_kernels << ' '
        << ps.nccl_attributed << ' ' << ps.records << ' ' << ps.buffers_grown << '\n';
      for (size_t i = 0; i < gpu_ms.size(); ++i) f << gpu_ms[i] << ' ' << wall_ms[i] << '\n';
    }
    std::filesystem::rename(tmp, a.result);
  }
  return 0;
}

struct RunResult {
  std::vector<double> gpu_ms, wall_ms;
  int64_t dropped = 0, kernels = 0, kernels_attributed = 0, nccl = 0, nccl_attributed = 0, records = 0, grown = 0;
};

RunResult runOnce(const Args& a, int gpus, const std::string& mode, const std::string& dir, int index) {
  const std::string result = fmt::format("{}/result{}", dir, index);
  std::vector<std::string> args{"--child", mode, "--steps", std::to_string(a.steps), "--result", result,
                                "--trace", fmt::format("{}/trace{}", dir, index)};
  if (a.eager) args.push_back("--eager");
  if (cuda::launchLocalRanks(gpus, args, 60) != 0)
    throw std::runtime_error(fmt::format("the {} run on {} GPU(s) failed (see above)", mode, gpus));
  std::ifstream f(result);
  RunResult r;
  f >> r.dropped >> r.kernels >> r.kernels_attributed >> r.nccl >> r.nccl_attributed >> r.records >> r.grown;
  double g = 0, w = 0;
  while (f >> g >> w) r.gpu_ms.push_back(g), r.wall_ms.push_back(w);
  if (r.gpu_ms.empty()) throw std::runtime_error("no step times from " + result);
  return r;
}

int runParent(const Args& a) {
  std::string why;
  const int count = cuda::usableGpuCount(&why);
  char tmpl[] = "/tmp/tandem-prof-bench-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("cannot create a temporary folder");
  const std::string dir = tmpl;
  int index = 0;
  for (int gpus : a.gpus) {
    if (count < gpus) {
      fmt::print("{{\"bench\":\"profiler_overhead\",\"gpus\":{},\"skipped\":\"needs {} GPU(s), found {} {}\"}}\n", gpus,
                 gpus, count, why);
      continue;
    }
    std::vector<double> plain_gpu, prof_gpu, plain_wall, prof_wall;
    int64_t dropped = 0, kernels = 0, attributed = 0, nccl = 0, nccl_attr = 0, grown = 0;
    for (const char* mode : {"plain", "profiled", "plain", "profiled"}) {
      const RunResult r = runOnce(a, gpus, mode, dir, index++);
      const bool p = std::string(mode) == "profiled";
      (p ? prof_gpu : plain_gpu).insert((p ? prof_gpu : plain_gpu).end(), r.gpu_ms.begin(), r.gpu_ms.end());
      (p ? prof_wall : plain_wall).insert((p ? prof_wall : plain_wall).end(), r.wall_ms.begin(), r.wall_ms.end());
      if (p) {
        dropped += r.dropped, kernels += r.kernels, attributed += r.kernels_attributed, nccl += r.nccl;
        nccl_attr += r.nccl_attributed, grown += r.grown;
      }
      fmt::print("{{\"bench\":\"profiler_overhead\",\"gpus\":{},\"mode\":\"{}\",\"steps\":{},\"median_gpu_ms\":{:.3f},"
                 "\"median_wall_ms\":{:.3f},\"records\":{},\"dropped_records\":{}}}\n",
                 gpus, mode, r.gpu_ms.size(), median(r.gpu_ms), median(r.wall_ms), r.records, r.dropped);
      std::fflush(stdout);
    }
    const double base = median(plain_gpu), with = median(prof_gpu);
    const double base_w = median(plain_wall), with_w = median(prof_wall);
    fmt::print("{{\"bench\":\"profiler_overhead\",\"summary\":true,\"gpus\":{},\"mode\":\"{}\",\"steps_per_run\":{},"
               "\"plain_median_gpu_ms\":{:.3f},\"profiled_median_gpu_ms\":{:.3f},\"overhead_gpu_pct\":{:.2f},"
               "\"plain_median_wall_ms\":{:.3f},\"profiled_median_wall_ms\":{:.3f},\"overhead_wall_pct\":{:.2f},"
               "\"dropped_records\":{},\"buffers_grown\":{},\"rank0_kernels_attributed\":\"{}/{}\","
               "\"rank0_nccl_attributed\":\"{}/{}\"}}\n",
               gpus, a.eager ? "eager" : "graph", a.steps, base, with, 100 * (with / base - 1), base_w, with_w,
               100 * (with_w / base_w - 1), dropped, grown, attributed, kernels, nccl_attr, nccl);
    std::fflush(stdout);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}

}  // namespace
#endif

int main(int argc, char** argv) {
  try {
    const Args a = parseArgs(argc, argv);
#ifndef TANDEM_HAVE_PROFILER
    fmt::print("{{\"bench\":\"profiler_overhead\",\"skipped\":\"built without the CUPTI profiler\"}}\n");
    return 0;
#else
    return a.child_mode.empty() ? runParent(a) : runChild(a);
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_profiler_overhead: error: %s\n", e.what());
    return 1;
  }
}
