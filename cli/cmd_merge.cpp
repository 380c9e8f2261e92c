// tandem merge RANK_DB... --out DB: per-rank trace files into one run.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <filesystem>
#include <memory>

#include "cli/command_registry.h"
#include "traces/store/atomic_output.h"
#include "traces/store/merge.h"
#include "traces/store/trace_writer.h"

namespace tandem::cli {

namespace {

struct MergeOptions {
  std::vector<std::string> inputs;
  std::string out;
  bool json = false;
};

void runMerge(const MergeOptions& o) {
  namespace fs = std::filesystem;
  for (const auto& in : o.inputs) {
    std::error_code ec;
    if (fs::exists(o.out, ec) && fs::equivalent(in, o.out, ec))
      throw std::runtime_error(fmt::format("{}: the output must not be one of the inputs", o.out));
  }
  traces::AtomicOutput output(o.out);
  traces::MergeResult r;
  {
    traces::TraceWriter writer(output.tempPath());
    r = traces::mergeTraces(o.inputs, writer);
  }
  output.commit();
  if (o.json)
    fmt::print("{{\"output\":\"{}\",\"run\":{},\"inputs\":{},\"ranks\":{},\"activities\":{}}}\n", o.out, r.run,
               r.inputs, r.ranks, r.activities);
  else
    fmt::print("merged {} files into {} (run {}): {} ranks, {} activities\n", r.inputs, o.out, r.run, r.ranks,
               r.activities);
}

void addMergeCommand(CLI::App& root) {
  auto o = std::make_shared<MergeOptions>();
  CLI::App* cmd = root.add_subcommand(
      "merge", "Merge per-rank trace files into one run, aligning clocks by the stored per-rank offsets");
  cmd->add_option("RANK_DB", o->inputs, "per-rank trace files (the latest run of each)")->required();
  cmd->add_option("--out", o->out, "merged trace file to write (replaced whole)")->required();
  cmd->add_flag("--json", o->json, "print a JSON summary line instead of text");
  cmd->callback([o] { runMerge(*o); });
}

const CommandRegistration registration{"merge", 64, &addMergeCommand};

}  // namespace

}  // namespace tandem::cli
