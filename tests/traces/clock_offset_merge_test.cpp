// tandem merge with measured clock offsets: the profiler stores, per rank, its
// offset to rank 0 at the start and at the end of the run ("rank0-start",
// "rank0-end" clock rows); merging applies the start offset plus the drift
// fitted between the two, linear in the rank's own time. Files without them
// (one rank, older files) keep the plain offset_ns rule.
#include <catch2/catch.hpp>

#include <map>

#include "traces/store/merge.h"
#include "traces/store/trace_reader.h"
#include "traces/test_fixtures.h"

using namespace tandem::traces;
using namespace tandem::traces::testing;

namespace {

struct Offsets {
  bool start = false, end = false;
  int64_t start_at = 0, start_offset = 0, end_at = 0, end_offset = 0;
  int64_t start_rtt = -1, end_rtt = -1;  // stored as stats when >= 0
};

// One rank's file as the profiler writes it: a few rows at local times
// 1 000 to 1 001 400 ns.
void writeRank(const std::string& path, int rank, const Offsets& o) {
  TraceWriter w(path, WriterOptions{.truncate = true});
  RunInfo info;
  info.kind = RunKind::Real;
  info.name = "rank" + std::to_string(rank);
  info.world_size = 2;
  w.beginRun(info);
  w.addStream({rank, 0, StreamKind::Compute, "compute", rank});
  w.addStream({rank, 2, StreamKind::Comm, "comm", rank});
  w.addActivity(act(rank, 0, 1000, 2000, ActivityKind::Kernel, "gemm", 1, Phase::Forward));
  w.addActivity(act(rank, 0, 501000, 502000, ActivityKind::Kernel, "gemm", 1, Phase::Forward));
  w.addActivity(act(rank, 2, 1001000, 1001400, ActivityKind::Kernel, "ncclKernel_AllReduce", 2, Phase::Comm));
  w.addStep({rank, 0, 1000, 1001400});
  w.addRange({rank, 501000, 502000, "task", 1, "tandem"});
  w.addCounter({rank, "memory.device_in_use_bytes", 501000, 42.0});
  w.addCollective(CollectiveRow{rank, 2, "all_reduce", "dp", 4, 1001000, 1001400});
  w.addClock({rank, "cupti", 10, 1000, 7, 0});
  if (o.start) w.addClock({rank, "rank0-start", 0, o.start_at, 0, o.start_offset});
  if (o.end) w.addClock({rank, "rank0-end", 0, o.end_at, 0, o.end_offset});
  if (o.start)
    w.setStat({"clock.offset_ns.rank" + std::to_string(rank), o.start_offset, Severity::Info, "offset"});
  if (o.start_rtt >= 0)
    w.setStat({"clock.offset_rtt_ns.rank" + std::to_string(rank), o.start_rtt, Severity::Info, "rtt"});
  if (o.end_rtt >= 0)
    w.setStat({"clock.offset_end_rtt_ns.rank" + std::to_string(rank), o.end_rtt, Severity::Info, "rtt"});
  w.flush();
}

std::vector<int64_t> starts(TraceReader& r, int64_t run, int rank, int stream) {
  Track t = r.loadTrack(run, rank, stream);
  return std::vector<int64_t>(t.start_ns.begin(), t.start_ns.end());
}

}  // namespace

