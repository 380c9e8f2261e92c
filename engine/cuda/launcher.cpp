#include "engine/cuda/launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "engine/cuda/check.h"

namespace tandem::cuda {

RankEnvironment rankEnvironment() {
  RankEnvironment env;
  const char* rank = std::getenv("TANDEM_RANK");
  const char* world = std::getenv("TANDEM_WORLD_SIZE");
  const char* file = std::getenv("TANDEM_NCCL_ID_FILE");
  if (rank && world && file) {
    env.launched = true;
    env.rank = std::atoi(rank);
    env.world = std::atoi(world);
    env.id_file = file;
  }
  return env;
}

int launchLocalRanks(int world, const std::vector<std::string>& args, double grace_s) {
  namespace fs = std::filesystem;
  std::string dir_template = (fs::temp_directory_path() / "tandem-run-XXXXXX").string();
  if (!mkdtemp(dir_template.data())) throw CudaError("cannot create a temporary folder for the NCCL id");
  const std::string id_file = dir_template + "/nccl.id";

  std::vector<pid_t> pids(world, -1);
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid < 0) throw CudaError("fork failed while starting rank " + std::to_string(r));
    if (pid == 0) {
      setenv("TANDEM_RANK", std::to_string(r).c_str(), 1);
      setenv("TANDEM_WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("TANDEM_NCCL_ID_FILE", id_file.c_str(), 1);
      std::vector<char*> argv;
      std::string self = "tandem";
      argv.push_back(self.data());
      std::vector<std::string> copy = args;
      for (auto& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv("/proc/self/exe", argv.data());
      std::fprintf(stderr, "tandem: error: rank %d: cannot start: %s\n", r, std::strerror(errno));
      _exit(127);
    }
    pids[r] = pid;
  }

  int failures = 0;
  int running = world;
  std::chrono::steady_clock::time_point kill_at{};
  bool killing = false;
  while (running > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      int r = 0;
      while (r < world && pids[r] != pid) ++r;
      if (r == world) continue;
      pids[r] = -1;
      --running;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok) {
        ++failures;
        if (WIFSIGNALED(status))
          std::fprintf(stderr, "tandem: error: rank %d was killed by signal %d (%s)\n", r, WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
        else
          std::fprintf(stderr, "tandem: error: rank %d exited with status %d\n", r, WEXITSTATUS(status));
        if (!killing && running > 0) {
          killing = true;
          kill_at = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                           std::chrono::duration<double>(grace_s));
        }
      }
      continue;
    }
    if (killing && std::chrono::steady_clock::now() > kill_at) {
      for (int r = 0; r < world; ++r)
        if (pids[r] > 0) {
          std::fprintf(stderr, "tandem: error: rank %d did not stop within %.0f s of a failed rank; killing it\n",
                       r, grace_s);
          kill(pids[r], SIGKILL);
        }
      killing = false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::error_code ec;
  fs::remove_all(dir_template, ec);
  return failures == 0 ? 0 : 1;
}

NcclId shareNcclId(const RankEnvironment& env, double timeout_s) {
  LaunchInfo info;
  info.launcher = Launcher::Tandem;
  info.rank = env.rank;
  info.world = env.world;
  info.id_file = env.id_file;
  RendezvousPlan plan;
  plan.needed = true;
  plan.file = env.id_file;
  try {
    return shareNcclId(info, plan, timeout_s);
  } catch (const LaunchError& e) {
    throw CudaError(e.what());
  }
}

NcclId shareNcclId(const LaunchInfo& info, const RendezvousPlan& plan, double timeout_s) {
  static_assert(sizeof(NcclId) == sizeof(IdBlob));
  NcclId id{};
  if (plan.mpi) {
    if (info.rank == 0) id = makeNcclId();
    return mpiBroadcastId(id, 0);
  }
  if (info.rank == 0) {
    id = makeNcclId();
    publishId(plan.file, id);
    return id;
  }
  return waitForId(plan.file, info.rank, timeout_s);
}

void finishRendezvous(const LaunchInfo& info, const RendezvousPlan& plan) {
  if (info.rank != 0 || plan.mpi || plan.file.empty() || info.launcher == Launcher::Tandem) return;
  removeId(plan.file, plan.remove_dir);
}

}  // namespace tandem::cuda
