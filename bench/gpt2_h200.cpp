// bench_gpt2_h200: GPT-2 124M training steps (micro-batch 16, sequence 1024,
// bf16, AdamW) on the CUDA executor, and in the same invocation the PyTorch
// peer script (eager and torch.compile), so the ratio is measured side by
// side. Prints one JSON object per line; the last line is the comparison.
// With --scaling (two GPUs) it runs GPU 0 alone, GPU 1 alone and both in
// data parallel, and prints the two-GPU throughput against twice GPU 0's and
// against the sum of each GPU's alone: the GPUs of one machine can differ
// by a few percent in clock, and a data-parallel step waits for the slower.
// With --rounds N tandem and torch.compile are measured N times in turn and
// the median ratio is printed last. --job runs another job file at the same
// micro-batch and precision: resources/jobs/llama-124m.yaml against the
// Llama peer bench/peers/llama_torch.py, which is handed the job's shape.
// --versus KEY=VALUE (repeatable) makes the peer tandem itself with those
// overrides on top (e.g. --set training.precision=fp8 --versus
// training.precision=bf16: FP8 against tandem's own bf16 step), measured in
// turn with the same --rounds alternation.
//
//   bench_gpt2_h200 [--job FILE] [--steps N] [--gpus 1|2] [--scaling] [--peer PATH/gpt2_torch.py [--rounds N]]
//                   [--breakdown] [--ahead-first] [--set KEY=VALUE]... [--versus KEY=VALUE [--rounds N]]...
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/wait.h>

#include "bench/bench_args.h"
#include "bench/gpu_bench.h"
#include "engine/spec/resources.h"

#ifdef TANDEM_HAVE_CUDA
#include <thread>

#include "engine/cuda/device.h"
#include "engine/cuda/executor.h"
#include "engine/cuda/kernels.h"
#include "engine/passes/buckets.h"
#include "engine/plan/planner.h"
#include "runner/rank_session.h"
#endif

namespace {

struct Args {
  std::string job = tandem::resourceDir() + "/jobs/gpt2-124m-dp8.yaml";
  int steps = 30;
  int gpus = 1;
  std::string peer;
  bool breakdown = false;
  bool scaling = false;
  bool ahead_first = false;  // time the steps queued ahead before the step-by-step ones
  int rounds = 1;            // with --peer: tandem and torch.compile measured this many times, in turn
  std::vector<std::string> sets;  // job overrides (--set KEY=VALUE), e.g. comm.bucket_mib=50
  std::vector<std::string> versus;  // the peer is tandem with these overrides on top of `sets`
};

[[maybe_unused]] Args parseArgs(int argc, char** argv) {
  Args a;
  tandem::bench::ArgReader args("bench_gpt2_h200",
                                "[--job FILE] [--steps N] [--gpus 1|2] [--scaling] [--peer FILE [--rounds N]] [--breakdown] "
                                "[--ahead-first] [--set KEY=VALUE]... [--versus KEY=VALUE]...",
                                argc, argv);
  while (args.next()) {
    if (args.is("--steps")) a.steps = int(args.integer(1, 1000000));
    else if (args.is("--gpus")) a.gpus = int(args.integer(1, 8));
    else if (args.is("--job")) a.job = args.text();
    else if (args.is("--peer")) a.peer = args.text();
    else if (args.is("--breakdown")) a.breakdown = true;
    else if (args.is("--scaling")) a.scaling = true;
    else if (args.is("--ahead-first")) a.ahead_first = true;
    else if (args.is("--rounds")) a.rounds = int(args.integer(1, 20));
    else if (args.is("--set")) a.sets.push_back(args.text());
    else if (args.is("--versus")) a.versus.push_back(args.text());
    else args.unknown();
  }
  if (!a.versus.empty() && (!a.peer.empty() || a.scaling))
    throw std::runtime_error("--versus compares tandem with itself: not with --peer or --scaling");
  return a;
}

// Runs the peer script (its stderr merged into stdout) and returns the
// median step of its last result line. A peer that prints none (out of
// memory, a missing package) is an error naming its exit status and its
// last lines, never a ratio of 0.
[[maybe_unused]] double peerMedianMs(const std::string& command, std::string* line_out) {
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) throw std::runtime_error("cannot start the peer: " + command);
  char buf[4096];
  std::string last;
  std::deque<std::string> tail;  // the last lines of other output
  while (fgets(buf, sizeof buf, p)) {
    if (std::strstr(buf, "median_step_ms")) {
      last = buf;
    } else {
      tail.emplace_back(buf);
      if (tail.size() > 6) tail.pop_front();
    }
  }
  const int status = pclose(p);
  if (!last.empty() && last.back() == '\n') last.pop_back();
  *line_out = last;
  const auto pos = last.find("\"median_step_ms\":");
  if (pos == std::string::npos) {
    std::string lines;
    for (const std::string& l : tail) lines += "  " + l;
    throw std::runtime_error(fmt::format("the peer printed no median_step_ms (exit status {}): {}\n{}",
                                         WIFEXITED(status) ? WEXITSTATUS(status) : -1, command, lines));
  }
  return std::atof(last.c_str() + pos + std::strlen("\"median_step_ms\":"));
}

