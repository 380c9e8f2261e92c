#include "engine/cuda/rendezvous.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <thread>

#include "engine/spec/parse_number.h"

namespace tandem::cuda {

namespace {

// The file holds this tag and then the 128 bytes: a foreign or truncated file
// is never taken for an id.
constexpr char kTag[8] = {'T', 'N', 'D', 'M', 'I', 'D', '0', '1'};

// A file older than this when a rank starts waiting is left over from an
// earlier launch: waited past until rank 0 replaces it.
constexpr int kStaleSeconds = 120;

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

std::string str(const char* s) { return s ? std::string(s) : std::string(); }

// Parses a whole decimal integer; throws naming the variable.
int parseInt(const char* name, const char* value) {
  const auto v = parseWholeNumber<int>(value);
  if (!v) throw LaunchError(std::string("launcher variable ") + name + "='" + value + "' is not an integer");
  return *v;
}

// The first of `names` that is set, or nullptr; `which` receives its name.
const char* firstOf(const EnvLookup& env, std::initializer_list<const char*> names, const char** which) {
  for (const char* n : names)
    if (const char* v = env(n)) {
      *which = n;
      return v;
    }
  return nullptr;
}

struct Family {
  Launcher launcher;
  const char* rank_var;
  std::initializer_list<const char*> world_vars;
  std::initializer_list<const char*> local_vars;
  bool partial_is_error;  // rank set without world size: an error (else: not this launcher)
};

void validate(const LaunchInfo& info, const std::string& vars) {
  const std::string who = std::string(launcherName(info.launcher));
  if (info.world < 1)
    throw LaunchError(who + " gives world size " + std::to_string(info.world) + " (" + vars + "); expected at least 1");
  if (info.rank < 0 || info.rank >= info.world)
    throw LaunchError(who + " gives rank " + std::to_string(info.rank) + " but world size " +
                      std::to_string(info.world) + " (" + vars + "); expected 0 <= rank < world size");
  if (info.local_rank < -1 || info.local_rank >= info.world)
    throw LaunchError(who + " gives local rank " + std::to_string(info.local_rank) + " but world size " +
                      std::to_string(info.world) + " (" + vars + ")");
}

}  // namespace

const char* launcherName(Launcher l) {
  switch (l) {
    case Launcher::None: return "no launcher";
    case Launcher::Tandem: return "tandem run --gpus";
    case Launcher::OpenMpi: return "Open MPI (mpirun)";
    case Launcher::Mpich: return "MPICH/Hydra (PMI)";
    case Launcher::Slurm: return "Slurm (srun)";
    case Launcher::Torchrun: return "torchrun";
  }
  return "?";
}

EnvLookup processEnvironment() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

LaunchInfo detectLauncher(const EnvLookup& env) {
  LaunchInfo info;
  // tandem's own launch: the id file comes with it.
  if (const char* rank = env("TANDEM_RANK")) {
    const char* world = env("TANDEM_WORLD_SIZE");
    const char* file = env("TANDEM_NCCL_ID_FILE");
    if (!world || !file)
      throw LaunchError("TANDEM_RANK is set but TANDEM_WORLD_SIZE or TANDEM_NCCL_ID_FILE is not (these are set by "
                        "`tandem run --gpus N` for its child processes)");
    info.launcher = Launcher::Tandem;
    info.rank = parseInt("TANDEM_RANK", rank);
    info.world = parseInt("TANDEM_WORLD_SIZE", world);
    info.local_rank = info.rank;
    info.id_file = file;
    validate(info, std::string("TANDEM_RANK=") + rank + ", TANDEM_WORLD_SIZE=" + world);
    return info;
  }
  // Slurm without a job step (batch script, salloc shell) is one process, not a launch.
  const bool slurm_without_step = env("SLURM_JOB_ID") && !env("SLURM_STEP_ID") && !env("SLURM_STEPID");
  const Family families[] = {
      {Launcher::OpenMpi, "OMPI_COMM_WORLD_RANK", {"OMPI_COMM_WORLD_SIZE"}, {"OMPI_COMM_WORLD_LOCAL_RANK"}, true},
      {Launcher::Mpich, "PMI_RANK", {"PMI_SIZE"}, {"MPI_LOCALRANKID", "PMI_LOCAL_RANK"}, true},
      {Launcher::Slurm, "SLURM_PROCID", {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"}, {"SLURM_LOCALID"},
       false},
      {Launcher::Torchrun, "RANK", {"WORLD_SIZE"}, {"LOCAL_RANK"}, false},
  };
  for (const Family& f : families) {
    const char* rank = env(f.rank_var);
    if (!rank) continue;
    if (f.launcher == Launcher::Slurm && slurm_without_step) continue;
    const char* world_var = nullptr;
    const char* world = firstOf(env, f.world_vars, &world_var);
    if (!world) {
      if (!f.partial_is_error) continue;
      throw LaunchError(std::string(launcherName(f.launcher)) + ": " + f.rank_var + " is set but " +
                        *f.world_vars.begin() + " is not");
    }
    info.launcher = f.launcher;
    info.rank = parseInt(f.rank_var, rank);
    info.world = parseInt(world_var, world);
    std::string vars = std::string(f.rank_var) + "=" + rank + ", " + world_var + "=" + world;
    const char* local_var = nullptr;
    if (const char* local = firstOf(env, f.local_vars, &local_var)) {
      info.local_rank = parseInt(local_var, local);
      vars += std::string(", ") + local_var + "=" + local;
    }
    switch (f.launcher) {
      case Launcher::OpenMpi: {
        const char* k = nullptr;
        info.job_key = str(firstOf(env, {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}, &k));
        break;
      }
      case Launcher::Mpich: info.job_key = str(env("PMI_KVSNAME")); break;
      case Launcher::Slurm: {
        const char* k = nullptr;
        const char* step = firstOf(env, {"SLURM_STEP_ID", "SLURM_STEPID"}, &k);
        if (env("SLURM_JOB_ID") && step) info.job_key = str(env("SLURM_JOB_ID")) + "." + step;
        break;
      }
      case Launcher::Torchrun: info.job_key = str(env("TORCHELASTIC_RUN_ID")); break;
      default: break;
    }
    validate(info, vars);
    return info;
  }
  return info;
}

std::string defaultRendezvousDir(const LaunchInfo& info, const EnvLookup& env) {
  if (info.launcher != Launcher::Slurm) return {};
  const char* submit = env("SLURM_SUBMIT_DIR");
  const char* job = env("SLURM_JOB_ID");
  const char* k = nullptr;
  const char* step = firstOf(env, {"SLURM_STEP_ID", "SLURM_STEPID"}, &k);
  if (!submit || !job || !step) return {};
  return (std::filesystem::path(submit) / ".tandem-rendezvous" / (std::string(job) + "." + step)).string();
}

std::string rendezvousFile(const std::string& dir, const LaunchInfo& info) {
  std::string name = "nccl-id";
  if (!info.job_key.empty()) {
    std::string key = info.job_key;
    for (char& c : key)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) c = '_';
    name += "." + key;
  }
  return (std::filesystem::path(dir) / name).string();
}

int launchWorldSize(const LaunchInfo& info, int gpus_flag, int job_world) {
  if (!info.external()) return gpus_flag > 0 ? gpus_flag : job_world;
  if (gpus_flag > 0 && gpus_flag != info.world)
    throw LaunchError("--gpus " + std::to_string(gpus_flag) + " does not match the " + std::to_string(info.world) +
                      " ranks started by " + launcherName(info.launcher) + "; leave --gpus out or pass --gpus " +
                      std::to_string(info.world));
  return info.world;
}

std::string RendezvousPlan::describe() const {
  if (!needed) return "none (one rank)";
  if (mpi) return "MPI_Bcast";
  return "file " + file;
}

RendezvousPlan planRendezvous(const LaunchInfo& info, const std::string& rendezvous_dir, const EnvLookup& env) {
  RendezvousPlan plan;
  plan.needed = info.world > 1;
  if (!plan.needed) return plan;
  if (info.launcher == Launcher::Tandem) {
    plan.file = info.id_file;
    return plan;
  }
  if (!rendezvous_dir.empty()) {
    plan.file = rendezvousFile(rendezvous_dir, info);
    return plan;
  }
  if ((info.launcher == Launcher::OpenMpi || info.launcher == Launcher::Mpich) && mpiBuiltIn()) {
    plan.mpi = true;
    return plan;
  }
  const std::string dir = defaultRendezvousDir(info, env);
  if (!dir.empty()) {
    plan.file = rendezvousFile(dir, info);
    plan.remove_dir = true;
    return plan;
  }
  throw LaunchError(std::string("started by ") + launcherName(info.launcher) + " as rank " + std::to_string(info.rank) +
                    " of " + std::to_string(info.world) +
                    ": pass --rendezvous DIR, a folder every rank can see, where rank 0 leaves the NCCL id" +
                    (mpiBuiltIn() ? "" : " (this tandem was built without MPI)"));
}

void publishId(const std::string& path, const IdBlob& id) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) {
    fs::create_directories(p.parent_path(), ec);
    if (ec)
      throw LaunchError("cannot create the rendezvous folder " + p.parent_path().string() + ": " + ec.message());
  }
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) throw LaunchError("cannot write the NCCL id to " + tmp + ": " + std::strerror(errno));
  char buf[sizeof(kTag) + sizeof(IdBlob)];
  std::memcpy(buf, kTag, sizeof(kTag));
  std::memcpy(buf + sizeof(kTag), id.data(), id.size());
  const bool ok = ::write(fd, buf, sizeof(buf)) == ssize_t(sizeof(buf)) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    throw LaunchError("cannot write the NCCL id to " + tmp + ": " + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw LaunchError("cannot publish the NCCL id as " + path + ": " + std::strerror(e));
  }
}

