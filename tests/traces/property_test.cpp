// Property test: breakdown and overlap figures on random multi-stream traces
// against an independent per-nanosecond sweep. The sweep classifies with its
// own table and shares no code with the analyses.
#include <catch2/catch.hpp>
#include <random>

#include "traces/analysis/analysis.h"
#include "traces/store/trace_reader.h"
#include "traces/test_fixtures.h"

using namespace tandem::traces;
using namespace tandem::traces::testing;

namespace {

struct RandomActivity {
  int stream;
  int64_t start, end;
  ActivityKind kind;
  std::string name;
  bool recompute;
};

// The sweep's own idea of each activity: 'c'ompute, co'm'm, memc'p'y, 's'ync, 'h'ost.
char sweepClass(const RandomActivity& a) {
  switch (a.kind) {
    case ActivityKind::Host: return 'h';
    case ActivityKind::Sync: return 's';
    case ActivityKind::Collective:
    case ActivityKind::Send:
    case ActivityKind::Recv: return 'm';
    case ActivityKind::Memcpy:
    case ActivityKind::Memset: return 'p';
    case ActivityKind::Kernel:
      if (a.name == "ncclDevKernel_AllReduce") return 'm';
      if (a.name == "flag_wait_kernel") return 's';
      return 'c';
  }
  return 'c';
}

std::vector<RandomActivity> randomTrace(std::mt19937_64& rng) {
  const ActivityKind kinds[] = {ActivityKind::Kernel, ActivityKind::Kernel,     ActivityKind::Kernel,
                                ActivityKind::Collective, ActivityKind::Memcpy, ActivityKind::Memset,
                                ActivityKind::Sync,   ActivityKind::Host,       ActivityKind::Send};
  const char* kernel_names[] = {"gemm", "ncclDevKernel_AllReduce", "flag_wait_kernel", "softmax"};
  std::uniform_int_distribution<int> count(1, 40), streams(1, 4), kind(0, 8), name(0, 3), coin(0, 4);
  std::uniform_int_distribution<int64_t> start(0, 1500), len(0, 300);
  std::vector<RandomActivity> out;
  int n = count(rng), s = streams(rng);
  for (int i = 0; i < n; ++i) {
    RandomActivity a;
    a.stream = std::uniform_int_distribution<int>(0, s - 1)(rng);
    a.start = start(rng);
    a.end = a.start + (coin(rng) == 0 ? 0 : len(rng));  // some zero-length ones
    a.kind = kinds[kind(rng)];
    a.name = a.kind == ActivityKind::Kernel ? kernel_names[name(rng)] : std::string(toString(a.kind));
    a.recompute = coin(rng) == 1;
    out.push_back(a);
  }
  return out;
}

struct Sweep {
  int64_t span = 0, busy = 0, compute = 0, comm = 0, memcpy = 0, sync = 0, overlap = 0, exposed = 0,
          memcpy_excl = 0, sync_excl = 0, recompute = 0;
};

// Counts every nanosecond of [t0, t1) by what covers it.
Sweep sweep(const std::vector<RandomActivity>& acts, int64_t t0, int64_t t1) {
  Sweep s;
  s.span = t1 - t0;
  for (int64_t t = t0; t < t1; ++t) {
    bool c = false, m = false, p = false, y = false, r = false;
    for (const auto& a : acts) {
      if (t < a.start || t >= a.end) continue;
      char k = sweepClass(a);
      if (k == 'h') continue;
      c |= k == 'c';
      m |= k == 'm';
      p |= k == 'p';
      y |= k == 's';
      r |= a.recompute;
    }
    s.busy += c || m || p || y;
    s.compute += c;
    s.comm += m;
    s.memcpy += p;
    s.sync += y;
    s.overlap += c && m;
    s.exposed += m && !c;
    s.memcpy_excl += p && !c && !m;
    s.sync_excl += y && !c && !m && !p;
    s.recompute += r;
  }
  return s;
}

void compare(const Breakdown& b, const Sweep& s) {
  CHECK(b.span_ns == s.span);
  CHECK(b.busy_ns == s.busy);
  CHECK(b.idle_ns == s.span - s.busy);
  CHECK(b.compute_ns == s.compute);
  CHECK(b.comm_ns == s.comm);
  CHECK(b.memcpy_ns == s.memcpy);
  CHECK(b.sync_ns == s.sync);
  CHECK(b.overlap_ns == s.overlap);
  CHECK(b.exposed_comm_ns == s.exposed);
  CHECK(b.memcpy_exclusive_ns == s.memcpy_excl);
  CHECK(b.sync_exclusive_ns == s.sync_excl);
  CHECK(b.recompute_ns == s.recompute);
  double pct = s.comm > 0 ? 100.0 * static_cast<double>(s.overlap) / static_cast<double>(s.comm) : 0.0;
  CHECK(b.overlap_pct == Approx(pct));
}

std::vector<Track> tracksOf(const std::vector<RandomActivity>& acts, std::vector<std::string>& strings) {
  std::vector<Track> tracks(4);
  std::vector<RandomActivity> sorted = acts;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
  for (const auto& a : sorted) {
    Track& t = tracks[static_cast<size_t>(a.stream)];
    t.stream = a.stream;
    auto it = std::find(strings.begin(), strings.end(), a.name);
    if (it == strings.end()) it = strings.insert(strings.end(), a.name);
    t.start_ns.push_back(a.start);
    t.end_ns.push_back(a.end);
    t.kind.push_back(a.kind);
    t.name.push_back(static_cast<int32_t>(it - strings.begin()));
    t.task_id.push_back(-1);
    t.phase.push_back(a.recompute ? Phase::Recompute : Phase::Backward);
    t.layer.push_back(-1);
    t.micro_batch.push_back(-1);
    t.correlation_id.push_back(-1);
    t.bytes.push_back(0);
    t.flops.push_back(0);
  }
  return tracks;
}

}  // namespace

