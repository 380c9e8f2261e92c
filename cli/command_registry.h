#pragma once
// Subcommands register themselves here, one cmd_<name>.cpp each, so adding a
// command never touches main.cpp:
//
//   static const tandem::cli::CommandRegistration reg{"plan", 10, &addPlanCommand};
//
// `order` sorts the commands in --help. A command's callback throws
// std::exception on failure; main prints "tandem: error: <what>" and exits 1.

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace tandem::cli {

using CommandAdder = void (*)(CLI::App& root);

struct CommandEntry {
  std::string name;
  int order;
  CommandAdder add;
};

std::vector<CommandEntry>& commandRegistry();

struct CommandRegistration {
  CommandRegistration(std::string name, int order, CommandAdder add) {
    commandRegistry().push_back({std::move(name), order, add});
  }
};

// Resolves a resource path: absolute or relative paths that exist are used as
// they are, otherwise the path is looked up under the installed resources/.
std::string resourcePath(const std::string& relative);

// A calibration file, or the name of one that comes with tandem
// ("h200x2-nv18" for resources/calibration/h200x2-nv18.yaml). What matches
// neither is returned as given, so that loading it names the path.
std::string calibrationPath(const std::string& name_or_file);

}  // namespace tandem::cli