TEST_CASE("merge applies each rank's measured start offset plus drift", "[merge][clock]") {
  const std::string a = tempTracePath("clk-rank0.sqlite"), b = tempTracePath("clk-rank1.sqlite"),
                    out = tempTracePath("clk-merged.sqlite");
  // Rank 0 is the reference: offsets 0. Rank 1 is 5 000 ns ahead at local
  // 1 000 and 4 000 ns ahead at local 1 001 000: drift 1 000 ns per 1 ms.
  writeRank(a, 0, {true, true, 1000, 0, 1001000, 0});
  writeRank(b, 1, {true, true, 1000, -5000, 1001000, -4000});
  MergeResult m;
  {
    TraceWriter w(out, WriterOptions{.truncate = true});
    m = mergeTraces({a, b}, w);
  }
  REQUIRE(m.ranks == 2);
  TraceReader r(out);
  CHECK(starts(r, m.run, 0, 0) == std::vector<int64_t>{1000, 501000});
  // local + (-5000 + 1000 * (local - 1000) / 1e6)
  CHECK(starts(r, m.run, 1, 0) == std::vector<int64_t>{1000 - 5000, 501000 - 4500});
  CHECK(starts(r, m.run, 1, 2) == std::vector<int64_t>{1001000 - 4000});
  Track t = r.loadTrack(m.run, 1, 0);
  REQUIRE(t.size() == 2);
  CHECK(t.end_ns[0] == 2000 - 5000 + 1);  // 1 000 ns later: 1 ns more drift
  for (const auto& s : r.steps(m.run)) {
    if (s.rank != 1) continue;
    CHECK(s.start_ns == -4000);
    CHECK(s.end_ns == 1001400 - 4000);  // -5000 + round(1 000 400 / 1 000)
  }
  bool range = false, counter = false, collective = false;
  for (const auto& x : r.ranges(m.run))
    if (x.rank == 1) {
      range = true;
      CHECK(x.start_ns == 496500);
      CHECK(x.end_ns == 497501);
    }
  for (const auto& x : r.counters(m.run))
    if (x.rank == 1) {
      counter = true;
      CHECK(x.ts_ns == 496500);
    }
  for (const auto& x : r.collectives(m.run))
    if (x.rank == 1) {
      collective = true;
      CHECK(x.start_ns == 997000);
      CHECK(x.end_ns == 997400);
    }
  CHECK(range);
  CHECK(counter);
  CHECK(collective);
  // The shift is now in the timestamps; the per-rank offset stats stay as measured.
  for (const auto& c : r.clocks(m.run)) CHECK(c.offset_ns == 0);
  int64_t stat1 = 0, stat0 = -1;
  for (const auto& s : r.stats(m.run)) {
    if (s.name == "clock.offset_ns.rank1") stat1 = s.value;
    if (s.name == "clock.offset_ns.rank0") stat0 = s.value;
  }
  CHECK(stat1 == -5000);
  CHECK(stat0 == 0);

  // Merging the merged file again moves nothing.
  const std::string again = tempTracePath("clk-again.sqlite");
  MergeResult m2;
  {
    TraceWriter w(again, WriterOptions{.truncate = true});
    m2 = mergeTraces({out}, w);
  }
  TraceReader r2(again);
  CHECK(starts(r2, m2.run, 1, 0) == std::vector<int64_t>{-4000, 496500});
}

TEST_CASE("merge: a start offset alone is a constant shift; no offsets, no shift", "[merge][clock]") {
  const std::string a = tempTracePath("clk1-rank0.sqlite"), b = tempTracePath("clk1-rank1.sqlite"),
                    out = tempTracePath("clk1-merged.sqlite");
  writeRank(a, 0, {});
  writeRank(b, 1, {true, false, 1000, 2500, 0, 0});
  MergeResult m;
  {
    TraceWriter w(out, WriterOptions{.truncate = true});
    m = mergeTraces({a, b}, w);
  }
  TraceReader r(out);
  CHECK(starts(r, m.run, 0, 0) == std::vector<int64_t>{1000, 501000});
  CHECK(starts(r, m.run, 1, 0) == std::vector<int64_t>{3500, 503500});
  CHECK(starts(r, m.run, 1, 2) == std::vector<int64_t>{1003500});

  // One rank alone (what `tandem run` without --gpus merges): untouched.
  const std::string single = tempTracePath("clk1-single.sqlite");
  MergeResult s;
  {
    TraceWriter w(single, WriterOptions{.truncate = true});
    s = mergeTraces({a}, w);
  }
  TraceReader rs(single);
  CHECK(starts(rs, s.run, 0, 0) == std::vector<int64_t>{1000, 501000});
  CHECK(rs.steps(s.run).at(0).end_ns == 1001400);
}

