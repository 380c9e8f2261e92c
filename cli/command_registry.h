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

}  // namespace tandem::cli
