// tandem train's checkpoints on the command line (engine/checkpoint/checkpoint.h).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <vector>

#include "tests/cli/cli_test_util.h"
#include "tests/traces/test_fixtures.h"

using namespace tandem;
using namespace tandem::cli::testing;

TEST_CASE("tandem train --checkpoint-dir --resume continues where a stopped run left off", "[cli][checkpoint]") {
  const std::string dir = traces::testing::tempTracePath("train-ckpt");
  std::filesystem::remove_all(dir);
  auto lossLines = [](const std::string& out) {
    std::string lines;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);)
      if (l.rfind("step ", 0) == 0) {
        // "step N/LAST  loss ...  grad norm ...": the step and its figures, not the run's last step.
        const size_t loss = l.find("loss"), lr = l.find("  lr");
        lines += l.substr(0, l.find('/')) + " " + l.substr(loss, lr - loss) + "\n";
      }
    return lines;
  };
  const auto straight = runTandem("train tiny --steps 4 --log-every 1", dir + ".straight");
  REQUIRE(straight.exit_code == 0);
  const auto first = runTandem("train tiny --steps 2 --log-every 1 --checkpoint-dir " + shellQuote(dir) +
                                   " --checkpoint-every 2 --keep 1",
                               dir + ".first");
  INFO(first.out << first.err);
  REQUIRE(first.exit_code == 0);
  CHECK_THAT(first.out, Catch::Contains("checkpoint written: ") && Catch::Contains("step-00000002"));
  const auto rest =
      runTandem("train tiny --steps 4 --log-every 1 --checkpoint-dir " + shellQuote(dir) + " --resume", dir + ".rest");
  INFO(rest.out << rest.err);
  REQUIRE(rest.exit_code == 0);
  CHECK_THAT(rest.out, Catch::Contains("(step 2)"));
  CHECK(lossLines(first.out) + lossLines(rest.out) == lossLines(straight.out));
  const auto bad = runTandem("train tiny --steps 2 --checkpoint-every 1", dir + ".bad");
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.err, Catch::Contains("--checkpoint-every needs --checkpoint-dir"));
}

TEST_CASE("tandem train --check-replicas-every stops on a bit flipped on one rank", "[cli][replicas]") {
  const std::string scratch = traces::testing::tempTracePath("replicas");
  const auto clean = runTandem("train tiny --steps 3 --set parallel.data_parallel=2 --check-replicas-every 1", scratch);
  CHECK(clean.exit_code == 0);
  const auto faulty = runTandem("train tiny --steps 3 --set parallel.data_parallel=2 --check-replicas-every 1",
                                scratch + ".f", "TANDEM_TEST_FLIP_BIT=1:2");
  CHECK(faulty.exit_code == 1);
  CHECK_THAT(faulty.err, Catch::StartsWith("tandem: error: step 2: replicas differ") && Catch::Contains("rank 1's"));
}

TEST_CASE("tandem train --resume under another data-parallel layout reshards; another global batch is refused",
          "[cli][checkpoint]") {
  const std::string dir = traces::testing::tempTracePath("train-reshard");
  std::filesystem::remove_all(dir);
  // tiny: one rank, micro-batch 16. Two replicas of 8 sequences, sharded,
  // then the one of 16.
  const auto first = runTandem("train tiny --steps 2 --set parallel.data_parallel=2 --set training.micro_batch=8 "
                               "--set parallel.shard_optimizer=true --checkpoint-dir " + shellQuote(dir) +
                                   " --checkpoint-every 2",
                               dir + ".first");
  INFO(first.out << first.err);
  REQUIRE(first.exit_code == 0);
  const auto one = runTandem("train tiny --steps 3 --checkpoint-dir " + shellQuote(dir) + " --resume", dir + ".one");
  INFO(one.out << one.err);
  CHECK(one.exit_code == 0);
  CHECK_THAT(one.out, Catch::Contains("(step 2)"));
  const auto other = runTandem("train tiny --steps 3 --set training.micro_batch=8 --checkpoint-dir " + shellQuote(dir) +
                                   " --resume",
                               dir + ".other");
  CHECK(other.exit_code == 1);
  CHECK_THAT(other.err, Catch::Contains("resharding refused: the global batch changed"));
}

