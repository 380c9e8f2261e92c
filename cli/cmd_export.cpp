// tandem export DB [--run ID] --chrome FILE.json: Chrome trace JSON for Perfetto's UI.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <fstream>
#include <memory>

#include "cli/command_registry.h"
#include "traces/export/chrome_export.h"
#include "traces/store/atomic_output.h"
#include "traces/store/trace_reader.h"

namespace tandem::cli {

namespace {

struct ExportOptions {
  std::string db;
  int64_t run = -1;
  std::string chrome;
  bool json = false;
};

void runExport(const ExportOptions& o) {
  traces::TraceReader reader(o.db);
  int64_t run = o.run >= 0 ? o.run : reader.defaultRunId();
  traces::AtomicOutput output(o.chrome);
  traces::ChromeExportSummary s;
  {
    std::ofstream out(output.tempPath(), std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(fmt::format("{}: cannot open for writing", o.chrome));
    s = traces::exportChromeTrace(reader, run, out);
    out.flush();
    if (!out) throw std::runtime_error(fmt::format("{}: write failed (disk full?)", o.chrome));
  }
  output.commit();
  if (o.json)
    fmt::print("{{\"output\":\"{}\",\"run\":{},\"processes\":{},\"threads\":{},\"slices\":{},\"flows\":{},"
               "\"counters\":{}}}\n",
               o.chrome, run, s.processes, s.threads, s.slices, s.flows, s.counters);
  else
    fmt::print("wrote {}: {} processes, {} threads, {} slices, {} flows, {} counter samples "
               "(open in ui.perfetto.dev)\n",
               o.chrome, s.processes, s.threads, s.slices, s.flows, s.counters);
}

void addExportCommand(CLI::App& root) {
  auto o = std::make_shared<ExportOptions>();
  CLI::App* cmd = root.add_subcommand("export", "Export one run of a trace file as Chrome trace JSON (Perfetto UI)");
  cmd->add_option("DB", o->db, "trace file (SQLite)")->required();
  cmd->add_option("--run", o->run, "run id (default: the latest run in the file)");
  cmd->add_option("--chrome", o->chrome, "output JSON file (written whole or not at all)")->required();
  cmd->add_flag("--json", o->json, "print a JSON summary line instead of text");
  cmd->callback([o] { runExport(*o); });
}

const CommandRegistration registration{"export", 62, &addExportCommand};

}  // namespace

}  // namespace tandem::cli
