#include "runner/run_trace.h"

#include <fmt/core.h>

#include <filesystem>

#include "plan_trace/plan_facts.h"
#include "traces/store/atomic_output.h"
#include "traces/store/trace_writer.h"

namespace tandem::runner {

std::string rankTracePath(const std::string& out, int rank) {
  std::filesystem::path p(out);
  const std::string stem = p.extension() == ".sqlite" ? p.stem().string() : p.filename().string();
  return (p.parent_path() / fmt::format("{}.rank{}.sqlite", stem, rank)).string();
}

traces::MergeResult mergeProfiles(const std::string& out, int world) {
  std::vector<std::string> inputs;
  for (int r = 0; r < world; ++r) inputs.push_back(rankTracePath(out, r));
  traces::AtomicOutput output(out, /*copy_existing=*/true);
  traces::MergeResult m;
  {
    traces::TraceWriter writer(output.tempPath());
    m = traces::mergeTraces(inputs, writer);
  }
  output.commit();
  return m;
}

void writeStepsRun(const std::string& path, const Plan& plan, int device,
                   const std::vector<cuda::GpuStepResult>& steps, const cuda::GpuMemoryReport& memory,
                   const StepStats& stats, const RunPlacement& placement) {
  traces::AtomicOutput output(path, /*copy_existing=*/true);
  {
    traces::TraceWriter w(output.tempPath());
    w.beginRun(realRunInfo(plan, device));
    w.setPlanFacts(plan_trace::planFacts(plan));
    int64_t t = 0;
    for (const auto& s : steps) {
      const int64_t dur = int64_t(s.ms * 1e6);
      w.addStep({0, s.step, t, t + dur});
      t += dur;
    }
    for (const traces::StatRow& row : summaryStats(plan, stats, memory, placement)) w.setStat(row);
    w.flush();
  }
  output.commit();
}

}  // namespace tandem::runner
