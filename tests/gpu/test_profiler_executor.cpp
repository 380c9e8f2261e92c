// The profiler behind the CUDA executor (one GPU, the tiny job): in CUDA
// Graph mode and in eager mode every kernel must be tagged with a plan task,
// carry that task's phase and stream, and both modes must agree task by task
// on how many kernels each task launches per step. The graph run also
// brackets GPU work with a clock measurement (clockSyncBegin/End, as `tandem
// run` does around its NCCL ping-pong): that work is counted apart, and the
// offsets land in the clocks rows and stats. Then ranks sharing the GPU in
// one process (tensor x pipeline parallel 2 x 2, in-process collectives, one
// profiler for all): every kernel of every rank tagged with a task of that
// rank's program, on that task's stream, in graph and eager mode.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "engine/cuda/executor.h"
#include "engine/cuda/local_comm.h"
#include "engine/plan/planner.h"
#include "plan_trace/gpu/plan_observer.h"
#include "tests/gpu/gpu_test.h"
#include "traces/store/trace_reader.h"

using namespace tandem;
using namespace tandem::gputest;
namespace tr = tandem::traces;

namespace {

constexpr int kSteps = 4;

struct Profiled {
  profiler::ProfileSummary summary;
  std::map<int64_t, int> kernels_per_task;  // over all steps
  int wrong_phase = 0, wrong_stream = 0, untagged = 0, steps = 0;
  std::map<std::string, tr::ClockRow> clocks;  // by source
  std::map<std::string, int64_t> stats;
  int64_t clock_track_records = 0;
  int64_t setup_track_kernels = 0;  // GEMM algorithm timing before the first step
  int64_t setup_track_copies = 0;   // copies and memsets there (the initial weights, the arena zeroed)
  int64_t copies_before_steps_elsewhere = 0;  // before the first step, off the set-up track
  bool steps_disjoint = true;         // each step row ends before the next begins
  std::vector<int> kernels_per_step;  // task kernels starting inside each step row
};

// Work "measured" between clockSyncBegin and clockSyncEnd: a memset on a
// stream of its own, the way the ping-pong runs on the communicator's.
profiler::ClockOffsetSample fakeMeasurement(profiler::Profiler& prof, int64_t offset_ns, bool at_end) {
  prof.clockSyncBegin();
  cudaStream_t s = nullptr;
  void* buf = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaMalloc(&buf, 4096);
  cudaMemsetAsync(buf, 0, 4096, s);
  cudaStreamSynchronize(s);
  const int64_t now = prof.nowNs();
  prof.clockSyncEnd({now, offset_ns, 7000}, at_end);
  cudaFree(buf);
  cudaStreamDestroy(s);
  return {now, offset_ns, 7000};
}

// queued: CudaExecutor::run, which launches each replay before the previous step ends.
Profiled profileRun(const Plan& plan, bool graph, const std::string& path, bool clock, bool queued = false) {
  std::filesystem::remove(path);
  Profiled out;
  {
    profiler::ProfilerOptions po;
    po.path = path;
    po.run.name = graph ? "graph" : "eager";
    po.arena_bytes = plan.programs[0].memory.arena_bytes;
    profiler::Profiler prof(po);
    plan_trace::PlanObserver obs(prof, plan.programs[0]);
    cuda::ExecutorOptions eo;
    eo.use_graph = graph;
    eo.observer = &obs;
    cuda::CudaExecutor exec(plan, eo);
    if (clock) fakeMeasurement(prof, -1000, false);
    if (queued)
      exec.run(kSteps);
    else
      for (int s = 0; s < kSteps; ++s) exec.step();
    if (clock) fakeMeasurement(prof, -1500, true);
    out.summary = prof.finish();
    fmt::print("     {}: {}\n", queued ? "graph, steps queued ahead" : graph ? "graph" : "eager",
               profiler::formatSummary(out.summary));
  }
  std::map<int64_t, const Task*> by_id;
  for (const Task& t : plan.programs[0].tasks) by_id[t.id] = &t;
  tr::TraceReader reader(path);
  const int64_t run = reader.defaultRunId();
  int setup_stream = -1;
  for (const auto& st : reader.streams(run))
    if (st.name == "executor set-up (GEMM algorithm timing)") setup_stream = st.stream;
  reader.forEachActivity(run, [&](const tr::ActivityRow& a) {
    if (a.kind != tr::ActivityKind::Kernel) return;
    if (a.stream == setup_stream) {
      ++out.setup_track_kernels;
      if (a.task_id >= 0) ++out.untagged;  // set-up work must stay untagged: count it as wrong
      return;
    }
    auto it = by_id.find(int(a.task_id));
    if (a.task_id < 0 || it == by_id.end()) {
      ++out.untagged;
      return;
    }
    ++out.kernels_per_task[a.task_id];
    if (a.phase != it->second->phase) ++out.wrong_phase;
    if (a.stream != it->second->stream) ++out.wrong_stream;
  });
  std::vector<tr::StepRow> step_rows = reader.steps(run);
  out.steps = int(step_rows.size());
  std::sort(step_rows.begin(), step_rows.end(),
            [](const tr::StepRow& a, const tr::StepRow& b) { return a.step < b.step; });
  for (size_t i = 1; i < step_rows.size(); ++i)
    if (step_rows[i - 1].end_ns > step_rows[i].start_ns) out.steps_disjoint = false;
  out.kernels_per_step.assign(step_rows.size(), 0);
  const int64_t first_step = step_rows.empty() ? INT64_MAX : step_rows.front().start_ns;
  std::set<int> clock_streams;  // the measured clock offsets' memsets (fakeMeasurement) come before the steps too
  for (const auto& st : reader.streams(run))
    if (st.name == "clock offset measurement") clock_streams.insert(st.stream);
  reader.forEachActivity(run, [&](const tr::ActivityRow& a) {
    if (a.kind != tr::ActivityKind::Memcpy && a.kind != tr::ActivityKind::Memset) return;
    if (clock_streams.count(a.stream)) return;
    if (a.stream == setup_stream)
      ++out.setup_track_copies;
    else if (a.start_ns < first_step)
      ++out.copies_before_steps_elsewhere;
  });
  reader.forEachActivity(run, [&](const tr::ActivityRow& a) {
    if (a.kind != tr::ActivityKind::Kernel || a.task_id < 0) return;
    for (size_t i = 0; i < step_rows.size(); ++i)
      if (a.start_ns >= step_rows[i].start_ns && a.start_ns <= step_rows[i].end_ns) ++out.kernels_per_step[i];
  });
  for (const auto& c : reader.clocks(run)) out.clocks[c.source] = c;
  for (const auto& st : reader.stats(run)) out.stats[st.name] = st.value;
  // Memsets on the track(s) of the clock measurement.
  for (const auto& st : reader.streams(run))
    if (st.name == "clock offset measurement") {
      const tr::Track t = reader.loadTrack(run, 0, st.stream);
      for (size_t i = 0; i < t.size(); ++i)
        if (t.kind[i] == tr::ActivityKind::Memset) ++out.clock_track_records;
    }
  std::filesystem::remove(path);
  return out;
}

// Every rank of `plan` on this GPU, one profiler for all of them.
struct RanksProfiled {
  profiler::ProfileSummary summary;
  std::vector<int> kernels, attributed, wrong_stream, steps;  // per rank
  int foreign_ranks = 0;  // kernel rows of a rank outside the plan
};

RanksProfiled profileRanks(const Plan& plan, bool graph, const std::string& path) {
  std::filesystem::remove(path);
  const int world = plan.world_size;
  RanksProfiled out;
  {
    profiler::ProfilerOptions po;
    po.path = path;
    po.run.name = graph ? "ranks graph" : "ranks eager";
    po.ranks = world;
    profiler::Profiler prof(po);
    auto local = std::make_shared<cuda::LocalWorld>(plan, 0, 60);
    std::vector<std::unique_ptr<plan_trace::PlanObserver>> observers;
    std::vector<std::unique_ptr<cuda::CudaExecutor>> execs(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r)
      observers.push_back(std::make_unique<plan_trace::PlanObserver>(prof, plan.forRank(r), r));
    std::vector<std::string> errors(static_cast<size_t>(world));
    auto onEveryRank = [&](const std::function<void(int)>& fn) {
      std::vector<std::thread> threads;
      for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
          try {
            cudaSetDevice(0);
            fn(r);
          } catch (const std::exception& e) {
            errors[size_t(r)] = e.what();
            local->abort(e.what());
          }
        });
      for (auto& t : threads) t.join();
      for (const std::string& e : errors)
        if (!e.empty()) throw std::runtime_error(e);
    };
    onEveryRank([&](int r) {
      cuda::ExecutorOptions eo;
      eo.rank = r;
      eo.world = world;
      eo.use_graph = graph;
      eo.tune_gemms = false;
      eo.local_world = local;
      eo.observer = observers[size_t(r)].get();
      execs[size_t(r)] = std::make_unique<cuda::CudaExecutor>(plan, eo);
    });
    onEveryRank([&](int r) { execs[size_t(r)]->run(kSteps); });
    out.summary = prof.finish();
    fmt::print("     {} ranks on one GPU, {}: {}\n", world, graph ? "graph" : "eager", profiler::formatSummary(out.summary));
  }
  out.kernels.assign(size_t(world), 0);
  out.attributed.assign(size_t(world), 0);
  out.wrong_stream.assign(size_t(world), 0);
  out.steps.assign(size_t(world), 0);
  std::vector<std::map<int64_t, const Task*>> by_id(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    for (const Task& t : plan.forRank(r).tasks) by_id[size_t(r)][t.id] = &t;
  tr::TraceReader reader(path);
  const int64_t run = reader.defaultRunId();
  std::set<std::pair<int, int>> setup_streams;
  for (const auto& st : reader.streams(run))
    if (st.name == "executor set-up (GEMM algorithm timing)") setup_streams.insert({st.rank, st.stream});
  reader.forEachActivity(run, [&](const tr::ActivityRow& a) {
    if (a.kind != tr::ActivityKind::Kernel || setup_streams.count({a.rank, a.stream})) return;
    if (a.rank < 0 || a.rank >= world) {
      ++out.foreign_ranks;
      return;
    }
    ++out.kernels[size_t(a.rank)];
    const auto& tasks = by_id[size_t(a.rank)];
    auto it = tasks.find(a.task_id);
    if (a.task_id < 0 || it == tasks.end()) return;
    ++out.attributed[size_t(a.rank)];
    if (a.stream != it->second->stream) ++out.wrong_stream[size_t(a.rank)];
  });
  for (const tr::StepRow& s : reader.steps(run))
    if (s.rank >= 0 && s.rank < world) ++out.steps[size_t(s.rank)];
  std::filesystem::remove(path);
  return out;
}

}  // namespace

