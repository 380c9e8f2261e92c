// tandem train's checkpoints on the command line (engine/checkpoint/checkpoint.h).
#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>

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
