// bench/sim_vs_real: how well the simulator predicts real runs it has not
// seen. In one invocation on a GPU machine:
//   1. every job below runs for real with profiling (`tandem run --profile`);
//   2. a calibration is fitted from the jobs marked `calibrate` only;
//   3. every job is simulated with that calibration, and without any
//      (roofline defaults), on the measured machine's topology, its GPUs at
//      the relative speeds the calibration runs measured (--equal-ranks:
//      all at one speed);
//   4. each simulation is compared with its real run task by task.
// Prints one JSON line per job, a table, and the rank order of the jobs by
// step time both ways (Kendall tau). With --max-dp 1 and --multi-rank-from
// FILE, the calibration written keeps FILE's multi-rank keys (a refit of
// the compute keys on one GPU, calibrate_merge.h).
//
//   bench_sim_vs_real TANDEM_BINARY OUT_DIR [--topology h200x2-nv18] [--steps 30] [--reuse-real] [--max-dp N]
//                     [--equal-ranks] [--multi-rank-from FILE] [--jobs gpt2-124m|scale|unseen|long]
//                     [--calibration FILE] [--no-run] [--only NAME,...] [--set KEY=VALUE]...
// (--no-run: analyse the real traces already in OUT_DIR, without a GPU.)
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "engine/plan/planner.h"
#include "simulator/calibrate/calibrate.h"
#include "simulator/calibrate/calibrate_merge.h"
#include "simulator/calibrate/calibrate_overlap.h"
#include "simulator/cost/calibration_lookup.h"
#include "simulator/cost/cost_model.h"
#include "simulator/pipeline/trace_output.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology_presets.h"
#include "traces/analysis/analysis.h"
#include "traces/analysis/compare.h"
#include "traces/store/trace_reader.h"
#include "traces/store/trace_writer.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

struct BenchJob {
  std::string name;
  std::vector<std::string> sets;  // --set overrides of the default job
  bool calibrate;                 // used to fit the calibration
};

// GPT-2 shapes at data parallel 1 and 2. The calibration jobs span the
// axes (micro-batch, sequence length, hidden size, data parallel); every
// held-out job has a combination none of them has, inside that span. The
// calibration jobs run on one compute stream, so that every kernel is
// measured alone; two more (base-mb16-wgrad and dp2-mb16-wgrad, the default
// schedule) measure how kernels of the weight-gradient stream share the GPU,
// with each other and with the gradient collectives. The held-out
// jobs run the default schedule (weight gradients on their own stream).
std::vector<BenchJob> benchJobs() {
  const std::string alone = "schedule.weight_gradient_stream=false";
  return {
      {"base-mb8", {"training.micro_batch=8", "parallel.data_parallel=1", alone}, true},
      {"base-mb16", {"training.micro_batch=16", "parallel.data_parallel=1", alone}, true},
      {"base-mb16-wgrad", {"training.micro_batch=16", "parallel.data_parallel=1"}, true},
      {"dp2-mb8", {"training.micro_batch=8", "parallel.data_parallel=2", alone}, true},
      {"dp2-mb16", {"training.micro_batch=16", "parallel.data_parallel=2", alone}, true},
      {"dp2-mb16-wgrad", {"training.micro_batch=16", "parallel.data_parallel=2"}, true},
      {"seq256-mb32", {"training.micro_batch=32", "model.seq_len=256", "parallel.data_parallel=1", alone}, true},
      {"hidden1280-mb4",
       {"training.micro_batch=4", "model.hidden=1280", "model.heads=20", "model.layers=6", "parallel.data_parallel=1",
        alone},
       true},
      // The LM head in 16 groups of 1024 tokens: the smallest LM-head
      // shapes; 8 groups (2048 tokens) lie between them and base-mb8's.
      {"lmhead16-mb16",
       {"training.micro_batch=16", "schedule.lm_head_chunks=16", "parallel.data_parallel=1", alone},
       true},
      {"seq512-mb16", {"training.micro_batch=16", "model.seq_len=512", "parallel.data_parallel=1"}, false},
      {"lmhead8-mb16", {"training.micro_batch=16", "schedule.lm_head_chunks=8", "parallel.data_parallel=1"}, false},
      {"lmhead4-mb16-selective",
       {"training.micro_batch=16", "schedule.lm_head_chunks=4", "recompute.policy=selective",
        "parallel.data_parallel=1"},
       false},
      {"mb12", {"training.micro_batch=12", "parallel.data_parallel=1"}, false},
      {"layers6-mb8", {"training.micro_batch=8", "model.layers=6", "parallel.data_parallel=1"}, false},
      {"hidden1024-mb8",
       {"training.micro_batch=8", "model.hidden=1024", "model.heads=16", "model.layers=8", "parallel.data_parallel=1"},
       false},
      {"recompute-full-mb8", {"training.micro_batch=8", "recompute.policy=full", "parallel.data_parallel=1"}, false},
      {"dp2-mb12", {"training.micro_batch=12", "parallel.data_parallel=2"}, false},
      {"dp2-mb16-selective",
       {"training.micro_batch=16", "parallel.data_parallel=2", "recompute.policy=selective"},
       false},
  };
}

