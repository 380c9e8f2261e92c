// tandem simulate JOB --topology NAME|FILE [--calibration NAME|FILE] [--out SIM.sqlite] [--json]:
// replay the job's plan on a simulated machine and print step time,
// breakdown, overlap, exposed communication and peak memory per rank.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/command_registry.h"
#include "cli/job_options.h"
#include "cli/plan_cache_option.h"
#include "cli/number_checks.h"
#include "simulator/pipeline/checkpoint_cost.h"
#include "simulator/pipeline/simulate_job.h"
#include "simulator/replay/replay.h"

namespace tandem::cli {
namespace {

struct SimulateOptions {
  JobOptions job;
  PlanCacheOption plan_cache;
  std::string topology;
  std::string calibration = "auto";
  std::string out;
  bool json = false;
  std::string symmetry = "auto";
  std::string algorithm;
  std::string protocol;
  bool nvls = false;
  bool inter_host_tree = true;
  bool tree_flows = false;
  int64_t call_floor_ns = -1;
  std::string kernel_sharing;  // empty: the calibration's, else first_holds
  int max_rank_rows = 16;
  int checkpoint_every = 0;        // --checkpoint-every: estimate what checkpoints cost (0: no)
  double checkpoint_gbps = 2.0;    // --checkpoint-gbps: a host's storage write rate
};

double ms(int64_t ns) { return double(ns) / 1e6; }
double gib(int64_t bytes) { return double(bytes) / double(int64_t(1) << 30); }

// The flags as the pipeline's settings; a bad spelling is one line naming it.
sim::SimulateSettings settingsOf(const SimulateOptions& o) {
  sim::SimulateSettings s;
  s.topology = o.topology;
  s.calibration = o.calibration;
  try {
    s.symmetry = sim::parseSymmetrySetting(o.symmetry);
    s.algorithm = sim::parseAlgorithmSetting(o.algorithm);
    s.protocol = sim::parseProtocolSetting(o.protocol);
    s.kernel_sharing = sim::parseKernelSharingSetting(o.kernel_sharing);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("simulate: ") + e.what());
  }
  s.nvls = o.nvls;
  s.inter_host_tree = o.inter_host_tree;
  s.tree_flows = o.tree_flows;
  s.call_floor_ns = o.call_floor_ns;
  return s;
}

nlohmann::json toJson(const Plan& plan, const sim::Topology& topo, const sim::SimResult& r,
                      const std::vector<sim::SimRankSummary>& sums, const std::string& out) {
  nlohmann::json j;
  j["job"] = plan.job.name;
  j["topology"] = topo.name;
  j["world_size"] = plan.world_size;
  j["step_ns"] = r.step_ns;
  j["symmetric"] = r.stats.symmetric;
  j["symmetry_note"] = r.stats.symmetry_note;
  j["events"] = r.stats.events;
  j["flows"] = r.stats.flows;
  j["collectives"] = r.stats.collectives;
  if (!out.empty()) j["trace"] = out;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& s : sums) {
    ranks.push_back({{"rank", s.rank},
                     {"step_ns", s.step_ns},
                     {"compute_ns", s.compute_ns},
                     {"comm_ns", s.comm_ns},
                     {"overlap_ns", s.overlap_ns},
                     {"overlap_pct", s.overlap_pct},
                     {"exposed_comm_ns", s.exposed_comm_ns},
                     {"exposed_p2p_ns", s.exposed_p2p_ns},
                     {"idle_ns", s.idle_ns},
                     {"forward_ns", s.forward_ns},
                     {"backward_ns", s.backward_ns},
                     {"recompute_ns", s.recompute_ns},
                     {"optimizer_ns", s.optimizer_ns},
                     {"data_ns", s.data_ns},
                     {"peak_memory_bytes", s.peak_memory_bytes}});
  }
  j["ranks"] = ranks;
  return j;
}

