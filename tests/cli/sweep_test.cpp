// tandem sweep on the command line (simulator/pipeline/config_sweep.h).
#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>

#include "tests/cli/cli_test_util.h"
#include "tests/traces/test_fixtures.h"

using namespace tandem;
using namespace tandem::cli::testing;

TEST_CASE("tandem sweep: a ranked table, the best line's arguments, a CSV; bad --vary in one line", "[cli][sweep]") {
  const std::string csv = traces::testing::tempTracePath("sweep.csv");
  const auto r = runTandem("sweep default --topology h200x2-nv18 --calibration none --set model.layers=2 "
                           "--vary parallel.data_parallel=1,2,4 --vary training.micro_batch=4,8 --csv " +
                               shellQuote(csv),
                           csv);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("4 of 6 combinations simulated"));
  CHECK_THAT(r.out, Catch::Contains("skipped parallel.data_parallel=4 training.micro_batch=4: the plan has 4 ranks"));
  CHECK_THAT(r.out, Catch::Contains("best that fits: --set parallel.data_parallel=2 --set training.micro_batch=8"));
  CHECK(std::filesystem::exists(csv));
  const auto bad = runTandem("sweep default --topology h200x2-nv18 --vary training.micro_batch", csv + ".bad");
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.err, Catch::StartsWith("tandem: error: sweep: --vary takes KEY=V1,V2"));
  // What every combination shares fails once, before any simulation.
  const auto topo = runTandem("sweep default --topology no-such-machine --vary training.micro_batch=4,8", csv + ".t");
  CHECK(topo.exit_code == 1);
  CHECK_THAT(topo.err, Catch::StartsWith("tandem: error: 'no-such-machine' is neither a preset"));
  CHECK(topo.out.find("skipped") == std::string::npos);
}