// Override lists of the scale and unseen sets: `a` then `b`; one rank;
// the Llama family's vocabulary and untied embeddings.
std::vector<std::string> join(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
std::vector<std::string> oneRank(const std::vector<std::string>& sets) {
  return join({"parallel.data_parallel=1"}, sets);
}
const std::vector<std::string> kLlama = {"model.family=llama", "model.vocab=32000", "model.tied_embeddings=false"};

// Jobs far from any calibration run (issue 49's held-out set): GPT-2 350M
// to 1.5B, Llama 1B to 3B and Llama 2 7B with four of its layers; sequences
// 512-8192, micro-batches 1-32, accumulation, recompute policies and mixes,
// LM-head groups, both families. None is a calibration job: they are
// simulated with the calibration given by --calibration (the sweep's).
std::vector<BenchJob> scaleJobs() {
  const auto with = oneRank;
  const std::vector<std::string>& llama = kLlama;
  const std::vector<std::string> gpt350 = {"model.hidden=1024", "model.heads=16", "model.layers=24"};
  const std::vector<std::string> gpt774 = {"model.hidden=1280", "model.heads=20", "model.layers=36"};
  const std::vector<std::string> gpt1558 = {"model.hidden=1600", "model.heads=25", "model.layers=48"};
  const std::vector<std::string> llama1b =
      join(llama, {"model.hidden=2048", "model.heads=32", "model.kv_heads=8", "model.mlp_ratio=4", "model.layers=16"});
  const std::vector<std::string> tinyllama = join(
      llama, {"model.hidden=2048", "model.heads=16", "model.kv_heads=4", "model.mlp_ratio=2.75", "model.layers=22"});
  const std::vector<std::string> llama3b = join(llama, {"model.hidden=3072", "model.heads=24", "model.kv_heads=8",
                                                        "model.mlp_ratio=2.6666666667", "model.layers=28"});
  const std::vector<std::string> llama7b_4l = join(
      llama, {"model.hidden=4096", "model.heads=32", "model.kv_heads=32", "model.mlp_ratio=2.6875", "model.layers=4"});
  return {
      {"gpt2-350m-mb8", with(join(gpt350, {"training.micro_batch=8"})), false},
      {"gpt2-350m-mb32-seq512", with(join(gpt350, {"training.micro_batch=32", "model.seq_len=512"})), false},
      {"gpt2-350m-mb2-seq4096",
       with(join(gpt350, {"training.micro_batch=2", "model.seq_len=4096", "recompute.policy=selective"})), false},
      {"gpt2-774m-mb4-selective", with(join(gpt774, {"training.micro_batch=4", "recompute.policy=selective"})), false},
      {"gpt2-774m-mb16-seq512-lmhead4",
       with(join(gpt774, {"training.micro_batch=16", "model.seq_len=512", "schedule.lm_head_chunks=4"})), false},
      {"gpt2-1.5b-mb4-accum2-full",
       with(join(gpt1558, {"training.micro_batch=4", "training.grad_accum=2", "recompute.policy=full"})), false},
      {"gpt2-1.5b-mb1-seq8192-mix",
       with(join(gpt1558, {"training.micro_batch=1", "model.seq_len=8192", "recompute.policy=selective",
                           "recompute.layers={0: full, 1: full, 2: full, 3: none}"})),
       false},
      {"llama-1b-mb4-seq2048", with(join(llama1b, {"training.micro_batch=4", "model.seq_len=2048"})), false},
      {"tinyllama-mb8-seq2048-full",
       with(join(tinyllama, {"training.micro_batch=8", "model.seq_len=2048", "recompute.policy=full"})), false},
      {"llama-3b-mb1-seq8192-selective",
       with(join(llama3b, {"training.micro_batch=1", "model.seq_len=8192", "recompute.policy=selective"})), false},
      {"llama2-7b-4l-mb1-seq4096-accum2",
       with(join(llama7b_4l, {"training.micro_batch=1", "model.seq_len=4096", "training.grad_accum=2"})), false},
      {"llama2-7b-4l-mb32-seq512-lmhead2",
       with(join(llama7b_4l, {"training.micro_batch=32", "model.seq_len=512", "schedule.lm_head_chunks=2"})), false},
  };
}

// Unseen jobs checked after the scale set was settled (fiftieth session):
// widths no grid point has (GPT-2 1536 and 2560, Llama 2560 with grouping
// 5), sequences past the grid's longest for heads 64 wide, a grouped Llama
// 2 13B width and Llama 3 8B at sequence 16384. Simulated with
// --calibration, like the scale set.
std::vector<BenchJob> unseenJobs() {
  const auto with = oneRank;
  const std::vector<std::string>& llama = kLlama;
  return {
      {"gpt2-2.7b-8l-mb4",
       with({"model.hidden=2560", "model.heads=40", "model.layers=8", "training.micro_batch=4"}), false},
      {"gpt2-w1536-12l-mb8",
       with({"model.hidden=1536", "model.heads=24", "model.layers=12", "training.micro_batch=8"}), false},
      {"gpt2-124m-seq16k", with({"model.layers=6", "model.seq_len=16384", "training.micro_batch=1"}), false},
      {"llama-w2560-8l-mb4-seq2048",
       with(join(llama, {"model.hidden=2560", "model.heads=20", "model.kv_heads=4", "model.mlp_ratio=2.75",
                         "model.layers=8", "model.seq_len=2048", "training.micro_batch=4"})),
       false},
      {"llama-13b-gqa-2l-mb2-seq4096",
       with(join(llama, {"model.hidden=5120", "model.heads=40", "model.kv_heads=8", "model.mlp_ratio=2.7",
                         "model.layers=2", "model.seq_len=4096", "training.micro_batch=2"})),
       false},
      {"llama3-8b-4l-mb1-seq16k-sel",
       with({"model.family=llama", "model.vocab=128256", "model.tied_embeddings=false", "model.hidden=4096",
             "model.heads=32", "model.kv_heads=8", "model.mlp_ratio=3.5", "model.layers=4", "model.seq_len=16384",
             "training.micro_batch=1", "recompute.policy=selective"}),
       false},
  };
}

// Long sequences (fifty-first session): past the grid's longest sequence
// for each head width and grouping (GPT-2 124M and a Llama 1B at 65536,
// heads 64 wide; Llama 3 8B's layer at 65536 and Llama 3.2 3B's at 32768,
// grouped heads 128 wide), where the reading extrapolates along the
// sequence, and GPT-2 1.5B at 16384, between grid points. Simulated with
// --calibration, like the scale set.
std::vector<BenchJob> longJobs() {
  const auto with = oneRank;
  const std::vector<std::string>& llama = kLlama;
  return {
      {"gpt2-124m-4l-seq64k", with({"model.layers=4", "model.seq_len=65536", "training.micro_batch=1"}), false},
      {"gpt2-1.5b-4l-seq16k",
       with({"model.hidden=1600", "model.heads=25", "model.layers=4", "model.seq_len=16384", "training.micro_batch=1",
             "recompute.policy=selective"}),
       false},
      {"llama-1b-2l-seq64k",
       with(join(llama, {"model.hidden=2048", "model.heads=32", "model.kv_heads=8", "model.mlp_ratio=4",
                         "model.layers=2", "model.seq_len=65536", "training.micro_batch=1"})),
       false},
      {"llama-3b-4l-seq32k",
       with(join(llama, {"model.hidden=3072", "model.heads=24", "model.kv_heads=8", "model.mlp_ratio=2.6666666667",
                         "model.layers=4", "model.seq_len=32768", "training.micro_batch=1"})),
       false},
      {"llama3-8b-2l-seq64k",
       with(join(llama, {"model.hidden=4096", "model.heads=32", "model.kv_heads=8", "model.mlp_ratio=3.5",
                         "model.layers=2", "model.seq_len=65536", "training.micro_batch=1"})),
       false},
  };
}

std::vector<BenchJob> jobSet(const std::string& set) {
  if (set == "scale") return scaleJobs();
  if (set == "unseen") return unseenJobs();
  if (set == "long") return longJobs();
  return benchJobs();
}

JobSpec jobOf(const BenchJob& b) {
  JobSpec base = defaultJob();
  return parseJob(base.yaml, b.name, b.sets);
}

std::string shellQuote(const std::string& s) { return "'" + s + "'"; }

struct Outcome {
  std::string name;
  bool calibrate = false;
  int dp = 1;
  double real_ms = 0, sim_ms = 0, uncal_ms = 0;
  double real_overlap = 0, sim_overlap = 0, real_exposed_ms = 0, sim_exposed_ms = 0;
  // Op kinds holding >= 5% of the real step's kernel time: their share and
  // median per-task error (issue 49's per-op target).
  struct OpRow {
    std::string op;
    double share_pct = 0, median_abs_pct = 0, total_error_pct = 0;
    // Split by whether the task ran alone in both runs or beside another
    // stream's GPU work in either (traces::OpError): the cost model alone,
    // or it with kernel sharing.
    int64_t alone_tasks = 0, beside_tasks = 0;
    double alone_median_abs_pct = 0, beside_median_abs_pct = 0;
  };
  std::vector<OpRow> big_ops;
  double errPct() const { return 100.0 * (sim_ms - real_ms) / real_ms; }
  double uncalErrPct() const { return 100.0 * (uncal_ms - real_ms) / real_ms; }
};

// Simulates the job and writes the run into `path`; returns the run id.
int64_t simulateInto(const JobSpec& job, const sim::Topology& topo, const sim::Calibration& cal,
                     const std::string& path, const std::string& label) {
  const Plan plan = buildPlan(job);
  const sim::RooflineCostModel cost(sim::RooflineParams::defaults(), cal);
  sim::SimOptions opts;
  opts.collective_calibration = cal.collectives;
  opts.nccl.call_floor_ns = 0;  // the executor replays a CUDA Graph: no per-call host overhead
  const sim::SimResult r = sim::simulatePlan(plan, topo, cost, opts);
  traces::TraceWriter w(path);
  sim::SimTraceOptions to;
  to.run_name = job.name + " " + label;
  return sim::writeSimulationTrace(w, plan, topo, r, to);
}

double kendallTau(const std::vector<double>& a, const std::vector<double>& b) {
  int concordant = 0, discordant = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = i + 1; j < a.size(); ++j) {
      const double s = (a[i] - a[j]) * (b[i] - b[j]);
      if (s > 0) ++concordant;
      else if (s < 0) ++discordant;
    }
  const int pairs = int(a.size() * (a.size() - 1) / 2);
  return pairs ? double(concordant - discordant) / pairs : 1.0;
}