void printText(const Plan& plan, const sim::Topology& topo, const sim::SimResult& r,
               const std::vector<sim::SimRankSummary>& sums, const std::string& calibration_used,
               const std::string& kernel_time_sources, const SimulateOptions& o) {
  fmt::print("simulated {} on {} ({} ranks{})\n", plan.job.name, topo.name, plan.world_size,
             r.stats.symmetric ? ", one representative per program" : "");
  fmt::print("kernel times     {}\n", calibration_used);
  // Its clauses (where from; how well read) one under the other.
  std::string sources = kernel_time_sources;
  for (size_t at = sources.find("; "); at != std::string::npos; at = sources.find("; ", at))
    sources.replace(at, 2, "\n                 ");
  if (!sources.empty()) fmt::print("                 {}\n", sources);
  const double tokens = double(plan.job.tokensPerStep());
  fmt::print("step time        {:.3f} ms ({:.0f} tokens/s)\n", ms(r.step_ns),
             r.step_ns > 0 ? tokens / (double(r.step_ns) * 1e-9) : 0.0);
  if (plan.summary.model_flops_per_token > 0 && r.step_ns > 0) {
    double peak = 0;
    for (const auto& rank : r.ranks) peak += topo.devices[size_t(rank.device)].bf16_flops;
    const double mfu = plan.summary.model_flops_per_token * tokens / (double(r.step_ns) * 1e-9) / peak;
    fmt::print("MFU (PaLM)       {:.1f}%\n", mfu * 100);
  }
  const sim::SimRankSummary& s0 = sums.front();
  fmt::print("breakdown rank 0 forward {:.3f} ms, backward {:.3f} ms, recompute {:.3f} ms, optimizer {:.3f} ms, "
             "data {:.3f} ms\n",
             ms(s0.forward_ns), ms(s0.backward_ns), ms(s0.recompute_ns), ms(s0.optimizer_ns), ms(s0.data_ns));
  // Pipelines: the exposed part of the stages' sends and receives (the
  // bubble, a stage waiting for its neighbour) in a column of its own.
  const bool pipeline = plan.job.parallel.pipeline_parallel > 1;
  fmt::print("{:>6} {:>10} {:>11} {:>9} {:>9} {:>12}{} {:>9} {:>10}\n", "rank", "step_ms", "compute_ms", "comm_ms",
             "overlap%", "exposed_ms", pipeline ? fmt::format(" {:>12}", "p2p_wait_ms") : "", "idle_ms", "peak_GiB");
  int shown = 0;
  for (const auto& s : sums) {
    if (shown++ >= o.max_rank_rows) {
      fmt::print("   ... {} more ranks (--json lists all)\n", sums.size() - size_t(o.max_rank_rows));
      break;
    }
    fmt::print("{:>6} {:>10.3f} {:>11.3f} {:>9.3f} {:>9.1f} {:>12.3f}{} {:>9.3f} {:>10.2f}\n", s.rank, ms(s.step_ns),
               ms(s.compute_ns), ms(s.comm_ns), s.overlap_pct, ms(s.exposed_comm_ns),
               pipeline ? fmt::format(" {:>12.3f}", ms(s.exposed_p2p_ns)) : "", ms(s.idle_ns),
               gib(s.peak_memory_bytes));
  }
  fmt::print("{} collectives, {} flows, {} events; {}\n", r.stats.collectives, r.stats.flows, r.stats.events,
             r.stats.symmetry_note);
  if (!o.out.empty()) fmt::print("trace written to {} (run kind simulated)\n", o.out);
}

void runSimulate(const SimulateOptions& o) {
  sim::SimulateRequest request;
  request.job = o.job.load();
  PlanCacheStats plan_stats;
  request.plan = o.plan_cache.plan(request.job, "tandem simulate", &plan_stats);
  request.settings = settingsOf(o);
  request.out_path = o.out;
  // Each warning on stderr as soon as it is known (a calibration's before
  // the simulation), and kept in the JSON document.
  sim::SimulateCallbacks callbacks;
  callbacks.on_warning = [](const std::string& w) { fmt::print(stderr, "tandem simulate: warning: {}\n", w); };
  const sim::SimulateOutcome out = sim::simulateJob(request, callbacks);
  std::optional<sim::CheckpointCostEstimate> ckpt;
  if (o.checkpoint_every > 0) {
    sim::CheckpointCostSettings cs;
    cs.every = o.checkpoint_every;
    cs.host_write_gbps = o.checkpoint_gbps;
    ckpt = sim::estimateCheckpointCost(out.plan, out.topology, out.result, cs);
  }
  if (o.json) {
    nlohmann::json j = toJson(out.plan, out.topology, out.result, out.ranks, o.out);
    j["warnings"] = out.warnings;
    j["calibration"] = out.calibration_used;
    if (!out.kernel_time_sources.empty()) j["kernel_time_sources"] = out.kernel_time_sources;
    j["plan"] = {{"from_cache", plan_stats.from_cache}, {"cache_file", plan_stats.path},
                 {"seconds", plan_stats.seconds}};
    if (ckpt)
      j["checkpoint_cost"] = {{"every", ckpt->every},
                              {"rank_bytes", ckpt->rank_bytes},
                              {"host_bytes", ckpt->host_bytes},
                              {"copy_gbps", ckpt->copy_gbps},
                              {"copy_gbps_assumed", ckpt->copy_gbps_assumed},
                              {"host_write_gbps", o.checkpoint_gbps},
                              {"copy_s", ckpt->copy_s},
                              {"write_s", ckpt->write_s},
                              {"between_s", ckpt->between_s},
                              {"wait_s", ckpt->wait_s},
                              {"per_checkpoint_s", ckpt->per_checkpoint_s},
                              {"per_step_s", ckpt->per_step_s},
                              {"overhead_pct", ckpt->overhead_pct},
                              {"first_setup_s", ckpt->first_setup_s}};
    fmt::print("{}\n", j.dump(2));
  } else {
    printText(out.plan, out.topology, out.result, out.ranks, out.calibration_used, out.kernel_time_sources, o);
    if (ckpt) fmt::print("{}\n", sim::describeCheckpointCost(*ckpt));
    if (plan_stats.from_cache)
      fmt::print("plan read back from the plan cache in {:.2f} s ({})\n", plan_stats.seconds, plan_stats.path);
  }
}

