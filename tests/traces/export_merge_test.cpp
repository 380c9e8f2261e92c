// Chrome trace export structure and merging per-rank files.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <map>
#include <set>
#include <sstream>

#include "traces/export/chrome_export.h"
#include "traces/store/merge.h"
#include "traces/store/trace_reader.h"
#include "traces/test_fixtures.h"

using namespace tandem::traces;
using namespace tandem::traces::testing;
using Json = nlohmann::json;

TEST_CASE("Chrome export of a 2-rank fixture: processes, threads, slices and flows", "[export]") {
  std::string path = tempTracePath("export.sqlite");
  writeOverlapFixture(path);
  TraceReader r(path);
  std::stringstream out;
  ChromeExportSummary s = exportChromeTrace(r, 1, out);
  Json doc = Json::parse(out.str());  // throws if not valid JSON
  REQUIRE(doc["traceEvents"].is_array());
  CHECK(doc["displayTimeUnit"] == "ns");
  std::set<int> process_pids;
  std::set<std::pair<int, int>> named_threads;
  std::set<std::pair<int, int>> slice_threads;
  std::map<int64_t, std::vector<Json>> flows;
  int slices = 0;
  for (const auto& e : doc["traceEvents"]) {
    std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") process_pids.insert(e["pid"].get<int>());
    if (ph == "M" && e["name"] == "thread_name") named_threads.insert({e["pid"].get<int>(), e["tid"].get<int>()});
    if (ph == "X") {
      ++slices;
      slice_threads.insert({e["pid"].get<int>(), e["tid"].get<int>()});
      REQUIRE(e["ts"].is_number());
      REQUIRE(e["dur"].get<double>() >= 0);
    }
    if (ph == "s" || ph == "f") flows[e["id"].get<int64_t>()].push_back(e);
  }
  CHECK(process_pids == std::set<int>{0, 1});
  // Every slice sits on a named thread of a named process.
  for (const auto& t : slice_threads) {
    CHECK(named_threads.count(t) == 1);
    CHECK(process_pids.count(t.first) == 1);
  }
  CHECK(named_threads.count({0, 4}) == 1);  // the side stream
  CHECK(slices == s.slices);
  CHECK(s.processes == 2);

  // Cross-stream waits: 7 -> 2 (side stream to compute) and 2 -> 4 (compute to
  // comm) on both ranks, 4 -> 6 (comm to compute) on both: 5 flows. 5 -> 7 and
  // 3 -> 6 stay on one stream and draw no arrow.
  CHECK(s.flows == 5);
  REQUIRE(flows.size() == 5);
  bool saw_side_to_compute = false;
  for (const auto& [id, pair] : flows) {
    REQUIRE(pair.size() == 2);
    const Json& start = pair[0]["ph"] == "s" ? pair[0] : pair[1];
    const Json& finish = pair[0]["ph"] == "f" ? pair[0] : pair[1];
    CHECK(start["pid"] == finish["pid"]);
    CHECK(start["tid"] != finish["tid"]);
    CHECK(finish["bp"] == "e");
    CHECK(start["ts"].get<double>() <= finish["ts"].get<double>() + 1e-9);
    if (start["pid"] == 0 && start["tid"] == 4 && finish["tid"] == 0) saw_side_to_compute = true;
  }
  CHECK(saw_side_to_compute);

  // Args carry the plan facts.
  bool found = false;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X" && e["name"] == "gemm_fwd" && e["pid"] == 0) {
      found = true;
      CHECK(e["args"]["task"] == 1);
      CHECK(e["args"]["phase"] == "forward");
      CHECK(e["args"]["flops"] == 2e5);
      CHECK(e["args"]["grid"][0] == 128);
    }
  CHECK(found);
}

TEST_CASE("export of an empty run is an error", "[export][errors]") {
  std::string path = tempTracePath("export-empty.sqlite");
  { TraceWriter w(path); w.beginRun({}); }
  TraceReader r(path);
  std::stringstream out;
  CHECK_THROWS_WITH(exportChromeTrace(r, 1, out), Catch::Contains("has no activities"));
}

