// tandem: the headless command line (see `tandem --help`).
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <exception>

#include "cli/command_registry.h"
#include "vocabulary/version.h"

namespace tandem::cli {

std::vector<CommandEntry>& commandRegistry() {
  static std::vector<CommandEntry> registry;
  return registry;
}

}  // namespace tandem::cli

int main(int argc, char** argv) {
  using namespace tandem::cli;
  CLI::App app{"tandem: plan, run, simulate, profile and analyse distributed training steps"};
  app.set_version_flag("--version", std::string(tandem::toolVersion()));
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
