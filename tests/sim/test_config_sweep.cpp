// Configuration sweeps (simulator/pipeline/config_sweep.h): axes, their
// combinations, the simulations and their ranking.
#include <catch2/catch.hpp>

#include "simulator/pipeline/config_sweep.h"

using namespace tandem;
using namespace tandem::sim;

TEST_CASE("sweep axes parse and combine, the last fastest", "[sweep]") {
  const SweepAxis a = parseSweepAxis("parallel.data_parallel=1, 2,4");
  CHECK(a.key == "parallel.data_parallel");
  CHECK(a.values == std::vector<std::string>{"1", "2", "4"});
  CHECK_THROWS_WITH(parseSweepAxis("parallel.data_parallel"), Catch::Contains("KEY=V1,V2"));
  CHECK_THROWS_WITH(parseSweepAxis("=1,2"), Catch::Contains("KEY=V1,V2"));
  CHECK_THROWS_WITH(parseSweepAxis("training.micro_batch=8,,16"), Catch::Contains("empty value"));
  const auto combos = sweepCombinations({a, parseSweepAxis("training.micro_batch=8,16")});
  REQUIRE(combos.size() == 6);
  CHECK(combos[0] == std::vector<std::string>{"parallel.data_parallel=1", "training.micro_batch=8"});
  CHECK(combos[1] == std::vector<std::string>{"parallel.data_parallel=1", "training.micro_batch=16"});
  CHECK(combos[5] == std::vector<std::string>{"parallel.data_parallel=4", "training.micro_batch=16"});
}

TEST_CASE("a sweep simulates every combination, skips the invalid ones with their reason, ranks by tokens/s",
          "[sweep]") {
  ConfigSweepRequest r;
  const JobSpec base = defaultJob();
  r.job_yaml = base.yaml;
  r.job_source = "default";
  r.base_sets = {"model.layers=2"};
  r.axes = {parseSweepAxis("parallel.data_parallel=1,2,4"), parseSweepAxis("training.micro_batch=4,8,0")};
  r.settings.topology = "h200x2-nv18";
  r.settings.calibration = "none";
  r.threads = 2;
  size_t calls = 0;
  std::vector<SweepRow> rows = runConfigSweep(r, [&](size_t done, size_t total) {
    ++calls;
    CHECK(done <= total);
  });
  CHECK(calls == 9);
  REQUIRE(rows.size() == 9);
  // Four ranks do not fit a machine of two GPUs; micro-batch 0 is no job.
  int simulated = 0;
  for (const SweepRow& row : rows) {
    if (row.sets[1] == "training.micro_batch=0") {
      CHECK_FALSE(row.simulated);
      CHECK_THAT(row.why_not, Catch::Contains("micro_batch"));
    } else if (row.sets[0] == "parallel.data_parallel=4") {
      CHECK_FALSE(row.simulated);
      CHECK_THAT(row.why_not, Catch::Contains("4 ranks"));
    } else {
      CHECK(row.simulated);
      CHECK(row.step_ms > 0);
      CHECK(row.tokens_per_s > 0);
      CHECK(row.peak_memory_gib > 0);
      ++simulated;
    }
  }
  CHECK(simulated == 4);
  rankSweepRows(rows);
  for (size_t i = 1; i < 4; ++i) CHECK(rows[i - 1].tokens_per_s >= rows[i].tokens_per_s);
  CHECK_FALSE(rows[4].simulated);
  // Two ranks at micro-batch 8 move the most tokens per second.
  CHECK(rows[0].sets == std::vector<std::string>{"parallel.data_parallel=2", "training.micro_batch=8"});
  const std::string csv = sweepRowsToCsv(rows, r.axes);
  CHECK_THAT(csv, Catch::StartsWith("parallel.data_parallel,training.micro_batch,simulated,step_ms"));
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 10);
}

TEST_CASE("sweep axes of fields that move together, and a fixed GPU count", "[sweep]") {
  const SweepAxis s = parseSweepAxis("parallel.shard_optimizer+parallel.shard_parameters=false+false,true+false");
  const auto combos = sweepCombinations({s});
  REQUIRE(combos.size() == 2);
  CHECK(combos[1] == std::vector<std::string>{"parallel.shard_optimizer=true", "parallel.shard_parameters=false"});
  CHECK_THROWS_WITH(parseSweepAxis("a+b=1,2+3"), Catch::Contains("'+' parts"));
  ConfigSweepRequest r;
  r.job_yaml = defaultJob().yaml;
  r.base_sets = {"model.layers=2"};
  r.axes = {parseSweepAxis("parallel.tensor_parallel=1,2,3")};
  r.gpus = 4;
  r.settings.topology = "dgx-h200";
  r.settings.calibration = "none";
  const std::vector<SweepRow> rows = runConfigSweep(r);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].world_size == 4);  // data parallel 4
  CHECK(rows[1].world_size == 4);  // data parallel 2 x tensor parallel 2
  CHECK(sweepValue(rows[1], r.axes[0]) == "2");
  CHECK_FALSE(rows[2].simulated);
  CHECK_THAT(rows[2].why_not, Catch::Contains("4 GPUs do not hold whole replicas of 3"));
}

TEST_CASE("a sweep at a fixed global batch sets each combination's accumulation", "[sweep]") {
  ConfigSweepRequest r;
  r.job_yaml = defaultJob().yaml;
  r.base_sets = {"model.layers=2"};
  r.axes = {parseSweepAxis("parallel.tensor_parallel=1,2"), parseSweepAxis("training.micro_batch=2,3")};
  r.gpus = 4;
  r.global_batch = 16;
  r.settings.topology = "dgx-h200";
  r.settings.calibration = "none";
  const std::vector<SweepRow> rows = runConfigSweep(r);
  REQUIRE(rows.size() == 4);
  // 16 sequences = micro-batch x data parallel x accumulation: TP 1 has 4
  // replicas, TP 2 two.
  const double tokens_per_step = 16.0 * 1024;  // the default job's sequence
  for (const SweepRow& row : rows) {
    if (sweepValue(row, r.axes[1]) == "3") {
      CHECK_FALSE(row.simulated);
      CHECK_THAT(row.why_not, Catch::Contains("a global batch of 16 sequences is not a whole number"));
      continue;
    }
    REQUIRE(row.simulated);
    CHECK(row.tokens_per_s * row.step_ms / 1e3 == Approx(tokens_per_step).epsilon(1e-9));
  }
}

TEST_CASE("sweep ranking: what fits first; axis labels", "[sweep]") {
  std::vector<SweepRow> rows(4);
  rows[0].simulated = true, rows[0].tokens_per_s = 900, rows[0].fits_memory = false;
  rows[1].simulated = false;
  rows[2].simulated = true, rows[2].tokens_per_s = 100, rows[2].fits_memory = true;
  rows[3].simulated = true, rows[3].tokens_per_s = 300, rows[3].fits_memory = true;
  rankSweepRows(rows);
  CHECK(rows[0].tokens_per_s == 300);
  CHECK(rows[1].tokens_per_s == 100);
  CHECK(rows[2].tokens_per_s == 900);
  CHECK_FALSE(rows[3].simulated);
  CHECK(sweepAxisLabel(parseSweepAxis("parallel.tensor_parallel+parallel.sequence_parallel=2+true")) == "TP+SP");
  CHECK(sweepAxisLabel(parseSweepAxis("recompute.policy=none")) == "recompute");
  CHECK(sweepAxisLabel(parseSweepAxis("training.micro_batch=1")) == "micro_batch");
}
