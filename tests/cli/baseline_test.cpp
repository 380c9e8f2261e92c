// tandem baseline record|check on a profiled two-GPU run (the committed
// fixture): the gate passes against its own baseline, fails with exit 1
// naming the metric against a faster one, and refuses bad inputs in one line.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_util.h"
#include "tests/traces/test_fixtures.h"
#include "tests/traces/stretch_kernels.h"
#include "traces/analysis/baseline.h"
#include "traces/store/trace_reader.h"

using namespace tandem;
using namespace tandem::cli::testing;

namespace {

const std::string kRun = std::string(TANDEM_SOURCE_DIR) + "/tests/traces/fixtures/real-dp2-h200.sqlite";

}  // namespace

TEST_CASE("baseline gate: a run passes against itself and fails against a faster baseline", "[cli][baseline]") {
  const std::string base = traces::testing::tempTracePath("base.json");
  const auto rec = runTandem("baseline record " + shellQuote(kRun) + " --out " + shellQuote(base), base + ".rec");
  INFO(rec.err);
  REQUIRE(rec.exit_code == 0);
  nlohmann::json j = nlohmann::json::parse(readFile(base));
  CHECK(j.at("steps").get<int>() == 4);
  CHECK(j.at("p95_step_ms").get<double>() >= j.at("p50_step_ms").get<double>());
  CHECK(j.at("tokens_per_s").get<double>() > 0);  // the run's own figure
  CHECK(j.at("op_ms").contains("matmul"));

  const auto same = runTandem("baseline check " + shellQuote(kRun) + " --baseline " + shellQuote(base), base + ".ok");
  CHECK(same.exit_code == 0);
  CHECK_THAT(same.out, Catch::Contains("PASS"));

  // A baseline whose p50 step was 10% faster: the run regressed by 11%.
  j["p50_step_ms"] = j["p50_step_ms"].get<double>() * 0.9;
  const std::string faster = traces::testing::tempTracePath("faster.json");
  std::ofstream(faster) << j.dump();
  const auto slow = runTandem("baseline check " + shellQuote(kRun) + " --baseline " + shellQuote(faster), faster);
  CHECK(slow.exit_code == 1);
  CHECK_THAT(slow.out, Catch::Contains("FAIL") && Catch::Contains("p50 step time (+11.11%)"));
  // Within a wider tolerance it passes; --json says the same.
  CHECK(runTandem("baseline check " + shellQuote(kRun) + " --baseline " + shellQuote(faster) + " --tolerance 12%",
                  faster + ".wide")
            .exit_code == 0);
  const auto js = runTandem("baseline check " + shellQuote(kRun) + " --baseline " + shellQuote(faster) + " --json",
                            faster + ".json");
  CHECK(js.exit_code == 1);
  CHECK(nlohmann::json::parse(js.out).at("pass") == false);
}

TEST_CASE("baseline gate: bad inputs are one line and leave no file", "[cli][baseline][errors]") {
  const std::string dir = traces::testing::tempTracePath("baseline-bad");
  std::filesystem::create_directories(dir);
  const std::string notjson = dir + "/notes.json";
  std::ofstream(notjson) << "{\"p50_step_ms\": 1}";
  auto r = runTandem("baseline check " + shellQuote(kRun) + " --baseline " + shellQuote(notjson), dir + "/a");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::StartsWith("tandem: error: ") && Catch::Contains("not a tandem baseline"));
  r = runTandem("baseline check " + shellQuote(kRun) + " --baseline " + shellQuote(notjson) + " --tolerance lots",
                dir + "/b");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("--tolerance takes a percentage"));
  const std::string out = dir + "/base.json";
  r = runTandem("baseline record " + shellQuote(dir + "/missing.sqlite") + " --out " + shellQuote(out), dir + "/c");
  CHECK(r.exit_code == 1);
  CHECK_FALSE(std::filesystem::exists(out));
}

