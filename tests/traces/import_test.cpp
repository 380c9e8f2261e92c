// Importers on small fixtures written from the formats' documentation:
// a PyTorch profiler JSON file (fixtures/kineto_small.json) and an Nsight
// Systems export built by nsys_fixture.h.
#include <catch2/catch.hpp>
#include <fstream>
#include <sqlite3.h>
#include <zlib.h>

#include <filesystem>
#include <iterator>
#include <nlohmann/json.hpp>

#include "traces/analysis/analysis.h"
#include "traces/importers/importers.h"
#include "traces/nsys_fixture.h"
#include "traces/store/trace_reader.h"
#include "traces/test_fixtures.h"

using namespace tandem::traces;
using namespace tandem::traces::testing;

namespace {

const std::string kKineto = std::string(TANDEM_SOURCE_DIR) + "/tests/traces/fixtures/kineto_small.json";

int64_t statValue(const std::vector<StatRow>& stats, const std::string& name) {
  for (const auto& s : stats)
    if (s.name == name) return s.value;
  return -1;
}

std::string importError(const std::string& json) {
  std::string in = tempTracePath("bad.json");
  std::ofstream(in) << json;
  std::string out = tempTracePath("bad-import.sqlite");
  try {
    TraceWriter w(out, WriterOptions{.truncate = true});
    importTrace(in, w);
  } catch (const TraceError& e) {
    return e.what();
  }
  return "";
}

// Imports `in` into a fresh file `out`, closed when this returns.
ImportResult importInto(const std::string& in, const std::string& out) {
  TraceWriter w(out, WriterOptions{.truncate = true});
  return importTrace(in, w);
}

}  // namespace

