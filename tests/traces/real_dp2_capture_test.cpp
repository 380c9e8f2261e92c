// A real 2-GPU profile (fixtures/real-dp2-h200.sqlite: the tiny job at data
// parallel 2 on 2 x H200, CUDA Graph replay, CUPTI, NCCL all-reduces on the
// comm stream). The report's per-rank and per-step breakdown is recomputed
// here from the raw activity rows, read with plain SQL and swept with code
// of this file alone (not traces/interval_set), and must agree to the
// nanosecond. Attribution is checked the same way: every compute kernel and
// every NCCL kernel of a plan task carries its task id.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "test_fixtures.h"
#include "traces/analysis/analysis.h"
#include "traces/store/sqlite_util.h"
#include "traces/store/trace_reader.h"

using namespace tandem::traces;

namespace {

using Span = std::pair<int64_t, int64_t>;

// Sorted, merged copy of the spans clipped to [lo, hi).
std::vector<Span> unionOf(std::vector<Span> v, int64_t lo, int64_t hi) {
  std::vector<Span> out;
  for (auto& s : v) s = {std::max(s.first, lo), std::min(s.second, hi)};
  std::sort(v.begin(), v.end());
  for (const Span& s : v) {
    if (s.second <= s.first) continue;
    if (!out.empty() && s.first <= out.back().second)
      out.back().second = std::max(out.back().second, s.second);
    else
      out.push_back(s);
  }
  return out;
}

int64_t lengthOf(const std::vector<Span>& u) {
  int64_t n = 0;
  for (const Span& s : u) n += s.second - s.first;
  return n;
}

// |a ∩ b| of two merged span lists, by walking both.
int64_t intersectionOf(const std::vector<Span>& a, const std::vector<Span>& b) {
  int64_t n = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) n += hi - lo;
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return n;
}

struct RawRank {
  std::vector<Span> compute, comm;
  int64_t compute_kernels = 0, compute_with_task = 0;
  int64_t nccl_with_task = 0;
  std::vector<int64_t> nccl_without_task_starts;
};

