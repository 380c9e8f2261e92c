// Launcher detection and the NCCL-id rendezvous of `tandem run`
// (engine/cuda/rendezvous.h): the environment table of each launcher, bad
// inputs, and the file exchange between real forked processes. The
// rendezvous code has no CUDA in it; it is compiled into this test directly
// so that it runs in builds without the CUDA executor too.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utime.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "engine/cuda/mpi_exchange.cpp"
#include "engine/cuda/rendezvous.cpp"

using namespace tandem::cuda;
namespace fs = std::filesystem;

namespace {

using Env = std::map<std::string, std::string>;

EnvLookup lookup(const Env& env) {
  return [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

LaunchInfo detect(const Env& env) { return detectLauncher(lookup(env)); }

std::string freshDir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("tandem-rdv-test-" + std::to_string(getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

struct CleanUp {
  ~CleanUp() {
    std::error_code ec;
    fs::remove_all(fs::temp_directory_path() / ("tandem-rdv-test-" + std::to_string(getpid())), ec);
  }
} clean_up;

IdBlob patternId(int seed) {
  IdBlob id;
  for (size_t i = 0; i < id.size(); ++i) id[i] = char((i * 31 + size_t(seed) * 7 + 1) & 0xff);
  return id;
}

}  // namespace

TEST_CASE("launcher detection: each launcher's variables", "[rendezvous]") {
  struct Row {
    Env env;
    Launcher launcher;
    int rank, world, local;
    std::string key;
  };
  const std::vector<Row> table = {
      {{}, Launcher::None, 0, 1, -1, ""},
      {{{"TANDEM_RANK", "1"}, {"TANDEM_WORLD_SIZE", "2"}, {"TANDEM_NCCL_ID_FILE", "/tmp/x/nccl.id"}},
       Launcher::Tandem, 1, 2, 1, ""},
      {{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
        {"OMPI_MCA_ess_base_jobid", "4242"}},
       Launcher::OpenMpi, 3, 8, 3, "4242"},
      {{{"PMI_RANK", "5"}, {"PMI_SIZE", "6"}, {"MPI_LOCALRANKID", "1"}}, Launcher::Mpich, 5, 6, 1, ""},
      {{{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"PMI_LOCAL_RANK", "0"}, {"PMI_KVSNAME", "kvs_77"}},
       Launcher::Mpich, 0, 2, 0, "kvs_77"},
      // srun: the step's task count wins over the allocation's.
      {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "16"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_LOCALID", "1"},
        {"SLURM_JOB_ID", "900"}, {"SLURM_STEP_ID", "3"}},
       Launcher::Slurm, 1, 2, 1, "900.3"},
      // The variables alone, as a manual launch sets them.
      {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}}, Launcher::Slurm, 1, 2, 1, ""},
      // A batch script inside an allocation (no job step) is not a launch.
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}, {"SLURM_JOB_ID", "900"}},
       Launcher::None, 0, 1, -1, ""},
      // mpirun inside a Slurm allocation: MPI's variables win.
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "900"}, {"SLURM_STEP_ID", "0"},
        {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
       Launcher::OpenMpi, 2, 4, -1, ""},
      {{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"TORCHELASTIC_RUN_ID", "abc"}},
       Launcher::Torchrun, 1, 4, 1, "abc"},
      // RANK alone is too common a name to mean torchrun.
      {{{"RANK", "1"}}, Launcher::None, 0, 1, -1, ""},
  };
  for (size_t i = 0; i < table.size(); ++i) {
    INFO("row " << i);
    const Row& row = table[i];
    const LaunchInfo info = detect(row.env);
    CHECK(info.launcher == row.launcher);
    CHECK(info.rank == row.rank);
    CHECK(info.world == row.world);
    CHECK(info.local_rank == row.local);
    CHECK(info.job_key == row.key);
    CHECK(info.external() == (row.launcher != Launcher::None && row.launcher != Launcher::Tandem));
  }
  CHECK(detect(table[1].env).id_file == "/tmp/x/nccl.id");
}

