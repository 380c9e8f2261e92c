#pragma once
// Step times others published for clusters we do not have, with the
// configurations they ran (resources/published/, one file per row of
// docs/accuracy.md's published table): the simulator's check at scale.
// Each row names its source, the figure and how it was obtained, the job and
// topology that set it up in tandem's terms, what tandem models differently
// (approximations) and what it cannot model yet (the row is then reported,
// not simulated, and counts as a miss).

#include <optional>
#include <string>
#include <vector>

#include "engine/spec/job.h"
#include "simulator/pipeline/simulate_job.h"

namespace tandem::sim {

struct PublishedRow {
  std::string file;
  std::string id;          // "A1", "C1-full"
  std::string title;
  std::string source;      // where the figure is printed, with the commit or table
  std::string hardware;    // the reference's tag: SEL, EOS, ...
  std::string topology;    // a preset, a generated cluster or a file
  double step_s = 0;       // the published step time
  std::string provenance;  // printed | derived | inferred | recalled
  std::string note;        // how the figure was obtained
  // Rows of one weak-scaling series (the same model per GPU at growing
  // scale) share a series name; the check compares their trend.
  std::string series;
  int gpus = 0;
  // False for published runs the reference does not list, checked as well
  // (key `in_reference`, default true).
  bool in_reference = true;
  std::vector<std::string> approximations;  // what tandem models differently
  std::vector<std::string> not_modelled;    // what tandem lacks: the row is not simulated
  std::optional<JobSpec> job;               // set when not_modelled is empty
};

// Reads one row file; throws SpecError naming the file, line and field.
PublishedRow loadPublishedRow(const std::string& path);
// Every *.yaml of a folder, by id. Throws on the first bad file.
std::vector<PublishedRow> loadPublishedRows(const std::string& folder);

struct PublishedOutcome {
  bool simulated = false;
  double predicted_s = 0;
  double error_pct = 0;                // (predicted - published) / published
  std::vector<std::string> warnings;  // the simulation's (calibration, memory)
  double wall_s = 0;                   // simulation time on this machine
};

// Simulates the row's job on its topology with `settings` (topology taken
// from the row); a row that is not modelled comes back unsimulated.
PublishedOutcome simulatePublished(const PublishedRow& row, SimulateSettings settings = {});

}  // namespace tandem::sim
