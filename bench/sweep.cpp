// bench/sweep: issue 52's configuration sweep target — Llama 2 70B on 1024
// GPUs (128 DGX H100), global batch 1024 sequences, over TP {1,2,4,8} (with
// sequence parallelism from 2) x PP {1,2,4,8} x micro-batch {1,2,4} x
// recompute {none, selective, full} x sharding {none, optimizer,
// parameters}: 432 combinations planned and simulated on every core
// (simulator/pipeline/config_sweep.h, the pipeline of `tandem sweep`), in
// at most 120 s on the 2-core CPU machine. Prints one JSON line: the
// counts, the wall time, the best layout that fits and its step.
//
//   bench_sweep [--threads N] [--calibration auto|none|FILE]
#include <fmt/format.h>

#include <chrono>
#include <string>

#include "bench/bench_args.h"
#include "engine/spec/resources.h"
#include "simulator/pipeline/config_sweep.h"

using namespace tandem;

int main(int argc, char** argv) {
  int threads = 0;
  std::string calibration = "auto";
  bench::ArgReader args("bench_sweep", "[--threads N] [--calibration auto|none|FILE]", argc, argv);
  while (args.next()) {
    if (args.is("--threads")) threads = int(args.integer(1, 1024));
    else if (args.is("--calibration")) calibration = args.text();
    else args.unknown();
  }
  const JobSpec job = loadJobFile(resourcePath("jobs/llama2-70b.yaml"));
  sim::ConfigSweepRequest r;
  r.job_yaml = job.yaml;
  r.job_source = job.source;
  r.base_sets = {"parallel.pipeline_chunks=1"};
  for (const char* axis : {"parallel.tensor_parallel+parallel.sequence_parallel=1+false,2+true,4+true,8+true",
                           "parallel.pipeline_parallel=1,2,4,8", "training.micro_batch=1,2,4",
                           "recompute.policy=none,selective,full",
                           "parallel.shard_optimizer+parallel.shard_parameters=false+false,true+false,true+true"})
    r.axes.push_back(sim::parseSweepAxis(axis));
  r.gpus = 1024;
  r.global_batch = 1024;
  r.settings.topology = "128xdgx-h100";
  r.settings.calibration = calibration;
  r.threads = threads;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<sim::SweepRow> rows = sim::runConfigSweep(r);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  sim::rankSweepRows(rows);
  int simulated = 0, fits = 0;
  for (const sim::SweepRow& row : rows) {
    simulated += row.simulated;
    fits += row.simulated && row.fits_memory;
  }
  std::string best = "none";
  double best_ms = 0, best_mfu = 0;
  if (!rows.empty() && rows.front().simulated && rows.front().fits_memory) {
    best.clear();
    for (const std::string& s : rows.front().sets) best += (best.empty() ? "" : " ") + s;
    best_ms = rows.front().step_ms;
    best_mfu = rows.front().mfu_pct;
  }
  fmt::print(R"({{"bench":"sweep","job":"llama2-70b","topology":"128xdgx-h100","gpus":1024,"combinations":{},)"
             R"("simulated":{},"fit":{},"wall_s":{:.1f},"target_s":120,"within_target":{},"best":"{}",)"
             R"("best_step_ms":{:.1f},"best_mfu_pct":{:.1f}}})"
             "\n",
             rows.size(), simulated, fits, wall_s, wall_s <= 120 ? "true" : "false", best, best_ms, best_mfu);
  return 0;
}
