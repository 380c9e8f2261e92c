// bench/plan_build: wall time to build and memory-plan the Plan of large
// models for one rank (target: under 1 s each). Prints one JSON line per job.
// Besides the two targets' models: GPT-2 1.5B accumulating 64 micro-batches
// (a step of 64 forward and backward passes) and GPT-2 with 1000 and 8000
// layers (the job check's limit is 8192), where a pass that is quadratic in
// the program's length shows.
//
//   bench_plan_build [REPEATS]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "engine/plan/planner.h"

using namespace tandem;

namespace {

struct Case {
  const char* name;
  int layers, hidden, heads, seq_len, micro_batch;
  int grad_accum = 1;
};

JobSpec jobFor(const Case& c) {
  JobSpec j = defaultJob();
  j.name = c.name;
  j.model.layers = c.layers;
  j.model.hidden = c.hidden;
  j.model.heads = c.heads;
  j.model.seq_len = c.seq_len;
  j.training.micro_batch = c.micro_batch;
  j.training.grad_accum = c.grad_accum;
  j.parallel.data_parallel = 1;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  // One optional argument: how many times each case is built (default 5).
  int repeats = 5;
  if (argc > 2) {
    std::fprintf(stderr, "usage: bench_plan_build [REPEATS]\n");
    return 2;
  }
  if (argc == 2) {
    char* end = nullptr;
    const long n = std::strtol(argv[1], &end, 10);
    if (*argv[1] == 0 || *end != 0 || n < 1 || n > 1000) {
      std::fprintf(stderr, "bench_plan_build: REPEATS is a whole number from 1 to 1000, not '%s'\n", argv[1]);
      return 2;
    }
    repeats = int(n);
  }
  const Case cases[] = {{"gpt2-1.5b", 48, 1600, 25, 1024, 16},
                        {"gpt-96l-12288h", 96, 12288, 96, 2048, 1},
                        {"gpt2-1.5b-accum64", 48, 1600, 25, 1024, 16, 64},
                        {"gpt2-1000l", 1000, 768, 12, 1024, 16},
                        {"gpt2-8000l", 8000, 768, 12, 1024, 16}};
  for (const Case& c : cases)
    for (RecomputePolicy policy : {RecomputePolicy::None, RecomputePolicy::Full}) {
      JobSpec job = jobFor(c);
      job.recompute.policy = policy;
      std::vector<double> ms;
      Plan plan;
      for (int r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        plan = buildPlan(job);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      const RankPlan& rp = plan.programs[0];
      fmt::print(
          "{{\"bench\":\"plan_build\",\"job\":\"{}\",\"grad_accum\":{},\"recompute\":\"{}\",\"parameters\":{},\"tasks\":{},"
          "\"buffers\":{},\"repeats\":{},\"min_ms\":{:.2f},\"median_ms\":{:.2f},\"arena_bytes\":{},"
          "\"lower_bound_bytes\":{},\"arena_over_bound\":{:.4f}}}\n",
          c.name, c.grad_accum, toString(policy), plan.summary.parameters, rp.tasks.size(), rp.buffers.size(), repeats, ms.front(),
          ms[ms.size() / 2], rp.memory.arena_bytes, rp.memory.lower_bound_bytes,
          double(rp.memory.arena_bytes) / double(rp.memory.lower_bound_bytes));
    }
  return 0;
}
