#include "cli/restart_supervisor.h"

#include <fmt/core.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace tandem::cli {

int restartAttempt() {
  const char* v = std::getenv("TANDEM_RESTART_ATTEMPT");
  return v ? std::max(0, std::atoi(v)) : 0;
}

namespace {

// One attempt: this program with `args`, TANDEM_RESTART_ATTEMPT set;
// returns its exit status, 128 + the signal when one killed it.
int runChild(const std::vector<std::string>& args, int attempt) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("--restarts: cannot start the run's process");
  if (pid == 0) {
    setenv("TANDEM_RESTART_ATTEMPT", std::to_string(attempt).c_str(), 1);
    std::vector<char*> argv;
    static const char kSelf[] = "/proc/self/exe";
    argv.push_back(const_cast<char*>("tandem"));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(kSelf, argv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

std::string describe(int status) {
  if (status > 128) {
    const char* name = strsignal(status - 128);
    return fmt::format("was killed by signal {} ({})", status - 128, name ? name : "?");
  }
  return fmt::format("exited with status {}", status);
}

}  // namespace

int runWithRestarts(const std::vector<std::string>& args, int restarts, std::FILE* out) {
  std::vector<std::string> resumed = args;
  if (std::find(resumed.begin(), resumed.end(), "--resume") == resumed.end()) resumed.push_back("--resume");
  int status = 0;
  for (int attempt = 0; attempt <= restarts; ++attempt) {
    status = runChild(attempt == 0 ? args : resumed, attempt);
    if (status == 0) return 0;
    if (attempt < restarts) {
      fmt::print(out, "restart {} of {}: the run {}; starting it again from the newest complete checkpoint\n",
                 attempt + 1, restarts, describe(status));
      std::fflush(out);
    } else if (restarts > 0) {
      fmt::print(out, "the run {} after {} restart{}: giving up\n", describe(status), restarts,
                 restarts == 1 ? "" : "s");
      std::fflush(out);
    }
  }
  return status;
}

void testKillAfterStep(int step) {
  static const std::vector<int> kills = [] {
    std::vector<int> v;
    if (const char* spec = std::getenv("TANDEM_TEST_KILL_AFTER_STEPS")) {
      std::stringstream in(spec);
      for (std::string part; std::getline(in, part, ',');) v.push_back(std::atoi(part.c_str()));
    }
    return v;
  }();
  const int attempt = restartAttempt();
  if (attempt < int(kills.size()) && kills[size_t(attempt)] == step) {
    std::fflush(nullptr);
    raise(SIGKILL);
  }
}

}  // namespace tandem::cli
