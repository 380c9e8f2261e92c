// Golden "diff tests" for `tandem report --json` and the trace commands'
// behaviour on bad input: fixture trace built here -> command -> expected
// output in tests/cli/golden/. Set TANDEM_UPDATE_GOLDEN=1 to rewrite the
// expected files after an intended change (and review the diff).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "traces/nsys_fixture.h"
#include "traces/test_fixtures.h"

using namespace tandem::traces;
using namespace tandem::traces::testing;
using namespace tandem::cli::testing;

namespace {

const std::string kGolden = std::string(TANDEM_SOURCE_DIR) + "/tests/cli/golden/";
const std::string kKineto = std::string(TANDEM_SOURCE_DIR) + "/tests/traces/fixtures/kineto_small.json";

void checkGolden(const std::string& actual, const std::string& name) {
  std::string path = kGolden + name;
  if (std::getenv("TANDEM_UPDATE_GOLDEN")) {
    std::ofstream(path, std::ios::binary) << actual;
    WARN("rewrote " << path);
    return;
  }
  std::string expected = readFile(path);
  REQUIRE_FALSE(expected.empty());
  if (actual != expected) {
    // Point at the first differing line so the failure is readable.
    std::istringstream a(actual), e(expected);
    std::string la, le;
    int line = 1;
    while (std::getline(a, la) && std::getline(e, le) && la == le) ++line;
    FAIL(name << " differs at line " << line << ":\n  expected: " << le << "\n  actual:   " << la);
  }
}

void expectOneLineError(const CommandResult& r, const std::string& fragment) {
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 1);
  CHECK(lineCount(r.err) == 1);
  CHECK_THAT(r.err, Catch::StartsWith("tandem: error: ") && Catch::Contains(fragment));
}

// One rank, two steps, two compute streams and synchronisation: step 0 has
// compute [0,500) [600,900) = 800, sync [500,600) = 100, idle 100; step 1
// has compute [1000,1500) [1900,2000) = 600, a wait kernel [1500,1800) = 300
// (sync by the default rules), idle 100. No communication.
void writeStepsFixture(const std::string& path) {
  using K = ActivityKind;
  using P = Phase;
  TraceWriter w(path, WriterOptions{.truncate = true});
  RunInfo info;
  info.kind = RunKind::Real;
  info.name = "steps-fixture";
  w.beginRun(info);
  w.addStream({0, 0, StreamKind::Compute, "compute", 0});
  w.addStream({0, 1, StreamKind::Compute, "compute2", 0});
  w.addStream({0, 2, StreamKind::Compute, "events", 0});
  w.addActivity(act(0, 0, 0, 400, K::Kernel, "matmul", 10, P::Forward));
  w.addActivity(act(0, 1, 300, 500, K::Kernel, "softmax", 12, P::Forward));
  w.addActivity(act(0, 2, 500, 600, K::Sync, "cudaStreamWaitEvent"));
  w.addActivity(act(0, 0, 600, 900, K::Kernel, "matmul", 11, P::Backward));
  w.addActivity(act(0, 0, 1000, 1500, K::Kernel, "matmul", 20, P::Forward));
  w.addActivity(act(0, 1, 1500, 1800, K::Kernel, "my_wait_kernel"));
  w.addActivity(act(0, 0, 1900, 2000, K::Kernel, "matmul", 21, P::Backward));
  w.addPlanTask(task(0, 10, "fc.fwd", "matmul", P::Forward, 0, {}));
  w.addPlanTask(task(0, 12, "softmax.fwd", "softmax", P::Forward, 1, {}));
  w.addPlanTask(task(0, 11, "fc.bwd", "matmul_bwd_data", P::Backward, 0, {10, 12}));
  w.addPlanTask(task(0, 20, "fc.fwd", "matmul", P::Forward, 0, {11}));
  w.addPlanTask(task(0, 21, "fc.bwd", "matmul_bwd_data", P::Backward, 0, {20}));
  w.addStep({0, 0, 0, 1000});
  w.addStep({0, 1, 1000, 2000});
  w.setStat({"cupti.dropped_records", 3, Severity::DataLoss, "activity records CUPTI could not buffer"});
}

}  // namespace

TEST_CASE("report --json on the overlapping 2-rank fixture matches the golden output", "[cli][golden]") {
  std::string db = tempTracePath("golden-overlap.sqlite");
  writeOverlapFixture(db);
  auto r = runTandem("report " + shellQuote(db) + " --json", db);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  checkGolden(r.out, "report_overlap.json");
  // Hand-worked figures (see test_fixtures.h), independent of the golden file.
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["ranks"][0]["breakdown"]["overlap_pct"] == Approx(66.667));
  CHECK(j["ranks"][0]["breakdown"]["exposed_comm_ns"] == 50);
  CHECK(j["ranks"][1]["breakdown"]["exposed_comm_ns"] == 90);
  CHECK(j["stragglers"]["straggler_rank"] == 1);
}