namespace {

// Rank 1's gemm starts (local 1 000 and 501 000) after merging with rank 0 (no offsets).
std::vector<int64_t> mergedRank1(const std::string& tag, const Offsets& o, std::map<std::string, int64_t>* stats) {
  const std::string a = tempTracePath(tag + "-rank0.sqlite"), b = tempTracePath(tag + "-rank1.sqlite"),
                    out = tempTracePath(tag + "-merged.sqlite");
  writeRank(a, 0, {true, true, 1000, 0, 1001000, 0, 0, 0});
  writeRank(b, 1, o);
  MergeResult m;
  {
    TraceWriter w(out, WriterOptions{.truncate = true});
    m = mergeTraces({a, b}, w);
  }
  TraceReader r(out);
  if (stats)
    for (const auto& st : r.stats(m.run)) (*stats)[st.name] = st.value;
  return starts(r, m.run, 1, 0);
}

}  // namespace

TEST_CASE("merge: offsets within their measurement's uncertainty", "[merge][clock]") {
  std::map<std::string, int64_t> stats;
  // Both offsets within rtt/2 of 0 (ranks of one host): no shift, no drift.
  CHECK(mergedRank1("u0", {true, true, 1000, -5000, 1001000, 4000, 12000, 10000}, &stats) ==
        std::vector<int64_t>{1000, 501000});
  CHECK(stats["clock.applied_offset_ns.rank1"] == 0);
  CHECK(stats["clock.applied_drift_ppb.rank1"] == 0);
  CHECK(stats["clock.applied_offset_ns.rank0"] == 0);
  // Start and end agree within their round trips but are far from 0: their
  // mean, constant (the difference is noise, not drift).
  CHECK(mergedRank1("u1", {true, true, 1000, 300000, 1001000, 310000, 100000, 100000}, &stats) ==
        std::vector<int64_t>{306000, 806000});
  CHECK(stats["clock.applied_offset_ns.rank1"] == 305000);
  CHECK(stats["clock.applied_drift_ppb.rank1"] == 0);
  // A change larger than the uncertainty is drift: applied linearly.
  CHECK(mergedRank1("u2", {true, true, 1000, 0, 1001000, 500000, 1000, 1000}, &stats) ==
        std::vector<int64_t>{1000, 751000});
  CHECK(stats["clock.applied_drift_ppb.rank1"] == 500000000);
  // Only a start measurement: 0 when within its uncertainty, else the offset.
  CHECK(mergedRank1("u3", {true, false, 1000, 3000, 0, 0, 8000, -1}, nullptr) == std::vector<int64_t>{1000, 501000});
  CHECK(mergedRank1("u4", {true, false, 1000, 3000, 0, 0, 4000, -1}, nullptr) == std::vector<int64_t>{4000, 504000});
}

TEST_CASE("merge: clock offsets that would move times out of range are an error naming the file", "[merge][clock]") {
  const std::string a = tempTracePath("clk-bad-rank0.sqlite"), b = tempTracePath("clk-bad-rank1.sqlite"),
                    out = tempTracePath("clk-bad-merged.sqlite");
  writeRank(a, 0, {});
  auto mergeError = [&] {
    try {
      TraceWriter w(out, WriterOptions{.truncate = true});
      mergeTraces({a, b}, w);
    } catch (const TraceError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SECTION("an offset itself out of range") {
    writeRank(b, 1, {true, false, 1000, int64_t(1) << 62 | 1, 0, 0});
    const std::string msg = mergeError();
    CHECK_THAT(msg, Catch::StartsWith(b + ": rank 1's clock row 'rank0-start'"));
    CHECK_THAT(msg, Catch::Contains("outside the trace's range of +-2^62 ns"));
  }
  SECTION("an offset that pushes a time out of range") {
    writeRank(b, 1, {true, false, 1000, (int64_t(1) << 62) - 1500, 0, 0});
    const std::string msg = mergeError();
    CHECK_THAT(msg, Catch::StartsWith(b + ": rank 1's clock offsets move time"));
  }
  SECTION("a drift fitted from far-apart offsets") {
    writeRank(b, 1, {true, true, 1000, -(int64_t(1) << 62), 1001, int64_t(1) << 62});
    CHECK_THAT(mergeError(), Catch::Contains("rank 1's clock offsets move time"));
  }
}
