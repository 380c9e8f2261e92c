// tandem run: train a job on local GPUs with the CUDA executor. Compiles
// without CUDA too; then (or without a GPU) it says so in one line and fails.
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cli/command_registry.h"
#include "cli/job_options.h"
#include "cli/plan_cache_option.h"
#include "cli/restart_supervisor.h"
#include "cli/number_checks.h"
#include "cli/plan_summary.h"
#include "cli/run_placement.h"
#include "engine/memory/gpu_footprint.h"
#include "engine/plan/gpu_support.h"
#include "engine/plan/planner.h"
#include "runner/checkpoint_settings.h"

#ifdef TANDEM_HAVE_CUDA
#include "engine/cuda/device.h"
#include "engine/cuda/executor.h"
#include "engine/cuda/launcher.h"
#include "engine/cuda/rendezvous.h"
#include "runner/rank_session.h"
#include "runner/run_trace.h"
#endif

namespace tandem::cli {
namespace {

struct RunOptions {
  JobOptions job;
  PlanCacheOption plan_cache;
  int gpus = 0;  // 0: the job's world (its data_parallel times the model-parallel ranks)
  // --ranks-per-gpu: that many ranks share each GPU, in one process, their
  // collectives in-process (engine/cuda/local_comm.h); 1: a process per rank.
  int ranks_per_gpu = 1;
  int steps = 0;
  int stop_after = 0;  // --stop-after: the last step this run takes (0: the schedule's end)
  bool eager = false;
  bool json = false;
  double timeout_s = 30;  // a dead peer is detected within this (plus the step in flight)
  std::string out;
  bool profile = false;  // CUPTI + NVTX into per-rank files, merged into `out`
  std::string rendezvous;  // under mpirun/srun/torchrun: the folder where rank 0 leaves the NCCL id
  std::string placement;   // auto or a map file (`tandem place --out`): each rank's GPU
  // The placement resolved by the process that starts the ranks, handed to
  // them so they do not resolve it again (hidden flags).
  std::string placement_devices;
  std::string placement_source;
  runner::CheckpointSettings checkpoints;
  int restarts = 0;  // --restarts: supervised, started again from the newest checkpoint
};

#ifdef TANDEM_HAVE_CUDA

constexpr double kGiB = double(1 << 30);

std::vector<std::string> childArguments(const RunOptions& o) {
  std::vector<std::string> args{"run", o.job.job};
  for (const auto& s : o.job.sets) args.insert(args.end(), {"--set", s});
  if (o.steps > 0) args.insert(args.end(), {"--steps", std::to_string(o.steps)});
  if (o.stop_after > 0) args.insert(args.end(), {"--stop-after", std::to_string(o.stop_after)});
  if (o.eager) args.push_back("--eager");
  if (o.ranks_per_gpu > 1) args.insert(args.end(), {"--ranks-per-gpu", std::to_string(o.ranks_per_gpu)});
  if (o.json) args.push_back("--json");
  if (!o.out.empty()) args.insert(args.end(), {"--out", o.out});
  if (o.profile) args.push_back("--profile");
  args.insert(args.end(), {"--timeout", fmt::format("{}", o.timeout_s)});
  if (!o.placement_devices.empty())
    args.insert(args.end(), {"--placement-devices", o.placement_devices, "--placement-source", o.placement_source});
  args.insert(args.end(), {"--plan-cache", o.plan_cache.dir.empty() ? std::string("off") : o.plan_cache.dir});
  const runner::CheckpointSettings& c = o.checkpoints;
  if (!c.dir.empty()) args.insert(args.end(), {"--checkpoint-dir", c.dir});
  if (c.every > 0) args.insert(args.end(), {"--checkpoint-every", std::to_string(c.every)});
  if (c.keep > 0) args.insert(args.end(), {"--keep", std::to_string(c.keep)});
  if (c.resume) args.push_back("--resume");
  if (c.check_replicas_every > 0) args.insert(args.end(), {"--check-replicas-every", std::to_string(c.check_replicas_every)});
  return args;
}

// Merges the ranks' profiles into `out` and says so.
void mergeProfiles(const std::string& out, int world, bool json) {
  const traces::MergeResult m = runner::mergeProfiles(out, world);
  if (json)
    fmt::print(R"({{"profile_merged":"{}","run":{},"ranks":{},"activities":{}}})" "\n", out, m.run, m.ranks,
               m.activities);
  else
    fmt::print("profile: merged {} rank files into {} (run {}, {} activities)\n", m.inputs, out, m.run, m.activities);
}

// Rank 0's line (or JSON object) with every rank's measured clock offset.
void printClockOffsets(const std::vector<cuda::ClockOffset>& all, const std::vector<cuda::ClockOffset>* start,
                       bool json) {
  const bool at_end = start != nullptr;
  auto drift_ppm = [&](size_t r) {
    const int64_t dt = all[r].local_ns - (*start)[r].local_ns;
    return dt > 0 ? double(all[r].offset_ns - (*start)[r].offset_ns) / double(dt) * 1e6 : 0.0;
  };
  std::string text;
  for (size_t r = 1; r < all.size(); ++r) {
    if (json) {
      text += fmt::format(R"({}{{"rank":{},"offset_ns":{},"rtt_ns":{})", r > 1 ? "," : "", r, all[r].offset_ns,
                          all[r].rtt_ns);
      if (at_end) text += fmt::format(R"(,"drift_ppm":{:.4f})", drift_ppm(r));
      text += "}";
    } else {
      text += fmt::format("{}rank {} {:+} ns (rtt {:.1f} us", r > 1 ? "; " : "", r, all[r].offset_ns,
                          all[r].rtt_ns / 1e3);
      if (at_end) text += fmt::format(", drift {:+.3f} ppm", drift_ppm(r));
      text += ")";
    }
  }
  if (json)
    fmt::print(R"({{"clock_offsets":"{}","ranks":[{}]}})" "\n", at_end ? "end" : "start", text);
  else
    fmt::print("clock offsets to rank 0 at {} (NCCL ping-pong, {} rounds): {}\n", at_end ? "end" : "start",
               all.empty() ? 0 : all[0].rounds, text);
  std::fflush(stdout);
}

// Where this rank runs: its rank, world and GPU from the launcher, and the
// NCCL id shared through the rendezvous. Says who started the ranks.
cuda::ExecutorOptions rankPlacement(const RunOptions& o, const Plan& plan, const cuda::LaunchInfo& info,
                                    const runner::RunPlacement& placement, cuda::RendezvousPlan& rendezvous) {
  std::string why;
  const int count = cuda::usableGpuCount(&why);
  if (count == 0) throw std::runtime_error("run: no CUDA GPU available (" + why + ")");
  cuda::ExecutorOptions eo;
  eo.rank = info.launched() ? info.rank : 0;
  eo.world = info.launched() ? info.world : 1;
  if (plan.world_size != eo.world)
    throw std::runtime_error(fmt::format("run: the job is planned for {} ranks but {} run it", plan.world_size, eo.world));
  // The GPU: the launcher's local rank (one GPU per rank on a host); a rank
  // that sees a single GPU (CUDA_VISIBLE_DEVICES set per rank) uses it.
  const int local = info.local_rank >= 0 ? info.local_rank : eo.rank;
  if (info.external() && count > 1 && local >= count)
    throw std::runtime_error(fmt::format("run: rank {} is local rank {} on this host but only {} GPUs are visible "
                                         "(one GPU per rank)", eo.rank, local, count));
  try {
    rendezvous = cuda::planRendezvous(info, o.rendezvous, cuda::processEnvironment());
  } catch (const cuda::LaunchError& e) {
    throw std::runtime_error(std::string("run: ") + e.what());
  }
  eo.device = count == 1 ? 0 : local % count;
  // --placement: the map's GPU for this rank, counted on this host in PCI
  // bus order (runCommand set CUDA_DEVICE_ORDER).
  if (!placement.device_of_rank.empty()) {
    const int wanted = placement.device_of_rank.at(size_t(eo.rank));
    if (wanted >= count)
      throw std::runtime_error(fmt::format(
          "run: the placement puts rank {} on GPU {} but this rank sees {} GPU{}{}", eo.rank, wanted, count,
          count == 1 ? "" : "s",
          count == 1 && info.external() ? " (a launcher that sets CUDA_VISIBLE_DEVICES per rank chooses the GPU "
                                          "itself: drop --placement or let each rank see every GPU)"
                                        : ""));
    eo.device = wanted;
  }
  eo.use_graph = !o.eager;
  eo.timeout_s = o.timeout_s;
  if (eo.rank == 0 && info.external()) {
    if (o.json)
      fmt::print(R"({{"launcher":"{}","world":{},"nccl_id":"{}"}})" "\n", cuda::launcherName(info.launcher),
                 eo.world, rendezvous.describe());
    else
      fmt::print("run: started by {}: {} ranks; NCCL id via {}\n", cuda::launcherName(info.launcher), eo.world,
                 rendezvous.describe());
    std::fflush(stdout);
  }
  if (rendezvous.mpi) cuda::mpiInit();
  if (eo.world > 1) {
    try {
      // tandem's own launch starts every rank at once; other launchers get --timeout.
      eo.nccl_id = cuda::shareNcclId(info, rendezvous,
                                     info.launcher == cuda::Launcher::Tandem ? std::max(120.0, o.timeout_s)
                                                                             : o.timeout_s);
    } catch (const cuda::LaunchError& e) {
      throw cuda::CudaError(e.what());
    }
  }
  return eo;
}

// Where the wait before the first step went (a minute or more for 7B), and
// what timing the GEMM algorithms changed.
void printSetup(const RunOptions& o, cuda::CudaExecutor& exec) {
  const cuda::SetupTimes st = exec.setupTimes();
  if (o.json)
    fmt::print(R"({{"setup_s":{:.3f},"kernels_and_arena_s":{:.3f},"tables_s":{:.3f},"gemm_timing_s":{:.3f},)"
               R"("initial_weights_s":{:.3f}}})"
               "\n",
               st.total_s, st.kernels_and_arena_s, st.tables_s, st.gemm_timing_s, st.initial_weights_s);
  else if (st.total_s >= 5)
    fmt::print("set-up {:.1f} s: kernels and arena {:.1f} s, task tables {:.1f} s, GEMM timing {:.1f} s, initial "
               "weights {:.1f} s\n",
               st.total_s, st.kernels_and_arena_s, st.tables_s, st.gemm_timing_s, st.initial_weights_s);
  if (!o.json && !exec.gemmTuning().empty()) {
    const cuda::GemmTuningTotals t = cuda::totalsOf(exec.gemmTuning());
    fmt::print("GEMM algorithms timed for {} shapes, {} changed from cuBLASLt's first choice: {:.3f} -> {:.3f} ms "
               "for one of each, {} -> {} extra graph nodes (TANDEM_GEMM_TUNING=0 turns this off)\n",
               t.shapes, t.changed, t.first_ms, t.chosen_ms, t.first_extra_nodes, t.chosen_extra_nodes);
  }
}

// One line (or JSON object) per step, from rank 0.
void printStep(const RunOptions& o, const Plan& plan, const runner::RankSession& session, int world,
               const cuda::GpuStepResult& r) {
  const double tokens = double(plan.job.tokensPerStep());
  const double peak = session.device().peak_bf16_flops;
  const double tps = tokens / (r.ms / 1e3);
  const double mfu = peak > 0 ? plan.summary.model_flops_per_token * tokens / (r.ms / 1e3) / (world * peak) : 0;
  if (o.json)
    fmt::print(R"({{"step":{},"loss":{:.6f},"grad_norm":{:.6f},"lr":{:.6e},"ms":{:.3f},)"
               R"("tokens_per_s":{:.0f},"mfu":{:.4f}}})"
               "\n",
               r.step + 1, r.loss, r.grad_norm, r.lr, r.ms, tps, mfu);
  else
    fmt::print("step {:>5}/{}  loss {:.6f}  norm {:.4f}  lr {:.3e}  {:8.2f} ms  {:9.0f} tok/s  MFU {:5.1f}%\n",
               r.step + 1, plan.job.training.steps, r.loss, r.grad_norm, r.lr, r.ms, tps, 100 * mfu);
  std::fflush(stdout);
}

// The replica checks the run made (--check-replicas-every) and their time.
void printReplicaChecks(const RunOptions& o, const runner::RankSession& session) {
  const auto rc = session.replicaChecks();
  if (!rc) return;
  const double ms = 1e3 * rc->seconds / rc->checks;
  if (o.json)
    fmt::print(R"({{"replica_checks":true,"checks":{},"seconds":{:.4f},"ms_per_check":{:.3f}}})" "\n", rc->checks,
               rc->seconds, ms);
  else
    fmt::print("replica checks: {} passed, {:.2f} ms each\n", rc->checks, ms);
}

// What checkpoints cost the run (--checkpoint-every): the copy-outs the step
// loop waited for, the writes beside the steps, and any wait for a write.
void printCheckpointCost(const RunOptions& o, const runner::RankSession& session) {
  const auto c = session.checkpointCost();
  if (!c) return;
  const double gb = double(c->copy_bytes) / 1e9;
  if (o.json)
    fmt::print(R"({{"checkpoint_cost":true,"copies":{},"copy_s":{:.4f},"first_copy_s":{:.4f},"copy_bytes":{},"writes":{},)"
               R"("write_bytes":{},"write_s":{:.4f},"write_gb_per_s":{:.3f},"loop_waited_s":{:.4f}}})"
               "\n",
               c->copies, c->copy_s, c->first_copy_s, c->copy_bytes, c->writes.writes, c->writes.bytes, c->writes.write_s,
               c->writes.gbPerSecond(), c->writes.loop_waited_s);
  else
    fmt::print("checkpoints: {} copied out ({:.2f} GB in {:.2f} s, {:.1f} GB/s, the steps waiting), {} written "
               "beside the steps ({:.2f} s, {:.2f} GB/s); the step loop waited {:.2f} s for writes\n",
               c->copies, gb, c->copy_s, c->copy_s > 0 ? gb / c->copy_s : 0.0, c->writes.writes, c->writes.write_s,
               c->writes.gbPerSecond(), c->writes.loop_waited_s);
}

// The steady state and the memory: what the plan counted against what was allocated.
void printSummary(const RunOptions& o, const Plan& plan, runner::RankSession& session) {
  const runner::StepStats s = session.stats();
  const cuda::GpuMemoryReport mem = session.executor().memory();
  const int64_t counted = gpu_footprint::executorFootprint(plan).total();
  if (o.json)
    fmt::print(R"({{"summary":true,"median_ms":{:.3f},"median_wall_ms":{:.3f},"tokens_per_s":{:.0f},"mfu":{:.4f},)"
               R"("planned_arena_bytes":{},"planned_executor_bytes":{},"allocated_bytes":{},"device_used_bytes":{}}})"
               "\n",
               s.median_ms, s.median_wall_ms, s.tokens_per_s, s.mfu, mem.planned_arena_bytes, counted,
               mem.allocated_bytes, mem.device_used_bytes);
  else
    fmt::print("median {:.2f} ms/step on the GPU ({:.2f} ms wall between step ends), {:.0f} tokens/s, MFU {:.1f}% "
               "({:.0f} TFLOP/s peak per GPU)\n"
               "memory: planned arena {:.3f} GiB + executor {:.1f} MiB; allocated {:.3f} GiB (workspace {:.0f} MiB, "
               "scratch {:.1f} MiB); device in use {:.3f} GiB\n",
               s.median_ms, s.median_wall_ms, s.tokens_per_s, 100 * s.mfu, session.device().peak_bf16_flops / 1e12,
               mem.planned_arena_bytes / kGiB, counted / double(1 << 20), mem.allocated_bytes / kGiB,
               mem.workspace_bytes / double(1 << 20), mem.scratch_bytes / double(1 << 20), mem.device_used_bytes / kGiB);
  printReplicaChecks(o, session);
  printCheckpointCost(o, session);
}

// Closes this rank's profile and, where one process sees every rank's file,
// merges them into --out.
void finishProfile(const RunOptions& o, runner::RankSession& session, const cuda::LaunchInfo& info, int rank,
                   int world) {
  const profiler::ProfileSummary ps = session.finishProfile();
  if (o.json)
    fmt::print(R"({{"profile_rank":{},"file":"{}","kernels":{},"kernels_attributed":{},"nccl_kernels":{},)"
               R"("nccl_attributed":{},"nccl_on_comm_stream":{},"graph_kernels":{},"dropped_records":{}}})"
               "\n",
               rank, ps.path, ps.kernels, ps.kernels_attributed, ps.nccl_kernels, ps.nccl_attributed,
               ps.nccl_on_comm_stream, ps.graph_kernels, ps.dropped_records);
  else
    fmt::print("rank {}: {}\n", rank, runner::profileSummaryLine(ps));
  std::fflush(stdout);
  if (!info.launched()) {
    mergeProfiles(o.out, 1, o.json);
  } else if (info.external() && world > 1) {
    // No parent process sees every rank: rank 0 merges once every rank has
    // written its file, if it can see them all (a shared folder).
    session.executor().communicator()->barrier("the end of profiling");
    if (rank != 0) return;
    std::vector<std::string> missing;
    for (int r = 0; r < world; ++r)
      if (!std::filesystem::exists(runner::rankTracePath(o.out, r))) missing.push_back(runner::rankTracePath(o.out, r));
    if (missing.empty())
      mergeProfiles(o.out, world, o.json);
    else
      fmt::print("profile: {} of {} rank files are not visible here (e.g. {}; other hosts?): run `tandem merge "
                 "RANK_FILES... --out {}` where they all are\n",
                 missing.size(), world, missing.front(), o.out);
  }
}

void runRank(const RunOptions& o, const Plan& plan, const cuda::LaunchInfo& info,
             const runner::RunPlacement& placement) {
  cuda::RendezvousPlan rendezvous;
  runner::SessionOptions so;
  so.executor = rankPlacement(o, plan, info, placement, rendezvous);
  so.placement = placement;
  so.checkpoints = o.checkpoints;
  so.checkpoints.save_last = o.stop_after > 0;
  const int rank = so.executor.rank, world = so.executor.world;
  const bool lead = rank == 0;
  if (o.profile) so.profile_path = runner::rankTracePath(o.out, rank);
  // A large model's set-up takes a while (weights drawn on the host, GEMM
  // algorithms timed, the step captured): say so before it starts.
  if (lead && !o.json && plan.summary.parameters >= 1'000'000'000)
    fmt::print("run {}: setting up {:.2f}B parameters (initial weights, GEMM timing, graph capture)...\n",
               plan.job.name, double(plan.summary.parameters) / 1e9);
  std::fflush(stdout);
  runner::RankSession session(plan, so);
  // Every rank joined the communicator: the id file has served.
  cuda::finishRendezvous(info, rendezvous);
  if (lead) printSetup(o, session.executor());
  if (const std::string folder = session.resumeIfAsked(); !folder.empty() && lead && !o.json)
    fmt::print("resumed from {} (step {})\n", folder, session.executor().stepsDone());
  else if (o.checkpoints.resume && folder.empty() && lead && !o.json)
    fmt::print("no complete checkpoint in {}: starting from step 0\n", o.checkpoints.dir);
  // --steps (the job's training.steps) is the step to train up to, unless
  // --stop-after ends the run earlier (the schedule still spans --steps).
  const int last_step =
      o.stop_after > 0 ? std::min(o.stop_after, plan.job.training.steps) : plan.job.training.steps;
  const int steps_left = std::max(0, last_step - session.executor().stepsDone());
  // Clock offsets between ranks, before the first step (outside graph
  // capture and the timed steps) and after the last.
  const std::vector<cuda::ClockOffset> offsets_start = session.measureClocks(false);
  if (lead && !offsets_start.empty()) printClockOffsets(offsets_start, nullptr, o.json);
  const cuda::DeviceInfo& dev = session.device();
  if (lead && !o.json)
    fmt::print("run {}: {} x {} ({} SMs), {} steps, {} tokens/step, {}, arena {:.2f} GiB\n", plan.job.name, world,
               dev.name, dev.sm_count, plan.job.training.steps, plan.job.tokensPerStep(),
               o.eager ? "eager" : "CUDA graph", plan.programs[0].memory.arena_bytes / kGiB);
  if (lead && !o.json)
    if (const std::optional<std::string> note = oneRankShardingNote(plan)) fmt::print("run: note: {}\n", *note);
  // The next step stays queued behind the running one (graph mode, not
  // profiling), so the per-step figures are GPU time without host gaps.
  std::vector<cuda::GpuStepResult> results;
  try {
    results = session.run(steps_left, [&](const cuda::GpuStepResult& r) {
      if (lead) printStep(o, plan, session, world, r);
      testKillAfterStep(r.step);
    });
  } catch (const runner::ReplicaMismatchError&) {
    // The profile keeps the steps before and the mismatch's record
    // (replica_check.mismatch); then the run stops with the error.
    if (o.profile) finishProfile(o, session, info, rank, world);
    throw;
  }
  const std::vector<cuda::ClockOffset> offsets_end = session.measureClocks(true);
  if (lead && !offsets_end.empty()) printClockOffsets(offsets_end, &offsets_start, o.json);
  if (lead) {
    printSummary(o, plan, session);
    if (!o.out.empty() && !o.profile)
      runner::writeStepsRun(o.out, plan, so.executor.device, results, session.executor().memory(), session.stats(),
                            so.placement);
  }
  if (o.profile) finishProfile(o, session, info, rank, world);
  if (rendezvous.mpi) cuda::mpiFinalize();
}

// --ranks-per-gpu: every rank of the plan on GPU 0 of this process, a
// thread each, the collectives in-process; with a graph, one CUDA Graph for
// every rank's step (engine/cuda/local_comm.h). For checking
// multi-rank plans where one GPU is at hand: the ranks share the GPU, so
// the step times are no production speed.
void runLocalRanks(const RunOptions& o, const Plan& plan) {
  std::string why;
  if (cuda::usableGpuCount(&why) == 0) throw std::runtime_error("run: no CUDA GPU available (" + why + ")");
  const int world = plan.world_size;
  auto local = std::make_shared<cuda::LocalWorld>(plan, 0, o.timeout_s);
  if (!o.json)
    fmt::print("run: {} ranks on GPU 0 in one process (--ranks-per-gpu {}): collectives in-process, {}; "
               "the ranks share the GPU, so step times are not a production speed\n",
               world, o.ranks_per_gpu, o.eager ? "eager steps" : "one CUDA Graph for every rank's step");
  std::fflush(stdout);
  const int last_step =
      o.stop_after > 0 ? std::min(o.stop_after, plan.job.training.steps) : plan.job.training.steps;
  // --profile: one profiler for every rank (each rank's records under its
  // rank) into the process's rank file, merged into --out at the end as a
  // one-process run's is, so --out is whole or untouched; made before the
  // ranks, destroyed after them.
  std::unique_ptr<profiler::Profiler> shared_profiler;
  if (o.profile) shared_profiler = runner::makeSharedProfiler(plan, runner::rankTracePath(o.out, 0), 0);
  std::vector<std::unique_ptr<runner::RankSession>> sessions(static_cast<size_t>(world));
  std::vector<std::vector<cuda::GpuStepResult>> results(static_cast<size_t>(world));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  // Every rank is set up before any steps: a rank still drawing its weights
  // would otherwise leave the others waiting at the first collective past
  // --timeout.
  std::mutex setup_mutex, construct_mutex;
  std::condition_variable setup_done;
  int ready = 0;
  bool failed = false;
  int first_failed = -1;  // the rank whose error stopped the others
  auto waitForEveryRank = [&] {
    std::unique_lock<std::mutex> lk(setup_mutex);
    ++ready;
    setup_done.notify_all();
    setup_done.wait(lk, [&] { return ready == world || failed; });
    if (failed) throw std::runtime_error("another rank failed during set-up");
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        runner::SessionOptions so;
        so.executor.rank = r;
        so.executor.world = world;
        so.executor.device = 0;
        so.executor.use_graph = !o.eager;
        so.executor.timeout_s = o.timeout_s;
        so.executor.local_world = local;
        so.checkpoints.check_replicas_every = o.checkpoints.check_replicas_every;
        so.checkpoints.flip_rank = o.checkpoints.flip_rank;
        so.checkpoints.flip_after_step = o.checkpoints.flip_after_step;
        so.shared_profiler = shared_profiler.get();
        {
          // One rank's set-up at a time: timing GEMM algorithms captures
          // probe graphs and synchronizes the device, which fails while
          // another rank's thread is capturing.
          std::lock_guard<std::mutex> one_at_a_time(construct_mutex);
          sessions[size_t(r)] = std::make_unique<runner::RankSession>(plan, so);
        }
        if (r == 0 && !o.json)
          fmt::print("run {}: {} ranks x {} on one GPU, {} steps, {} tokens/step, {}, arena {:.2f} GiB (rank 0)\n",
                     plan.job.name, world, sessions[0]->device().name, plan.job.training.steps,
                     plan.job.tokensPerStep(), o.eager ? "eager" : "CUDA graph", plan.forRank(0).memory.arena_bytes / kGiB);
        waitForEveryRank();
        results[size_t(r)] = sessions[size_t(r)]->run(last_step, [&](const cuda::GpuStepResult& res) {
          if (r == 0) printStep(o, plan, *sessions[0], 1, res);
        });
      } catch (const std::exception& e) {
        errors[size_t(r)] = std::current_exception();
        {
          std::lock_guard<std::mutex> lk(setup_mutex);
          if (first_failed < 0) first_failed = r;
          failed = true;
          setup_done.notify_all();
        }
        local->abort(fmt::format("rank {} failed: {}", r, e.what()));
      }
    });
  for (auto& t : threads) t.join();
  if (first_failed >= 0) {
    try {
      std::rethrow_exception(errors[size_t(first_failed)]);
    } catch (const runner::ReplicaMismatchError& e) {
      // Every rank found it; the line names the ranks. The profile keeps
      // the steps before and the mismatch's record.
      if (shared_profiler) {
        sessions[0]->finishProfile();
        mergeProfiles(o.out, 1, o.json);
      }
      throw std::runtime_error(fmt::format("run: {}", e.what()));
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("run: rank {}: {}", first_failed, e.what()));
    }
  }
  printSummary(o, plan, *sessions[0]);
  if (shared_profiler) {
    const profiler::ProfileSummary ps = sessions[0]->finishProfile();
    if (o.json)
      fmt::print(R"({{"profile":"{}","ranks":{},"kernels":{},"kernels_attributed":{},"graph_kernels":{},)"
                 R"("dropped_records":{}}})" "\n",
                 ps.path, world, ps.kernels, ps.kernels_attributed, ps.graph_kernels, ps.dropped_records);
    else
      fmt::print("profile: {} ranks: {}\n", world, runner::profileSummaryLine(ps));
    std::fflush(stdout);
    mergeProfiles(o.out, 1, o.json);
  } else if (!o.out.empty()) {
    runner::writeStepsRun(o.out, plan, 0, results[0], sessions[0]->executor().memory(), sessions[0]->stats(), {});
  }
}