TEST_CASE("report --json with steps, sync and a classification rule matches the golden output", "[cli][golden]") {
  std::string db = tempTracePath("golden-steps.sqlite");
  writeStepsFixture(db);
  auto r = runTandem("report " + shellQuote(db) + " --json", db);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  checkGolden(r.out, "report_steps.json");
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["steps"][0]["breakdown"]["compute_ns"] == 800);
  CHECK(j["steps"][0]["breakdown"]["sync_exclusive_ns"] == 100);
  CHECK(j["steps"][1]["breakdown"]["sync_ns"] == 300);
  CHECK(j["steps"][1]["breakdown"]["idle_ns"] == 100);

  // A user rule that calls the wait kernel compute changes step 1 only.
  auto ruled = runTandem("report " + shellQuote(db) + " --json --rule my_wait=compute", db);
  REQUIRE(ruled.exit_code == 0);
  auto k = nlohmann::json::parse(ruled.out);
  CHECK(k["steps"][1]["breakdown"]["compute_ns"] == 900);
  CHECK(k["steps"][1]["breakdown"]["sync_ns"] == 0);
  CHECK(k["steps"][0]["breakdown"] == j["steps"][0]["breakdown"]);

  auto text = runTandem("report " + shellQuote(db), db);
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("temporal breakdown") && Catch::Contains("critical path") &&
                           Catch::Contains("window: steps 0-1"));

  // One step; a step the run lacks; the whole run.
  auto one = runTandem("report " + shellQuote(db) + " --json --step 1", db);
  REQUIRE(one.exit_code == 0);
  auto s1 = nlohmann::json::parse(one.out);
  CHECK(s1["window"]["covers"] == "step 1");
  REQUIRE(s1["steps"].size() == 1);
  CHECK(s1["steps"][0]["breakdown"] == j["steps"][1]["breakdown"]);
  CHECK(s1["total"]["span_ns"] == j["steps"][1]["breakdown"]["span_ns"]);
  expectOneLineError(runTandem("report " + shellQuote(db) + " --step 5", db), "has steps 0-1; step 5 is not one");
  auto both = runTandem("report " + shellQuote(db) + " --step 1 --whole-run", db);
  CHECK(both.exit_code != 0);
  CHECK(both.out.empty());
  auto whole = runTandem("report " + shellQuote(db) + " --json --whole-run", db);
  REQUIRE(whole.exit_code == 0);
  CHECK(nlohmann::json::parse(whole.out)["window"]["whole_run"] == true);
}

TEST_CASE("import of both formats, then report, matches the golden output", "[cli][golden][import]") {
  std::string db = tempTracePath("golden-import.sqlite");
  auto imp = runTandem("import " + shellQuote(kKineto) + " --out " + shellQuote(db) + " --json", db);
  INFO(imp.err);
  REQUIRE(imp.exit_code == 0);
  CHECK(nlohmann::json::parse(imp.out)["activities"] == 7);
  auto r = runTandem("report " + shellQuote(db) + " --json", db);
  REQUIRE(r.exit_code == 0);
  checkGolden(r.out, "report_kineto.json");

  // A second import appends a run to the same file.
  std::string nsys = tempTracePath("fixture.nsys.sqlite");
  writeNsysFixture(nsys);
  auto imp2 = runTandem("import " + shellQuote(nsys) + " --out " + shellQuote(db) + " --json", db);
  INFO(imp2.err);
  REQUIRE(imp2.exit_code == 0);
  CHECK(nlohmann::json::parse(imp2.out)["run"] == 2);
  auto r2 = runTandem("report " + shellQuote(db) + " --run 2 --json", db);
  REQUIRE(r2.exit_code == 0);
  checkGolden(r2.out, "report_nsys.json");
}

TEST_CASE("export --chrome writes a valid trace; merge joins rank files", "[cli][export][merge]") {
  std::string db = tempTracePath("cli-export.sqlite");
  writeOverlapFixture(db);
  std::string json = tempTracePath("cli-export.json");
  auto r = runTandem("export " + shellQuote(db) + " --chrome " + shellQuote(json) + " --json", db);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto summary = nlohmann::json::parse(r.out);
  CHECK(summary["processes"] == 2);
  CHECK(summary["flows"] == 5);
  auto doc = nlohmann::json::parse(readFile(json));
  CHECK(doc["traceEvents"].size() > 20);

  std::string merged = tempTracePath("cli-merged.sqlite");
  std::string kineto_db = tempTracePath("cli-kineto.sqlite");
  REQUIRE(runTandem("import " + shellQuote(kKineto) + " --out " + shellQuote(kineto_db), db).exit_code == 0);
  // Rank 1 of the Kineto trace cannot join a file that already has rank 1.
  auto clash = runTandem("merge " + shellQuote(db) + " " + shellQuote(kineto_db) + " --out " + shellQuote(merged), db);
  expectOneLineError(clash, "rank 1 is also in");
  CHECK_FALSE(std::filesystem::exists(merged));
}