namespace {

// `tandem train ARGS` started, and SIGKILLed after `delay_ms`.
void runAndKill(const std::vector<std::string>& args, int delay_ms, const std::string& log) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv;
    const std::string bin = tandemBinary();
    argv.push_back(const_cast<char*>(bin.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  ::usleep(useconds_t(delay_ms) * 1000);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

}  // namespace

TEST_CASE("tandem train killed at random moments while it checkpoints every step resumes from a complete "
          "checkpoint with the losses of a run never stopped",
          "[cli][checkpoint][kill]") {
  constexpr int kSteps = 60;
  auto stepLines = [](const std::string& out, int after) {
    std::map<int, std::string> lines;  // step -> "loss ... grad norm ..."
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);)
      if (l.rfind("step ", 0) == 0) {
        const int step = std::stoi(l.substr(5));
        const size_t loss = l.find("loss"), lr = l.find("  lr");
        if (step > after) lines[step] = l.substr(loss, lr - loss);
      }
    return lines;
  };
  const std::string base = traces::testing::tempTracePath("train-kill");
  const auto started = std::chrono::steady_clock::now();
  const auto straight = runTandem(fmt::format("train tiny --steps {} --log-every 1", kSteps), base + ".straight");
  // The kills fall within the run as long as it takes here (about 0.8 s on
  // an idle machine, longer beside other tests).
  const int run_ms = int(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
  REQUIRE(straight.exit_code == 0);
  const auto want = stepLines(straight.out, 0);
  REQUIRE(want.size() == size_t(kSteps));
  std::mt19937 rng(51);
  std::uniform_int_distribution<int> delay(run_ms / 25, run_ms);
  int resumed_from_checkpoint = 0, left_incomplete = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const std::string dir = fmt::format("{}-{}", base, trial);
    std::filesystem::remove_all(dir);
    const int ms = delay(rng);
    runAndKill({"train", "tiny", "--steps", std::to_string(kSteps), "--checkpoint-dir", dir, "--checkpoint-every", "1",
                "--keep", "2"},
               ms, dir + ".killed.log");
    // A save cut short leaves a step folder without its manifest.
    if (std::filesystem::exists(dir))
      for (const auto& e : std::filesystem::directory_iterator(dir))
        left_incomplete += e.is_directory() && !std::filesystem::exists(e.path() / "manifest.json");
    const auto rest = runTandem(fmt::format("train tiny --steps {} --log-every 1 --checkpoint-dir {} --resume", kSteps,
                                            shellQuote(dir)),
                                dir + ".rest");
    INFO("trial " << trial << ", killed after " << ms << " ms: " << rest.out << rest.err);
    REQUIRE(rest.exit_code == 0);
    int from = 0;
    if (const size_t at = rest.out.find("(step "); at != std::string::npos) {
      from = std::stoi(rest.out.substr(at + 6));
      ++resumed_from_checkpoint;
    }
    const auto got = stepLines(rest.out, from);
    CHECK(got.size() == size_t(kSteps - from));
    for (const auto& [step, line] : got) {
      INFO("step " << step);
      CHECK(line == want.at(step));
    }
    std::filesystem::remove_all(dir);
  }
  // The kills must have landed in the run, some of them in a save.
  INFO(resumed_from_checkpoint << " of 20 resumed from a checkpoint; " << left_incomplete
                               << " left a checkpoint without its manifest");
  CHECK(resumed_from_checkpoint >= 10);
  WARN(resumed_from_checkpoint << " of 20 trials resumed from a checkpoint, " << left_incomplete
                               << " killed with a checkpoint half written");
}

TEST_CASE("tandem train --restarts: killed twice, started again from its checkpoints, the loss of a run never "
          "stopped; a third kill gives up",
          "[cli][checkpoint][restarts]") {
  const std::string dir = traces::testing::tempTracePath("train-restarts");
  std::filesystem::remove_all(dir);
  auto lastLine = [](const std::string& out) {
    const size_t at = out.find("step    60/60");
    return at == std::string::npos ? std::string() : out.substr(at, out.find("  lr", at) - at);
  };
  const auto straight = runTandem("train tiny --steps 60 --log-every 20", dir + ".straight");
  REQUIRE(straight.exit_code == 0);
  const std::string cmd = "train tiny --steps 60 --log-every 20 --checkpoint-dir " + shellQuote(dir) +
                          " --checkpoint-every 5 --restarts 2";
  const auto healed = runTandem(cmd, dir + ".healed", "TANDEM_TEST_KILL_AFTER_STEPS=20,45");
  INFO(healed.out << healed.err);
  REQUIRE(healed.exit_code == 0);
  CHECK_THAT(healed.out, Catch::Contains("restart 1 of 2: the run was killed by signal 9") &&
                             Catch::Contains("restart 2 of 2: the run was killed by signal 9"));
  REQUIRE_FALSE(lastLine(straight.out).empty());
  CHECK(lastLine(healed.out) == lastLine(straight.out));
  std::filesystem::remove_all(dir);
  const auto dead = runTandem(cmd, dir + ".dead", "TANDEM_TEST_KILL_AFTER_STEPS=10,20,30");
  CHECK(dead.exit_code == 1);
  CHECK_THAT(dead.out, Catch::Contains("after 2 restarts: giving up"));
  CHECK_THAT(dead.err, Catch::Contains("train: the run failed (status 137) after 2 restarts"));
  const auto bare = runTandem("train tiny --steps 5 --restarts 1", dir + ".bare");
  CHECK(bare.exit_code == 1);
  CHECK_THAT(bare.err, Catch::Contains("--restarts needs --checkpoint-dir and --checkpoint-every"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("tandem run's checkpoint options are checked before any GPU is looked for", "[cli][checkpoint]") {
  const std::string dir = traces::testing::tempTracePath("run-ckpt");
  auto refusedOr = [](const std::string& err, const std::string& why) {
    return err.find(why) != std::string::npos || err.find("built without CUDA support") != std::string::npos;
  };
  const auto every = runTandem("run default --gpus 1 --checkpoint-every 5", dir + ".every");
  CHECK(every.exit_code == 1);
  CHECK(refusedOr(every.err, "--checkpoint-every needs --checkpoint-dir"));
  const auto restarts = runTandem("run default --gpus 1 --restarts 2", dir + ".restarts");
  CHECK(restarts.exit_code == 1);
  CHECK(refusedOr(restarts.err, "--restarts needs --checkpoint-dir and --checkpoint-every"));
}
