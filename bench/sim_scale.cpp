// bench_sim_scale: how the simulator's cost grows with the GPU count.
//
// GPT-2 1.5B (resources/jobs/gpt2-1.5b.yaml) data parallel over N GPUs of
// <N/8>xdgx-h100 clusters (8 rails of 400 Gb/s InfiniBand, fat tree). For each
// N it plans the job once, then simulates one step with one representative
// rank (symmetric mode) and, up to --full-max GPUs, with every rank simulated.
// Prints one JSON line per (N, mode): wall seconds of the simulation (plan
// and topology building excluded, reported separately), events, events/s,
// flows and the simulated step time.
//
//   bench_sim_scale [--sizes 64,256,1024,4096] [--full-max 1024] [--repeat 1]
#include <fmt/core.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/job.h"
#include "engine/planner.h"
#include "simulator/cost_model.h"
#include "simulator/engine.h"
#include "simulator/topology_presets.h"

namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<int> parseSizes(const char* s) {
  std::vector<int> out;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == 0) {
      if (!cur.empty()) out.push_back(std::atoi(cur.c_str()));
      cur.clear();
      if (*p == 0) break;
    } else {
      cur += *p;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tandem;
  std::vector<int> sizes{64, 256, 1024, 4096};
  int full_max = 1024;
  int repeat = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--sizes")) sizes = parseSizes(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--full-max")) full_max = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeat")) repeat = std::max(1, std::atoi(argv[i + 1]));
    else {
      fmt::print(stderr, "usage: bench_sim_scale [--sizes 64,256,1024,4096] [--full-max N] [--repeat K]\n");
      return 2;
    }
  }
  try {
    const std::string job_text(builtinJobText("gpt2-1.5b"));
    for (int gpus : sizes) {
      auto t0 = std::chrono::steady_clock::now();
      const JobSpec job = parseJob(job_text, "gpt2-1.5b.yaml", {"parallel.data_parallel=" + std::to_string(gpus)});
      const Plan plan = buildPlan(job);
      const double plan_s = secondsSince(t0);
      t0 = std::chrono::steady_clock::now();
      const sim::Topology topo = sim::makeDgxH100Cluster((gpus + 7) / 8);
      const double topo_s = secondsSince(t0);
      const sim::RooflineCostModel cost;
      for (int mode = 0; mode < 2; ++mode) {
        if (mode == 1 && gpus > full_max) continue;
        sim::SimOptions opt;
        opt.symmetry = mode == 0 ? sim::SymmetryMode::On : sim::SymmetryMode::Off;
        double best = 1e300;
        sim::SimResult r;
        for (int k = 0; k < repeat; ++k) {
          t0 = std::chrono::steady_clock::now();
          r = sim::simulatePlan(plan, topo, cost, opt);
          best = std::min(best, secondsSince(t0));
        }
        fmt::print(
            "{{\"bench\":\"sim_scale\",\"gpus\":{},\"mode\":\"{}\",\"wall_s\":{:.4f},\"events\":{},"
            "\"events_per_s\":{:.0f},\"tasks\":{},\"flows\":{},\"collectives\":{},\"rate_recomputations\":{},"
            "\"step_ms\":{:.3f},\"plan_s\":{:.3f},\"topology_s\":{:.3f},\"tasks_per_rank\":{}}}\n",
            gpus, mode == 0 ? "symmetric" : "full", best, r.stats.events,
            best > 0 ? double(r.stats.events) / best : 0.0, r.stats.tasks, r.stats.flows, r.stats.collectives,
            r.stats.rate_recomputations, double(r.step_ns) / 1e6, plan_s, topo_s, plan.programs.front().tasks.size());
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_sim_scale: {}\n", e.what());
    return 1;
  }
  return 0;
}