TEST_CASE("bad inputs: one-line errors, non-zero exit, no partial output", "[cli][errors]") {
  std::string dir = tempTracePath("bad-dir");
  std::filesystem::create_directories(dir);
  std::string text = dir + "/notes.sqlite";
  std::ofstream(text) << "these are notes, not a database; long enough to look like a header to a careless reader\n";
  expectOneLineError(runTandem("report " + shellQuote(text), dir + "/r1"), "not a SQLite database");
  expectOneLineError(runTandem("report " + shellQuote(dir + "/missing.sqlite"), dir + "/r2"), "no such trace file");
  // Appending a run to a file that is no trace names that file and leaves it as it was.
  const std::string notes = readFile(text);
  expectOneLineError(runTandem("simulate tiny --topology h200x2-nv18 --calibration none --out " + shellQuote(text),
                               dir + "/r2b"),
                     "notes.sqlite: not a SQLite database");
  CHECK(readFile(text) == notes);

  std::string truncated = dir + "/truncated.sqlite";
  writeOverlapFixture(truncated);
  std::filesystem::resize_file(truncated, std::filesystem::file_size(truncated) / 2 + 512);
  expectOneLineError(runTandem("report " + shellQuote(truncated), dir + "/r3"), "truncated or damaged");

  std::string nsys = dir + "/foreign.sqlite";
  writeNsysFixture(nsys);
  expectOneLineError(runTandem("report " + shellQuote(nsys), dir + "/r4"), "foreign schema");

  std::string empty = dir + "/empty-run.sqlite";
  {
    TraceWriter w(empty);
    w.beginRun({});
  }
  expectOneLineError(runTandem("report " + shellQuote(empty), dir + "/r5"), "has no activities");
  std::string out_json = dir + "/empty.json";
  expectOneLineError(runTandem("export " + shellQuote(empty) + " --chrome " + shellQuote(out_json), dir + "/r6"),
                     "has no activities");
  CHECK_FALSE(std::filesystem::exists(out_json));
  expectOneLineError(runTandem("report " + shellQuote(empty) + " --run 9", dir + "/r7"), "no run with id 9");

  std::string bad_json = dir + "/bad.json";
  std::ofstream(bad_json) << R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": "2"}]})";
  std::string out_db = dir + "/imported.sqlite";
  expectOneLineError(runTandem("import " + shellQuote(bad_json) + " --out " + shellQuote(out_db), dir + "/r8"),
                     "field 'dur' must be a number");
  CHECK_FALSE(std::filesystem::exists(out_db));
  std::ofstream(bad_json) << R"({"traceEvents": [)";
  expectOneLineError(runTandem("import " + shellQuote(bad_json) + " --out " + shellQuote(out_db), dir + "/r9"),
                     "not valid JSON");
  CHECK_FALSE(std::filesystem::exists(out_db));
  // A failed import into an existing file leaves that file as it was.
  std::string existing = dir + "/existing.sqlite";
  writeOverlapFixture(existing);
  std::string before = readFile(existing);
  expectOneLineError(runTandem("import " + shellQuote(bad_json) + " --out " + shellQuote(existing), dir + "/r10"),
                     "not valid JSON");
  CHECK(readFile(existing) == before);
  expectOneLineError(runTandem("report " + shellQuote(existing) + " --rule gelu=gpu", dir + "/r11"),
                     "unknown category 'gpu'");
  // No temporary files are left behind in the output folder.
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    CHECK_THAT(entry.path().filename().string(), !Catch::Contains(".tmp-"));
}

TEST_CASE("numeric flags say what they take", "[cli][errors]") {
  const std::string dir = tempTracePath("flags-dir");
  std::filesystem::create_directories(dir);
  struct Case {
    const char* args;
    const char* message;
  };
  const Case cases[] = {
      {"run tiny --steps 0", "--steps: takes a whole number of at least 1, not '0'"},
      {"train tiny --log-every x", "--log-every: takes a whole number of at least 1, not 'x'"},
      {"run tiny --timeout -1", "--timeout: takes a number greater than 0, not '-1'"},
      // Counts and durations of simulate and report that cannot be negative.
      {"simulate tiny --topology h200x2-nv18 --call-floor-ns -5",
       "--call-floor-ns: takes a whole number of at least 0, not '-5'"},
      {"simulate tiny --topology h200x2-nv18 --rank-rows -1", "--rank-rows: takes a whole number of at least 0, not '-1'"},
      {"report nothing.sqlite --kernel-wait-ns -5", "--kernel-wait-ns: takes a whole number of at least 0, not '-5'"},
      // A cluster too large to count in an int is named as written.
      {"simulate tiny --topology 99999999999xdgx-h100", "cluster size 99999999999 is out of range: 1 to 4096 hosts"},
  };
  int n = 0;
  for (const Case& c : cases) {
    INFO(c.args);
    const auto r = runTandem(c.args, dir + "/f" + std::to_string(++n));
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.err, Catch::Contains(c.message));
  }
}