#ifdef TANDEM_HAVE_CUDA
// Per-op GPU time from eager steps timed task by task, on one compute
// stream: kernels of the weight-gradient stream would run beside the
// others and each be timed with the time it shares. `config` names the
// configuration in each line (empty: none).
void printBreakdown(const tandem::JobSpec& job, const std::string& config) {
  using namespace tandem;
  JobSpec serial = job;
  serial.schedule.weight_gradient_stream = false;
  const Plan serial_plan = buildPlan(serial);
  cuda::ExecutorOptions o;
  o.use_graph = false;
  o.time_tasks = true;
  cuda::CudaExecutor timed(serial_plan, o);
  const int timed_steps = 3;
  for (int s = 0; s < timed_steps + 1; ++s) timed.step();
  const std::vector<double> t = timed.taskMilliseconds();
  std::map<std::string, double> by_op;
  double total = 0;
  const auto& tasks = serial_plan.programs[0].tasks;
  for (size_t i = 0; i < tasks.size(); ++i) {
    by_op[std::string(toString(tasks[i].op))] += t[i] / (timed_steps + 1);
    total += t[i] / (timed_steps + 1);
  }
  std::vector<std::pair<double, std::string>> rows;
  for (auto& [k, v] : by_op) rows.push_back({v, k});
  std::sort(rows.rbegin(), rows.rend());
  const std::string tag = config.empty() ? "" : ",\"config\":" + nlohmann::json(config).dump();
  for (auto& [v, k] : rows)
    fmt::print("{{\"breakdown\":\"{}\",\"ms_per_step\":{:.3f},\"share\":{:.3f}{}}}\n", k, v, v / total, tag);
  std::fflush(stdout);
}

// One configuration measured: `gpus` ranks on devices first_device,
// first_device + 1, ...; prints its JSON lines.
struct Measured {
  tandem::JobSpec job;
  double med = 0, sync_med = 0, tps = 0;
};

// The job measured: the file's, at micro-batch 16 in bf16 unless --set says otherwise.
tandem::JobSpec jobOf(const Args& a, int gpus) {
  std::vector<std::string> sets = {fmt::format("parallel.data_parallel={}", gpus), "training.micro_batch=16",
                                   "training.precision=bf16", fmt::format("training.steps={}", 2 * a.steps)};
  sets.insert(sets.end(), a.sets.begin(), a.sets.end());
  return tandem::loadJobFile(a.job, sets);
}