TEST_CASE("PyTorch profiler JSON: kernels, copies, launches, annotations and skipped records", "[import][kineto]") {
  std::string out = tempTracePath("kineto.sqlite");
  ImportResult res;
  {
    TraceWriter w(out, WriterOptions{.truncate = true});
    REQUIRE(detectImportFormat(kKineto) == ImportFormat::Kineto);
    res = importTrace(kKineto, w);
  }
  CHECK(res.format == "kineto");
  CHECK(res.activities == 7);
  CHECK(res.ranges == 2);
  TraceReader r(out);
  RunInfo run = r.run(res.run);
  CHECK(run.kind == RunKind::Imported);
  CHECK(run.world_size == 2);
  CHECK_THAT(run.devices_json, Catch::Contains("H100"));

  // Rank from distributedInfo; GPU streams keep their CUDA ids.
  auto streams = r.streams(res.run);
  REQUIRE(streams.size() == 4);
  CHECK(streams[0].rank == 1);
  CHECK(streams[0].stream == 7);
  CHECK(streams[0].kind == StreamKind::Compute);
  CHECK(streams[1].kind == StreamKind::Comm);
  CHECK(streams[2].kind == StreamKind::Copy);
  CHECK(streams[3].kind == StreamKind::Host);
  CHECK(streams[3].name == "python main");

  Track gpu = r.loadTrack(res.run, 1, 7);
  REQUIRE(gpu.size() == 2);
  CHECK(gpu.start_ns[0] == 1'010'000);  // 1010 us
  CHECK(gpu.end_ns[0] == 1'060'000);
  CHECK(gpu.correlation_id[0] == 101);
  CHECK(gpu.kind[1] == ActivityKind::Memset);
  Track comm = r.loadTrack(res.run, 1, 20);
  REQUIRE(comm.size() == 1);
  CHECK(comm.kind[0] == ActivityKind::Collective);  // NCCL kernels are communication
  Track copy = r.loadTrack(res.run, 1, 21);
  CHECK(copy.bytes[0] == 4096);
  CHECK(copy.end_ns[0] - copy.start_ns[0] == 5'500);
  int with_geometry = 0;
  r.forEachActivity(res.run, [&](const ActivityRow& a) {
    if (a.geometry) {
      ++with_geometry;
      CHECK(a.geometry->grid_x == 132);
      // What each block holds, as PyTorch's profiler writes it.
      CHECK(a.geometry->registers_per_thread == 168);
      CHECK(a.geometry->shared_memory_bytes == 213024);
      CHECK(a.geometry->cluster_x == 0);
    }
  });
  CHECK(with_geometry == 1);

  auto ranges = r.ranges(res.run);
  REQUIRE(ranges.size() == 2);
  CHECK(ranges[0].name == "ProfilerStep#3");
  CHECK(ranges[0].depth == 0);
  CHECK(ranges[1].name == "forward");
  CHECK(ranges[1].depth == 1);

  // Nothing silently dropped: each record not imported is counted.
  auto stats = r.stats(res.run);
  CHECK(statValue(stats, "import.kineto.skipped_category.python_function") == 1);
  CHECK(statValue(stats, "import.kineto.skipped_phase.s") == 1);
  CHECK(statValue(stats, "import.kineto.skipped_phase.f") == 1);

  // The imported run is analysable: GEMM [1010,1060) us vs all-reduce [1040,1080) us.
  RunReport rep = analyzeRun(r, res.run);
  REQUIRE(rep.ranks.size() == 1);
  CHECK(rep.ranks[0].breakdown.overlap_ns == 20'000);
  CHECK(rep.ranks[0].breakdown.overlap_pct == Approx(50.0));
  CHECK(rep.ranks[0].idle.has_launch_records);
}

TEST_CASE("PyTorch profiler JSON with missing fields or wrong types is refused", "[import][kineto][errors]") {
  CHECK_THAT(importError("{\"schemaVersion\": 1}"), Catch::Contains("missing field 'traceEvents'"));
  CHECK_THAT(importError("{\"traceEvents\": 5}"), Catch::Contains("'traceEvents' must be an array"));
  CHECK_THAT(importError("{\"traceEvents\": [ {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": \"10\", "
                         "\"dur\": 1, \"args\": {\"stream\": 7}} ]}"),
             Catch::Contains("traceEvents[0]: field 'ts' must be a number, got string"));
  CHECK_THAT(importError("{\"traceEvents\": [ {\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": 1, \"dur\": 1} ]}"),
             Catch::Contains("traceEvents[0]: missing field 'name'"));
  CHECK_THAT(importError("{\"traceEvents\": [ 3 ]}"), Catch::Contains("traceEvents[0] must be an object"));
  CHECK_THAT(
      importError("{\"traceEvents\": [ {\"ph\": \"X\", \"cat\": \"python_function\", \"name\": \"f\", \"ts\": 1, "
                  "\"dur\": 1} ]}"),
      Catch::Contains("no GPU or CPU activity"));
  CHECK_THAT(importError("{\"traceEvents\": [ {\"ph\": "), Catch::Contains("not valid JSON"));
  CHECK_THAT(importError("hello"), Catch::Contains("unrecognised trace format"));
  CHECK_THROWS_WITH(detectImportFormat(std::string(TANDEM_SOURCE_DIR) + "/tests"),
                    Catch::Contains("/tests: is a folder, not a PyTorch profiler JSON or Nsight Systems SQLite export"));
  // Times and numbers beyond what the store holds.
  CHECK_THAT(importError("{\"traceEvents\": [ {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 1e300, "
                         "\"dur\": 1, \"args\": {\"stream\": 7}} ]}"),
             Catch::Contains("traceEvents[0]: field 'ts' (1e+300 us) is outside the trace's range of +-2^62 ns"));
  CHECK_THAT(importError("{\"traceEvents\": [ {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 1, "
                         "\"dur\": 1, \"args\": {\"stream\": 1e300}} ]}"),
             Catch::Contains("traceEvents[0]: args.stream (1e+300) is out of range"));
  CHECK_THAT(importError("{\"traceEvents\": [ {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 1, "
                         "\"dur\": 1, \"args\": {\"stream\": 7, \"grid\": [1, 1, 1], \"block\": [32, 1, 1], "
                         "\"registers per thread\": 4096, \"shared memory\": 0}} ]}"),
             Catch::Contains("traceEvents[0]: args \"registers per thread\" (4096) or \"shared memory\" (0) is out of "
                             "range"));
}

TEST_CASE("Nsight Systems export: devices become ranks, names resolve through StringIds", "[import][nsys]") {
  std::string in = tempTracePath("report.nsys.sqlite");
  writeNsysFixture(in);
  std::string out = tempTracePath("nsys.sqlite");
  ImportResult res;
  {
    TraceWriter w(out, WriterOptions{.truncate = true});
    REQUIRE(detectImportFormat(in) == ImportFormat::Nsys);
    res = importTrace(in, w, ImportFormat::Auto, "nsys run");
  }
  CHECK(res.format == "nsys");
  CHECK(res.ranks == 2);
  CHECK(res.activities == 11);  // 3 timed kernels, 1 memcpy, 1 memset, 6 runtime calls
  CHECK(res.ranges == 2);
  TraceReader r(out);
  RunInfo run = r.run(res.run);
  CHECK(run.name == "nsys run");
  CHECK(run.tool_version == "nsys export schema 3.11.1");
  CHECK_THAT(run.devices_json, Catch::Contains("H200"));
  CHECK(run.world_size == 2);

  Track k = r.loadTrack(res.run, 0, 7);
  REQUIRE(k.size() == 1);
  CHECK(r.string(k.name[0]) == "void gemm_kernel<128, 256>(float*, float const*)");
  // Geometry and each block's registers and shared memory (static + dynamic).
  int gemms = 0;
  r.forEachActivity(res.run, [&](const ActivityRow& a) {
    if (a.rank != 0 || a.stream != 7) return;
    ++gemms;
    REQUIRE(a.geometry.has_value());
    CHECK(a.geometry->grid_x == 132);
    CHECK(a.geometry->block_x == 256);
    CHECK(a.geometry->registers_per_thread == 128);
    CHECK(a.geometry->shared_memory_bytes == 49152);
  });
  CHECK(gemms == 1);
  Track nccl = r.loadTrack(res.run, 0, 13);
  REQUIRE(nccl.size() == 1);
  CHECK(nccl.kind[0] == ActivityKind::Collective);
  Track copy = r.loadTrack(res.run, 0, 14);
  REQUIRE(copy.size() == 1);
  CHECK(r.string(copy.name[0]) == "[CUDA memcpy DtoH]");
  CHECK(copy.bytes[0] == 65536);
  Track rank1 = r.loadTrack(res.run, 1, 7);
  REQUIRE(rank1.size() == 2);
  CHECK(rank1.kind[1] == ActivityKind::Memset);

  auto ranges = r.ranges(res.run);
  REQUIRE(ranges.size() == 2);
  CHECK(ranges[0].name == "step");
  CHECK(ranges[1].name == "forward");  // text through textId
  CHECK(ranges[1].depth == 1);

  auto stats = r.stats(res.run);
  CHECK(statValue(stats, "import.nsys.no_timestamp") == 1);
  CHECK(statValue(stats, "import.nsys.nvtx_skipped_event_type.34") == 1);
  CHECK(statValue(stats, "import.nsys.tables_not_imported") == 2);

  RunReport rep = analyzeRun(r, res.run);
  REQUIRE(rep.ranks.size() == 2);
  CHECK(rep.ranks[0].breakdown.overlap_ns == 300);
  CHECK(rep.ranks[0].breakdown.idle_ns == 100);
  CHECK(rep.ranks[1].idle.host_wait_ns == 50);  // memset launched at 1440, after the GEMM ended at 1400
}

TEST_CASE("Nsight Systems import refuses files that are not exports", "[import][nsys][errors]") {
  std::string in = tempTracePath("not-nsys.sqlite");
  writeOverlapFixture(in);  // a tandem trace, not an nsys export
  std::string out = tempTracePath("out.sqlite");
  TraceWriter w(out, WriterOptions{.truncate = true});
  CHECK_THROWS_WITH(importTrace(in, w), Catch::Contains("not an Nsight Systems export"));
}

TEST_CASE("an imported row with a time the store cannot hold names the input file", "[import][nsys][errors]") {
  const std::string in = tempTracePath("nsys-bad-time.sqlite");
  writeNsysFixture(in);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(in.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -9223372036854775808 WHERE rowid = 1",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  const std::string out = tempTracePath("nsys-bad-time-out.sqlite");
  TraceWriter w(out, WriterOptions{.truncate = true});
  CHECK_THROWS_WITH(importTrace(in, w), Catch::StartsWith(in + ": ") &&
                                            Catch::Contains("has time -9223372036854775808 ns, outside the trace's "
                                                            "range of +-2^62 ns"));
}

TEST_CASE("PyTorch profiler steps: one per ProfilerStep#N, on the GPU where the trace has it", "[import][kineto][steps]") {
  // Steps 4 and 5 marked on the CPU ([0,100) and [100,200) us) and on the
  // GPU's two streams (the work lagging the CPU: [30,140) and [140,260) us,
  // stream 7 ending step 4 at 135); a "ProfilerStep#x" that is no step.
  const std::string in = tempTracePath("kineto_steps.json");
  std::ofstream(in) << R"({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "ts": 100, "dur": 100, "pid": 1, "tid": 1},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#x", "ts": 0, "dur": 300, "pid": 1, "tid": 1},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#4", "ts": 30, "dur": 110, "pid": 0, "tid": 7, "args": {"stream": 7}},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#4", "ts": 40, "dur": 95, "pid": 0, "tid": 8, "args": {"stream": 8}},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#5", "ts": 140, "dur": 120, "pid": 0, "tid": 7, "args": {"stream": 7}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 30, "dur": 100, "pid": 0, "tid": 7, "args": {"stream": 7}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 140, "dur": 110, "pid": 0, "tid": 7, "args": {"stream": 7}}
  ]})";
  const std::string out = tempTracePath("kineto_steps.sqlite");
  const ImportResult res = importInto(in, out);
  CHECK(res.steps == 2);
  TraceReader r(out);
  const std::vector<StepRow> steps = r.steps(res.run);
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].step == 4);
  CHECK(steps[0].start_ns == 30'000);
  CHECK(steps[0].end_ns == 140'000);
  CHECK(steps[1].step == 5);
  CHECK(steps[1].start_ns == 140'000);
  CHECK(steps[1].end_ns == 260'000);
  // The report then has per-step figures.
  const RunReport rep = analyzeRun(r, res.run);
  CHECK(rep.window.covers == "steps 4-5");
  CHECK(rep.step_time.duration_ns.count == 2);
  CHECK(rep.step_time.duration_ns.max == 120'000);
}

TEST_CASE("Nsight Systems steps: tandem's \"step N\" and torch's ProfilerStep#N ranges", "[import][nsys][steps]") {
  std::string in = tempTracePath("report_steps.nsys.sqlite");
  writeNsysFixture(in);
  {
    // Two step ranges on the fixture's thread, and one that is no step.
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(in.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db,
                         "INSERT INTO NVTX_EVENTS VALUES (900, 1500, 59, 0, 0, 0, 'step 3', 5001, 5001, NULL, 0),"
                         "(1500, 2500, 59, 0, 0, 0, 'ProfilerStep#4', 5001, 5001, NULL, 0),"
                         "(1500, 2500, 59, 0, 0, 0, 'step four', 5001, 5001, NULL, 0);",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  const std::string out = tempTracePath("nsys_steps.sqlite");
  const ImportResult res = importInto(in, out);
  CHECK(res.steps == 2);
  TraceReader r(out);
  const std::vector<StepRow> steps = r.steps(res.run);
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].step == 3);
  CHECK(steps[0].start_ns == 900);
  CHECK(steps[0].end_ns == 1500);
  CHECK(steps[1].step == 4);
  CHECK(steps[1].end_ns == 2500);
}

TEST_CASE("PyTorch profiler JSON compressed (.json.gz) imports as the plain file does; a cut one is named",
          "[import][kineto][gzip]") {
  std::ifstream in(kKineto, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string gz = tempTracePath("kineto.json.gz");
  {
    gzFile f = gzopen(gz.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(gzwrite(f, text.data(), unsigned(text.size())) == int(text.size()));
    REQUIRE(gzclose(f) == Z_OK);
  }
  REQUIRE(detectImportFormat(gz) == ImportFormat::Kineto);
  const std::string out = tempTracePath("kineto-gz.sqlite");
  ImportResult res;
  {
    TraceWriter w(out, WriterOptions{.truncate = true});
    res = importTrace(gz, w);
  }
  CHECK(res.format == "kineto");
  CHECK(res.activities == 7);
  CHECK(res.ranges == 2);
  // The same file cut after half its bytes.
  std::ifstream whole(gz, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(whole)), std::istreambuf_iterator<char>());
  const std::string cut = tempTracePath("kineto-cut.json.gz");
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  TraceWriter w(tempTracePath("kineto-cut.sqlite"), WriterOptions{.truncate = true});
  CHECK_THROWS_WITH(importTrace(cut, w), Catch::Contains("kineto-cut.json.gz") && Catch::Contains("gzip"));
}

TEST_CASE("a folder of per-rank PyTorch profiler files is one multi-rank run on one clock", "[import][kineto][folder]") {
  std::ifstream in(kKineto, std::ios::binary);
  nlohmann::json base = nlohmann::json::parse(in);
  const std::string dir = tempTracePath("kineto-ranks");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // Rank 1's trace base is 1 ms after rank 0's: its first kernel, at the
  // same relative ts, lies 1 ms later on the common clock.
  for (int rank : {0, 1}) {
    nlohmann::json j = base;
    j["distributedInfo"] = {{"rank", rank}, {"world_size", 2}, {"backend", "nccl"}};
    j["baseTimeNanoseconds"] = int64_t(1700000000000000000) + rank * int64_t(1000000);
    std::ofstream(dir + "/rank" + std::to_string(rank) + ".pt.trace.json") << j.dump();
  }
  std::ofstream(dir + "/notes.txt") << "not a trace";
  const std::string out = tempTracePath("kineto-ranks.sqlite");
  ImportResult res;
  {
    TraceWriter w(out, WriterOptions{.truncate = true});
    res = importTrace(dir, w);
  }
  CHECK(res.ranks == 2);
  CHECK(res.activities == 14);
  TraceReader r(out);
  int64_t first[2] = {INT64_MAX, INT64_MAX};
  r.forEachActivity(res.run, [&](const ActivityRow& a) {
    if (a.rank >= 0 && a.rank < 2) first[a.rank] = std::min(first[a.rank], a.start_ns);
  });
  CHECK(first[1] - first[0] == 1000000);
  // Two files of one rank cannot merge: the folder and the rank are named.
  std::ofstream(dir + "/rank1-again.json") << [&] {
    nlohmann::json j = base;
    j["distributedInfo"] = {{"rank", 1}, {"world_size", 2}};
    return j.dump();
  }();
  TraceWriter w2(tempTracePath("kineto-ranks-bad.sqlite"), WriterOptions{.truncate = true});
  CHECK_THROWS_WITH(importTrace(dir, w2), Catch::Contains("kineto-ranks") && Catch::Contains("rank 1"));
  // An empty folder says what it looked for.
  const std::string empty = tempTracePath("kineto-empty");
  std::filesystem::create_directories(empty);
  TraceWriter w3(tempTracePath("kineto-empty.sqlite"), WriterOptions{.truncate = true});
  CHECK_THROWS_WITH(importTrace(empty, w3), Catch::Contains("no PyTorch profiler traces"));
}
