// tandem simulate --plan-cache: the second simulation of a job reads its
// plan back, says so, and simulates the same step.
#include <catch2/catch.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_util.h"
#include "tests/traces/test_fixtures.h"

using namespace tandem;
using namespace tandem::cli::testing;

TEST_CASE("tandem simulate reads a cached plan back and says so", "[cli][plan_cache]") {
  const std::string dir = traces::testing::tempTracePath("plan-cache-cli");
  std::filesystem::remove_all(dir);
  const std::string cmd = "simulate default --topology dgx-h200 --calibration none --set model.layers=2 --json "
                          "--plan-cache " + shellQuote(dir);
  const auto first = runTandem(cmd, dir + ".1");
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  const auto a = nlohmann::json::parse(first.out);
  CHECK(a.at("plan").at("from_cache") == false);
  const std::string file = a.at("plan").at("cache_file");
  CHECK(std::filesystem::exists(file));
  const auto second = runTandem(cmd, dir + ".2");
  REQUIRE(second.exit_code == 0);
  const auto b = nlohmann::json::parse(second.out);
  CHECK(b.at("plan").at("from_cache") == true);
  CHECK(b.at("plan").at("cache_file") == file);
  CHECK(b.at("step_ns") == a.at("step_ns"));
  // The text says it too; off plans every time.
  const auto text = runTandem("simulate default --topology dgx-h200 --calibration none --set model.layers=2 "
                              "--plan-cache " + shellQuote(dir), dir + ".3");
  CHECK_THAT(text.out, Catch::Contains("plan read back from the plan cache"));
  const auto off = runTandem("simulate default --topology dgx-h200 --calibration none --set model.layers=2 "
                             "--plan-cache off", dir + ".4");
  CHECK(off.exit_code == 0);
  CHECK(off.out.find("read back") == std::string::npos);
}