// --placement resolved once: by the process that starts the ranks (which
// hands it to them), or by each rank under another launcher.
runner::RunPlacement resolvePlacement(const RunOptions& o, const Plan& plan, const cuda::LaunchInfo& info) {
  runner::RunPlacement p;
  if (!o.placement_devices.empty()) {
    p.device_of_rank = parseDevicesText(o.placement_devices, plan.world_size);
    p.source = o.placement_source;
    return p;
  }
  if (o.placement.empty()) return p;
  const ResolvedPlacement r = resolveRunPlacement(o.placement, plan);
  p.device_of_rank = r.device_of_rank;
  p.source = r.source;
  const bool lead = !info.launched() || (info.external() && info.rank == 0);
  if (lead) {
    if (o.json)
      fmt::print(R"({{"placement":[{}],"source":{}}})" "\n", devicesText(p.device_of_rank),
                 nlohmann::json(p.source).dump());
    else
      fmt::print("run: placement from {}: {}\n", p.source, placementLine(p.device_of_rank));
    std::fflush(stdout);
  }
  return p;
}

#endif  // TANDEM_HAVE_CUDA

void runCommand(const RunOptions& o) {
#ifndef TANDEM_HAVE_CUDA
  (void)o;
  throw std::runtime_error(
      "run: this tandem was built without CUDA support (use `tandem train` for the CPU reference executor)");
#else
  if (o.profile && o.out.empty())
    throw std::runtime_error("run: --profile needs --out RUN.sqlite (where the profile goes)");
  if (o.checkpoints.every > 0 && o.checkpoints.dir.empty())
    throw std::runtime_error("run: --checkpoint-every needs --checkpoint-dir");
  if (o.restarts > 0) {
    if (o.checkpoints.dir.empty() || o.checkpoints.every <= 0)
      throw std::runtime_error("run: --restarts needs --checkpoint-dir and --checkpoint-every (a restart resumes "
                               "from the newest checkpoint)");
    if (cuda::detectLauncher(cuda::processEnvironment()).external())
      throw std::runtime_error("run: --restarts supervises runs tandem starts itself; under torchrun or srun use "
                               "their restarts (torchrun --max-restarts, a requeued srun job) with --resume");
    RunOptions attempt = o;
    attempt.restarts = 0;
    std::vector<std::string> args = childArguments(attempt);
    if (o.gpus > 0) args.insert(args.end(), {"--gpus", std::to_string(o.gpus)});
    if (!o.placement.empty()) args.insert(args.end(), {"--placement", o.placement});
    if (!o.rendezvous.empty()) args.insert(args.end(), {"--rendezvous", o.rendezvous});
    if (const int status = runWithRestarts(args, o.restarts, stdout); status != 0)
      throw std::runtime_error(fmt::format("run: the run failed (status {}) after {} restart{}", status, o.restarts,
                                           o.restarts == 1 ? "" : "s"));
    return;
  }
  if (o.profile && !runner::profilingAvailable())
    throw std::runtime_error("run: this tandem was built without the CUPTI profiler (--profile unavailable)");
  cuda::LaunchInfo info;
  int gpus = 0;
  try {
    info = cuda::detectLauncher(cuda::processEnvironment());
    gpus = cuda::launchWorldSize(info, o.gpus, 0);
  } catch (const cuda::LaunchError& e) {
    throw std::runtime_error(std::string("run: ") + e.what());
  }
  JobOptions jo = o.job;
  if (o.steps > 0) jo.sets.push_back(fmt::format("training.steps={}", o.steps));
  if (gpus > 0) {
    // The ranks (GPUs times --ranks-per-gpu) are the job's world: its data
    // parallelism is what the model-parallel groups leave.
    const ParallelSpec& p = jo.load().parallel;
    const int model_ranks = p.tensor_parallel * p.pipeline_parallel * p.context_parallel;
    const int ranks = gpus * o.ranks_per_gpu;
    if (ranks % model_ranks != 0)
      throw std::runtime_error(fmt::format(
          "run: {} ranks ({} GPUs x {} per GPU) are not a multiple of tensor x pipeline x context parallel = {}",
          ranks, gpus, o.ranks_per_gpu, model_ranks));
    jo.sets.push_back(fmt::format("parallel.data_parallel={}", ranks / model_ranks));
  }
  const JobSpec job = jo.load();
  // What the executor would refuse, before looking for GPUs or starting
  // ranks: one line, the same as `tandem plan` prints.
  PlanCacheStats plan_stats;
  const Plan plan = o.plan_cache.plan(job, "tandem run", &plan_stats);
  if (const std::optional<std::string> refusal = gpuRunRefusal(plan))
    throw std::runtime_error("run: the GPU executor refuses the job: " + *refusal);
  if (!o.json && plan_stats.from_cache && info.rank == 0)
    fmt::print("plan read back from the plan cache in {:.2f} s ({})\n", plan_stats.seconds, plan_stats.path);
  // The placement, before looking for GPUs: a bad map is refused at once,
  // and CUDA must count devices in PCI bus order (nvidia-smi's, the map's)
  // from its first call on.
  const runner::RunPlacement placement = resolvePlacement(o, plan, info);
  if (!placement.device_of_rank.empty()) setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", /*overwrite=*/0);
  const int world = plan.world_size;
  if (o.ranks_per_gpu > 1) {
    if (info.launched())
      throw std::runtime_error("run: --ranks-per-gpu runs every rank in one process; not under a launcher");
    if (world != o.ranks_per_gpu)
      throw std::runtime_error(fmt::format("run: --ranks-per-gpu {} puts every rank on one GPU: the job has {} ranks "
                                           "(pass --gpus 1, or --ranks-per-gpu {})",
                                           o.ranks_per_gpu, world, world));
    if (!o.checkpoints.dir.empty() || !o.placement.empty())
      throw std::runtime_error("run: --ranks-per-gpu does not checkpoint or place ranks yet (it checks "
                               "multi-rank plans on one GPU)");
    runLocalRanks(o, plan);
    return;
  }
  if (!info.launched() && world > 1) {
    std::string why;
    const int count = cuda::usableGpuCount(&why);
    if (count == 0) throw std::runtime_error("run: no CUDA GPU available (" + why + ")");
    if (count < world)
      throw std::runtime_error(fmt::format("run: the job needs {} GPUs (one per rank) but {} are visible; "
                                           "pass --gpus {} or fewer, or --ranks-per-gpu {} to run every rank on one",
                                           world, count, count, world));
    RunOptions child = o;
    child.gpus = world;
    child.placement_devices = devicesText(placement.device_of_rank);
    child.placement_source = placement.source;
    std::vector<std::string> args = childArguments(child);
    args.insert(args.end(), {"--gpus", std::to_string(world)});
    if (cuda::launchLocalRanks(world, args, o.timeout_s + 30) != 0)
      throw std::runtime_error(fmt::format("run: {} of {} ranks failed (see above)", "at least one", world));
    if (o.profile) mergeProfiles(o.out, world, o.json);
    return;
  }
  try {
    runRank(o, plan, info, placement);
  } catch (const cuda::CudaError& e) {
    // A failed rank may have kernels or NCCL work still queued: leave without
    // running destructors that would synchronise with them.
    std::fflush(stdout);
    std::fprintf(stderr, "tandem: error: %s\n", e.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
#endif
}

void addRunCommand(CLI::App& root) {
  auto* cmd = root.add_subcommand("run", "Train a job on local GPUs with the CUDA executor (CUDA Graph by default)");
  auto o = std::make_shared<RunOptions>();
  o->job.addTo(*cmd, true);
  o->plan_cache.addTo(*cmd);
  cmd->add_option("--gpus", o->gpus,
                  "GPUs (one process per rank); the ranks are the job's world, its data parallelism what tensor, "
                  "pipeline and context parallelism leave; default: the job's world")
      ->check(wholeNumberAtLeast(1));
  cmd->add_option("--ranks-per-gpu", o->ranks_per_gpu,
                  "run this many ranks on each GPU in one process (threads, collectives in-process, one CUDA Graph for "
                  "every rank's step unless --eager): "
                  "to check a multi-rank plan where fewer GPUs are at hand; with --gpus 1 every rank shares GPU 0")
      ->check(wholeNumberAtLeast(1));
  cmd->add_option("--steps", o->steps, "steps to run (default: training.steps of the job)")
      ->check(wholeNumberAtLeast(1));
  cmd->add_option("--stop-after", o->stop_after,
                  "stop after this step, as a time-limited allocation would, the learning-rate schedule still "
                  "spanning --steps; with --checkpoint-dir its last step is saved (go on later with --resume)")
      ->check(wholeNumberAtLeast(1));
  cmd->add_flag("--eager", o->eager, "issue every kernel each step instead of replaying a captured CUDA Graph");
  cmd->add_flag("--json", o->json, "print one JSON object per step and a summary line");
  cmd->add_option("--timeout", o->timeout_s, "seconds to wait for a step or a collective before aborting")
      ->check(numberAboveZero());
  cmd->add_option("--out", o->out, "append the run (steps, throughput, memory) to this trace file")
      ->type_name("RUN.sqlite");
  cmd->add_option("--rendezvous", o->rendezvous,
                  "under mpirun/srun/torchrun: a folder every rank sees, where rank 0 leaves the NCCL id (default "
                  "under srun: $SLURM_SUBMIT_DIR/.tandem-rendezvous/JOB.STEP; under mpirun MPI_Bcast when built "
                  "with MPI)")
      ->type_name("DIR");
  cmd->add_option("--placement", o->placement,
                  "which GPU each rank opens: a map from `tandem place --out` (rank r on its GPU `local`), or auto "
                  "(this machine's `nvidia-smi topo -m`, placed as `tandem place` does); recorded in the run's stats "
                  "(placement.device.rankN)")
      ->type_name("auto|MAP.yaml");
  cmd->add_option("--placement-devices", o->placement_devices)->group("");  // handed to the ranks tandem run starts
  cmd->add_option("--placement-source", o->placement_source)->group("");
  cmd->add_option("--checkpoint-dir", o->checkpoints.dir,
                  "folder of checkpoints (DIR/step-N: a file per layer, manifest.json written last); one GPU")
      ->type_name("DIR");
  cmd->add_option("--checkpoint-every", o->checkpoints.every,
                  "write a checkpoint every N steps (the state copied out between steps, written while the next "
                  "run)")
      ->check(wholeNumberAtLeast(1));
  cmd->add_option("--keep", o->checkpoints.keep, "complete checkpoints to keep, the newest (default: all)")
      ->check(wholeNumberAtLeast(1));
  cmd->add_flag("--resume", o->checkpoints.resume,
                "continue from the newest complete checkpoint in --checkpoint-dir; --steps is the step to train up to");
  cmd->add_option("--restarts", o->restarts,
                  "run as a child process, started again from the newest complete checkpoint when it dies, at most "
                  "this many times (needs --checkpoint-dir and --checkpoint-every)")
      ->check(CLI::Range(0, 1000));
  cmd->add_flag("--profile", o->profile,
                "profile with CUPTI + NVTX: every kernel tagged with its plan task; each rank writes RUN.rankN.sqlite, "
                "merged into --out at the end");
  cmd->footer(
      "Environment: TANDEM_GEMM_TUNING=0 keeps cuBLASLt's first algorithm choice (bit-reproducible across "
      "processes; by default each GEMM shape's candidates are timed before the first step); TANDEM_FUSION=0 "
      "runs the GELUs the plan fused into their GEMMs as kernels of their own (the run then differs from its plan "
      "and its simulation), TANDEM_FUSION=all also moves the bias gradients into the weight GEMMs; "
      "TANDEM_ATTN_MMA=sync runs the bf16 attention on mma.sync instead of Hopper's wgmma (the default where the "
      "GPU runs the sm_90a code). See docs/gpu-executor.md.");
  cmd->add_option("--check-replicas-every", o->checkpoints.check_replicas_every,
                  "after every N steps compare the data-parallel replicas' state (parameters; master weights, "
                  "moments and reduced gradients where not sharded; a fingerprint per tensor on each GPU, gathered "
                  "over the group); a difference stops the run naming the step, the ranks and the first tensor "
                  "(default 0: off)")
      ->check(wholeNumberAtLeast(0));
  cmd->callback([o] {
    // Tests of the replica check: TANDEM_TEST_FLIP_BIT=RANK:STEP flips one
    // bit of that rank's replicated state after that step
    // (checkpoint::flipTarget: a master weight's top mantissa bit).
    if (const char* flip = std::getenv("TANDEM_TEST_FLIP_BIT"))
      if (std::sscanf(flip, "%d:%d", &o->checkpoints.flip_rank, &o->checkpoints.flip_after_step) != 2)
        throw std::runtime_error("TANDEM_TEST_FLIP_BIT takes RANK:STEP");
    runCommand(*o);
  });
}

const CommandRegistration reg{"run", 30, &addRunCommand};

}  // namespace
}  // namespace tandem::cli
