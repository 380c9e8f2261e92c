// bench_sim_scale: how the simulator's cost grows with the GPU count.
//
// GPT-2 1.5B (resources/jobs/gpt2-1.5b.yaml, or the built-in job --job
// names) data parallel over N GPUs of <N/8>xdgx-h100 clusters (8 rails of
// 400 Gb/s InfiniBand, fat tree); with tensor or pipeline parallelism set
// (--set parallel.tensor_parallel=8 ...), N / (tensor x pipeline) replicas. For each
// N it plans the job once, then simulates one step with one representative
// rank (symmetric mode) and, up to --full-max GPUs, with every rank simulated.
// Prints one JSON line per (N, mode): wall seconds of the simulation (plan
// and topology building excluded, reported separately; the best of
// --repeat runs), the thread's CPU seconds (steadier than wall time when
// other processes share the cores), wall microseconds per GPU, events,
// events/s, flows and the simulated step time, plus a digest of the whole result
// (every activity, collective and link byte count, doubles bit for bit), so
// two builds can be checked to simulate identically.
//
//   bench_sim_scale [--sizes 64,256,1024,4096] [--full-max 1024] [--repeat 1]
//                   [--job NAME] [--set key=value]... [--inter-host-tree] [--extra-gpus K]
//
// --set overrides job fields (e.g. comm.bucket_mib=5); --inter-host-tree
// turns on trees between the rails; --extra-gpus K adds K GPUs to
// the world beyond N (ranks on a partly used host: a flat, asymmetric run).
#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_args.h"

#include "engine/plan/planner.h"
#include "engine/spec/job.h"
#include "simulator/cost/calibration_lookup.h"
#include "simulator/cost/cost_model.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology_presets.h"

namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds of this thread: less disturbed than wall time when other
// processes share the cores (it still counts cache and page-fault costs).
double threadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// "64,256,1024": GPU counts, each a whole number from 1 to 1,000,000.
std::vector<int> parseSizes(tandem::bench::ArgReader& args) {
  const std::string list = args.text();
  std::vector<int> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    char* end = nullptr;
    const long n = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != 0 || n < 1 || n > 1000000)
      args.fail("--sizes takes GPU counts separated by commas (e.g. 64,256,1024), not '" + list + "'");
    out.push_back(int(n));
    at = comma + 1;
  }
  return out;
}

