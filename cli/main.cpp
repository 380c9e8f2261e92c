// tandem: the headless command line (see `tandem --help`).
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>

#include "cli/command_registry.h"

namespace tandem::cli {

std::vector<CommandEntry>& commandRegistry() {
  static std::vector<CommandEntry> registry;
  return registry;
}

std::string resourcePath(const std::string& relative) {
  namespace fs = std::filesystem;
  if (fs::exists(relative)) return relative;
  fs::path installed = fs::path(TANDEM_RESOURCE_DIR) / relative;
  if (fs::exists(installed)) return installed.string();
  return relative;
}

std::string calibrationPath(const std::string& name_or_file) {
  namespace fs = std::filesystem;
  const std::string path = resourcePath(name_or_file);
  if (fs::exists(path)) return path;
  for (const std::string& name : {name_or_file, name_or_file + ".yaml"}) {
    const fs::path committed = fs::path(TANDEM_RESOURCE_DIR) / "calibration" / name;
    if (fs::is_regular_file(committed)) return committed.string();
  }
  return name_or_file;
}

}  // namespace tandem::cli

int main(int argc, char** argv) {
  using namespace tandem::cli;
  CLI::App app{"tandem: plan, run, simulate, profile and analyse distributed training steps"};
  app.set_version_flag("--version", std::string("tandem ") + TANDEM_VERSION);
  app.require_subcommand(1);
  auto& registry = commandRegistry();
  std::sort(registry.begin(), registry.end(),
            [](const CommandEntry& a, const CommandEntry& b) { return a.order < b.order; });
  for (const auto& entry : registry) entry.add(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    // Subcommand callbacks run inside parse(); their failures land here.
    std::fflush(stdout);
    fmt::print(stderr, "tandem: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
