#pragma once
// Runs the built `tandem` binary (TANDEM_BIN, else the build tree's) and
// captures its exit status, stdout and stderr.

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace tandem::cli::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string tandemBinary() {
  if (const char* bin = std::getenv("TANDEM_BIN")) return bin;
  return std::string(TANDEM_BINARY_DIR) + "/cli/tandem";
}

inline std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string shellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// `env`: "NAME=VALUE" words set for the command alone.
inline CommandResult runTandem(const std::string& args, const std::string& scratch, const std::string& env = "") {
  std::string out = scratch + ".stdout", err = scratch + ".stderr";
  std::string cmd = (env.empty() ? "" : "env " + env + " ") + shellQuote(tandemBinary()) + " " + args + " > " +
                    shellQuote(out) + " 2> " + shellQuote(err);
  int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = readFile(out);
  r.err = readFile(err);
  return r;
}

inline size_t lineCount(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace tandem::cli::testing
