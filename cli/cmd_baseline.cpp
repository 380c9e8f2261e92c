// tandem baseline record|check: a run's performance baseline and the gate
// against it (traces/analysis/baseline.h). `check` exits 1 when something
// regressed by more than the tolerance, so a CI job or a rollout script can
// stop on it.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/command_registry.h"
#include "engine/spec/job.h"
#include "traces/analysis/baseline.h"
#include "traces/store/atomic_output.h"
#include "traces/store/trace_reader.h"

namespace tandem::cli {
namespace {

struct BaselineOptions {
  std::string trace;
  int64_t run = -1;
  std::string out;       // record
  std::string baseline;  // check
  std::string tolerance = "5%";
  bool json = false;
};

// The baseline of a run of a trace file: its report over the steps, and
// tokens/s from its job where the run recorded none.
traces::Baseline measure(const BaselineOptions& o) {
  traces::TraceReader reader(o.trace);
  const int64_t run = o.run >= 0 ? o.run : reader.defaultRunId();
  const traces::RunReport report = traces::analyzeRun(reader, run);
  std::optional<double> tokens_per_step;
  if (!report.run.job_yaml.empty()) {
    try {
      tokens_per_step = double(parseJob(report.run.job_yaml, o.trace).tokensPerStep());
    } catch (const std::exception&) {
      // An imported or foreign job: no tokens/s unless the run recorded it.
    }
  }
  const std::string source = fmt::format("{} run {} ({})", std::filesystem::path(o.trace).filename().string(), run,
                                         report.run.name);
  return traces::baselineOf(report, source, tokens_per_step);
}

// "5%", "5" (percent) or "0.5%"; anything else is one line naming the flag.
double tolerancePct(const std::string& text) {
  std::string t = text;
  if (!t.empty() && t.back() == '%') t.pop_back();
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !(v >= 0) || v > 1000)
    throw std::runtime_error("baseline check: --tolerance takes a percentage such as 5% or 2.5, not '" + text + "'");
  return v;
}

void runRecord(const BaselineOptions& o) {
  const traces::Baseline b = measure(o);
  traces::AtomicOutput output(o.out);
  {
    std::ofstream f(output.tempPath());
    f << traces::baselineToJson(b);
    if (!f) throw std::runtime_error(o.out + ": cannot write the baseline");
  }
  output.commit();
  fmt::print("baseline of {} ({} steps): p50 {:.3f} ms, p95 {:.3f} ms{}; written to {}\n", b.source, b.steps,
             b.p50_step_ms, b.p95_step_ms,
             b.tokens_per_s ? fmt::format(", {:.0f} tokens/s", *b.tokens_per_s) : std::string(), o.out);
}

// Exit status 1 when the gate fails (after printing why).
void runCheck(const BaselineOptions& o) {
  const double tolerance = tolerancePct(o.tolerance);
  std::ifstream in(o.baseline);
  if (!in) throw std::runtime_error(o.baseline + ": cannot read the baseline");
  std::ostringstream text;
  text << in.rdbuf();
  const traces::Baseline base = traces::parseBaseline(text.str(), o.baseline);
  const traces::Baseline now = measure(o);
  const traces::GateResult g = traces::checkBaseline(base, now, tolerance);
  if (o.json) {
    fmt::print("{}\n", traces::gateToJson(g));
  } else {
    fmt::print("baseline {} ({})\nnow      {}\n\n", o.baseline, base.source, now.source);
    fmt::print("{}", traces::gateToText(g));
  }
  std::fflush(stdout);
  if (!g.pass) std::exit(1);
}

void addBaselineCommand(CLI::App& root) {
  auto* cmd = root.add_subcommand(
      "baseline", "Record a run's performance baseline, or gate a run against one (exit 1 on a regression)");
  cmd->require_subcommand(1);
  auto o = std::make_shared<BaselineOptions>();
  auto* record = cmd->add_subcommand(
      "record", "Write a run's baseline: p50, p95 and max step time, tokens/s, MFU, peak memory, exposed "
                "communication and GPU time per op kind (JSON)");
  record->add_option("trace", o->trace, "trace file (a real, simulated or imported run)")->required();
  record->add_option("--run", o->run, "run id (default: the latest run in the file)");
  record->add_option("--out", o->out, "baseline JSON to write")->required()->type_name("BASE.json");
  record->callback([o] { runRecord(*o); });
  auto* check = cmd->add_subcommand(
      "check", "Gate a run against a baseline: p50/p95 step time and peak memory may not grow, tokens/s and MFU "
               "may not fall, by more than the tolerance; exit 0 (pass) or 1 (regressed), with the op kinds that "
               "moved most");
  check->add_option("trace", o->trace, "trace file of the run to check")->required();
  check->add_option("--run", o->run, "run id (default: the latest run in the file)");
  check->add_option("--baseline", o->baseline, "baseline JSON from `tandem baseline record`")
      ->required()
      ->type_name("BASE.json");
  check->add_option("--tolerance", o->tolerance, "allowed regression, in percent")->capture_default_str();
  check->add_flag("--json", o->json, "print the verdict as JSON");
  check->callback([o] { runCheck(*o); });
}

const CommandRegistration reg{"baseline", 57, &addBaselineCommand};

}  // namespace
}  // namespace tandem::cli