IdBlob waitForId(const std::string& path, int rank, double timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(timeout_s);
  const std::time_t stale_before = std::time(nullptr) - kStaleSeconds;
  bool saw_stale = false;
  for (;;) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      if (st.st_mtime < stale_before) {
        saw_stale = true;
      } else {
        const int fd = ::open(path.c_str(), O_RDONLY);
        if (fd >= 0) {
          char buf[sizeof(kTag) + sizeof(IdBlob) + 1];
          const ssize_t n = ::read(fd, buf, sizeof(buf));
          ::close(fd);
          if (n == ssize_t(sizeof(kTag) + sizeof(IdBlob)) && std::memcmp(buf, kTag, sizeof(kTag)) == 0) {
            IdBlob id;
            std::memcpy(id.data(), buf + sizeof(kTag), id.size());
            return id;
          }
        }
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::string msg = "rank " + std::to_string(rank) + ": rank 0 did not publish the NCCL id in " + path +
                        " within " + seconds(timeout_s) +
                        " s (is rank 0 running, and do all ranks see this folder? see --rendezvous, --timeout)";
      if (saw_stale) msg += "; a file older than " + std::to_string(kStaleSeconds) + " s was there and was ignored";
      throw LaunchError(msg);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void removeId(const std::string& path, bool remove_dir) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (remove_dir) {
    const auto dir = std::filesystem::path(path).parent_path();
    if (!dir.empty() && std::filesystem::is_empty(dir, ec) && !ec) std::filesystem::remove(dir, ec);
  }
}

}  // namespace tandem::cuda