// One collective of a data-parallel job: its time in the real run (the
// median per step, steps after the first, shortest over the ranks: early
// ranks wait inside the NCCL kernel) beside the simulated one.
struct CollectivePoint {
  std::string job;
  int64_t task_id = 0;
  int64_t bytes = 0;
  double real_us = 0, sim_us = 0;
  double errPct() const { return real_us > 0 ? 100.0 * (sim_us - real_us) / real_us : 0.0; }
};

std::vector<CollectivePoint> collectivePoints(const std::string& job, traces::TraceReader& real, int64_t real_run,
                                              traces::TraceReader& simr, int64_t sim_run) {
  std::map<int, std::vector<int64_t>> step_starts;
  for (const auto& st : real.steps(real_run)) step_starts[st.rank].push_back(st.start_ns);
  for (auto& [rank, v] : step_starts) std::sort(v.begin(), v.end());
  std::map<int64_t, std::map<int, std::vector<double>>> per_task;  // task -> rank -> durations
  std::map<int64_t, int64_t> bytes;
  for (const auto& c : real.collectives(real_run)) {
    const auto& starts = step_starts[c.rank];
    const auto pos = std::upper_bound(starts.begin(), starts.end(), c.start_ns);
    if (pos - starts.begin() < 2) continue;  // before or in the first step
    per_task[c.task_id][c.rank].push_back(double(c.end_ns - c.start_ns));
    bytes[c.task_id] = c.bytes;
  }
  // The simulated one likewise on the rank that arrived last (ranks of
  // different speed wait for each other there too).
  std::map<int64_t, double> sim_ns;
  for (const auto& c : simr.collectives(sim_run)) {
    const double ns = double(c.end_ns - c.start_ns);
    auto [it, fresh] = sim_ns.try_emplace(c.task_id, ns);
    if (!fresh) it->second = std::min(it->second, ns);
  }
  std::vector<CollectivePoint> out;
  for (auto& [task, ranks] : per_task) {
    double best = 0;
    for (auto& [rank, v] : ranks) {
      std::sort(v.begin(), v.end());
      const double med = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
      best = best == 0 ? med : std::min(best, med);
    }
    const auto it = sim_ns.find(task);
    if (it == sim_ns.end()) continue;
    out.push_back({job, task, bytes[task], best / 1e3, it->second / 1e3});
  }
  return out;
}

double medianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Options {
  std::string tandem_bin;
  fs::path out_dir;
  std::string topology = "h200x2-nv18";
  int steps = 30;
  bool reuse = false;  // keep real traces already in OUT_DIR (analyse again without a GPU)
  int max_dp = 1 << 20;
  bool equal_ranks = false;  // simulate every GPU at one speed (the measured speeds are not applied)
  std::string multi_rank_from;  // a calibration whose multi-rank keys the written one keeps
  std::vector<std::string> only;  // --only NAME,...: these jobs of the set alone
  bool no_run = false;  // run nothing: analyse the jobs whose real traces are in OUT_DIR, leave out the rest
  std::string jobs = "gpt2-124m";  // the job set: gpt2-124m (benchJobs), scale, unseen or long (their *Jobs)
  std::string calibration;      // simulate with this calibration instead of fitting one
  std::vector<std::string> sets;  // --set KEY=VALUE: added to every job (run and simulated alike)
};

// What follows the program's name (the usage line and ArgReader's).
constexpr const char* kUsage =
    "TANDEM_BINARY OUT_DIR [--topology NAME] [--steps N] [--reuse-real] [--max-dp N] [--equal-ranks] "
    "[--multi-rank-from FILE] [--jobs gpt2-124m|scale|unseen|long] [--calibration FILE] [--no-run] [--only NAME,...] "
    "[--set KEY=VALUE]...";