Measured measureTandem(const Args& a, int gpus, int first_device) {
  using namespace tandem;
  const JobSpec job = jobOf(a, gpus);
  const Plan plan = buildPlan(job);
  const cuda::DeviceInfo dev = cuda::deviceInfo(first_device);
  // Each rank as `tandem run` sets one up (runner/rank_session.h), one thread per rank.
  std::vector<std::unique_ptr<runner::RankSession>> sessions(gpus);
  std::vector<cuda::CudaExecutor*> ex(gpus);
  const cuda::NcclId id = gpus > 1 ? cuda::makeNcclId() : cuda::NcclId{};
  auto onRanks = [&](auto fn) {
    if (gpus == 1) return fn(0);  // no thread per step on one GPU
    std::vector<std::thread> th;
    for (int r = 0; r < gpus; ++r) th.emplace_back([&, r] { fn(r); });
    for (auto& t : th) t.join();
  };
  std::vector<std::string> errors(gpus);
  onRanks([&](int r) {
    try {
      runner::SessionOptions o;
      o.executor.rank = r, o.executor.world = gpus, o.executor.device = first_device + r, o.executor.nccl_id = id;
      sessions[r] = std::make_unique<runner::RankSession>(plan, o);
      ex[r] = &sessions[r]->executor();
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  });
  for (auto& e : errors)
    if (!e.empty()) throw std::runtime_error(e);
  fmt::print("{{\"fusion\":\"{}\"}}\n", ex[0]->fusion().summary());
  {
    // What timing cuBLASLt's candidates gained (rank 0 tunes; the others reuse its choices).
    const cuda::GemmTuningTotals t = cuda::totalsOf(ex[0]->gemmTuning());
    fmt::print("{{\"gemm_tuning\":{{\"shapes\":{},\"changed\":{},\"first_choice_ms\":{:.3f},\"chosen_ms\":{:.3f},"
               "\"first_choice_extra_graph_nodes\":{},\"chosen_extra_graph_nodes\":{}}}}}\n",
               t.shapes, t.changed, t.first_ms, t.chosen_ms, t.first_extra_nodes, t.chosen_extra_nodes);
  }
  // Two loops over the same executors, each `steps` long with the first 5
  // steps left out:
  // - "step by step": the host waits for each step before launching the
  //   next, timed like the peer script (wall clock around one step, which
  //   ends when the GPU is done);
  // - "run ahead" (CudaExecutor::run, what `tandem run` does): the next
  //   step is queued while one runs; wall time between two step ends.
  // The comparison with the peer uses "run ahead"; GPU time is the event
  // time of rank 0's step. Step by step runs first unless --ahead-first (the
  // GPU at its power limit: the loop that runs first may find it cooler).
  struct Loop {
    std::vector<double> wall_ms, gpu_ms;
    double median(std::vector<double> v) const {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0 : v[v.size() / 2];
    }
  };
  Loop sync_loop, ahead_loop;
  double loss = 0;
  auto stepByStep = [&] {
    for (int s = 0; s < a.steps; ++s) {
      std::vector<cuda::GpuStepResult> res(gpus);
      const auto t0 = std::chrono::steady_clock::now();
      onRanks([&](int r) { res[r] = ex[r]->step(); });
      const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (s >= 5) {
        sync_loop.wall_ms.push_back(wall);
        sync_loop.gpu_ms.push_back(res[0].ms);
      }
    }
  };
  auto runAhead = [&] {
    std::vector<std::thread> th;
    auto last = std::chrono::steady_clock::now();
    int seen = 0;
    for (int r = 0; r < gpus; ++r)
      th.emplace_back([&, r] {
        ex[r]->run(a.steps, [&](const cuda::GpuStepResult& res) {
          if (r != 0) return;
          const auto now = std::chrono::steady_clock::now();
          if (seen++ >= 5) {
            ahead_loop.wall_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
            ahead_loop.gpu_ms.push_back(res.ms);
          }
          last = now;
          loss = res.loss;
        });
      });
    for (auto& t : th) t.join();
  };
  if (a.ahead_first) {
    runAhead();
    stepByStep();
  } else {
    stepByStep();
    runAhead();
  }
  const double sync_med = sync_loop.median(sync_loop.wall_ms);
  const double med = ahead_loop.median(ahead_loop.wall_ms);
  const double gpu_med = ahead_loop.median(ahead_loop.gpu_ms);
  const double tokens = double(job.tokensPerStep());
  const double tps = tokens / (med / 1e3);
  const double mfu = plan.summary.model_flops_per_token * tps / (gpus * dev.peak_bf16_flops);
  const cuda::GpuMemoryReport m = ex[0]->memory();
  const bool gathered = std::any_of(plan.programs[0].tasks.begin(), plan.programs[0].tasks.end(),
                                    [](const Task& t) { return t.op == OpKind::EmbeddingBwd && t.attrs.shards > 1; });
  fmt::print("{{\"system\":\"tandem\",\"job\":\"{}\",\"device\":\"{}\",\"first_device\":{},\"gpus\":{},\"shard_optimizer\":{},"
             "\"embedding_gradient_gathered\":{},\"weight_gradient_stream\":{},\"median_step_ms\":{:.2f},"
             "\"min_step_ms\":{:.2f},"
             "\"median_gpu_ms\":{:.2f},\"step_by_step_ms\":{:.2f},\"step_by_step_gpu_ms\":{:.2f},"
             "\"tokens_per_s\":{:.0f},\"mfu\":{:.4f},\"loss\":{:.4f},\"planned_arena_gib\":{:.3f},"
             "\"allocated_gib\":{:.3f}}}\n",
             job.name, dev.name, first_device, gpus, shardsOptimizer(job), gathered, job.schedule.weight_gradient_stream, med,
             ahead_loop.wall_ms.empty() ? 0 : *std::min_element(ahead_loop.wall_ms.begin(), ahead_loop.wall_ms.end()),
             gpu_med, sync_med, sync_loop.median(sync_loop.gpu_ms), tps, mfu, loss,
             m.planned_arena_bytes / double(1 << 30), m.allocated_bytes / double(1 << 30));
  {
    const cuda::CudaExecutor::GraphMemsets gm = ex[0]->graphMemsets();
    std::string examples;
    for (const std::string& e : gm.other_edge_examples)
      examples += (examples.empty() ? "" : ",") + nlohmann::json(e).dump();
    fmt::print("{{\"graph_memsets\":{{\"memsets\":{},\"hoisted\":{},\"merged_into\":{},\"before_roots\":{}}},"
               "\"graph_edges\":{{\"full\":{},\"other\":{},\"other_examples\":[{}]}},"
               "\"attention_mma\":\"{}\"}}\n",
               gm.memsets, gm.hoisted, gm.merged_into, gm.before_roots, gm.full_edges, gm.other_edges,
               examples, cuda::attentionMmaPath());
  }
  std::fflush(stdout);
  ex.clear();
  sessions.clear();
  return {job, med, sync_med, tps};
}

// --versus: the peer is tandem with those overrides on top, measured in
// turn, the peer first in even rounds (whatever runs first on a rested GPU
// at its power limit is faster). `med` is round 1's step of `a`.
void compareWithVersus(const Args& a, double med) {
  using namespace tandem;
  Args peer = a;
  peer.sets.insert(peer.sets.end(), a.versus.begin(), a.versus.end());
  std::string versus_text;
  for (const std::string& v : a.versus) versus_text += (versus_text.empty() ? "" : " ") + v;
  if (a.breakdown && a.gpus == 1) printBreakdown(jobOf(peer, a.gpus), versus_text);
  std::vector<double> ratios;
  for (int round = 1; round <= a.rounds; ++round) {
    double ms = med, versus_ms = 0;
    if (round == 1) {
      versus_ms = measureTandem(peer, a.gpus, 0).med;
    } else if (round % 2 == 0) {
      versus_ms = measureTandem(peer, a.gpus, 0).med;
      ms = measureTandem(a, a.gpus, 0).med;
    } else {
      ms = measureTandem(a, a.gpus, 0).med;
      versus_ms = measureTandem(peer, a.gpus, 0).med;
    }
    ratios.push_back(versus_ms / ms);
    fmt::print("{{\"comparison\":{},\"round\":{},\"gpus\":{},\"tandem_ms\":{:.2f},"
               "\"versus_ms\":{:.2f},\"speedup_vs_versus\":{:.3f}}}\n",
               nlohmann::json("tandem / tandem with " + versus_text).dump(), round, a.gpus, ms, versus_ms, versus_ms / ms);
    std::fflush(stdout);
  }
  std::sort(ratios.begin(), ratios.end());
  const size_t n = ratios.size();
  fmt::print("{{\"comparison\":{},\"rounds\":{},"
             "\"speedup_vs_versus\":{:.3f},\"lowest\":{:.3f},\"highest\":{:.3f}}}\n",
             nlohmann::json("tandem / tandem with " + versus_text + ", median of rounds").dump(), a.rounds, n % 2 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]),
             ratios.front(), ratios.back());
}
#endif

}  // namespace

