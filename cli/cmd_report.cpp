// tandem report DB [--run ID] [--json] [--whole-run | --step N]: the analyses
// of one run of a trace file, over its steps by default.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <memory>

#include "cli/command_registry.h"
#include "cli/number_checks.h"
#include "traces/analysis/analysis.h"
#include "traces/analysis/report_format.h"
#include "traces/store/trace_reader.h"

namespace tandem::cli {

namespace {

struct ReportOptions {
  std::string db;
  int64_t run = -1;
  bool json = false;
  std::vector<std::string> rules;
  size_t top = 20;
  int64_t kernel_wait_ns = 30;
  bool whole_run = false;
  int step = -1;
};

void runReport(const ReportOptions& o) {
  traces::TraceReader reader(o.db);
  int64_t run = o.run >= 0 ? o.run : reader.defaultRunId();
  std::vector<traces::ClassificationRule> rules;
  for (const auto& r : o.rules) rules.push_back(traces::Classifier::parseRule(r));
  traces::AnalysisOptions options{traces::Classifier(std::move(rules))};
  options.top_names = o.top;
  options.kernel_wait_threshold_ns = o.kernel_wait_ns;
  options.window = o.whole_run ? traces::ReportWindow::WholeRun : traces::ReportWindow::Steps;
  options.step = o.step;
  traces::RunReport report = traces::analyzeRun(reader, run, options);
  fmt::print("{}", o.json ? traces::reportToJson(report) : traces::reportToText(report));
}

void addReportCommand(CLI::App& root) {
  auto o = std::make_shared<ReportOptions>();
  CLI::App* cmd = root.add_subcommand(
      "report",
      "Analyse one run of a trace file: devices, temporal breakdown, comm/compute overlap, idle time, stream waits, "
      "kernel statistics, recompute cost, critical path and stragglers");
  cmd->add_option("DB", o->db, "trace file (SQLite) written by run, simulate, import or merge")->required();
  cmd->add_option("--run", o->run, "run id (default: the latest run in the file)");
  cmd->add_flag("--json", o->json, "print a stable JSON document instead of tables");
  cmd->add_option("--rule", o->rules,
                  "classification rule tried before the defaults: PATTERN=CATEGORY or "
                  "kind:KIND[:PATTERN]=CATEGORY, CATEGORY one of compute, comm, memcpy, sync, host (repeatable)");
  cmd->add_option("--top", o->top, "rows in the by-name kernel table and the unattributed list")
      ->capture_default_str()
      ->check(wholeNumberAtLeast(0));
  auto* whole = cmd->add_flag("--whole-run", o->whole_run,
                              "report every activity, start-up, set-up and tail included (default: a run with "
                              "recorded steps is reported over its steps, the rest summarized apart)");
  cmd->add_option("--step", o->step, "report one step only (its index as recorded)")
      ->check(wholeNumberAtLeast(0))
      ->excludes(whole);
  cmd->add_option("--kernel-wait-ns", o->kernel_wait_ns, "gaps shorter than this count as kernel wait (HTA)")
      ->capture_default_str()
      ->check(wholeNumberAtLeast(0));
  cmd->callback([o] { runReport(*o); });
}

const CommandRegistration registration{"report", 60, &addReportCommand};

}  // namespace

}  // namespace tandem::cli
