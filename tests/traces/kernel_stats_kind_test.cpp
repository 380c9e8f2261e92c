// Kernel statistics by op keep a task's copies and memsets under their own
// kind: a matmul task that also clears its workspace is one compute row and
// one memset row, not a matmul row labelled with the first activity's kind.
#include <catch2/catch.hpp>

#include "test_fixtures.h"
#include "traces/analysis.h"
#include "traces/trace_reader.h"

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
    w.addActivity(act(0, 0, 0, 10, ActivityKind::Memset, "memset", 5, TracePhase::Forward));
    w.addActivity(act(0, 0, 10, 110, ActivityKind::Kernel, "gemm", 5, TracePhase::Forward));
    w.addPlanTask(task(0, 5, "layer0.fc.fwd", "matmul", TracePhase::Forward, 0, {}));
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