TEST_CASE("baseline gate rules: which way each metric may move", "[baseline]") {
  traces::Baseline base;
  base.p50_step_ms = 100;
  base.p95_step_ms = 110;
  base.max_step_ms = 150;
  base.exposed_comm_ms = 2;
  base.tokens_per_s = 1000;
  base.peak_memory_gib = 40;
  base.op_ms = {{"matmul", 60}, {"attention", 20}};
  traces::Baseline now = base;
  now.p95_step_ms = 114;          // +3.6%: within 5%
  now.tokens_per_s = 940;         // -6%: fewer tokens is a regression
  now.peak_memory_gib = 36;       // less memory: better
  now.exposed_comm_ms = 6;        // +4 ms, under 5% of the 100 ms step
  now.max_step_ms = 300;          // not gated
  now.op_ms = {{"matmul", 62}, {"attention", 26}, {"rmsnorm", 1}};
  const traces::GateResult g = traces::checkBaseline(base, now, 5);
  CHECK_FALSE(g.pass);
  auto row = [&](const std::string& m) {
    for (const auto& r : g.rows)
      if (r.metric == m) return r;
    FAIL("no row " << m);
    return traces::GateRow{};
  };
  CHECK_FALSE(row("p95 step time").regressed);
  CHECK(row("tokens/s").regressed);
  CHECK(row("peak memory").improved);
  CHECK_FALSE(row("exposed communication").regressed);
  CHECK_FALSE(row("slowest step").regressed);
  REQUIRE(g.ops.size() == 3);
  CHECK(g.ops[0].op == "attention");  // moved most
  CHECK(g.ops[1].op == "matmul");
  CHECK(g.ops[2].op == "rmsnorm");  // new in the run
}

namespace {

// Records a baseline of `run_file`, then checks copies of it whose matmul
// kernels ran `factor` times as long.
struct SlowedCheck {
  int exit_code;
  std::string out;
};
SlowedCheck checkSlowedMatmuls(const std::string& run_file, const std::string& label, double factor) {
  const std::string base = traces::testing::tempTracePath(label + "-base.json");
  const auto rec = runTandem("baseline record " + shellQuote(run_file) + " --out " + shellQuote(base), base + ".r");
  REQUIRE(rec.exit_code == 0);
  const std::string slowed = traces::testing::tempTracePath(label + "-slowed.sqlite");
  std::filesystem::copy_file(run_file, slowed, std::filesystem::copy_options::overwrite_existing);
  const int64_t run = traces::TraceReader(slowed).defaultRunId();
  REQUIRE(traces::testing::stretchOpKernels(slowed, run, "matmul", factor) > 0);
  const auto check = runTandem("baseline check " + shellQuote(slowed) + " --baseline " + shellQuote(base),
                               slowed + ".c");
  return {check.exit_code, check.out};
}

}  // namespace

TEST_CASE("baseline gate: matmuls 7% slower fail naming matmul, 3% slower pass (real and simulated runs)",
          "[cli][baseline]") {
  // A profiled run of two H200s (GPT-2 124M), and a simulated one.
  const std::string real = traces::testing::fixtureCopy("real-dp2-h200.sqlite");
  const std::string simulated = traces::testing::tempTracePath("gate-simulated.sqlite");
  const auto sim = runTandem("simulate default --topology h200x2-nv18 --set parallel.data_parallel=2 --out " +
                                 shellQuote(simulated),
                             simulated);
  REQUIRE(sim.exit_code == 0);
  for (const auto& [label, file] : {std::pair{"real", real}, std::pair{"simulated", simulated}}) {
    INFO(label);
    const SlowedCheck seven = checkSlowedMatmuls(file, label, 1.07);
    INFO(seven.out);
    CHECK(seven.exit_code == 1);
    CHECK_THAT(seven.out, Catch::Contains("FAIL") && Catch::Contains(" matmul time (+"));
    const SlowedCheck three = checkSlowedMatmuls(file, label, 1.03);
    INFO(three.out);
    CHECK(three.exit_code == 0);
    CHECK_THAT(three.out, Catch::Contains("PASS"));
  }
}