void addSimulateCommand(CLI::App& root) {
  auto o = std::make_shared<SimulateOptions>();
  CLI::App* cmd = root.add_subcommand(
      "simulate", "Replay a job's plan on a simulated machine: step time, breakdown, overlap, exposed "
                  "communication and peak memory per rank; optionally a trace (run kind simulated)");
  o->job.addTo(*cmd, true);
  o->plan_cache.addTo(*cmd);
  cmd->add_option("--topology", o->topology,
                  "preset (h200x2-nv18, dgx-h100, dgx-h200, pcie-4gpu, hgx-a100, <N>xdgx-h100, <N>xdgx-a100, "
                  "<N>xgrand-teton-500w; `tandem topo list`) or topology YAML file")
      ->required();
  cmd->add_option("--calibration", o->calibration,
                  "kernel times: auto (the profile shipped for the topology's GPU, measured by `tandem calibrate "
                  "--sweep`: h200, h100; the roofline defaults with a warning for other GPUs), none (the roofline "
                  "defaults), a calibration YAML (docs/simulator.md) or the name of one that comes with tandem")
      ->type_name("auto|none|NAME|FILE")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "trace file to write (appended as a new run when it exists)")
      ->type_name("SIM.sqlite");
  cmd->add_flag("--json", o->json, "print a JSON document instead of tables");
  cmd->add_option("--symmetric", o->symmetry,
                  "simulate one representative rank per program: auto (when the check passes), on, off")
      ->capture_default_str();
  cmd->add_option("--algorithm", o->algorithm, "force the collective algorithm: ring, tree, nvls");
  cmd->add_option("--protocol", o->protocol, "force the protocol: ll, ll128, simple");
  cmd->add_flag("--nvls", o->nvls, "allow NVLink SHARP all-reduce on NVSwitch machines");
  cmd->add_flag("--inter-host-tree,!--no-inter-host-tree", o->inter_host_tree,
                "allow tree all-reduce across hosts, as NCCL's tuner weighs it (default; --no-inter-host-tree: rings "
                "only)");
  cmd->add_flag("--tree-flows", o->tree_flows,
                "simulate a tree across hosts flow by flow (spine collisions; slow at 1000+ GPUs) instead of in "
                "closed form");
  cmd->add_option("--call-floor-ns", o->call_floor_ns,
                  "shortest time of one collective call (default 20000, host overhead of eager frameworks; 0 for "
                  "CUDA-graph replays)")
      ->check(wholeNumberAtLeast(0));
  cmd->add_option("--kernel-sharing", o->kernel_sharing,
                  "how kernels of two compute streams divide a GPU: first_holds (the one that started first runs "
                  "as alone; default) or fair (processor sharing); overrides the calibration's")
      ->check(CLI::IsMember({"first_holds", "fair"}));
  cmd->add_option("--checkpoint-every", o->checkpoint_every,
                  "also estimate what a checkpoint every N steps costs the steps, as `tandem run` checkpoints "
                  "(copy-out over each GPU's PCIe link, write beside the next N steps at --checkpoint-gbps per host; "
                  "docs/simulator.md)")
      ->check(wholeNumberAtLeast(1));
  cmd->add_option("--checkpoint-gbps", o->checkpoint_gbps,
                  "the storage write rate one host gets, GB/s, for --checkpoint-every (default 2.0: an H100 "
                  "machine's local disk measured 2.2)")
      ->check(numberAboveZero());
  cmd->add_option("--rank-rows", o->max_rank_rows, "ranks listed in the text table")
      ->capture_default_str()
      ->check(wholeNumberAtLeast(0));
  cmd->callback([o] { runSimulate(*o); });
}

const CommandRegistration registration{"simulate", 40, &addSimulateCommand};

}  // namespace
}  // namespace tandem::cli
