// The published rows (resources/published/, simulator/validation/published.h):
// every shipped row loads and sets up the configuration it says, a row that
// is not modelled is reported and not simulated, and bad rows give one line
// naming the file, line and field.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <unistd.h>

#include "simulator/validation/published.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

const std::string kRows = std::string(TANDEM_SOURCE_DIR) + "/resources/published";

std::string writeRow(const std::string& name, const std::string& text) {
  const std::string path = (fs::temp_directory_path() / ("tandem_published_" + std::to_string(::getpid()) + "_" + name))
                               .string();
  std::ofstream(path) << text;
  return path;
}

const char* kGood = R"(id: X1
title: "a test row"
source: "nowhere"
topology: 1xdgx-a100
published: {step_s: 1.5, provenance: printed, note: "test"}
gpus: 8
job:
  name: test-row
  model: {family: gpt2, vocab: 64, seq_len: 32, layers: 2, hidden: 64, heads: 4}
  parallel: {data_parallel: 2, tensor_parallel: 4}
)";

}  // namespace

TEST_CASE("every shipped published row loads as the reference lists it", "[published]") {
  const std::vector<sim::PublishedRow> rows = sim::loadPublishedRows(kRows);
  // 26 rows of the reference; C1-C4 carry two figures each (full and
  // selective recompute), J1 and J2 three (eager, torch.compile, Float8);
  // and rows the reference does not list: two torchtitan runs on A100s,
  // eleven of Megatron-Bridge's dense Llama rows (H100 and Blackwell).
  REQUIRE(rows.size() == 36 + 11);
  std::set<std::string> ids;
  int not_modelled = 0;
  for (const sim::PublishedRow& r : rows) {
    INFO(r.file);
    CHECK(ids.insert(r.id).second);
    CHECK(r.step_s > 0);
    CHECK(!r.source.empty());
    if (r.not_modelled.empty()) {
      REQUIRE(r.job.has_value());
      CHECK(r.job->worldSize() == r.gpus);  // the job runs on the published GPU count
    } else {
      ++not_modelled;
      CHECK_FALSE(r.job.has_value());
    }
  }
  // Every row of the reference is set up as published.
  CHECK(not_modelled == 0);
  const auto outside = std::count_if(rows.begin(), rows.end(), [](const auto& r) { return !r.in_reference; });
  CHECK(outside == 2 + 11);
}

TEST_CASE("a published row's job is read from its job section", "[published]") {
  const sim::PublishedRow r = sim::loadPublishedRow(writeRow("good.yaml", kGood));
  CHECK(r.id == "X1");
  REQUIRE(r.job.has_value());
  CHECK(r.job->parallel.tensor_parallel == 4);
  CHECK(r.gpus == 8);
  const sim::PublishedOutcome o = sim::simulatePublished(r);
  CHECK(o.simulated);
  CHECK(o.predicted_s > 0);
  CHECK(o.error_pct == Approx(100.0 * (o.predicted_s - 1.5) / 1.5));
}

TEST_CASE("bad published rows name the file, line and field", "[published][errors]") {
  auto fails = [](const std::string& name, std::string text, const std::string& what) {
    const std::string path = writeRow(name, text);
    INFO(name);
    CHECK_THROWS_WITH(sim::loadPublishedRow(path), Catch::Contains(path) && Catch::Contains(what));
  };
  std::string t = kGood;
  fails("unknown.yaml", t + "colour: red\n", "colour: unknown key");
  fails("provenance.yaml", std::string(kGood).replace(t.find("printed"), 7, "guessed"),
        "'guessed' (allowed: printed, derived, inferred, recalled)");
  fails("step.yaml", std::string(kGood).replace(t.find("1.5"), 3, "-2"), "published.step_s: expected a step time above 0 s");
  fails("gpus.yaml", std::string(kGood).replace(t.find("gpus: 8"), 7, "gpus: 16"),
        "gpus: 16 GPUs published, but the job plans 8 ranks");
  fails("job.yaml", std::string(kGood).replace(t.find("heads: 4"), 8, "heads: 5"), ":9: model.heads");
  fails("nojob.yaml", t.substr(0, t.find("job:")), "no 'job:' section");
  fails("id.yaml", t.substr(t.find('\n') + 1), "id: missing");
  fails("reference.yaml", t + "in_reference: maybe\n", "in_reference: expected true or false");
  CHECK_FALSE(sim::loadPublishedRow(writeRow("outside.yaml", t + "in_reference: false\n")).in_reference);
  CHECK(sim::loadPublishedRow(writeRow("inside.yaml", t)).in_reference);
}
