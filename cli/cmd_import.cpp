// tandem import FILE --out DB: PyTorch profiler JSON or an Nsight Systems
// SQLite export into a run of a tandem trace file.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <filesystem>
#include <memory>

#include "cli/command_registry.h"
#include "traces/importers/importers.h"
#include "traces/store/atomic_output.h"
#include "traces/store/trace_writer.h"

namespace tandem::cli {

namespace {

struct ImportOptions {
  std::string input;
  std::string out;
  std::string format = "auto";
  std::string name;
  bool json = false;
};

void runImport(const ImportOptions& o) {
  traces::ImportFormat format = o.format == "kineto" ? traces::ImportFormat::Kineto
                                : o.format == "nsys" ? traces::ImportFormat::Nsys
                                                     : traces::ImportFormat::Auto;
  // A folder is one multi-rank run of per-rank PyTorch profiler files.
  if (format == traces::ImportFormat::Auto && !std::filesystem::is_directory(o.input))
    format = traces::detectImportFormat(o.input);
  // An existing output gains a run; it is replaced only once the import succeeded.
  traces::AtomicOutput output(o.out, /*copy_existing=*/true);
  traces::ImportResult r;
  {
    traces::TraceWriter writer(output.tempPath());
    r = traces::importTrace(o.input, writer, format, o.name);
  }
  output.commit();
  if (o.json)
    fmt::print("{{\"output\":\"{}\",\"run\":{},\"format\":\"{}\",\"ranks\":{},\"activities\":{},\"ranges\":{},"
               "\"steps\":{}}}\n",
               o.out, r.run, r.format, r.ranks, r.activities, r.ranges, r.steps);
  else
    fmt::print("imported {} ({}) into {} as run {}: {} ranks, {} activities, {} ranges, {} steps (records not "
               "imported are counted in the run's stats, see `tandem report`)\n",
               o.input, r.format, o.out, r.run, r.ranks, r.activities, r.ranges, r.steps);
}

void addImportCommand(CLI::App& root) {
  auto o = std::make_shared<ImportOptions>();
  CLI::App* cmd = root.add_subcommand(
      "import", "Import a PyTorch profiler (Kineto) JSON trace or an Nsight Systems SQLite export as a new run");
  cmd->add_option("FILE", o->input,
                  "trace to import: PyTorch profiler JSON (.json or .json.gz), an Nsight Systems SQLite export, or a "
                  "folder of per-rank PyTorch profiler files (one multi-rank run, clocks aligned by each file's "
                  "baseTimeNanoseconds)")
      ->required();
  cmd->add_option("--out", o->out, "tandem trace file to create or add the run to")->required();
  cmd->add_option("--format", o->format, "input format")
      ->check(CLI::IsMember({"auto", "kineto", "nsys"}))
      ->capture_default_str();
  cmd->add_option("--name", o->name, "name of the new run (default: the input's file name)");
  cmd->add_flag("--json", o->json, "print a JSON summary line instead of text");
  cmd->callback([o] { runImport(*o); });
}

const CommandRegistration registration{"import", 63, &addImportCommand};

}  // namespace

}  // namespace tandem::cli
