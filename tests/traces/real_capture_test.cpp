// A real profile, kept small: the tiny job, 3 steps on one H200 with CUDA
// Graph replay and the CUPTI profiler (fixtures/real-tiny-h200.sqlite). The
// Chrome export must have Perfetto's structure and the report must find
// every compute kernel attributed to its plan task.
#include <catch2/catch.hpp>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "test_fixtures.h"
#include "traces/analysis/analysis.h"
#include "traces/export/chrome_export.h"
#include "traces/store/trace_reader.h"

using namespace tandem::traces;

TEST_CASE("Chrome export of a real capture has Perfetto's process/thread/flow structure", "[export][real]") {
  TraceReader reader(testing::fixtureCopy("real-tiny-h200.sqlite"));
  const int64_t run = reader.defaultRunId();
  REQUIRE(reader.run(run).kind == RunKind::Real);
  std::ostringstream out;
  const ChromeExportSummary sum = exportChromeTrace(reader, run, out);
  const auto doc = nlohmann::json::parse(out.str());
  REQUIRE(doc.contains("traceEvents"));
  std::set<int> pids;
  std::map<std::string, int> phases;
  std::set<std::pair<int, int>> threads_named, threads_used;
  std::map<int64_t, int> flow_ends;  // flow id -> 's' and 'f' seen
  int64_t with_task = 0;
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e.at("ph").get<std::string>();
    phases[ph]++;
    if (ph == "M" && e.at("name") == "thread_name")
      threads_named.insert({e.at("pid").get<int>(), e.at("tid").get<int>()});
    if (ph == "X") {
      pids.insert(e.at("pid").get<int>());
      threads_used.insert({e.at("pid").get<int>(), e.at("tid").get<int>()});
      CHECK(e.at("dur").get<double>() >= 0);
      if (e.contains("args") && e["args"].contains("task")) ++with_task;
    }
    if (ph == "s" || ph == "f") flow_ends[e.at("id").get<int64_t>()] += ph == "s" ? 1 : 100;
  }
  CHECK(pids == std::set<int>{0});  // one rank
  CHECK(phases["X"] == sum.slices);
  CHECK(sum.slices >= reader.activityCount(run));
  CHECK(with_task > 300);  // the 333 graph-replayed kernels carry their task
  for (const auto& t : threads_used) CHECK(threads_named.count(t) == 1);  // every thread is named
  for (const auto& [id, seen] : flow_ends) CHECK(seen == 101);            // each flow starts and ends once
}

TEST_CASE("The report attributes every compute kernel of the real capture", "[analysis][real]") {
  TraceReader reader(testing::fixtureCopy("real-tiny-h200.sqlite"));
  const RunReport rep = analyzeRun(reader, reader.defaultRunId());
  int64_t compute_kernels = 0;
  for (const auto& s : rep.by_op)
    if (s.category == "compute") compute_kernels += s.count;
  CHECK(compute_kernels >= 333);
  CHECK(rep.steps.size() == 3);
  // Unattributed activity is only host synchronisation and copies/memsets
  // outside any task, never a kernel.
  for (const auto& [name, ns] : rep.attribution.top_unattributed) {
    INFO(name);
    const bool copy_or_sync = name.find("mem") != std::string::npos || name.find("Mem") != std::string::npos ||
                              name.find("Synchronize") != std::string::npos;
    CHECK(copy_or_sync);
  }
}

TEST_CASE("a real capture's ops take their plan tasks' rates; host waits sit apart", "[analysis][real]") {
  TraceReader reader(testing::fixtureCopy("real-tiny-h200.sqlite"));
  const RunReport rep = analyzeRun(reader, reader.defaultRunId());
  // The kernels carry no flops of their own (the copies carry bytes): the
  // GEMMs' rates come from the plan.
  int rated = 0;
  for (const KernelStat& s : rep.by_op)
    if (s.key == "matmul" || s.key == "matmul_bwd_data" || s.key == "matmul_bwd_weight") {
      INFO(s.key);
      CHECK(s.tflops > 0);
      ++rated;
    }
  CHECK(rated == 3);
  // cudaEventSynchronize is the host waiting: in the synchronization table, not counted as GPU work.
  REQUIRE_FALSE(rep.host_calls.empty());
  CHECK(rep.host_calls.front().key == "cudaEventSynchronize");
  for (const KernelStat& s : rep.by_op) CHECK(s.key != "sync");
  for (const KernelStat& s : rep.by_name) CHECK(s.key.find("Synchronize") == std::string::npos);
  for (const auto& [name, ns] : rep.attribution.top_unattributed) CHECK(name.find("Synchronize") == std::string::npos);
}
