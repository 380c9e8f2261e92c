// tandem sweep JOB --topology T --vary KEY=V1,V2,... [--vary ...]: every
// combination planned and simulated on all cores, ranked by tokens/s
// (simulator/pipeline/config_sweep.h).
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "cli/command_registry.h"
#include "cli/job_options.h"
#include "engine/spec/resources.h"
#include "simulator/cost/calibration_lookup.h"
#include "simulator/cost/cost_model.h"
#include "simulator/pipeline/config_sweep.h"
#include "simulator/topology/topology_presets.h"
#include "traces/store/atomic_output.h"

namespace tandem::cli {
namespace {

struct SweepCliOptions {
  JobOptions job;
  std::string topology;
  std::string calibration = "auto";
  std::vector<std::string> vary;
  int threads = 0;
  std::string csv;
  bool json = false;
  int top = 20;
  int gpus = 0;
  int global_batch = 0;
};

void writeWhole(const std::string& path, const std::string& text) {
  traces::AtomicOutput output(path);
  {
    std::ofstream f(output.tempPath());
    f << text;
    if (!f) throw std::runtime_error(path + ": cannot write");
  }
  output.commit();
}

// A progress bar on a terminal; nothing when stderr is a file or a pipe.
void showProgress(size_t done, size_t total) {
  if (!isatty(fileno(stderr))) return;
  constexpr int kWidth = 30;
  const int filled = int(kWidth * done / std::max<size_t>(total, 1));
  fmt::print(stderr, "\r[{}{}] {}/{} simulated", std::string(size_t(filled), '#'),
             std::string(size_t(kWidth - filled), ' '), done, total);
  if (done == total) fmt::print(stderr, "\n");
}

void runSweep(const SweepCliOptions& o) {
  sim::ConfigSweepRequest request;
  const JobSpec base = o.job.load();
  request.job_yaml = base.yaml;
  request.job_source = base.source;
  try {
    for (const std::string& v : o.vary) request.axes.push_back(sim::parseSweepAxis(v));
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("sweep: ") + e.what());
  }
  request.settings.topology = o.topology;
  request.settings.calibration = o.calibration;
  // What every combination shares is checked once: a bad topology or
  // calibration is one error, not a table of skipped rows.
  sim::loadTopology(resourcePath(o.topology));
  if (o.calibration != sim::kShippedCalibration && o.calibration != sim::kNoCalibration && !o.calibration.empty())
    sim::loadCalibration(sim::calibrationPath(o.calibration));
  request.threads = o.threads;
  request.gpus = o.gpus;
  request.global_batch = o.global_batch;
  const size_t total = sim::sweepCombinations(request.axes).size();
  if (total > 100000) throw std::runtime_error(fmt::format("sweep: {} combinations is too many (at most 100000)", total));
  fmt::print(stderr, "sweeping {} combinations of {} on {}\n", total, base.name, o.topology);
  std::vector<sim::SweepRow> rows = sim::runConfigSweep(request, showProgress);
  sim::rankSweepRows(rows);
  if (!o.csv.empty()) writeWhole(o.csv, sim::sweepRowsToCsv(rows, request.axes));
  if (o.json) {
    fmt::print("{}\n", sim::sweepRowsToJson(rows, request.axes));
    return;
  }
  size_t simulated = 0;
  for (const sim::SweepRow& r : rows) simulated += r.simulated;
  // Each axis's column as wide as its heading or its widest value.
  std::vector<size_t> widths;
  for (const sim::SweepAxis& a : request.axes) {
    size_t w = std::max<size_t>(sim::sweepAxisLabel(a).size(), 4);
    for (const std::string& v : a.values) w = std::max(w, v.size());
    widths.push_back(w);
  }
  std::string header = fmt::format("{:>4}", "rank");
  for (size_t i = 0; i < request.axes.size(); ++i)
    header += fmt::format(" {:>{}}", sim::sweepAxisLabel(request.axes[i]), widths[i]);
  fmt::print("{} {:>5} {:>11} {:>13} {:>11} {:>7} {:>10} {:>5} {:>12}\n", header, "GPUs", "step ms", "tokens/s",
             "per GPU", "MFU %", "peak GiB", "fits", "exposed ms");
  int shown = 0;
  for (const sim::SweepRow& r : rows) {
    if (!r.simulated || shown >= o.top) continue;
    std::string line = fmt::format("{:>4}", ++shown);
    for (size_t i = 0; i < request.axes.size(); ++i)
      line += fmt::format(" {:>{}}", sim::sweepValue(r, request.axes[i]), widths[i]);
    fmt::print("{} {:>5} {:>11.3f} {:>13.0f} {:>11.0f} {:>7.1f} {:>10.2f} {:>5} {:>12.3f}\n", line, r.world_size,
               r.step_ms, r.tokens_per_s, r.tokens_per_s / std::max(1, r.world_size), r.mfu_pct, r.peak_memory_gib,
               r.fits_memory ? "yes" : "NO", r.exposed_comm_ms);
  }
  if (simulated > size_t(o.top)) fmt::print("   ... {} more (--top, --csv or --json for all)\n", simulated - size_t(o.top));
  // The first few skipped combinations with their reasons; all of them in
  // the CSV and JSON.
  constexpr size_t kSkippedShown = 5;
  size_t skipped = 0;
  for (const sim::SweepRow& r : rows) {
    if (r.simulated || ++skipped > kSkippedShown) continue;
    std::string what;
    for (const std::string& s : r.sets) what += (what.empty() ? "" : " ") + s;
    fmt::print("skipped {}: {}\n", what, r.why_not);
  }
  if (skipped > kSkippedShown) fmt::print("... {} more skipped (--csv or --json for every reason)\n", skipped - kSkippedShown);
  fmt::print("{} of {} combinations simulated (those that fit the GPUs first, each group by tokens/s)\n", simulated,
             rows.size());
  if (simulated == 0) throw std::runtime_error("sweep: no combination could be simulated (reasons above)");
  // The best one that fits, as arguments to paste.
  for (const sim::SweepRow& r : rows) {
    if (!r.simulated || !r.fits_memory) continue;
    std::string args;
    for (const std::string& s : r.sets) args += " --set " + s;
    fmt::print("best that fits:{}\n", args);
    break;
  }
  if (!o.csv.empty()) fmt::print("table written to {}\n", o.csv);
}

void addSweepCommand(CLI::App& root) {
  auto o = std::make_shared<SweepCliOptions>();
  CLI::App* cmd = root.add_subcommand(
      "sweep", "Simulate every combination of some job fields on a topology, on all cores, ranked by tokens/s: "
               "step time, MFU, peak memory per rank, whether it fits, exposed communication");
  o->job.addTo(*cmd, true);
  cmd->add_option("--topology", o->topology, "preset or topology YAML file")->required();
  cmd->add_option("--vary", o->vary, "a job field and its values, KEY=V1,V2,... (repeatable: every combination)")
      ->required()
      ->type_name("KEY=V1,V2");
  cmd->add_option("--calibration", o->calibration, "as tandem simulate's (auto, none, a file or a shipped name)")
      ->capture_default_str();
  cmd->add_option("--gpus", o->gpus,
                  "every combination on this many GPUs: data_parallel = GPUs / (tensor x pipeline x context "
                  "parallel), combinations that do not divide skipped")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--global-batch", o->global_batch,
                  "every combination trains this many sequences per step: grad_accum = global batch / (micro_batch "
                  "x data_parallel), combinations that do not divide skipped (default: the job's accumulation)")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--threads", o->threads, "simulations at once (default: all cores)")->check(CLI::Range(1, 1024));
  cmd->add_option("--csv", o->csv, "also write every row as CSV")->type_name("FILE");
  cmd->add_flag("--json", o->json, "print every row as JSON instead of the table");
  cmd->add_option("--top", o->top, "rows of the table")->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->footer(
      "Examples:\n  tandem sweep llama2-7b --topology 4xdgx-h100 --vary parallel.tensor_parallel=1,2,4,8 \\\n"
      "      --vary training.micro_batch=1,2 --vary recompute.policy=none,selective,full\n"
      "  tandem sweep llama2-70b --topology 128xdgx-h100 --gpus 1024 --global-batch 1024 \\\n"
      "      --vary parallel.tensor_parallel=1,2,4,8 \\\n"
      "      --vary parallel.pipeline_parallel=1,2,4,8 \\\n"
      "      --vary parallel.shard_optimizer+parallel.shard_parameters=false+false,true+false,true+true\n"
      "(fields joined by + move together: one axis of three sharding choices)");
  cmd->callback([o] { runSweep(*o); });
}

const CommandRegistration reg{"sweep", 42, &addSweepCommand};

}  // namespace
}  // namespace tandem::cli