std::string lowered(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Kinds as stored (docs/trace-schema.md): 0 kernel, 3 collective, 4 send, 5
// recv. A kernel whose name holds "nccl" is communication; the spinning
// kernels the classifier calls sync are neither.
std::map<int, RawRank> readRaw(const std::string& path, int64_t run) {
  sql::Db db(path, SQLITE_OPEN_READONLY);
  sql::Stmt s(db,
              "SELECT a.rank, a.kind, st.value, a.task_id, a.start_ns, a.end_ns FROM activities a "
              "JOIN strings st ON st.id = a.name WHERE a.run = ?");
  s.bind(1, run);
  std::map<int, RawRank> out;
  while (s.step()) {
    RawRank& r = out[int(s.colInt(0))];
    const int kind = int(s.colInt(1));
    const std::string name = lowered(s.colText(2));
    const bool has_task = !s.colIsNull(3) && s.colInt(3) >= 0;
    const Span span{s.colInt(4), s.colInt(5)};
    const bool nccl = name.find("nccl") != std::string::npos;
    if (kind == 3 || kind == 4 || kind == 5 || (kind == 0 && nccl)) {
      r.comm.push_back(span);
      if (kind == 0) {
        if (has_task)
          r.nccl_with_task++;
        else
          r.nccl_without_task_starts.push_back(span.first);
      }
    } else if (kind == 0) {
      const bool spin = name.find("synchronize") != std::string::npos || name.find("waitevent") != std::string::npos ||
                        name.find("wait_kernel") != std::string::npos || name.find("spin_wait") != std::string::npos;
      if (spin) continue;
      r.compute.push_back(span);
      r.compute_kernels++;
      if (has_task) r.compute_with_task++;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("Breakdown of a real 2-GPU capture equals a computation from the raw rows", "[real][analysis]") {
  const std::string path = testing::fixtureCopy("real-dp2-h200.sqlite");
  TraceReader reader(path);
  const int64_t run = reader.defaultRunId();
  REQUIRE(reader.run(run).kind == RunKind::Real);
  AnalysisOptions whole_run;
  whole_run.window = ReportWindow::WholeRun;
  const RunReport rep = analyzeRun(reader, run, whole_run);
  REQUIRE(rep.ranks.size() == 2);
  const std::map<int, RawRank> raw = readRaw(path, run);
  REQUIRE(raw.size() == 2);

  for (const RankReport& rr : rep.ranks) {
    INFO("rank " << rr.rank);
    const RawRank& r = raw.at(rr.rank);
    const int64_t lo = std::numeric_limits<int64_t>::min() / 4, hi = std::numeric_limits<int64_t>::max() / 4;
    const auto compute = unionOf(r.compute, lo, hi), comm = unionOf(r.comm, lo, hi);
    const int64_t overlap = intersectionOf(compute, comm);
    REQUIRE(lengthOf(comm) > 0);  // data parallel: there is communication to look at
    CHECK(rr.breakdown.compute_ns == lengthOf(compute));
    CHECK(rr.breakdown.comm_ns == lengthOf(comm));
    CHECK(rr.breakdown.overlap_ns == overlap);
    CHECK(rr.breakdown.exposed_comm_ns == lengthOf(comm) - overlap);
    CHECK(rr.breakdown.overlap_pct == Approx(100.0 * double(overlap) / double(lengthOf(comm))));

    // Attribution: every compute kernel and every NCCL kernel of a plan task
    // carries a task id. Inside the steps, NCCL kernels without one are the
    // executor's loss all-reduce, one per step; outside them, the profiler's
    // clock-offset ping-pong before the first step and after the last.
    CHECK(r.compute_kernels > 0);
    CHECK(r.compute_with_task == r.compute_kernels);
    CHECK(r.nccl_with_task > 0);
    int64_t steps = 0, inside = 0;
    for (const StepReport& st : rep.steps)
      if (st.rank == rr.rank) {
        ++steps;
        for (int64_t t : r.nccl_without_task_starts) inside += t >= st.start_ns && t < st.end_ns;
      }
    CHECK(inside <= steps);
  }

  // Per (rank, step) windows, as `tandem report` prints them.
  REQUIRE(!rep.steps.empty());
  for (const StepReport& st : rep.steps) {
    INFO("rank " << st.rank << " step " << st.step);
    const RawRank& r = raw.at(st.rank);
    const auto compute = unionOf(r.compute, st.start_ns, st.end_ns), comm = unionOf(r.comm, st.start_ns, st.end_ns);
    const int64_t overlap = intersectionOf(compute, comm);
    CHECK(st.breakdown.compute_ns == lengthOf(compute));
    CHECK(st.breakdown.comm_ns == lengthOf(comm));
    CHECK(st.breakdown.overlap_ns == overlap);
    CHECK(st.breakdown.exposed_comm_ns == lengthOf(comm) - overlap);
  }
}

TEST_CASE("A real 2-GPU capture is reported over its steps by default, the rest left out", "[real][analysis]") {
  const std::string path = testing::fixtureCopy("real-dp2-h200.sqlite");
  TraceReader reader(path);
  const int64_t run = reader.defaultRunId();
  const RunReport rep = analyzeRun(reader, run);
  CHECK_FALSE(rep.window.whole_run);
  CHECK(rep.window.covers == "steps 0-3");
  // Start-up (the GEMM algorithms timed, NCCL's set-up) before the steps,
  // the profiler's clock exchange after them.
  CHECK(rep.window.before_activities > 1000);
  CHECK(rep.window.after_activities > 0);
  std::map<int, RawRank> raw = readRaw(path, run);
  for (const RankReport& rr : rep.ranks) {
    INFO("rank " << rr.rank);
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
    for (const StepRow& st : reader.steps(run))
      if (st.rank == rr.rank) lo = std::min(lo, st.start_ns), hi = std::max(hi, st.end_ns);
    // The span is the steps' span; what started in it counts, to its end.
    CHECK(rr.breakdown.span_ns == hi - lo);
    auto inside = [&](const std::vector<Span>& v) {
      std::vector<Span> kept;
      for (const Span& s : v)
        if (s.first >= lo && s.first < hi) kept.push_back(s);
      return unionOf(kept, lo, hi);
    };
    const RawRank& r = raw.at(rr.rank);
    const auto compute = inside(r.compute), comm = inside(r.comm);
    CHECK(rr.breakdown.compute_ns == lengthOf(compute));
    CHECK(rr.breakdown.comm_ns == lengthOf(comm));
    CHECK(rr.breakdown.overlap_ns == intersectionOf(compute, comm));
    CHECK(rr.breakdown.idle_ns <= rr.breakdown.span_ns);
  }
  // Every compute kernel inside the steps is a plan task's.
  CHECK(rep.attribution.compute_kernels > 0);
  CHECK(rep.attribution.compute_attributed == rep.attribution.compute_kernels);
  // The set-up's kernels are outside the window, not a row of the tables.
  for (const KernelStat& s : rep.by_op) CHECK(s.key != "set-up");

  // One step: its span, its activities only.
  AnalysisOptions one;
  one.step = 2;
  const RunReport step2 = analyzeRun(reader, run, one);
  CHECK(step2.window.covers == "step 2");
  REQUIRE(step2.steps.size() == 2);  // one per rank
  for (const StepReport& st : step2.steps) CHECK(st.step == 2);
  for (const RankReport& rr : step2.ranks) {
    const auto it = std::find_if(step2.steps.begin(), step2.steps.end(),
                                 [&](const StepReport& st) { return st.rank == rr.rank; });
    CHECK(rr.breakdown.span_ns == it->end_ns - it->start_ns);
  }
  one.step = 9;
  CHECK_THROWS_WITH(analyzeRun(reader, run, one), Catch::Contains("has steps 0-3; step 9 is not one of them"));
}
