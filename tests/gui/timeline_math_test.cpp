// The timeline's pure functions: mapping, ticks, index ranges, hit-testing,
// coalescing and the overlap / phase sweeps. No pixels involved.
#include <catch2/catch.hpp>

#include "gui/synthetic_run.h"
#include "gui/timeline_math.h"

using namespace tandem;
using namespace tandem::gui;

namespace {

Track makeTrack(std::vector<std::pair<int64_t, int64_t>> spans, Phase phase = Phase::Forward) {
  Track t;
  for (auto [s, e] : spans) t.append(s, e, 0, -1, TaskKind::Kernel, phase, -1, 0);
  t.finalize();
  return t;
}

}  // namespace

TEST_CASE("time and pixel mapping round-trip", "[gui][mapping]") {
  TimeMapping m{1000, 2000, 100, 500};
  CHECK(m.toX(1000) == Approx(100));
  CHECK(m.toX(2000) == Approx(600));
  CHECK(m.toX(1500) == Approx(350));
  CHECK(m.toTime(350) == 1500);
  CHECK(m.toTime(100) == 1000);
  for (int64_t t : {1000, 1234, 1999}) CHECK(std::llabs(m.toTime(m.toX(t)) - t) <= 1);
}

TEST_CASE("zoom keeps the time under the cursor and pan shifts by pixels", "[gui][mapping]") {
  TimeMapping m{0, 1'000'000, 0, 1000};
  const int64_t under = m.toTime(250);
  TimeMapping z = zoomAt(m, 250, 0.5);
  CHECK(z.end_ns - z.start_ns == 500'000);
  CHECK(std::llabs(z.toTime(250) - under) <= 1);
  TimeMapping out = zoomAt(z, 900, 2.0);
  CHECK(out.end_ns - out.start_ns == 1'000'000);
  // Zooming in forever stops at the minimum window.
  TimeMapping deep = m;
  for (int i = 0; i < 100; ++i) deep = zoomAt(deep, 500, 0.5);
  CHECK(deep.end_ns - deep.start_ns == kMinWindowNs);

  TimeMapping p = panBy(m, 100);  // drag right: earlier times come into view
  CHECK(p.start_ns == -100'000);
  CHECK(p.end_ns == 900'000);
  TimeMapping c = clampTo(panBy(m, 10'000), 0, 1'000'000);
  CHECK(c.start_ns >= -50'000);
  CHECK(c.end_ns - c.start_ns == 1'000'000);
}

TEST_CASE("tick steps follow 1-2-5 and respect the spacing", "[gui][ticks]") {
  CHECK(tickStep(1'000'000, 1000, 80) == 100'000);
  CHECK(tickStep(1'000'000, 1000, 150) == 200'000);
  CHECK(tickStep(1'000'000, 1000, 300) == 500'000);
  CHECK(tickStep(100, 1000, 80) == 10);
  CHECK(tickStep(7, 1000, 80) == 1);
  for (int64_t w : {1LL, 999LL, 123'456LL, 98'765'432'100LL}) {
    const int64_t step = tickStep(w, 1200, 90);
    CHECK(double(step) * 1200 / double(w) >= 90 - 1e-9);
    // The next smaller 1-2-5 step would be too dense (so the step is adaptive).
    if (step > 1) CHECK(double(step) / 2.5 * 1200 / double(w) < 90);
  }
  CHECK(formatDuration(1'500'000) == "1.5 ms");
  CHECK(formatDuration(250'000) == "250 us");
  CHECK(formatDuration(12) == "12 ns");
  CHECK(formatDuration(2'000'000'000) == "2 s");
}

TEST_CASE("visible index range and hit-testing on disjoint slices", "[gui][hit]") {
  Track t = makeTrack({{0, 10}, {20, 30}, {40, 50}, {60, 70}});
  CHECK(firstIndex(t.max_end_ns, 0) == 0);
  CHECK(firstIndex(t.max_end_ns, 10) == 1);  // ends are exclusive
  CHECK(firstIndex(t.max_end_ns, 45) == 2);
  CHECK(firstIndex(t.max_end_ns, 70) == 4);
  CHECK(lastIndex(t.start_ns, 40) == 2);
  CHECK(lastIndex(t.start_ns, 41) == 3);
  CHECK(hitTest(t, 25, 0) == 1);
  CHECK(hitTest(t, 35, 0) == -1);
  CHECK(hitTest(t, 35, 5) >= 1);  // within tolerance of slice 1 (ends 30) and 2 (starts 40)
  CHECK(hitTest(t, 38, 3) == 2);
  CHECK(hitTest(t, 100, 5) == -1);
}

TEST_CASE("hit-testing nested slices uses the running maximum of ends", "[gui][hit]") {
  // A long slice that encloses later ones: a plain binary search on ends
  // would miss it when looking at t=80.
  Track t = makeTrack({{0, 100}, {10, 20}, {30, 40}, {50, 60}});
  CHECK(t.max_end_ns == std::vector<int64_t>{100, 100, 100, 100});
  CHECK(firstIndex(t.max_end_ns, 80) == 0);
  CHECK(hitTest(t, 80, 0) == 0);
  CHECK(hitTest(t, 35, 0) == 2);  // innermost wins
  CHECK(hitTest(t, 15, 0) == 1);
}

TEST_CASE("finalize sorts unsorted input", "[gui][model]") {
  Track t;
  t.append(50, 60, 3, 3, TaskKind::Kernel, Phase::Backward, 1, 0);
  t.append(10, 20, 1, 1, TaskKind::Kernel, Phase::Forward, 0, 0);
  t.finalize();
  CHECK(t.start_ns == std::vector<int64_t>{10, 50});
  CHECK(t.task_id == std::vector<int32_t>{1, 3});
  CHECK(t.phase[1] == uint8_t(Phase::Backward));
}

TEST_CASE("coalescing folds sub-pixel runs and keeps wide slices", "[gui][lod]") {
  // 1000 slices of 1 ns every 2 ns, then one wide slice.
  Track t;
  for (int i = 0; i < 1000; ++i) t.append(2 * i, 2 * i + 1, 0, i, TaskKind::Kernel, Phase::Forward, -1, 0);
  t.append(3000, 4000, 0, 1000, TaskKind::Kernel, Phase::Forward, -1, 0);
  t.finalize();
  TimeMapping m{0, 4000, 0, 400};  // 10 ns per pixel: each small slice is 0.1 px
  std::vector<LaneBox> boxes;
  coalesce(t.start_ns.data(), t.end_ns.data(), t.max_end_ns.data(), t.size(), m, 3.0, boxes);
  uint64_t covered = 0;
  for (const auto& b : boxes) covered += b.count;
  CHECK(covered == 1001);  // every slice is in exactly one box
  CHECK(boxes.size() < 100);  // ~ 2000 ns / 30 ns per box + 1
  CHECK(boxes.back().count == 1);
  CHECK(boxes.back().first == 1000);
  CHECK(boxes.back().x0 == Approx(300));
  CHECK(boxes.back().x1 == Approx(400));
  for (const auto& b : boxes) CHECK(b.x1 > b.x0);
  // Zoomed in so every slice is 10 px wide: no folding at all.
  TimeMapping zin{0, 40, 0, 400};
  coalesce(t.start_ns.data(), t.end_ns.data(), t.max_end_ns.data(), t.size(), zin, 3.0, boxes);
  CHECK(boxes.size() == 20);
  for (const auto& b : boxes) CHECK(b.count == 1);
}

TEST_CASE("overlap sweep splits communication into hidden and exposed", "[gui][overlap]") {
  Track compute = makeTrack({{0, 100}, {150, 300}});
  Track comm = makeTrack({{50, 120}, {200, 250}, {280, 400}});
  OverlapResult r = computeOverlap({&compute}, {&comm});
  CHECK(r.compute_ns == 250);
  CHECK(r.comm_ns == 70 + 50 + 120);
  CHECK(r.hidden_ns == 50 + 50 + 20);
  CHECK(r.exposed_ns == 20 + 100);
  CHECK(r.hidden_ns + r.exposed_ns == r.comm_ns);
  REQUIRE(r.lane.size() == 5);
  CHECK(r.lane.start_ns == std::vector<int64_t>{50, 100, 200, 280, 300});
  CHECK(r.lane.end_ns == std::vector<int64_t>{100, 120, 250, 300, 400});
  CHECK(r.lane.code == std::vector<uint8_t>{0, 1, 0, 0, 1});
}

TEST_CASE("phase lane merges runs of equal phase", "[gui][overlap]") {
  Track t;
  t.append(0, 10, 0, 0, TaskKind::Kernel, Phase::Forward, 0, 0);
  t.append(12, 20, 0, 1, TaskKind::Kernel, Phase::Forward, 1, 0);
  t.append(22, 30, 0, 2, TaskKind::Kernel, Phase::Recompute, 1, 0);
  t.append(31, 40, 0, 3, TaskKind::Kernel, Phase::Backward, 1, 0);
  t.finalize();
  IntervalLane lane = computePhaseLane({&t});
  CHECK(lane.start_ns == std::vector<int64_t>{0, 22, 31});
  CHECK(lane.end_ns == std::vector<int64_t>{20, 30, 40});
  CHECK(lane.code == std::vector<uint8_t>{uint8_t(Phase::Forward), uint8_t(Phase::Recompute),
                                          uint8_t(Phase::Backward)});
}

TEST_CASE("generated run is sorted, has steps, overlap and recompute", "[gui][model]") {
  SyntheticSpec spec;
  spec.ranks = 2;
  spec.steps = 3;
  TimelineData d = makeSyntheticRun(spec);
  CHECK(int64_t(d.sliceCount()) == syntheticSlicesPerStep(spec) * spec.steps);
  REQUIRE(d.ranks.size() == 2);
  CHECK(d.steps.size() == 3);
  for (const auto& t : d.tracks) CHECK(std::is_sorted(t.start_ns.begin(), t.start_ns.end()));
  for (const auto& r : d.ranks) {
    CHECK(r.tracks.size() == 3);
    CHECK(r.hidden_ns > 0);
    CHECK(r.exposed_ns > 0);  // the last bucket waits past backward
    CHECK(r.hidden_ns + r.exposed_ns == r.comm_ns);
  }
  bool has_recompute = false;
  for (uint8_t p : d.tracks[0].phase) has_recompute |= p == uint8_t(Phase::Recompute);
  CHECK(has_recompute);
  CHECK(d.stepAt(d.steps[1].start_ns + 1) == 1);
  CHECK(d.stepAt(d.end_ns + 1000) == -1);
  const auto* f = d.factsFor(0, d.tracks[0].task_id[5]);
  REQUIRE(f != nullptr);
  CHECK(f->flops > 0);
}

TEST_CASE("interval lanes sum lengths per code in O(1) for folded boxes", "[gui][lod]") {
  IntervalLane lane;
  lane.start_ns = {0, 10, 13, 30};
  lane.end_ns = {10, 13, 30, 31};
  lane.code = {0, 1, 0, 1};
  lane.finalize();
  CHECK(lane.totalLength(0, 4) == 31);
  CHECK(lane.nonzeroLength(0, 4) == 4);
  CHECK(lane.nonzeroLength(1, 1) == 3);
  CHECK(lane.totalLength(2, 2) == 18);
}

TEST_CASE("the sampled start index finds the same positions as a plain search", "[gui][lod]") {
  std::vector<int64_t> starts;
  for (int i = 0; i < 5000; ++i) starts.push_back(int64_t(i / 3) * 10);  // duplicates on purpose
  const std::vector<int64_t> sample = sampleStarts(starts);
  CHECK(sample.size() == (5000 + kSampleStride - 1) / kSampleStride);
  for (size_t lo : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(65), size_t(1000), size_t(4990)})
    for (size_t hi : {size_t(lo), lo + 1, lo + 129, lo + 700, size_t(5000)})
      for (int64_t t : {-5LL, 0LL, 5LL, 640LL, 645LL, 3330LL, 16660LL, 20000LL}) {
        if (hi > 5000 || hi < lo) continue;
        const size_t want = size_t(std::lower_bound(starts.begin() + long(lo), starts.begin() + long(hi), t) -
                                   starts.begin());
        CHECK(lowerBoundStart(starts.data(), lo, hi, t, &sample) == want);
      }
}

TEST_CASE("a wide slice is never folded into a box of narrow ones", "[gui][lod]") {
  // Three 1-px slices, then a slice 100 px wide starting within the merge window.
  Track t;
  t.append(0, 10, 0, 0, TaskKind::Kernel, Phase::Data, -1, 0);
  t.append(10, 20, 0, 1, TaskKind::Kernel, Phase::Forward, -1, 0);
  t.append(20, 1020, 0, 2, TaskKind::Kernel, Phase::Forward, -1, 0);
  t.finalize();
  TimeMapping m{0, 2000, 0, 200};  // 10 ns per px
  std::vector<LaneBox> boxes;
  coalesce(t.start_ns.data(), t.end_ns.data(), t.max_end_ns.data(), t.size(), m, 3.0, boxes);
  REQUIRE(boxes.size() == 2);
  CHECK(boxes[0].count == 2);
  CHECK(boxes[0].x1 == Approx(2));
  CHECK(boxes[1].first == 2);
  CHECK(boxes[1].count == 1);
}

TEST_CASE("tick labels carry the digits their step needs", "[gui][math][axis]") {
  CHECK(formatTick(0, 1000) == "0");
  CHECK(formatTick(3'578'124'000, 2'000) == "3.578124 s");
  CHECK(formatTick(3'578'126'000, 2'000) == "3.578126 s");
  CHECK(formatTick(1'500'000, 500'000) == "1.5 ms");
  CHECK(formatTick(2'000, 2'000) == "2 us");
  CHECK(formatTick(1'001, 1) == "1.001 us");
  CHECK(formatTick(700, 100) == "700 ns");
  CHECK(formatTick(-1'500'000, 500'000) == "-1.5 ms");
  CHECK(formatTick(12'000'000'000, 1'000'000'000) == "12 s");
}

TEST_CASE("axis labels never repeat, from a microsecond to the whole run", "[gui][math][axis]") {
  // A 10 s run; windows from 1 us to all of it, near the start, in the
  // middle (where three significant digits repeat) and at the end, over
  // widths of 300 to 2000 pixels, absolute and relative.
  const int64_t origin = 1'796'022'436'020'453'248;  // a real run's clock
  const int64_t run = 10'000'000'000;
  int windows = 0;
  for (int64_t width_ns = 1'000; width_ns <= run; width_ns = width_ns * 3 + 7)
    for (double at : {0.0, 0.357812, 0.5, 0.999})
      for (double px : {300.0, 1000.0, 2000.0})
        for (bool relative : {false, true}) {
          TimeMapping m;
          m.start_ns = origin + int64_t(at * double(run - width_ns));
          m.end_ns = m.start_ns + width_ns;
          m.width_px = px;
          const AxisLabels axis = axisLabels(m, origin, relative, 90);
          INFO("window " << width_ns << " ns at " << at << ", " << px << " px, relative " << relative);
          REQUIRE(axis.ticks.size() >= 1);
          CHECK(axis.ticks.size() <= size_t(px / 90) + 2);
          for (size_t k = 0; k < axis.ticks.size(); ++k) {
            CHECK(axis.ticks[k].t_ns >= m.start_ns);
            CHECK(axis.ticks[k].t_ns <= m.end_ns);
            if (k > 0) {
              INFO(axis.ticks[k - 1].label << " then " << axis.ticks[k].label);
              CHECK(axis.ticks[k].label != axis.ticks[k - 1].label);
            }
          }
          if (relative) {
            CHECK(axis.ticks[0].label == "0");
            CHECK_FALSE(axis.base.empty());
          }
          ++windows;
        }
  CHECK(windows > 300);
}