int main() {
  requireGpus(1);
  const Plan plan = buildPlan(tinyJob());
  const std::string base =
      (std::filesystem::temp_directory_path() / fmt::format("tandem_prof_exec_{}", getpid())).string();
  Profiled g = profileRun(plan, true, base + ".graph.sqlite", true);
  Profiled e = profileRun(plan, false, base + ".eager.sqlite", false);
  Profiled q = profileRun(plan, true, base + ".queued.sqlite", false, true);
  for (const Profiled* p : {&g, &e, &q}) {
    const std::string m = p == &g ? "graph" : p == &e ? "eager" : "graph, steps queued ahead";
    expectTrue(fmt::format("{}: every compute kernel attributed ({}/{})", m, p->summary.kernels_attributed,
                           p->summary.kernels),
               p->summary.kernels > 0 && p->summary.kernels_attributed == p->summary.kernels);
    expectTrue(fmt::format("{}: no kernel row without a plan task outside the set-up track (got {})", m, p->untagged),
               p->untagged == 0);
    expectTrue(fmt::format("{}: set-up kernels on their own track ({}) and counted apart ({} records)", m,
                           p->setup_track_kernels, p->summary.setup_records),
               p->setup_track_kernels <= p->summary.setup_records &&
                   (p->summary.setup_records == 0) == (p->setup_track_kernels == 0));
    // The executor's set-up copies (the initial weights, the arena zeroed)
    // are on the set-up track, which tandem report leaves out of the
    // rank's time; nothing else copies before the first step.
    expectTrue(fmt::format("{}: the set-up copies on the set-up track ({}), none before the first step elsewhere ({})",
                           m, p->setup_track_copies, p->copies_before_steps_elsewhere),
               p->setup_track_copies > 0 && p->copies_before_steps_elsewhere == 0);
    expectTrue(fmt::format("{}: every kernel carries its task's phase (wrong: {})", m, p->wrong_phase),
               p->wrong_phase == 0);
    expectTrue(fmt::format("{}: every kernel on its task's plan stream (wrong: {})", m, p->wrong_stream),
               p->wrong_stream == 0);
    expectTrue(fmt::format("{}: {} steps stored (got {})", m, kSteps, p->steps), p->steps == kSteps);
    expectTrue(fmt::format("{}: no dropped records", m), p->summary.dropped_records == 0);
    int uneven = 0;
    for (auto [task, n] : p->kernels_per_task)
      if (n % kSteps != 0) ++uneven;
    expectTrue(fmt::format("{}: each task launches the same kernels every step (uneven tasks: {})", m, uneven),
               uneven == 0);
    expectTrue(fmt::format("{}: step rows do not overlap", m), p->steps_disjoint);
    const int per_step = p->summary.kernels / kSteps;
    const bool even = std::all_of(p->kernels_per_step.begin(), p->kernels_per_step.end(),
                                  [&](int n) { return n == per_step; });
    expectTrue(fmt::format("{}: each step row holds its {} task kernels (first step {}, last {})", m, per_step,
                           p->kernels_per_step.empty() ? -1 : p->kernels_per_step.front(),
                           p->kernels_per_step.empty() ? -1 : p->kernels_per_step.back()),
               even && !p->kernels_per_step.empty());
  }
  expectTrue("steps queued ahead attribute the same kernels to the same tasks as step by step",
             q.kernels_per_task == g.kernels_per_task);
  expectTrue("graph mode: kernels came from graph replays", g.summary.graph_kernels == g.summary.kernels);
  // The clock measurement's work and results.
  expectTrue(fmt::format("clock measurement: its records counted apart ({}), its 2 memsets on its own track ({})",
                         g.summary.clock_sync_records, g.clock_track_records),
             g.summary.clock_sync_records >= 2 && g.clock_track_records == 2);
  expectTrue("clock measurement: rank0-start and rank0-end rows with the offsets",
             g.clocks.count("rank0-start") && g.clocks.count("rank0-end") &&
                 g.clocks["rank0-start"].offset_ns == -1000 && g.clocks["rank0-end"].offset_ns == -1500);
  const int64_t span = g.clocks["rank0-end"].realtime_ns - g.clocks["rank0-start"].realtime_ns;
  const int64_t want_ppb = span > 0 ? int64_t(std::llround(-500.0 / double(span) * 1e9)) : 0;
  expectTrue(fmt::format("clock measurement: stats (offset {}, rtt {}, drift {} ppb, expected {})",
                         g.stats["clock.offset_ns.rank0"], g.stats["clock.offset_rtt_ns.rank0"],
                         g.stats["clock.offset_drift_ppb.rank0"], want_ppb),
             span > 0 && g.stats["clock.offset_ns.rank0"] == -1000 && g.stats["clock.offset_rtt_ns.rank0"] == 7000 &&
                 g.stats["clock.offset_end_ns.rank0"] == -1500 && g.stats["clock.offset_drift_ppb.rank0"] == want_ppb);
  expectTrue("eager run without a clock measurement: no clock rows beyond the anchors",
             e.clocks.size() == 1 && e.clocks.count("cupti") == 1 && e.summary.clock_sync_records == 0);
  expectTrue("graph and eager attribute the same kernels to the same tasks", g.kernels_per_task == e.kernels_per_task);
  if (g.kernels_per_task != e.kernels_per_task) {
    for (auto [task, n] : g.kernels_per_task) {
      auto it = e.kernels_per_task.find(task);
      const int m = it == e.kernels_per_task.end() ? 0 : it->second;
      if (m != n) fmt::print("     task {}: graph {} eager {}\n", task, n, m);
    }
  }

  // Tensor x pipeline parallel 2 x 2, every rank on this GPU.
  JobSpec tp2pp2 = tinyJob();
  tp2pp2.parallel.tensor_parallel = 2;
  tp2pp2.parallel.pipeline_parallel = 2;
  tp2pp2.parallel.data_parallel = 1;
  tp2pp2.training.grad_accum = 2;
  const Plan ranks_plan = buildPlan(tp2pp2);
  for (const bool graph : {true, false}) {
    const RanksProfiled rp = profileRanks(ranks_plan, graph, base + (graph ? ".ranks-graph.sqlite" : ".ranks-eager.sqlite"));
    const std::string m = fmt::format("tp2 x pp2 on one GPU, {}", graph ? "graph" : "eager");
    // The executor's own step work (the loss all-reduce, a kernel per step
    // issued outside every task) is counted apart, as on one rank.
    const int64_t step_work = rp.summary.step_work_kernels;
    expectTrue(fmt::format("{}: every compute kernel but the {} of the executor's step work attributed ({}/{})", m,
                           step_work, rp.summary.kernels_attributed, rp.summary.kernels),
               rp.summary.kernels > 0 && step_work == kSteps &&
                   rp.summary.kernels_attributed + step_work == rp.summary.kernels);
    expectTrue(fmt::format("{}: no kernel row of a rank outside the plan ({})", m, rp.foreign_ranks),
               rp.foreign_ranks == 0);
    int untagged = 0;
    for (int r = 0; r < ranks_plan.world_size; ++r) {
      const size_t i = size_t(r);
      untagged += rp.kernels[i] - rp.attributed[i];
      expectTrue(fmt::format("{}: rank {}: {} kernels, {} tagged with a task of its program, on the task's stream "
                             "(wrong: {}), {} step rows",
                             m, r, rp.kernels[i], rp.attributed[i], rp.wrong_stream[i], rp.steps[i]),
                 rp.attributed[i] > 0 && rp.wrong_stream[i] == 0 && rp.steps[i] == kSteps);
    }
    // The world's first member, rank 0, issues the loss all-reduce.
    const int on_rank0 = rp.kernels[0] - rp.attributed[0];
    expectTrue(fmt::format("{}: the kernels without a task are the step work's ({} of {}), on rank 0's lane ({})", m,
                           untagged, step_work, on_rank0),
               untagged == step_work && on_rank0 == step_work);
  }
  return finish();
}