// FNV-1a over the result's fields; doubles by their bits.
struct Digest {
  uint64_t h = 1469598103934665603ull;
  void add(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  void add(double v) { add(std::bit_cast<uint64_t>(v)); }
};

uint64_t resultDigest(const tandem::sim::SimResult& r) {
  Digest d;
  d.add(uint64_t(r.step_ns));
  for (const auto& rank : r.ranks) {
    d.add(uint64_t(rank.rank));
    d.add(uint64_t(rank.represented_by));
    d.add(uint64_t(rank.end_ns));
    d.add(uint64_t(rank.activities.size()));
    for (const auto& a : rank.activities) {
      d.add(uint64_t(a.task));
      d.add(uint64_t(a.start_ns));
      d.add(uint64_t(a.end_ns));
      d.add(uint64_t(a.stream));
    }
  }
  for (const auto& c : r.collectives) {
    d.add(uint64_t(c.group));
    d.add(uint64_t(c.sequence));
    d.add(uint64_t(c.start_ns));
    d.add(uint64_t(c.end_ns));
    d.add(uint64_t(c.algorithm) * 16 + uint64_t(c.protocol));
  }
  for (const auto& l : r.links) {
    d.add(uint64_t(l.link));
    d.add(l.bytes);
    d.add(l.utilization);
  }
  d.add(uint64_t(r.stats.events));
  d.add(uint64_t(r.stats.flows));
  d.add(uint64_t(r.stats.rate_recomputations));
  return d.h;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tandem;
  std::vector<int> sizes{64, 256, 1024, 4096};
  int full_max = 1024;
  int repeat = 1;
  int extra = 0;
  bool inter_host_tree = true;  // NCCL's default choice; --rings-only as before 2026-12-04
  bool tree_flows = false;
  std::string job_name = "gpt2-1.5b";
  std::vector<std::string> overrides;
  std::string calibration;  // empty: the roofline defaults
  tandem::bench::ArgReader args(
      "bench_sim_scale",
      "[--sizes 64,256,1024,4096] [--full-max N] [--repeat K] [--job NAME] [--set k=v]... [--rings-only] "
      "[--tree-flows] [--extra-gpus K] [--calibration NAME|FILE]",
      argc, argv);
  while (args.next()) {
    if (args.is("--rings-only")) inter_host_tree = false;
    else if (args.is("--tree-flows")) tree_flows = true;
    else if (args.is("--sizes")) sizes = parseSizes(args);
    else if (args.is("--set")) overrides.push_back(args.text());
    else if (args.is("--job")) job_name = args.text();
    else if (args.is("--extra-gpus")) extra = int(args.integer(0, 1000000));
    else if (args.is("--full-max")) full_max = int(args.integer(0, 1000000));
    else if (args.is("--repeat")) repeat = int(args.integer(1, 1000));
    else if (args.is("--calibration")) calibration = args.text();
    else args.unknown();
  }
  try {
    const std::string job_text(builtinJobText(job_name));
    if (job_text.empty()) throw std::runtime_error("--job: no built-in job named '" + job_name + "'");
    const std::string source = job_name + ".yaml";
    // GPUs per replica: its tensor-parallel group in each pipeline stage.
    std::vector<std::string> probe_sets = overrides;
    probe_sets.push_back("parallel.data_parallel=1");
    const JobSpec probe = parseJob(job_text, source, probe_sets);
    const int per_replica = probe.parallel.tensor_parallel * probe.parallel.pipeline_parallel;
    for (int n : sizes) {
      const int gpus = n + extra;
      if (gpus % per_replica != 0)
        throw std::runtime_error(fmt::format("{} GPUs do not hold whole replicas of {} GPUs", gpus, per_replica));
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::string> sets = overrides;
      sets.push_back("parallel.data_parallel=" + std::to_string(gpus / per_replica));
      const JobSpec job = parseJob(job_text, source, sets);
      const Plan plan = buildPlan(job);
      const double plan_s = secondsSince(t0);
      t0 = std::chrono::steady_clock::now();
      const sim::Topology topo = sim::makeDgxH100Cluster((gpus + 7) / 8);
      const double topo_s = secondsSince(t0);
      // The shipped profile costs its unmeasured shapes from their
      // neighbours, once per program and kind of device; --calibration shows
      // what that adds to a simulation's time.
      const sim::Calibration cal =
          calibration.empty() ? sim::Calibration{} : sim::loadCalibration(sim::calibrationPath(calibration));
      const sim::RooflineCostModel cost(sim::RooflineParams::defaults(), cal);
      for (int mode = 0; mode < 2; ++mode) {
        if (mode == 1 && gpus > full_max) continue;
        sim::SimOptions opt;
        opt.symmetry = mode == 0 ? (extra ? sim::SymmetryMode::Auto : sim::SymmetryMode::On) : sim::SymmetryMode::Off;
        opt.nccl.inter_host_tree = inter_host_tree;
        opt.nccl.tree_flows = tree_flows;
        double best = 1e300, best_cpu = 1e300;
        sim::SimResult r;
        for (int k = 0; k < repeat; ++k) {
          r = sim::SimResult{};  // the previous result's memory is freed before the run
          t0 = std::chrono::steady_clock::now();
          const double c0 = threadCpuSeconds();
          r = sim::simulatePlan(plan, topo, cost, opt);
          best_cpu = std::min(best_cpu, threadCpuSeconds() - c0);
          best = std::min(best, secondsSince(t0));
        }
        fmt::print(
            "{{\"bench\":\"sim_scale\",\"gpus\":{},\"mode\":\"{}\",\"wall_s\":{:.4f},\"cpu_s\":{:.4f},"
            "\"wall_us_per_gpu\":{:.1f},\"events\":{},"
            "\"events_per_s\":{:.0f},\"tasks\":{},\"flows\":{},\"collectives\":{},\"rate_recomputations\":{},"
            "\"step_ms\":{:.3f},\"plan_s\":{:.3f},\"topology_s\":{:.3f},"
            "\"tasks_per_rank\":{},\"digest\":\"{:016x}\"}}\n",
            gpus, mode == 0 ? "symmetric" : "full", best, best_cpu, best / gpus * 1e6, r.stats.events,
            best > 0 ? double(r.stats.events) / best : 0.0, r.stats.tasks, r.stats.flows, r.stats.collectives,
            r.stats.rate_recomputations, double(r.step_ns) / 1e6, plan_s, topo_s, plan.programs.front().tasks.size(),
            resultDigest(r));
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_sim_scale: {}\n", e.what());
    return 1;
  }
  return 0;
}