namespace {

void writeRankFile(const std::string& path, int rank, int64_t offset_ns) {
  TraceWriter w(path, WriterOptions{.truncate = true});
  RunInfo info;
  info.kind = RunKind::Real;
  info.name = "rank" + std::to_string(rank);
  info.world_size = 2;
  info.devices_json = R"([{"index":)" + std::to_string(rank) + R"(,"name":"NVIDIA H200","driver":"580.1"}])";
  w.beginRun(info);
  w.addStream({rank, 0, StreamKind::Compute, "compute", rank});
  w.addActivity(act(rank, 0, 100, 200, ActivityKind::Kernel, "gemm", 1, Phase::Forward));
  w.addActivity(act(rank, 0, 300, 350, ActivityKind::Collective, "ncclAllReduce", 2, Phase::Comm));
  w.addStep({rank, 0, 100, 350});
  w.addClock({rank, "cupti", 5, 6, 7, offset_ns});
  w.incrementStat("cupti.dropped_records", rank + 1, Severity::DataLoss);
  // Run-level figures each rank writes: the world's throughput and MFU, its
  // own GPU's memory.
  w.setStat({"tokens_per_second", 1'000'000, Severity::Info, "median over measured steps"});
  w.setStat({"mfu_ppm", 480'000, Severity::Info, "PaLM model FLOPs utilisation, parts per million"});
  w.setStat({"device_used_bytes", 10'000 + rank, Severity::Info, "after setup"});
  w.setStat({"planned_executor_bytes", 2'000 + rank, Severity::Info, "executor buffers beyond the arena"});
}

}  // namespace

TEST_CASE("merge puts per-rank files on one clock in one run", "[merge]") {
  std::string a = tempTracePath("rank0.sqlite"), b = tempTracePath("rank1.sqlite"),
              out = tempTracePath("merged.sqlite");
  writeRankFile(a, 0, 0);
  writeRankFile(b, 1, 1000);  // rank 1's clock runs 1000 ns behind the common clock
  MergeResult m;
  {
    TraceWriter w(out, WriterOptions{.truncate = true});
    m = mergeTraces({a, b}, w);
  }
  CHECK(m.inputs == 2);
  CHECK(m.ranks == 2);
  CHECK(m.activities == 4);
  TraceReader r(out);
  REQUIRE(r.runs().size() == 1);
  Track t1 = r.loadTrack(m.run, 1, 0);
  REQUIRE(t1.size() == 2);
  CHECK(t1.start_ns[0] == 1100);
  auto steps = r.steps(m.run);
  REQUIRE(steps.size() == 2);
  CHECK(steps[1].start_ns == 1100);
  for (const auto& c : r.clocks(m.run)) CHECK(c.offset_ns == 0);
  std::map<std::string, int64_t> stats;
  for (const auto& s : r.stats(m.run)) stats[s.name] = s.value;
  CHECK(stats["cupti.dropped_records"] == 3);  // counts add up
  // Run-level figures do not: the world's MFU stays 48%, memory is per GPU.
  CHECK(stats["tokens_per_second"] == 1'000'000);
  CHECK(stats["mfu_ppm"] == 480'000);
  CHECK(stats["device_used_bytes"] == 10'001);
  CHECK(stats["planned_executor_bytes"] == 2'001);
  // Each rank's GPU, not only the first file's, tagged with its rank.
  const auto devices = nlohmann::json::parse(r.run(m.run).devices_json);
  REQUIRE(devices.size() == 2);
  CHECK(devices[0]["rank"] == 0);
  CHECK(devices[0]["index"] == 0);
  CHECK(devices[1]["rank"] == 1);
  CHECK(devices[1]["index"] == 1);
  CHECK(devices[1]["driver"] == "580.1");

  TraceWriter w(tempTracePath("merged-dup.sqlite"), WriterOptions{.truncate = true});
  CHECK_THROWS_WITH(mergeTraces({a, a}, w), Catch::Contains("rank 0 is also in"));
}
