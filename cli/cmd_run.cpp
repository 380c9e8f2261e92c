// tandem run: train a job on local GPUs with the CUDA executor. Compiles
// without CUDA too; then (or without a GPU) it says so in one line and fails.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "cli/command_registry.h"
#include "cli/job_options.h"
#include "cli/plan_summary.h"
#include "cli/number_checks.h"
#include "engine/memory/gpu_footprint.h"
#include "engine/plan/gpu_support.h"
#include "engine/memory/memory_fit.h"
#include "engine/plan/planner.h"
#include "vocabulary/version.h"

#ifdef TANDEM_HAVE_CUDA
#include <unistd.h>

#include "engine/cuda/device.h"
#include "engine/cuda/executor.h"
#include "engine/cuda/launcher.h"
#include "engine/cuda/rendezvous.h"
#include "plan_trace/plan_facts.h"
#include "traces/store/trace_writer.h"
#endif
#ifdef TANDEM_HAVE_PROFILER
#include "plan_trace/gpu/plan_observer.h"
#include "traces/store/atomic_output.h"
#include "traces/store/merge.h"
#endif

namespace tandem::cli {
namespace {

struct RunOptions {
  JobOptions job;
  int gpus = 0;  // 0: the job's data_parallel
  int steps = 0;
  bool eager = false;
  bool json = false;
  double timeout_s = 30;  // a dead peer is detected within this (plus the step in flight)
  std::string out;
  bool profile = false;  // CUPTI + NVTX into per-rank files, merged into `out`
  std::string rendezvous;  // under mpirun/srun/torchrun: the folder where rank 0 leaves the NCCL id
};

#ifdef TANDEM_HAVE_CUDA

constexpr double kGiB = double(1 << 30);

// Recompute, micro-batch and LM-head choices whose plan fits `free_bytes`
// with the executor's own buffers and 512 MiB to spare (engine/memory/memory_fit.h).
std::string fittingChoices(const JobSpec& job, int64_t free_bytes) {
  const std::vector<FittingChoice> fits = choicesThatFit(job, free_bytes, gpu_footprint::runOverheadBytes);
  if (fits.empty()) return "no recompute policy, micro-batch or LM head split fits on this GPU";
  std::string s = "choices that fit: ";
  for (size_t i = 0; i < fits.size(); ++i) s += (i ? "; " : "") + fits[i].text(job);
  return s;
}

std::vector<std::string> childArguments(const RunOptions& o) {
  std::vector<std::string> args{"run", o.job.job};
  for (const auto& s : o.job.sets) args.insert(args.end(), {"--set", s});
  if (o.steps > 0) args.insert(args.end(), {"--steps", std::to_string(o.steps)});
  if (o.eager) args.push_back("--eager");
  if (o.json) args.push_back("--json");
  if (!o.out.empty()) args.insert(args.end(), {"--out", o.out});
  if (o.profile) args.push_back("--profile");
  args.insert(args.end(), {"--timeout", fmt::format("{}", o.timeout_s)});
  return args;
}

void writeTrace(const std::string& path, const Plan& plan, const cuda::DeviceInfo& dev,
                const std::vector<cuda::GpuStepResult>& steps, const cuda::GpuMemoryReport& mem,
                double tokens_per_s, double mfu) {
  namespace fs = std::filesystem;
  const std::string tmp = path + ".tmp";
  std::error_code ec;
  fs::remove(tmp, ec);
  if (fs::exists(path)) fs::copy_file(path, tmp);
  {
    traces::TraceWriter w(tmp);
    traces::RunInfo info;
    info.kind = traces::RunKind::Real;
    info.name = plan.job.name;
    info.job_yaml = plan.job.yaml;
    info.job_hash = plan.job.content_hash;
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    info.host = host;
    info.devices_json = cuda::devicesJson(cuda::deviceRecord(dev.index));
    info.tool_version = std::string(toolVersion());
    info.plan_format = plan.version;
    info.created_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    info.world_size = plan.world_size;
    w.beginRun(info);
    w.setPlanFacts(plan_trace::planFacts(plan));
    int64_t t = 0;
    for (const auto& s : steps) {
      const int64_t dur = int64_t(s.ms * 1e6);
      w.addStep({0, s.step, t, t + dur});
      t += dur;
    }
    w.setStat({"tokens_per_second", int64_t(tokens_per_s), traces::Severity::Info, "median over measured steps"});
    w.setStat({"mfu_ppm", int64_t(mfu * 1e6), traces::Severity::Info,
               "PaLM model FLOPs utilisation, parts per million"});
    w.setStat({"planned_arena_bytes", mem.planned_arena_bytes, traces::Severity::Info, "memory plan peak"});
    w.setStat({"planned_executor_bytes", gpu_footprint::executorFootprint(plan).total(), traces::Severity::Info,
               "executor buffers beyond the arena, as counted from the plan"});
    w.setStat({"allocated_bytes", mem.allocated_bytes, traces::Severity::Info, "arena + workspace + scratch"});
    w.setStat({"device_used_bytes", mem.device_used_bytes, traces::Severity::Info,
               "after setup, incl. context and NCCL"});
    w.flush();
  }
  fs::rename(tmp, path);
}

#ifdef TANDEM_HAVE_PROFILER
// RUN.sqlite -> RUN.rank3.sqlite: each rank profiles into its own file (never
// several processes into one SQLite file); the files stay for `tandem merge`.
std::string rankTracePath(const std::string& out, int rank) {
  std::filesystem::path p(out);
  const std::string stem = p.extension() == ".sqlite" ? p.stem().string() : p.filename().string();
  return (p.parent_path() / fmt::format("{}.rank{}.sqlite", stem, rank)).string();
}

// Merges the ranks' profiles into `out` (appended as one run; written whole or not at all).
void mergeProfiles(const std::string& out, int world, bool json) {
  std::vector<std::string> inputs;
  for (int r = 0; r < world; ++r) inputs.push_back(rankTracePath(out, r));
  traces::AtomicOutput output(out, true);
  traces::MergeResult m;
  {
    traces::TraceWriter writer(output.tempPath());
    m = traces::mergeTraces(inputs, writer);
  }
  output.commit();
  if (json)
    fmt::print(R"({{"profile_merged":"{}","run":{},"ranks":{},"activities":{}}})" "\n", out, m.run, m.ranks,
               m.activities);
  else
    fmt::print("profile: merged {} rank files into {} (run {}, {} activities)\n", m.inputs, out, m.run, m.activities);
}

std::unique_ptr<profiler::Profiler> startProfiler(const RunOptions& o, const Plan& plan, const cuda::DeviceInfo& dev,
                                                  int rank, int device) {
  profiler::ProfilerOptions po;
  po.path = rankTracePath(o.out, rank);
  std::error_code ec;
  std::filesystem::remove(po.path, ec);  // one run per rank file: a fresh profile
  po.run.name = plan.job.name;
  po.run.job_yaml = plan.job.yaml;
  po.run.job_hash = plan.job.content_hash;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  po.run.host = host;
  po.run.devices_json = cuda::devicesJson(cuda::deviceRecord(dev.index));
  po.run.tool_version = std::string(toolVersion());
  po.run.plan_format = plan.version;
  po.plan_facts = plan_trace::planFacts(plan);
  po.run.world_size = plan.world_size;
  po.rank = rank;
  po.device = device;
  po.arena_bytes = plan.programs.at(0).memory.arena_bytes;
  po.arena_peak_bytes = plan.programs.at(0).memory.peak_bytes;
  return std::make_unique<profiler::Profiler>(po);
}
#endif

#ifdef TANDEM_HAVE_PROFILER
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
#endif

void runRank(const RunOptions& o, const JobSpec& job, const Plan& plan, const cuda::LaunchInfo& info) {
  std::string why;
  const int count = cuda::usableGpuCount(&why);
  if (count == 0) throw std::runtime_error("run: no CUDA GPU available (" + why + ")");
  const int rank = info.launched() ? info.rank : 0;
  const int world = info.launched() ? info.world : 1;
  if (plan.world_size != world)
    throw std::runtime_error(fmt::format("run: the job is planned for {} ranks but {} run it", plan.world_size, world));
  // The GPU: the launcher's local rank (one GPU per rank on a host); a rank
  // that sees a single GPU (CUDA_VISIBLE_DEVICES set per rank) uses it.
  const int local = info.local_rank >= 0 ? info.local_rank : rank;
  if (info.external() && count > 1 && local >= count)
    throw std::runtime_error(fmt::format("run: rank {} is local rank {} on this host but only {} GPUs are visible "
                                         "(one GPU per rank)", rank, local, count));
  cuda::RendezvousPlan rendezvous;
  try {
    rendezvous = cuda::planRendezvous(info, o.rendezvous, cuda::processEnvironment());
  } catch (const cuda::LaunchError& e) {
    throw std::runtime_error(std::string("run: ") + e.what());
  }
  cuda::ExecutorOptions eo;
  eo.rank = rank;
  eo.world = world;
  eo.device = count == 1 ? 0 : local % count;
  eo.use_graph = !o.eager;
  eo.timeout_s = o.timeout_s;
  const cuda::DeviceInfo dev = cuda::deviceInfo(eo.device);
  if (rank == 0 && info.external()) {
    if (o.json)
      fmt::print(R"({{"launcher":"{}","world":{},"nccl_id":"{}"}})" "\n", cuda::launcherName(info.launcher), world,
                 rendezvous.describe());
    else
      fmt::print("run: started by {}: {} ranks; NCCL id via {}\n", cuda::launcherName(info.launcher), world,
                 rendezvous.describe());
    std::fflush(stdout);
  }
  if (rendezvous.mpi) cuda::mpiInit();
  if (world > 1) {
    try {
      // tandem's own launch starts every rank at once; other launchers get --timeout.
      eo.nccl_id = cuda::shareNcclId(info, rendezvous,
                                     info.launcher == cuda::Launcher::Tandem ? std::max(120.0, o.timeout_s)
                                                                             : o.timeout_s);
    } catch (const cuda::LaunchError& e) {
      throw cuda::CudaError(e.what());
    }
  }
#ifdef TANDEM_HAVE_PROFILER
  std::unique_ptr<profiler::Profiler> prof;
  std::unique_ptr<plan_trace::PlanObserver> observer;
  if (o.profile) {
    prof = startProfiler(o, plan, dev, rank, eo.device);
    observer = std::make_unique<plan_trace::PlanObserver>(*prof, plan.programs.at(0));
    eo.observer = observer.get();
  }
#endif
  std::unique_ptr<cuda::CudaExecutor> exec;
  // A large model's set-up takes a while (weights drawn on the host, GEMM
  // algorithms timed, the step captured): say so before it starts.
  if (rank == 0 && !o.json && plan.summary.parameters >= 1'000'000'000)
    fmt::print("run {}: setting up {:.2f}B parameters (initial weights, GEMM timing, graph capture)...\n",
               plan.job.name, double(plan.summary.parameters) / 1e9);
  std::fflush(stdout);
  try {
    exec = std::make_unique<cuda::CudaExecutor>(plan, eo);
  } catch (const cuda::OutOfDeviceMemory& e) {
    throw std::runtime_error(std::string(e.what()) + "; " + fittingChoices(job, e.free_bytes));
  }
  // Every rank joined the communicator: the id file has served.
  cuda::finishRendezvous(info, rendezvous);
  const bool lead = rank == 0;
  if (lead) {
    // Where the wait before the first step went (a minute or more for 7B).
    const cuda::SetupTimes st = exec->setupTimes();
    if (o.json)
      fmt::print(R"({{"setup_s":{:.3f},"kernels_and_arena_s":{:.3f},"tables_s":{:.3f},"gemm_timing_s":{:.3f},)"
                 R"("initial_weights_s":{:.3f}}})"
                 "\n",
                 st.total_s, st.kernels_and_arena_s, st.tables_s, st.gemm_timing_s, st.initial_weights_s);
    else if (st.total_s >= 5)
      fmt::print("set-up {:.1f} s: kernels and arena {:.1f} s, task tables {:.1f} s, GEMM timing {:.1f} s, initial "
                 "weights {:.1f} s\n",
                 st.total_s, st.kernels_and_arena_s, st.tables_s, st.gemm_timing_s, st.initial_weights_s);
  }
  if (lead && !o.json && !exec->gemmTuning().empty()) {
    const cuda::GemmTuningTotals t = cuda::totalsOf(exec->gemmTuning());
    fmt::print("GEMM algorithms timed for {} shapes, {} changed from cuBLASLt's first choice: {:.3f} -> {:.3f} ms "
               "for one of each, {} -> {} extra graph nodes (TANDEM_GEMM_TUNING=0 turns this off)\n",
               t.shapes, t.changed, t.first_ms, t.chosen_ms, t.first_extra_nodes, t.chosen_extra_nodes);
  }
#ifdef TANDEM_HAVE_PROFILER
  // Clock offsets between ranks, before the first step (outside graph
  // capture and the timed steps) and after the last.
  std::vector<cuda::ClockOffset> offsets_start;
  auto measureClocks = [&](bool at_end) {
    if (!prof || !exec->communicator()) return;
    prof->clockSyncBegin();
    std::vector<cuda::ClockOffset> all =
        exec->communicator()->measureClockOffsets([&prof] { return prof->nowNs(); }, 20);
    const cuda::ClockOffset& mine = all.at(size_t(rank));
    prof->clockSyncEnd({mine.local_ns, mine.offset_ns, mine.rtt_ns}, at_end);
    if (lead) printClockOffsets(all, at_end ? &offsets_start : nullptr, o.json);
    if (!at_end) offsets_start = all;
  };
  measureClocks(false);
#endif
  const int steps = plan.job.training.steps;
  const double tokens = double(plan.job.tokensPerStep());
  const double peak = dev.peak_bf16_flops;
  const double flops_per_step = plan.summary.model_flops_per_token * tokens;
  if (lead && !o.json)
    fmt::print("run {}: {} x {} ({} SMs), {} steps, {} tokens/step, {}, arena {:.2f} GiB\n", plan.job.name,
               world, dev.name, dev.sm_count, steps, int64_t(tokens), o.eager ? "eager" : "CUDA graph",
               plan.programs[0].memory.arena_bytes / kGiB);
  if (lead && !o.json)
    if (const std::optional<std::string> note = oneRankShardingNote(plan)) fmt::print("run: note: {}\n", *note);
  // exec->run keeps the next step queued behind the running one (graph mode,
  // not profiling), so the per-step figures are GPU time without host gaps.
  std::vector<std::chrono::steady_clock::time_point> ended;  // when the host saw each step end
  auto report = [&](const cuda::GpuStepResult& r) {
    ended.push_back(std::chrono::steady_clock::now());
    const double tps = tokens / (r.ms / 1e3);
    const double mfu = peak > 0 ? flops_per_step / (r.ms / 1e3) / (world * peak) : 0;
    if (!lead) return;
    if (o.json)
      fmt::print(R"({{"step":{},"loss":{:.6f},"grad_norm":{:.6f},"lr":{:.6e},"ms":{:.3f},)"
                 R"("tokens_per_s":{:.0f},"mfu":{:.4f}}})"
                 "\n",
                 r.step + 1, r.loss, r.grad_norm, r.lr, r.ms, tps, mfu);
    else
      fmt::print("step {:>5}/{}  loss {:.6f}  norm {:.4f}  lr {:.3e}  {:8.2f} ms  {:9.0f} tok/s  MFU {:5.1f}%\n",
                 r.step + 1, steps, r.loss, r.grad_norm, r.lr, r.ms, tps, 100 * mfu);
    std::fflush(stdout);
  };
  const std::vector<cuda::GpuStepResult> results = exec->run(steps, report);
#ifdef TANDEM_HAVE_PROFILER
  measureClocks(true);
#endif
  // Steady state: drop the first steps (graph capture, cuBLASLt heuristics, warm-up).
  std::vector<double> ms;
  for (size_t i = std::min<size_t>(3, results.size() / 2); i < results.size(); ++i) ms.push_back(results[i].ms);
  std::sort(ms.begin(), ms.end());
  const double med = ms.empty() ? 0 : ms[ms.size() / 2];
  // Wall time per step as a training loop sees it: between two step ends.
  std::vector<double> wall;
  for (size_t i = std::max<size_t>(1, std::min<size_t>(3, ended.size() / 2)); i < ended.size(); ++i)
    wall.push_back(std::chrono::duration<double, std::milli>(ended[i] - ended[i - 1]).count());
  std::sort(wall.begin(), wall.end());
  const double wall_med = wall.empty() ? 0 : wall[wall.size() / 2];
  const double tps = med > 0 ? tokens / (med / 1e3) : 0;
  const double mfu = (peak > 0 && med > 0) ? flops_per_step / (med / 1e3) / (world * peak) : 0;
  const cuda::GpuMemoryReport mem = exec->memory();
  // What the plan says the executor allocates beyond the arena
  // (engine/memory/gpu_footprint.h), beside what it did.
  const int64_t counted = gpu_footprint::executorFootprint(plan).total();
  if (lead) {
    if (o.json)
      fmt::print(R"({{"summary":true,"median_ms":{:.3f},"median_wall_ms":{:.3f},"tokens_per_s":{:.0f},"mfu":{:.4f},)"
                 R"("planned_arena_bytes":{},"planned_executor_bytes":{},"allocated_bytes":{},"device_used_bytes":{}}})"
                 "\n",
                 med, wall_med, tps, mfu, mem.planned_arena_bytes, counted, mem.allocated_bytes,
                 mem.device_used_bytes);
    else
      fmt::print("median {:.2f} ms/step on the GPU ({:.2f} ms wall between step ends), {:.0f} tokens/s, MFU {:.1f}% "
                 "({:.0f} TFLOP/s peak per GPU)\n"
                 "memory: planned arena {:.3f} GiB + executor {:.1f} MiB; allocated {:.3f} GiB (workspace {:.0f} MiB, "
                 "scratch {:.1f} MiB); device in use {:.3f} GiB\n",
                 med, wall_med, tps, 100 * mfu, peak / 1e12, mem.planned_arena_bytes / kGiB,
                 counted / double(1 << 20), mem.allocated_bytes / kGiB, mem.workspace_bytes / double(1 << 20),
                 mem.scratch_bytes / double(1 << 20), mem.device_used_bytes / kGiB);
    if (!o.out.empty() && !o.profile) writeTrace(o.out, plan, dev, results, mem, tps, mfu);
  }
#ifdef TANDEM_HAVE_PROFILER
  if (prof) {
    prof->setStat({"tokens_per_second", int64_t(tps), traces::Severity::Info, "median over measured steps"});
    prof->setStat({"mfu_ppm", int64_t(mfu * 1e6), traces::Severity::Info,
                   "PaLM model FLOPs utilisation, parts per million"});
    prof->setStat({"planned_arena_bytes", mem.planned_arena_bytes, traces::Severity::Info, "memory plan peak"});
    prof->setStat({"planned_executor_bytes", counted, traces::Severity::Info,
                   "executor buffers beyond the arena, as counted from the plan"});
    prof->setStat({"allocated_bytes", mem.allocated_bytes, traces::Severity::Info, "arena + workspace + scratch"});
    prof->setStat({"device_used_bytes", mem.device_used_bytes, traces::Severity::Info,
                   "after setup, incl. context and NCCL"});
    const profiler::ProfileSummary ps = prof->finish();
    if (o.json)
      fmt::print(R"({{"profile_rank":{},"file":"{}","kernels":{},"kernels_attributed":{},"nccl_kernels":{},)"
                 R"("nccl_attributed":{},"nccl_on_comm_stream":{},"graph_kernels":{},"dropped_records":{}}})"
                 "\n",
                 rank, ps.path, ps.kernels, ps.kernels_attributed, ps.nccl_kernels, ps.nccl_attributed,
                 ps.nccl_on_comm_stream, ps.graph_kernels, ps.dropped_records);
    else
      fmt::print("rank {}: {}\n", rank, profiler::formatSummary(ps));
    std::fflush(stdout);
    if (!info.launched()) {
      mergeProfiles(o.out, 1, o.json);
    } else if (info.external() && world > 1) {
      // No parent process sees every rank: rank 0 merges once every rank has
      // written its file, if it can see them all (a shared folder).
      exec->communicator()->barrier("the end of profiling");
      if (lead) {
        std::vector<std::string> missing;
        for (int r = 0; r < world; ++r)
          if (!std::filesystem::exists(rankTracePath(o.out, r))) missing.push_back(rankTracePath(o.out, r));
        if (missing.empty())
          mergeProfiles(o.out, world, o.json);
        else
          fmt::print("profile: {} of {} rank files are not visible here (e.g. {}; other hosts?): run `tandem merge "
                     "RANK_FILES... --out {}` where they all are\n",
                     missing.size(), world, missing.front(), o.out);
      }
    }
  }
#endif
  if (rendezvous.mpi) cuda::mpiFinalize();
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
#ifndef TANDEM_HAVE_PROFILER
  if (o.profile)
    throw std::runtime_error("run: this tandem was built without the CUPTI profiler (--profile unavailable)");
#endif
  cuda::LaunchInfo info;
  int gpus = 0;
  try {
    info = cuda::detectLauncher(cuda::processEnvironment());
    gpus = cuda::launchWorldSize(info, o.gpus, 0);
  } catch (const cuda::LaunchError& e) {
    throw std::runtime_error(std::string("run: ") + e.what());
  }
  JobOptions jo = o.job;
  if (gpus > 0) jo.sets.push_back(fmt::format("parallel.data_parallel={}", gpus));
  if (o.steps > 0) jo.sets.push_back(fmt::format("training.steps={}", o.steps));
  const JobSpec job = jo.load();
  // What the executor would refuse, before looking for GPUs or starting
  // ranks: one line, the same as `tandem plan` prints.
  const Plan plan = buildPlan(job);
  if (const std::optional<std::string> refusal = gpuRunRefusal(plan))
    throw std::runtime_error("run: the GPU executor refuses the job: " + *refusal);
  const int world = job.parallel.data_parallel;
  if (!info.launched() && world > 1) {
    std::string why;
    const int count = cuda::usableGpuCount(&why);
    if (count == 0) throw std::runtime_error("run: no CUDA GPU available (" + why + ")");
    if (count < world)
      throw std::runtime_error(fmt::format("run: the job needs {} GPUs (data parallel) but {} are visible; "
                                           "pass --gpus {} or fewer", world, count, count));
    RunOptions child = o;
    child.gpus = world;
    std::vector<std::string> args = childArguments(child);
    args.insert(args.end(), {"--gpus", std::to_string(world)});
    if (cuda::launchLocalRanks(world, args, o.timeout_s + 30) != 0)
      throw std::runtime_error(fmt::format("run: {} of {} ranks failed (see above)", "at least one", world));
#ifdef TANDEM_HAVE_PROFILER
    if (o.profile) mergeProfiles(o.out, world, o.json);
#endif
    return;
  }
  try {
    runRank(o, job, plan, info);
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
  cmd->add_option("--gpus", o->gpus, "GPUs (one process each, data parallel); default: parallel.data_parallel")
      ->check(wholeNumberAtLeast(1));
  cmd->add_option("--steps", o->steps, "steps to run (default: training.steps of the job)")
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
  cmd->callback([o] { runCommand(*o); });
}

const CommandRegistration reg{"run", 30, &addRunCommand};

}  // namespace
}  // namespace tandem::cli
