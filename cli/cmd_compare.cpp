// tandem compare: two runs side by side, task by task (real vs simulated, or A vs B).
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <memory>

#include "cli/command_registry.h"
#include "cli/number_checks.h"
#include "traces/analysis/compare.h"
#include "traces/store/trace_reader.h"

namespace tandem::cli {
namespace {

struct CompareOptions {
  std::vector<std::string> files;
  int64_t a_run = -1;
  int64_t b_run = -1;
  bool json = false;
  size_t top = 20;
};

// The latest run of a kind in the file, or -1.
int64_t latestOfKind(traces::TraceReader& reader, traces::RunKind kind) {
  int64_t id = -1;
  for (const auto& r : reader.runs())
    if (r.kind == kind) id = std::max(id, r.id);
  return id;
}

void runCompare(const CompareOptions& o) {
  if (o.files.size() > 2) throw std::runtime_error("compare: give one trace file (two runs in it) or two files");
  traces::TraceReader a(o.files[0]);
  std::unique_ptr<traces::TraceReader> second;
  if (o.files.size() == 2) second = std::make_unique<traces::TraceReader>(o.files[1]);
  traces::TraceReader& b = second ? *second : a;

  int64_t a_run = o.a_run, b_run = o.b_run;
  if (second) {
    if (a_run < 0) a_run = a.defaultRunId();
    if (b_run < 0) b_run = b.defaultRunId();
  } else {
    if (a_run < 0) a_run = latestOfKind(a, traces::RunKind::Real);
    if (b_run < 0) b_run = latestOfKind(a, traces::RunKind::Simulated);
    if (a_run < 0 || b_run < 0)
      throw std::runtime_error(fmt::format(
          "compare: {} needs --real and --sim run ids (it does not hold both a real and a simulated run)",
          o.files[0]));
  }
  a.run(a_run);  // clear errors for unknown ids, naming the runs in the file
  b.run(b_run);
  const traces::RunComparison c = traces::compareRuns(a, a_run, b, b_run, o.top);
  fmt::print("{}\n", o.json ? traces::comparisonToJson(c) : traces::comparisonToText(c));
}

void addCompareCommand(CLI::App& root) {
  auto* cmd = root.add_subcommand(
      "compare",
      "Compare two runs task by task (matched by plan task id, or by plan task name when the runs' plans number "
      "their tasks differently): step time, overlap, exposed communication, stream waits and per-op error");
  auto o = std::make_shared<CompareOptions>();
  cmd->add_option("db", o->files, "one trace file holding both runs, or two files (A then B)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--real,-a", o->a_run, "run id of A, the reference (default: the latest real run)");
  cmd->add_option("--sim,-b", o->b_run, "run id of B, the prediction (default: the latest simulated run)");
  cmd->add_option("--top", o->top, "tasks listed by absolute difference")
      ->capture_default_str()
      ->check(wholeNumberAtLeast(0));
  cmd->add_flag("--json", o->json, "print JSON instead of tables");
  cmd->callback([o] { runCompare(*o); });
}

const CommandRegistration reg{"compare", 55, &addCompareCommand};

}  // namespace
}  // namespace tandem::cli
