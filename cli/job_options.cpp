#include "cli/job_options.h"

#include <CLI/CLI.hpp>

#include "cli/command_registry.h"
#include "engine/spec/resources.h"

namespace tandem::cli {

void JobOptions::addTo(CLI::App& cmd, bool required) {
  auto* opt = cmd.add_option("job", job,
                             "job spec YAML file, or a built-in job: 'default' (GPT-2 124M, data parallel "
                             "8), 'tiny' (the CPU training demo) or a name from resources/jobs/ without .yaml");
  if (required) opt->required();
  cmd.add_option("--set", sets, "override a field of the job, e.g. --set training.micro_batch=8 (repeatable)")
      ->type_name("KEY=VALUE");
}

JobSpec JobOptions::load() const {
  if (job == "default") return parseJob(std::string(defaultJob().yaml), "<default>", sets);
  if (job == "tiny") return parseJob(std::string(tinyJob().yaml), "<tiny>", sets);
  for (const std::string& name : builtinJobNames())
    if (job == name) return parseJob(std::string(builtinJobText(name)), name + ".yaml", sets);
  return loadJobFile(resourcePath(job), sets);
}

}  // namespace tandem::cli