TEST_CASE("launcher detection: bad variables give one clear line", "[rendezvous][errors]") {
  CHECK_THROWS_WITH(detect({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
                    "Open MPI (mpirun) gives rank 2 but world size 2 (OMPI_COMM_WORLD_RANK=2, OMPI_COMM_WORLD_SIZE=2); "
                    "expected 0 <= rank < world size");
  CHECK_THROWS_WITH(detect({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "2"}}),
                    Catch::Contains("Slurm (srun) gives rank 4 but world size 2"));
  CHECK_THROWS_WITH(detect({{"PMI_RANK", "x1"}, {"PMI_SIZE", "2"}}),
                    "launcher variable PMI_RANK='x1' is not an integer");
  CHECK_THROWS_WITH(detect({{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}}), Catch::Contains("world size 0"));
  CHECK_THROWS_WITH(detect({{"OMPI_COMM_WORLD_RANK", "0"}}),
                    Catch::Contains("OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not"));
  CHECK_THROWS_WITH(detect({{"TANDEM_RANK", "0"}}), Catch::Contains("TANDEM_WORLD_SIZE"));
  CHECK_THROWS_WITH(detect({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "-3"}}),
                    Catch::Contains("local rank -3"));
  for (const auto& [name, env] : std::vector<std::pair<std::string, Env>>{
           {"rank", {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}}},
           {"integer", {{"PMI_RANK", "x"}, {"PMI_SIZE", "2"}}}}) {
    try {
      detect(env);
      FAIL("no error for " << name);
    } catch (const LaunchError& e) {
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
  }
}

TEST_CASE("world size: --gpus must match the launcher", "[rendezvous][errors]") {
  const LaunchInfo none;
  CHECK(launchWorldSize(none, 0, 3) == 3);
  CHECK(launchWorldSize(none, 2, 3) == 2);
  const LaunchInfo slurm = detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}});
  CHECK(launchWorldSize(slurm, 0, 8) == 2);
  CHECK(launchWorldSize(slurm, 2, 8) == 2);
  CHECK_THROWS_WITH(launchWorldSize(slurm, 4, 8),
                    "--gpus 4 does not match the 2 ranks started by Slurm (srun); leave --gpus out or pass --gpus 2");
}

