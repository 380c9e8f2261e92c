#include "gui/what_if.h"

#include <algorithm>

#include "engine/spec/job.h"

namespace tandem::gui {

namespace {

JobSpec jobFor(const std::string& yaml, const std::string& source, const std::vector<std::string>& overrides) {
  if (yaml.empty()) {
    if (overrides.empty()) return defaultJob();
    return parseJob(jobToYaml(defaultJob()), "<built-in gpt2-124m-dp8>", overrides);
  }
  return parseJob(yaml, source, overrides);
}

}  // namespace

WhatIfResult runWhatIf(const WhatIfRequest& request, const std::function<void(int, const std::string&)>& progress) {
  sim::SimulateRequest sim_request;
  sim_request.job = jobFor(request.job_yaml, request.job_source, request.overrides);
  sim_request.settings = request.settings;
  sim_request.out_path = request.out_path;
  sim_request.run_name = request.run_name.empty() ? sim_request.job.name + " (what-if)" : request.run_name;
  sim::SimulateCallbacks callbacks;
  callbacks.progress = progress;
  sim::SimulateOutcome outcome = sim::simulateJob(sim_request, callbacks);

  WhatIfResult out;
  out.run_id = outcome.run_id;
  out.step_ns = outcome.result.step_ns;
  for (const auto& r : outcome.result.ranks) out.peak_memory_bytes = std::max(out.peak_memory_bytes, r.peak_memory_bytes);
  if (!outcome.ranks.empty()) {
    out.recompute_ns = outcome.ranks.front().recompute_ns;
    out.exposed_comm_ns = outcome.ranks.front().exposed_comm_ns;
  }
  out.recompute = outcome.plan.recompute;
  out.warnings = std::move(outcome.warnings);
  out.kernel_time_sources = std::move(outcome.kernel_time_sources);
  out.fitting_choices = std::move(outcome.fitting_choices);
  out.job = std::move(sim_request.job);
  return out;
}

}  // namespace tandem::gui