int main(int argc, char** argv) {
#ifndef TANDEM_HAVE_CUDA
  (void)argc;
  (void)argv;
  tandem::bench::printSkipped("gpt2_h200", "built without CUDA");
  return 0;
#else
  using namespace tandem;
  try {
    const Args a = parseArgs(argc, argv);
    std::string why;
    const int count = cuda::usableGpuCount(&why);
    if (count < a.gpus) {
      bench::printSkipped("gpt2_h200", fmt::format("needs {} GPU(s): {}", a.gpus, why));
      return 0;
    }
    if (a.scaling) {
      if (count < 2) {
        bench::printSkipped("gpt2_h200", fmt::format("--scaling needs 2 GPUs: {}", count < 1 ? why : "one GPU"));
        return 0;
      }
      const Measured g0 = measureTandem(a, 1, 0), g1 = measureTandem(a, 1, 1), dp = measureTandem(a, 2, 0);
      fmt::print("{{\"scaling\":\"data parallel 2 against each GPU alone\",\"gpu0_tokens_per_s\":{:.0f},"
                 "\"gpu1_tokens_per_s\":{:.0f},\"dp2_tokens_per_s\":{:.0f},\"vs_twice_gpu0\":{:.4f},"
                 "\"vs_each_gpu_alone\":{:.4f},\"vs_twice_gpu0_step_by_step\":{:.4f},"
                 "\"vs_each_gpu_alone_step_by_step\":{:.4f}}}\n",
                 g0.tps, g1.tps, dp.tps, dp.tps / (2 * g0.tps), dp.tps / (g0.tps + g1.tps),
                 // Step by step, per GPU and step the same tokens: throughput is 1 / time.
                 g0.sync_med / dp.sync_med, 2.0 / (dp.sync_med * (1.0 / g0.sync_med + 1.0 / g1.sync_med)));
      return 0;
    }
    const Measured mt = measureTandem(a, a.gpus, 0);
    const JobSpec& job = mt.job;
    const double med = mt.med, sync_med = mt.sync_med;

    // With --versus each breakdown line names its configuration.
    if (a.breakdown && a.gpus == 1) printBreakdown(job, a.versus.empty() ? "" : "as set");

    if (!a.versus.empty()) compareWithVersus(a, med);

    if (!a.peer.empty()) {
      std::string line_e;
      const std::string base = a.gpus > 1 ? fmt::format("torchrun --standalone --nproc_per_node={} {}", a.gpus, a.peer)
                                          : "python3 " + a.peer;
      // A Llama job's peer builds the same shape (the GPT-2 peer has GPT-2 124M's).
      const ModelSpec& ms = job.model;
      const std::string shape =
          ms.family == ModelFamily::Llama
              ? fmt::format(" --layers {} --hidden {} --heads {} --kv-heads {} --mlp {} --vocab {}", ms.layers,
                            ms.hidden, ms.heads, ms.kv_heads > 0 ? ms.kv_heads : ms.heads, ms.mlpHidden(), ms.vocab)
              : "";
      // The peer runs the job's micro-batch, one per step.
      if (job.training.grad_accum != 1)
        throw std::runtime_error("--peer times one micro-batch per step: set training.grad_accum=1");
      const std::string common = fmt::format(" --batch {} --seq {}{} --steps {}", job.training.micro_batch,
                                             ms.seq_len, shape, std::max(a.steps, 30));
      const double eager_ms = a.gpus == 1 ? peerMedianMs(base + " --compile 0" + common, &line_e) : 0;
      if (!line_e.empty()) fmt::print("{{\"system\":\"torch-eager\",\"peer\":{}}}\n", line_e);
      std::fflush(stdout);
      auto compiledPeer = [&] {
        std::string line_c;
        const double ms = peerMedianMs(base + " --compile 1" + common, &line_c);
        if (!line_c.empty()) fmt::print("{{\"system\":\"torch-compile\",\"peer\":{}}}\n", line_c);
        std::fflush(stdout);
        return ms;
      };
      // The headline ratio takes tandem's steps queued ahead (what `tandem
      // run` does); the peer script times each step between two
      // synchronizations, which tandem's step-by-step loop does too: the
      // ratio of like with like is printed beside it. The peer's eager run
      // is measured once, before round 1. With --rounds, every
      // later round measures again, the peer first in even rounds: at the
      // power limit whatever runs first on a rested GPU is faster
      // (docs/benchmarks.md), so the rounds alternate who that is.
      std::vector<double> ratios, ratios_sync;
      for (int round = 1; round <= a.rounds; ++round) {
        double tandem_ms = med, tandem_sync_ms = sync_med, compile_ms = 0;
        if (round == 1) {
          compile_ms = compiledPeer();
        } else if (round % 2 == 0) {
          compile_ms = compiledPeer();
          const Measured again = measureTandem(a, a.gpus, 0);
          tandem_ms = again.med, tandem_sync_ms = again.sync_med;
        } else {
          const Measured again = measureTandem(a, a.gpus, 0);
          tandem_ms = again.med, tandem_sync_ms = again.sync_med;
          compile_ms = compiledPeer();
        }
        const double ratio = compile_ms > 0 ? compile_ms / tandem_ms : 0;
        const double ratio_sync = compile_ms > 0 && tandem_sync_ms > 0 ? compile_ms / tandem_sync_ms : 0;
        ratios.push_back(ratio);
        ratios_sync.push_back(ratio_sync);
        fmt::print("{{\"comparison\":\"tandem / torch.compile\",\"round\":{},\"gpus\":{},\"tandem_ms\":{:.2f},"
                   "\"torch_eager_ms\":{:.2f},\"torch_compile_ms\":{:.2f},\"speedup_vs_compile\":{:.3f},"
                   "\"speedup_vs_eager\":{:.3f},\"tandem_step_by_step_ms\":{:.2f},"
                   "\"speedup_vs_compile_step_by_step\":{:.3f}}}\n",
                   round, a.gpus, tandem_ms, eager_ms, compile_ms, ratio,
                   eager_ms > 0 ? eager_ms / tandem_ms : 0, tandem_sync_ms, ratio_sync);
        std::fflush(stdout);
      }
      if (a.rounds > 1) {
        auto medianOf = [](std::vector<double> v) {
          std::sort(v.begin(), v.end());
          return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
        };
        fmt::print("{{\"comparison\":\"tandem / torch.compile, median of rounds\",\"rounds\":{},"
                   "\"speedup_vs_compile\":{:.3f},\"speedup_vs_compile_step_by_step\":{:.3f},"
                   "\"lowest\":{:.3f},\"highest\":{:.3f}}}\n",
                   a.rounds, medianOf(ratios), medianOf(ratios_sync), *std::min_element(ratios.begin(), ratios.end()),
                   *std::max_element(ratios.begin(), ratios.end()));
      }
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_gpt2_h200: error: {}\n", e.what());
    return 1;
  }
#endif
}