TEST_CASE("rendezvous plan: flag, srun default folder, MPI, or a clear error", "[rendezvous]") {
  const Env srun = {{"SLURM_PROCID", "1"},       {"SLURM_NTASKS", "2"},  {"SLURM_LOCALID", "1"},
                    {"SLURM_SUBMIT_DIR", "/home/u/exp"}, {"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "0"}};
  const LaunchInfo s = detect(srun);
  CHECK(defaultRendezvousDir(s, lookup(srun)) == "/home/u/exp/.tandem-rendezvous/77.0");
  RendezvousPlan p = planRendezvous(s, "", lookup(srun));
  CHECK(p.needed);
  CHECK_FALSE(p.mpi);
  CHECK(p.file == "/home/u/exp/.tandem-rendezvous/77.0/nccl-id.77.0");
  CHECK(p.remove_dir);
  p = planRendezvous(s, "/shared/rdv", lookup(srun));
  CHECK(p.file == "/shared/rdv/nccl-id.77.0");
  CHECK_FALSE(p.remove_dir);

  const Env torch = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}};
  CHECK_THROWS_WITH(planRendezvous(detect(torch), "", lookup(torch)),
                    Catch::StartsWith("started by torchrun as rank 0 of 2: pass --rendezvous DIR"));
  CHECK(planRendezvous(detect(torch), "/r", lookup(torch)).file == "/r/nccl-id");
  const Env one = {{"RANK", "0"}, {"WORLD_SIZE", "1"}};
  CHECK_FALSE(planRendezvous(detect(one), "", lookup(one)).needed);

  // This test compiles mpi_exchange.cpp without MPI: mpirun needs --rendezvous.
  const Env ompi = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}};
  CHECK_FALSE(mpiBuiltIn());
  CHECK_THROWS_WITH(planRendezvous(detect(ompi), "", lookup(ompi)), Catch::Contains("built without MPI"));
  CHECK_THROWS_WITH(mpiBroadcastId(IdBlob{}, 0), Catch::Contains("without MPI"));

  const Env own = {{"TANDEM_RANK", "1"}, {"TANDEM_WORLD_SIZE", "2"}, {"TANDEM_NCCL_ID_FILE", "/tmp/t/nccl.id"}};
  CHECK(planRendezvous(detect(own), "/ignored", lookup(own)).file == "/tmp/t/nccl.id");
  CHECK(rendezvousFile("/d", detect({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_RUN_ID", "a/b c"}})) ==
        "/d/nccl-id.a_b_c");
}

TEST_CASE("file rendezvous: 4 real processes exchange a 128-byte id", "[rendezvous]") {
  const std::string dir = freshDir("four") + "/sub/folder";  // created by rank 0
  const std::string path = dir + "/nccl-id";
  constexpr int kWorld = 4;
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r = 1; r < kWorld; ++r) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      int rc = 0;
      try {
        const IdBlob id = waitForId(path, r, 20);
        rc = write(fds[1], id.data(), id.size()) == ssize_t(id.size()) ? 0 : 2;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        rc = 3;
      }
      _exit(rc);
    }
    close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  // The others are waiting before the id exists.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK_FALSE(fs::exists(path));
  const IdBlob id = patternId(getpid());
  publishId(path, id);
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    REQUIRE(waitpid(pids[i], &status, 0) == pids[i]);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    IdBlob got{};
    CHECK(read(pipes[i], got.data(), got.size()) == ssize_t(got.size()));
    close(pipes[i]);
    CHECK(got == id);
  }
  // Only the id is left (no temp file), and rank 0 removes it with its folder.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    (void)e;
    ++files;
  }
  CHECK(files == 1);
  removeId(path, true);
  CHECK_FALSE(fs::exists(path));
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("file rendezvous: threads, a late rank 0, and a republished id", "[rendezvous]") {
  const std::string path = freshDir("threads") + "/nccl-id";
  std::vector<IdBlob> got(3);
  std::vector<std::thread> threads;
  for (int r = 1; r <= 3; ++r) threads.emplace_back([&, r] { got[r - 1] = waitForId(path, r, 20); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const IdBlob id = patternId(5);
  publishId(path, id);
  for (auto& t : threads) t.join();
  for (const auto& g : got) CHECK(g == id);
  // Publishing again replaces the id whole.
  publishId(path, patternId(6));
  CHECK(waitForId(path, 1, 1) == patternId(6));
}

TEST_CASE("file rendezvous: timeouts, stale and foreign files", "[rendezvous][errors]") {
  const std::string dir = freshDir("timeout");
  const std::string path = dir + "/nccl-id";
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(waitForId(path, 2, 0.3),
                    "rank 2: rank 0 did not publish the NCCL id in " + path +
                    " within 0.3 s (is rank 0 running, and do all ranks see this folder? see --rendezvous, --timeout)");
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(waited >= 0.3);
  CHECK(waited < 5);

  // A file from an earlier launch (old mtime) is not taken for this launch's id.
  publishId(path, patternId(1));
  utimbuf old{};
  old.actime = old.modtime = time(nullptr) - 3600;
  REQUIRE(utime(path.c_str(), &old) == 0);
  CHECK_THROWS_WITH(waitForId(path, 1, 0.2), Catch::Contains("older than 120 s was there and was ignored"));

  // A file without tandem's tag, or cut short, is never an id.
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f);
    std::string junk(136, 'x');
    std::fwrite(junk.data(), 1, junk.size(), f);
    std::fclose(f);
  }
  CHECK_THROWS_AS(waitForId(path, 1, 0.2), LaunchError);
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f);
    std::fwrite("TNDMID01abc", 1, 11, f);
    std::fclose(f);
  }
  CHECK_THROWS_AS(waitForId(path, 1, 0.2), LaunchError);

  // An unwritable folder: one line naming it.
  if (geteuid() != 0) {
    const std::string ro = dir + "/readonly";
    fs::create_directories(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_THROWS_WITH(publishId(ro + "/nccl-id", patternId(1)), Catch::Contains("cannot write the NCCL id"));
    fs::permissions(ro, fs::perms::owner_all);
  } else {
    CHECK_THROWS_WITH(publishId("/proc/tandem-no-such/nccl-id", patternId(1)),
                      Catch::Contains("rendezvous folder"));
  }
}

TEST_CASE("MPI id exchange under a real mpirun", "[rendezvous][mpi]") {
  const std::string bin = std::string(TANDEM_BINARY_DIR) + "/engine/cuda/tandem_mpi_id_exchange";
  if (!fs::exists(bin)) {
    WARN("skipped: " << bin << " not built (tandem configured without MPI)");
    return;
  }
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) {
    WARN("skipped: mpirun is not installed");
    return;
  }
  const std::string cmd = "mpirun -n 2 --oversubscribe --allow-run-as-root " + bin + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p)) out += buf;
  const int status = pclose(p);
  INFO(out);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  std::set<int> ranks;
  std::set<std::string> ids;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    int rank = -1, world = -1, local = -9;
    char id[32] = {0};
    if (std::sscanf(line.c_str(), "rank %d of %d local %d launcher 'Open MPI (mpirun)' id %16s", &rank, &world,
                    &local, id) == 4) {
      CHECK(world == 2);
      CHECK(local == rank);
      ranks.insert(rank);
      ids.insert(id);
    }
  }
  CHECK(ranks == std::set<int>{0, 1});
  CHECK(ids.size() == 1);
}
