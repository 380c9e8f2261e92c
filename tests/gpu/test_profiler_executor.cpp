// The profiler behind the CUDA executor (one GPU, the tiny job): in CUDA
// Graph mode and in eager mode every kernel must be tagged with a plan task,
// carry that task's phase and stream, and both modes must agree task by task
// on how many kernels each task launches per step.
#include <cuda_runtime.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "engine/cuda/executor.h"
#include "engine/planner.h"
#include "profiler/plan_observer.h"
#include "tests/gpu/gpu_test.h"
#include "traces/trace_reader.h"

using namespace tandem;
using namespace tandem::gputest;
namespace tr = tandem::traces;

namespace {

constexpr int kSteps = 4;

struct Profiled {
  profiler::ProfileSummary summary;
  std::map<int64_t, int> kernels_per_task;  // over all steps
  int wrong_phase = 0, wrong_stream = 0, untagged = 0, steps = 0;
};

Profiled profileRun(const Plan& plan, bool graph, const std::string& path) {
  std::filesystem::remove(path);
  Profiled out;
  {
    profiler::ProfilerOptions po;
    po.path = path;
    po.run.name = graph ? "graph" : "eager";
    po.arena_bytes = plan.programs[0].memory.arena_bytes;
    profiler::Profiler prof(po);
    profiler::PlanObserver obs(prof, plan.programs[0]);
    cuda::ExecutorOptions eo;
    eo.use_graph = graph;
    eo.observer = &obs;
    cuda::CudaExecutor exec(plan, eo);
    for (int s = 0; s < kSteps; ++s) exec.step();
    out.summary = prof.finish();
    fmt::print("     {}: {}\n", graph ? "graph" : "eager", profiler::formatSummary(out.summary));
  }
  std::map<int64_t, const Task*> by_id;
  for (const Task& t : plan.programs[0].tasks) by_id[t.id] = &t;
  tr::TraceReader reader(path);
  const int64_t run = reader.defaultRunId();
  reader.forEachActivity(run, [&](const tr::ActivityRow& a) {
    if (a.kind != tr::ActivityKind::Kernel) return;
    auto it = by_id.find(int(a.task_id));
    if (a.task_id < 0 || it == by_id.end()) {
      ++out.untagged;
      return;
    }
    ++out.kernels_per_task[a.task_id];
    if (a.phase != profiler::tracePhaseOf(it->second->phase)) ++out.wrong_phase;
    if (a.stream != it->second->stream) ++out.wrong_stream;
  });
  out.steps = int(reader.steps(run).size());
  std::filesystem::remove(path);
  return out;
}

}  // namespace

int main() {
  requireGpus(1);
  const Plan plan = buildPlan(tinyJob());
  const std::string base = (std::filesystem::temp_directory_path() / fmt::format("tandem_prof_exec_{}", getpid())).string();
  const Profiled g = profileRun(plan, true, base + ".graph.sqlite");
  const Profiled e = profileRun(plan, false, base + ".eager.sqlite");
  for (const Profiled* p : {&g, &e}) {
    const std::string m = p == &g ? "graph" : "eager";
    expectTrue(fmt::format("{}: every compute kernel attributed ({}/{})", m, p->summary.kernels_attributed, p->summary.kernels),
               p->summary.kernels > 0 && p->summary.kernels_attributed == p->summary.kernels);
    expectTrue(fmt::format("{}: no kernel row without a plan task (got {})", m, p->untagged), p->untagged == 0);
    expectTrue(fmt::format("{}: every kernel carries its task's phase (wrong: {})", m, p->wrong_phase), p->wrong_phase == 0);
    expectTrue(fmt::format("{}: every kernel on its task's plan stream (wrong: {})", m, p->wrong_stream), p->wrong_stream == 0);
    expectTrue(fmt::format("{}: {} steps stored (got {})", m, kSteps, p->steps), p->steps == kSteps);
    expectTrue(fmt::format("{}: no dropped records", m), p->summary.dropped_records == 0);
    int uneven = 0;
    for (auto [task, n] : p->kernels_per_task)
      if (n % kSteps != 0) ++uneven;
    expectTrue(fmt::format("{}: each task launches the same kernels every step (uneven tasks: {})", m, uneven), uneven == 0);
  }
  expectTrue("graph mode: kernels came from graph replays", g.summary.graph_kernels == g.summary.kernels);
  expectTrue("graph and eager attribute the same kernels to the same tasks", g.kernels_per_task == e.kernels_per_task);
  if (g.kernels_per_task != e.kernels_per_task) {
    for (auto [task, n] : g.kernels_per_task) {
      auto it = e.kernels_per_task.find(task);
      const int m = it == e.kernels_per_task.end() ? 0 : it->second;
      if (m != n) fmt::print("     task {}: graph {} eager {}\n", task, n, m);
    }
  }
  return finish();
}