// TANDEM_BINARY OUT_DIR and the flags after them (a bad flag exits with status 2).
Options parseOptions(int argc, char** argv) {
  Options o;
  o.tandem_bin = argv[1];
  o.out_dir = argv[2];
  tandem::bench::ArgReader args("bench_sim_vs_real", kUsage, argc, argv, 3);
  while (args.next()) {
    if (args.is("--reuse-real")) o.reuse = true;
    else if (args.is("--topology")) o.topology = args.text();
    else if (args.is("--steps")) o.steps = int(args.integer(1, 100000));
    else if (args.is("--max-dp")) o.max_dp = int(args.integer(1, 1 << 20));
    else if (args.is("--equal-ranks")) o.equal_ranks = true;
    else if (args.is("--multi-rank-from")) o.multi_rank_from = args.text();
    else if (args.is("--jobs")) o.jobs = args.text();
    else if (args.is("--no-run")) o.no_run = o.reuse = true;
    else if (args.is("--only")) {
      const std::string list = args.text();
      for (size_t from = 0;;) {
        const size_t comma = list.find(',', from);
        o.only.push_back(list.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
        if (comma == std::string::npos) break;
        from = comma + 1;
      }
    }
    else if (args.is("--calibration")) o.calibration = args.text();
    else if (args.is("--set")) {
      // Traces recorded by an older tandem: its defaults, e.g.
      // recompute.rerun=needed for full recompute before the option existed.
      const std::string kv = args.text();
      if (kv.find('=') == std::string::npos || kv.front() == '=') args.fail("--set takes KEY=VALUE, not '" + kv + "'");
      o.sets.push_back(kv);
    }
    else args.unknown();
  }
  return o;
}

// --max-dp: leave out the jobs of more ranks (a machine with fewer GPUs);
// the summary then covers the jobs that ran.
std::vector<BenchJob> jobsUpTo(int max_dp, const std::string& set, const std::vector<std::string>& extra) {
  std::vector<BenchJob> jobs;
  for (BenchJob b : jobSet(set)) {
    b.sets.insert(b.sets.end(), extra.begin(), extra.end());
    if (jobOf(b).parallel.data_parallel > max_dp) {
      fmt::print(stderr, "job {} left out (--max-dp {})\n", b.name, max_dp);
      continue;
    }
    jobs.push_back(b);
  }
  return jobs;
}

// --multi-rank-from: checked before any run (calibrate_merge.h). Reads the
// file's text into `yaml`; false, having said why, when it cannot serve.
bool readMultiRankBase(const std::string& multi_rank_from, const std::vector<BenchJob>& jobs, std::string& yaml) {
  for (const BenchJob& b : jobs)
    if (b.calibrate && jobOf(b).parallel.data_parallel > 1) {
      fmt::print(stderr, "bench_sim_vs_real: --multi-rank-from keeps the multi-rank keys of another calibration, so "
                         "the calibration jobs must have one rank: add --max-dp 1\n");
      return false;
    }
  std::ifstream base(multi_rank_from);
  std::ostringstream text;
  text << base.rdbuf();
  yaml = text.str();
  try {
    sim::parseCalibration(yaml, multi_rank_from);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_sim_vs_real: --multi-rank-from: {}\n", base ? e.what() : "cannot read the file");
    return false;
  }
  return true;
}

// 1. Real runs, profiled (kept from an earlier invocation with --reuse-real).
// A job that fails is named with its log and left out of `jobs`; false when
// one did.
bool runRealJobs(const Options& o, std::vector<BenchJob>& jobs) {
  std::vector<BenchJob> ran;
  for (const BenchJob& b : jobs) {
    const fs::path trace = o.out_dir / (b.name + ".real.sqlite");
    if (o.reuse && fs::exists(trace)) {
      ran.push_back(b);
      continue;
    }
    fs::remove(trace);
    std::string cmd = fmt::format("{} run default --steps {} --profile --out {}", shellQuote(o.tandem_bin), o.steps,
                                  shellQuote(trace.string()));
    for (const auto& s : b.sets) cmd += " --set " + shellQuote(s);
    cmd += " > " + shellQuote((o.out_dir / (b.name + ".log")).string()) + " 2>&1";
    fmt::print(stderr, "real run {}\n", b.name);
    if (std::system(cmd.c_str()) != 0) {
      fmt::print(stderr, "real run {} failed; see {}; left out\n", b.name, (o.out_dir / (b.name + ".log")).string());
      continue;
    }
    ran.push_back(b);
  }
  const bool all = ran.size() == jobs.size();
  jobs = std::move(ran);
  return all;
}

// 2. Calibration from the calibration subset; empty, having said why, when
// --multi-rank-from's keys cannot be kept.
std::optional<sim::CalibrationResult> fitCalibration(const Options& o, const std::vector<BenchJob>& jobs,
                                                     const sim::Topology& topo, const std::string& multi_rank_yaml) {
  std::vector<sim::CalibrationInput> inputs;
  for (const BenchJob& b : jobs)
    if (b.calibrate) inputs.push_back({(o.out_dir / (b.name + ".real.sqlite")).string(), -1});
  sim::CalibrationResult cal = sim::calibrateFromRuns(inputs);
  if (const auto refit = sim::refitOverlapBySimulation(cal, inputs, topo))
    fmt::print(stderr, "kernel overlap efficiency {:.3f} from the timelines, {:.3f} by simulation ({} runs, {:.2f}%)\n",
               refit->from_timelines, refit->efficiency, refit->runs, refit->mean_abs_error_pct);
  if (!o.multi_rank_from.empty()) {
    // One-rank runs refresh what they measure; the rest stays as measured
    // on more GPUs.
    try {
      sim::keepMultiRankKeys(cal, multi_rank_yaml, o.multi_rank_from);
    } catch (const std::exception& e) {
      fmt::print(stderr, "bench_sim_vs_real: --multi-rank-from: {}\n", e.what());
      return std::nullopt;
    }
  }
  return cal;
}

// Writes the calibration as YAML (nothing when the file cannot be opened:
// loading it afterwards says so).
void writeCalibration(const sim::CalibrationResult& cal, const std::string& cal_path) {
  std::FILE* f = std::fopen(cal_path.c_str(), "w");
  if (f) {
    std::fputs(sim::calibrationToYaml(cal).c_str(), f);
    std::fclose(f);
  }
}

// The machine as the calibration runs measured it: its GPUs' relative
// speeds (rank r on device r), unless --equal-ranks. The roofline
// simulations keep the topology as it is.
sim::Topology measuredTopology(const sim::Topology& topo, const sim::CalibrationResult& cal, bool equal_ranks) {
  sim::Topology measured = topo;
  if (!equal_ranks)
    for (const auto& [rank, speed] : cal.rank_speed)
      if (rank < int(measured.devices.size())) {
        measured.devices[size_t(rank)].speed = speed;
        fmt::print(stderr,
                   "device {} at speed {:.4f} of device 0 (forward kernels of {} multi-rank calibration runs)\n",
                   measured.devices[size_t(rank)].name, speed, cal.rank_speed_runs);
      }
  return measured;
}

// 3 and 4 for one job: simulated with the calibration and without it, each
// compared with the real run; a data-parallel job's collectives are added
// to `collectives`.
Outcome simulateAndCompare(const BenchJob& b, const fs::path& out_dir, const sim::Topology& measured,
                           const sim::Topology& topo, const sim::Calibration& loaded,
                           std::vector<CollectivePoint>& collectives) {
  const JobSpec job = jobOf(b);
  const std::string real_path = (out_dir / (b.name + ".real.sqlite")).string();
  const std::string sim_path = (out_dir / (b.name + ".sim.sqlite")).string();
  fs::remove(sim_path);
  const int64_t cal_run = simulateInto(job, measured, loaded, sim_path, "(calibrated)");
  const int64_t uncal_run = simulateInto(job, topo, {}, sim_path, "(roofline defaults)");
  traces::TraceReader real(real_path);
  traces::TraceReader simr(sim_path);
  const int64_t real_run = real.defaultRunId();
  const traces::RunComparison c = traces::compareRuns(real, real_run, simr, cal_run);
  const traces::RunComparison u = traces::compareRuns(real, real_run, simr, uncal_run);
  if (job.parallel.data_parallel > 1)
    for (const CollectivePoint& p : collectivePoints(b.name, real, real_run, simr, cal_run)) collectives.push_back(p);
  Outcome o;
  o.name = b.name;
  o.calibrate = b.calibrate;
  o.dp = job.parallel.data_parallel;
  o.real_ms = c.a.step_ns / 1e6;
  o.sim_ms = c.b.step_ns / 1e6;
  o.uncal_ms = u.b.step_ns / 1e6;
  o.real_overlap = c.a.overlap_pct;
  o.sim_overlap = c.b.overlap_pct;
  o.real_exposed_ms = c.a.exposed_comm_ns / 1e6;
  o.sim_exposed_ms = c.b.exposed_comm_ns / 1e6;
  double kernel_ns = 0;
  for (const traces::OpError& e : c.by_op) kernel_ns += e.a_total_ns;
  for (const traces::OpError& e : c.by_op)
    if (kernel_ns > 0 && e.a_total_ns >= 0.05 * kernel_ns)
      o.big_ops.push_back({e.op, 100.0 * e.a_total_ns / kernel_ns, e.median_abs_pct,
                           e.a_total_ns > 0 ? 100.0 * (e.b_total_ns - e.a_total_ns) / e.a_total_ns : 0.0,
                           e.alone_tasks, e.beside_tasks, e.alone_median_abs_pct, e.beside_median_abs_pct});
  return o;
}

// One job's JSON line.
void printOutcomeJson(const Outcome& o) {
  fmt::print("{{\"bench\":\"sim_vs_real\",\"job\":\"{}\",\"calibration_job\":{},\"dp\":{},\"real_ms\":{:.3f},"
             "\"sim_ms\":{:.3f},\"error_pct\":{:.2f},\"uncalibrated_ms\":{:.3f},\"uncalibrated_error_pct\":{:.2f},"
             "\"real_overlap_pct\":{:.1f},\"sim_overlap_pct\":{:.1f},\"real_exposed_ms\":{:.3f},"
             "\"sim_exposed_ms\":{:.3f}}}\n",
             o.name, o.calibrate, o.dp, o.real_ms, o.sim_ms, o.errPct(), o.uncal_ms, o.uncalErrPct(), o.real_overlap,
             o.sim_overlap, o.real_exposed_ms, o.sim_exposed_ms);
}

// The step times of all jobs and of the held-out ones, for the summary.
struct StepStats {
  std::vector<double> real_ms, sim_ms, held_out_err, held_real_ms, held_sim_ms;
  double worst_overlap_pp = 0;
};

// Prints the table of step times and overlap per job.
StepStats printStepTable(const std::vector<Outcome>& outcomes) {
  fmt::print("\n{:<22} {:>5} {:>3} {:>9} {:>9} {:>8} {:>12} {:>8} {:>14}\n", "job", "calib", "dp", "real ms", "sim ms",
             "error%", "roofline ms", "error%", "overlap r/s %");
  StepStats st;
  for (const Outcome& o : outcomes) {
    fmt::print("{:<22} {:>5} {:>3} {:>9.3f} {:>9.3f} {:>+8.2f} {:>12.3f} {:>+8.2f} {:>7.1f}/{:<6.1f}\n", o.name,
               o.calibrate ? "yes" : "no", o.dp, o.real_ms, o.sim_ms, o.errPct(), o.uncal_ms, o.uncalErrPct(),
               o.real_overlap, o.sim_overlap);
    st.real_ms.push_back(o.real_ms);
    st.sim_ms.push_back(o.sim_ms);
    if (o.dp > 1) st.worst_overlap_pp = std::max(st.worst_overlap_pp, std::fabs(o.sim_overlap - o.real_overlap));
    if (!o.calibrate) {
      st.held_out_err.push_back(std::fabs(o.errPct()));
      st.held_real_ms.push_back(o.real_ms);
      st.held_sim_ms.push_back(o.sim_ms);
    }
  }
  return st;
}

// Per held-out job, the op kinds holding >= 5% of its kernel time: share,
// median per-task error and the kind's summed error, the medians of its
// tasks that ran alone and beside another stream's GPU work; the worst
// medians.
double printOpTable(const std::vector<Outcome>& outcomes) {
  fmt::print("\n{:<34} {:<20} {:>8} {:>14} {:>12} {:>14} {:>14}\n", "held-out job", "op kind (>= 5%)", "share%",
             "median |err|%", "sum err%", "alone", "beside");
  double worst = 0, worst_alone = 0, worst_beside = 0;
  int kinds = 0, over_10 = 0, alone_over_10 = 0;
  auto split = [](int64_t n, double median) { return n == 0 ? std::string("-") : fmt::format("{:.2f} ({})", median, n); };
  for (const Outcome& o : outcomes) {
    if (o.calibrate) continue;
    for (const Outcome::OpRow& r : o.big_ops) {
      fmt::print("{:<34} {:<20} {:>8.1f} {:>14.2f} {:>+12.2f} {:>14} {:>14}\n", o.name, r.op, r.share_pct,
                 r.median_abs_pct, r.total_error_pct, split(r.alone_tasks, r.alone_median_abs_pct),
                 split(r.beside_tasks, r.beside_median_abs_pct));
      fmt::print("{{\"bench\":\"sim_vs_real\",\"job\":\"{}\",\"op\":\"{}\",\"share_pct\":{:.2f},"
                 "\"median_abs_error_pct\":{:.2f},\"sum_error_pct\":{:.2f},\"alone_tasks\":{},"
                 "\"alone_median_abs_error_pct\":{:.2f},\"beside_tasks\":{},\"beside_median_abs_error_pct\":{:.2f}}}\n",
                 o.name, r.op, r.share_pct, r.median_abs_pct, r.total_error_pct, r.alone_tasks,
                 r.alone_median_abs_pct, r.beside_tasks, r.beside_median_abs_pct);
      worst = std::max(worst, r.median_abs_pct);
      if (r.alone_tasks > 0) worst_alone = std::max(worst_alone, r.alone_median_abs_pct);
      if (r.beside_tasks > 0) worst_beside = std::max(worst_beside, r.beside_median_abs_pct);
      ++kinds;
      over_10 += r.median_abs_pct > 10;
      alone_over_10 += r.alone_tasks > 0 && r.alone_median_abs_pct > 10;
    }
  }
  fmt::print("worst median per-task error of an op kind holding >= 5% of a held-out job: {:.2f}% ({} of {} kinds "
             "over 10%); of its tasks alone in both runs: {:.2f}% ({} over 10%), beside another stream's work: {:.2f}%\n",
             worst, over_10, kinds, worst_alone, alone_over_10, worst_beside);
  return worst;
}

// Collectives of 1 MiB and more: how many, how many within 5%, the worst.
struct CollectiveStats {
  int big = 0, big_within = 0, held_big = 0, held_big_within = 0;
  double big_worst = 0, held_big_worst = 0;
};

// Collectives of the data-parallel jobs, 1 MiB and more: all of them, and
// those of the held-out jobs alone (what the accuracy target speaks of).
CollectiveStats printCollectiveTable(const std::vector<CollectivePoint>& collectives,
                                     const std::vector<Outcome>& outcomes) {
  std::set<std::string> calibration_jobs;
  for (const Outcome& o : outcomes)
    if (o.calibrate) calibration_jobs.insert(o.name);
  CollectiveStats st;
  fmt::print("\n{:<22} {:>6} {:>10} {:>10} {:>10} {:>8}\n", "collective of job", "task", "MiB", "real us", "sim us",
             "error%");
  for (const CollectivePoint& p : collectives) {
    fmt::print("{:<22} {:>6} {:>10.2f} {:>10.1f} {:>10.1f} {:>+8.1f}\n", p.job, p.task_id, double(p.bytes) / (1 << 20),
               p.real_us, p.sim_us, p.errPct());
    if (p.bytes >= (int64_t(1) << 20)) {
      ++st.big;
      st.big_within += std::fabs(p.errPct()) <= 5.0;
      st.big_worst = std::max(st.big_worst, std::fabs(p.errPct()));
      if (!calibration_jobs.count(p.job)) {
        ++st.held_big;
        st.held_big_within += std::fabs(p.errPct()) <= 5.0;
        st.held_big_worst = std::max(st.held_big_worst, std::fabs(p.errPct()));
      }
    }
  }
  return st;
}

// The summary line and its JSON object: held-out error, rank order (Kendall
// tau), overlap and collectives.
void printSummary(const StepStats& s, const CollectiveStats& c, size_t jobs) {
  const double median = medianOf(s.held_out_err);
  const double worst = s.held_out_err.empty() ? 0 : *std::max_element(s.held_out_err.begin(), s.held_out_err.end());
  const double tau = kendallTau(s.real_ms, s.sim_ms);
  const double tau_held = kendallTau(s.held_real_ms, s.held_sim_ms);
  fmt::print("\nheld-out jobs ({}): median |error| {:.2f}%, max {:.2f}%; Kendall tau {:.3f} over them, "
             "{:.3f} over all {} jobs; overlap within {:.1f} points on the data-parallel jobs; "
             "collectives >= 1 MiB: {} of {} within 5% in the held-out jobs (worst {:.1f}%), {} of {} with the "
             "calibration jobs (worst {:.1f}%)\n",
             s.held_out_err.size(), median, worst, tau_held, tau, jobs, s.worst_overlap_pp, c.held_big_within,
             c.held_big, c.held_big_worst, c.big_within, c.big, c.big_worst);
  fmt::print("{{\"bench\":\"sim_vs_real\",\"summary\":true,\"held_out_jobs\":{},"
             "\"held_out_median_abs_error_pct\":{:.2f},\"held_out_max_abs_error_pct\":{:.2f},"
             "\"kendall_tau_held_out\":{:.3f},\"kendall_tau_all\":{:.3f},\"jobs\":{},"
             "\"worst_overlap_diff_pp\":{:.1f},\"collectives_1mib\":{},\"collectives_1mib_within_5pct\":{},"
             "\"collectives_1mib_worst_pct\":{:.1f},\"held_out_collectives_1mib\":{},"
             "\"held_out_collectives_1mib_within_5pct\":{},\"held_out_collectives_1mib_worst_pct\":{:.1f}}}\n",
             s.held_out_err.size(), median, worst, tau_held, tau, jobs, s.worst_overlap_pp, c.big, c.big_within,
             c.big_worst, c.held_big, c.held_big_within, c.held_big_worst);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: bench_sim_vs_real {}\n", kUsage);
    return 2;
  }
  const Options o = parseOptions(argc, argv);
  fs::create_directories(o.out_dir);
  if (o.jobs != "gpt2-124m" && o.jobs != "scale" && o.jobs != "unseen" && o.jobs != "long") {
    fmt::print(stderr, "bench_sim_vs_real: --jobs takes gpt2-124m, scale, unseen or long, not '{}'\n", o.jobs);
    return 2;
  }
  if (o.jobs != "gpt2-124m" && o.calibration.empty()) {
    fmt::print(stderr, "bench_sim_vs_real: --jobs {} has no calibration jobs: give --calibration FILE\n", o.jobs);
    return 2;
  }
  std::vector<BenchJob> jobs = jobsUpTo(o.max_dp, o.jobs, o.sets);
  if (!o.only.empty())
    jobs.erase(std::remove_if(jobs.begin(), jobs.end(),
                              [&](const BenchJob& b) {
                                return std::find(o.only.begin(), o.only.end(), b.name) == o.only.end();
                              }),
               jobs.end());
  if (o.no_run)
    jobs.erase(std::remove_if(jobs.begin(), jobs.end(),
                              [&](const BenchJob& b) {
                                const bool missing = !fs::exists(o.out_dir / (b.name + ".real.sqlite"));
                                if (missing) fmt::print(stderr, "job {} left out: no real trace (--no-run)\n", b.name);
                                return missing;
                              }),
               jobs.end());
  std::string multi_rank_yaml;
  if (!o.multi_rank_from.empty() && !readMultiRankBase(o.multi_rank_from, jobs, multi_rank_yaml)) return 2;
  const bool all_ran = runRealJobs(o, jobs);
  if (jobs.empty()) return 1;

  const sim::Topology topo = sim::loadTopology(o.topology);
  // --calibration: simulate with it as it is (no job fits one); else fit
  // from the calibration jobs.
  sim::Calibration loaded;
  sim::Topology measured = topo;
  if (!o.calibration.empty()) {
    loaded = sim::loadCalibration(sim::calibrationPath(o.calibration));
  } else {
    const std::optional<sim::CalibrationResult> cal = fitCalibration(o, jobs, topo, multi_rank_yaml);
    if (!cal) return 1;
    const std::string cal_path = (o.out_dir / "calibration.yaml").string();
    writeCalibration(*cal, cal_path);
    loaded = sim::loadCalibration(cal_path);
    measured = measuredTopology(topo, *cal, o.equal_ranks);
  }

  // 3 and 4. Simulate and compare.
  std::vector<Outcome> outcomes;
  std::vector<CollectivePoint> collectives;
  for (const BenchJob& b : jobs) {
    outcomes.push_back(simulateAndCompare(b, o.out_dir, measured, topo, loaded, collectives));
    printOutcomeJson(outcomes.back());
  }

  const StepStats step_stats = printStepTable(outcomes);
  printOpTable(outcomes);
  const CollectiveStats collective_stats = printCollectiveTable(collectives, outcomes);
  printSummary(step_stats, collective_stats, outcomes.size());
  return all_ran ? 0 : 1;  // a job that failed to run was named above
}