TEST_CASE("breakdown and overlap agree with a per-nanosecond sweep on 1500 random traces", "[analysis][property]") {
  std::mt19937_64 rng(20261130);
  int checked_windows = 0;
  for (int iteration = 0; iteration < 1500; ++iteration) {
    auto acts = randomTrace(rng);
    std::vector<std::string> strings;
    auto tracks = tracksOf(acts, strings);
    std::vector<const Track*> ptrs;
    for (const auto& t : tracks) ptrs.push_back(&t);
    CategoryTable cats(Classifier(), strings);
    RankSets sets = buildRankSets(ptrs, cats);

    int64_t first = INT64_MAX, last = INT64_MIN;
    for (const auto& a : acts)
      if (sweepClass(a) != 'h') first = std::min(first, a.start), last = std::max(last, a.end);
    if (first > last) continue;  // host activity only
    INFO("iteration " << iteration);
    compare(breakdownOf(sets, first, last), sweep(acts, first, last));
    // A random window, as a step would cut one.
    int64_t w0 = std::uniform_int_distribution<int64_t>(0, 1700)(rng);
    int64_t w1 = w0 + std::uniform_int_distribution<int64_t>(0, 400)(rng);
    compare(breakdownOf(sets, w0, w1), sweep(acts, w0, w1));
    ++checked_windows;
  }
  CHECK(checked_windows > 1000);
}

TEST_CASE("the whole pipeline through a file agrees with the sweep", "[analysis][property]") {
  std::mt19937_64 rng(7);
  for (int iteration = 0; iteration < 60; ++iteration) {
    auto acts = randomTrace(rng);
    std::string path = tempTracePath("property.sqlite");
    bool any_gpu = false;
    {
      TraceWriter w(path, WriterOptions{.batch_rows = 5, .truncate = true});
      w.beginRun({});
      for (const auto& a : acts) {
        ActivityRow row = act(0, a.stream, a.start, a.end, a.kind, a.name, -1,
                              a.recompute ? Phase::Recompute : Phase::Backward);
        w.addActivity(row);
        any_gpu |= sweepClass(a) != 'h';
      }
    }
    TraceReader r(path);
    RunReport rep = analyzeRun(r, 1);
    if (!any_gpu) continue;
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (const auto& a : acts)
      if (sweepClass(a) != 'h') first = std::min(first, a.start), last = std::max(last, a.end);
    INFO("iteration " << iteration);
    REQUIRE(rep.ranks.size() == 1);
    compare(rep.ranks[0].breakdown, sweep(acts, first, last));
  }
}
