// Kernel statistics by op keep a task's copies and memsets under their own
// kind: a matmul task that also clears its workspace is one compute row and
// one memset row, not a matmul row labelled with the first activity's kind.
#include <catch2/catch.hpp>

#include "test_fixtures.h"
#include "traces/analysis/analysis.h"
#include "traces/store/trace_reader.h"

using namespace tandem::traces;
using tandem::traces::testing::act;
using tandem::traces::testing::task;
using tandem::traces::testing::tempTracePath;

TEST_CASE("kernels by op: a task's memsets stay under memset", "[analysis][kernels]") {
  const std::string path = tempTracePath("kernel-kinds.sqlite");
  {
    TraceWriter w(path);
    RunInfo r;
    r.name = "memset inside a matmul task";
    w.beginRun(r);
    w.addStream({0, 0, StreamKind::Compute, "compute", 0});
    w.addActivity(act(0, 0, 0, 10, ActivityKind::Memset, "memset", 5, Phase::Forward));
    w.addActivity(act(0, 0, 10, 110, ActivityKind::Kernel, "gemm", 5, Phase::Forward));
    w.addPlanTask(task(0, 5, "layer0.fc.fwd", "matmul", Phase::Forward, 0, {}));
  }
  TraceReader reader(path);
  const RunReport rep = analyzeRun(reader, reader.defaultRunId());
  const KernelStat* matmul = nullptr;
  const KernelStat* memset = nullptr;
  for (const auto& s : rep.by_op) {
    if (s.key == "matmul") matmul = &s;
    if (s.key == "memset") memset = &s;
  }
  REQUIRE(matmul != nullptr);
  REQUIRE(memset != nullptr);
  CHECK(matmul->category == "compute");
  CHECK(matmul->count == 1);
  CHECK(matmul->total_ns == 100);
  CHECK(memset->count == 1);
  CHECK(rep.attribution.attributed == 2);  // both still count as attributed
}

TEST_CASE("kernels by op: the executor's set-up work is a row of its own, not unattributed", "[analysis][kernels]") {
  const std::string path = tempTracePath("kernel-setup.sqlite");
  {
    TraceWriter w(path);
    RunInfo r;
    r.name = "set-up before the first step";
    w.beginRun(r);
    w.addStream({0, 0, StreamKind::Compute, "compute", 0});
    w.addStream({0, 7, StreamKind::Compute, std::string(kSetupStreamName), 0});
    // cuBLASLt's algorithms timed before the step: untagged, on the set-up track.
    w.addActivity(act(0, 7, 0, 40, ActivityKind::Kernel, "gemm"));
    w.addActivity(act(0, 7, 50, 90, ActivityKind::Kernel, "gemm"));
    w.addActivity(act(0, 7, 92, 95, ActivityKind::Memset, "memset"));
    w.addActivity(act(0, 0, 100, 200, ActivityKind::Kernel, "gemm", 5, Phase::Forward));
    // A step's kernel no task claims stays unattributed.
    w.addActivity(act(0, 0, 210, 220, ActivityKind::Kernel, "stray"));
    w.addPlanTask(task(0, 5, "layer0.fc.fwd", "matmul", Phase::Forward, 0, {}));
  }
  TraceReader reader(path);
  const RunReport rep = analyzeRun(reader, reader.defaultRunId());
  const KernelStat* setup = nullptr;
  const KernelStat* kernel = nullptr;
  for (const auto& s : rep.by_op) {
    if (s.key == "set-up") setup = &s;
    if (s.key == "kernel") kernel = &s;
  }
  REQUIRE(setup != nullptr);
  CHECK(setup->count == 2);
  CHECK(setup->total_ns == 80);
  CHECK(setup->category == "compute");  // its memset stays under memset
  REQUIRE(kernel != nullptr);  // the stray step kernel
  CHECK(kernel->count == 1);
  CHECK(rep.attribution.gpu_activities == 2);
  CHECK(rep.attribution.attributed == 1);
  REQUIRE(rep.attribution.top_unattributed.size() == 1);
  CHECK(rep.attribution.top_unattributed[0].first == "stray");
  // The rank's time starts with its first step work: the set-up track is
  // no part of its span, busy or idle time (a 7B model's set-up is a minute).
  REQUIRE(rep.ranks.size() == 1);
  CHECK(rep.ranks[0].first_ns == 100);
  CHECK(rep.ranks[0].breakdown.span_ns == 120);
  CHECK(rep.ranks[0].breakdown.compute_ns == 110);
  CHECK(rep.ranks[0].breakdown.memcpy_ns == 0);
  CHECK(rep.ranks[0].breakdown.idle_ns == 10);
  CHECK(rep.ranks[0].activities == 5);  // every activity still counted
}
