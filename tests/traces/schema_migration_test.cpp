// Trace schema 2 (runs keep their plan facts and topology text) against
// files of schema 1: read as they are, migrated when a writer opens them,
// and the facts a new run stores come back as written.
#include <sqlite3.h>

#include <catch2/catch.hpp>
#include <string>

#include "traces/store/schema.h"
#include "traces/store/trace_reader.h"
#include "traces/store/trace_writer.h"
#include "traces/test_fixtures.h"

using namespace tandem::traces;
using namespace tandem::traces::testing;

namespace {

PlanFacts sampleFacts() {
  PlanFacts f;
  f.recompute = {{0, "full", 1000, 4000, 2.5e9, 123456}, {1, "none", 5000, 0, 0, -1}};
  MemoryRow m;
  m.program = 0;
  m.first_rank = 0;
  m.rank_count = 8;
  m.arena_bytes = 1 << 30;
  m.peak_bytes = 1 << 30;
  m.lower_bound_bytes = 900 << 20;
  m.activation_peak_bytes = 300 << 20;
  m.gpu_run_bytes = (1 << 30) + (600 << 20);
  m.by_category = {{"activations", 300 << 20}, {"parameters", 250 << 20}};
  f.memory = {m};
  f.plan_encoding = "json+zlib";
  f.plan_blob = std::string("\x00\x01\x02zlib-bytes\xff", 14);
  return f;
}

// A simulated run's row with its topology named and written out.
RunInfo simulatedRun(const std::string& name, const std::string& topology) {
  RunInfo info;
  info.kind = RunKind::Simulated;
  info.name = name;
  info.topology = topology;
  info.topology_yaml = "name: " + topology + "\n";
  info.plan_format = 1;
  return info;
}

int64_t userVersion(const std::string& path) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(st) == SQLITE_ROW);
  const int64_t v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

}  // namespace

TEST_CASE("a new run's plan facts and topology text round-trip", "[store][schema][facts]") {
  const std::string path = tempTracePath("facts_roundtrip.sqlite");
  const RunInfo info = simulatedRun("sim", "dgx-h200");
  const PlanFacts facts = sampleFacts();
  int64_t run = -1;
  {
    TraceWriter w(path, WriterOptions{.truncate = true});
    run = w.beginRun(info);
    w.setPlanFacts(facts);
    w.setPlanFacts(facts);  // a second call replaces the first
  }
  TraceReader r(path);
  CHECK(r.schemaVersion() == kTraceSchemaVersion);
  const RunInfo back = r.run(run);
  CHECK(back.topology == "dgx-h200");
  CHECK(back.topology_yaml == info.topology_yaml);
  CHECK(back.plan_format == 1);
  const PlanFacts f = r.planFacts(run);
  REQUIRE(f.recompute.size() == 2);
  CHECK(f.recompute[0].policy == "full");
  CHECK(f.recompute[0].bytes_saved == 4000);
  CHECK(f.recompute[0].extra_flops == 2.5e9);
  CHECK(f.recompute[0].extra_ns == 123456);
  CHECK(f.recompute[1].extra_ns == -1);  // not timed: stored as NULL
  REQUIRE(f.memory.size() == 1);
  CHECK(f.memory[0].rank_count == 8);
  CHECK(f.memory[0].gpu_run_bytes == facts.memory[0].gpu_run_bytes);
  CHECK(f.memory[0].by_category == facts.memory[0].by_category);
  CHECK(f.plan_encoding == "json+zlib");
  CHECK(f.plan_blob == facts.plan_blob);  // bytes, embedded zeros included
  const PlanFacts rows_only = r.planFacts(run, /*with_plan=*/false);
  CHECK(rows_only.plan_blob.empty());
  CHECK(rows_only.recompute.size() == 2);
}

TEST_CASE("a schema-1 file is read as it is and migrated when written", "[store][schema][facts]") {
  const std::string path = fixtureCopy("real-tiny-h200.sqlite");
  REQUIRE(userVersion(path) == 1);
  int64_t old_run = -1;
  RunInfo old_info;
  {
    TraceReader r(path);
    CHECK(r.schemaVersion() == 1);
    old_run = r.defaultRunId();
    old_info = r.run(old_run);
    CHECK(!old_info.job_yaml.empty());
    CHECK(old_info.plan_format == 0);
    CHECK(r.planFacts(old_run).empty());
  }
  REQUIRE(userVersion(path) == 1);  // reading never changes the file
  const RunInfo info = simulatedRun("appended", "h200x2-nv18");
  int64_t new_run = -1;
  {
    TraceWriter w(path);
    new_run = w.beginRun(info);
    w.setPlanFacts(sampleFacts());
  }
  CHECK(userVersion(path) == kTraceSchemaVersion);
  TraceReader r(path);
  CHECK(r.schemaVersion() == kTraceSchemaVersion);
  // The old run keeps its rows and has no facts; the new one has them.
  const RunInfo old_again = r.run(old_run);
  CHECK(old_again.job_yaml == old_info.job_yaml);
  CHECK(old_again.plan_format == 0);
  CHECK(r.planFacts(old_run).empty());
  CHECK(r.activityCount(old_run) > 0);
  CHECK(r.run(new_run).topology_yaml == info.topology_yaml);
  CHECK(r.planFacts(new_run).recompute.size() == 2);
}

TEST_CASE("a schema-1 run that kept a topology file's text in its name is read apart", "[store][schema]") {
  // Schema 1 stored either a preset's name or a whole file in `topology`.
  const std::string path = fixtureCopy("real-tiny-h200.sqlite");
  const std::string yaml = "name: mine\nnodes:\n  - gpu0\n";
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, "UPDATE runs SET topology=?", -1, &st, nullptr) == SQLITE_OK);
    sqlite3_bind_text(st, 1, yaml.c_str(), -1, SQLITE_TRANSIENT);
    REQUIRE(sqlite3_step(st) == SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  {
    TraceReader r(path);
    const RunInfo info = r.run(r.defaultRunId());
    CHECK(info.topology.empty());
    CHECK(info.topology_yaml == yaml);
  }
  { TraceWriter w(path); }  // migrates: the text moves to its own column
  TraceReader r(path);
  const RunInfo info = r.run(r.defaultRunId());
  CHECK(info.topology.empty());
  CHECK(info.topology_yaml == yaml);
}
