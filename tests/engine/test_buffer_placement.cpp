// The memory plan's placement index against the definition: for every
// question, the lowest offset it returns must be the one a scan of all
// placed buffers in offset order returns.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "engine/memory/buffer_placement.h"

using namespace tandem;

namespace {

struct Interval {
  int first, last;
  int64_t size;
};

// Places `intervals` in order, each at its lowest fit (or, every `stray`-th
// one, at a random offset, so that the lists also hold gaps and buffers that
// overlap in memory); compares every answer with the scan. Returns the
// number of disagreements.
int placeAndCompare(const std::vector<Interval>& intervals, int tasks, std::mt19937& rng, int stray) {
  PlacedBuffers index(tasks);
  std::vector<PlacedRange> placed;
  int wrong = 0;
  for (size_t i = 0; i < intervals.size(); ++i) {
    const Interval& v = intervals[i];
    const int64_t fast = index.lowestFit(v.first, v.last, v.size);
    const int64_t slow = lowestFitByScan(placed, v.first, v.last, v.size);
    if (fast != slow) {
      if (wrong == 0)
        UNSCOPED_INFO("buffer " << i << " [" << v.first << ", " << v.last << "] size " << v.size << ": index " << fast
                                << ", scan " << slow);
      ++wrong;
    }
    int64_t offset = slow;
    if (stray > 0 && i % size_t(stray) == 0) offset = int64_t(rng() % 4096) * 256;
    const PlacedRange p{offset, v.size, v.first, v.last};
    index.add(p);
    placed.push_back(p);
  }
  return wrong;
}

int64_t randomSize(std::mt19937& rng) {
  // A few sizes, so that equal offsets, exact fits and gaps all occur.
  static const int64_t kSizes[] = {256, 512, 768, 4096, 65536, 1 << 20};
  return kSizes[rng() % 6];
}

}  // namespace

TEST_CASE("Placement index answers as the full scan does", "[planner][memory]") {
  std::mt19937 rng(20261202);
  for (int stray : {0, 7}) {
    INFO("every " << stray << "th buffer at a random offset (0: none)");
    {  // random live ranges, short and long
      const int tasks = 5000;
      std::vector<Interval> v;
      for (int i = 0; i < 3000; ++i) {
        const int first = int(rng() % tasks);
        const int span = (i % 5 == 0) ? int(rng() % tasks) : int(rng() % 40);
        v.push_back({first, std::min(tasks - 1, first + span), randomSize(rng)});
      }
      INFO("random live ranges");
      CHECK(placeAndCompare(v, tasks, rng, stray) == 0);
    }
    {  // a deep model: nested saved activations and each layer's transients
      const int layers = 600, tasks = 4 * layers;
      std::vector<Interval> v;
      for (int l = 0; l < layers; ++l) {
        v.push_back({2 * l, tasks - 1 - 2 * l, 1 << 20});                       // saved from forward to backward
        v.push_back({2 * l, 2 * l + 1, randomSize(rng)});                     // forward transient
        v.push_back({tasks - 2 - 2 * l, tasks - 1 - 2 * l, randomSize(rng)});  // backward transient
      }
      std::stable_sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.size > b.size; });
      INFO("deep model");
      CHECK(placeAndCompare(v, tasks, rng, stray) == 0);
    }
    {  // many micro-batches: the same buffers again and again
      const int micro = 64, per = 60, tasks = micro * per;
      std::vector<Interval> v;
      for (int m = 0; m < micro; ++m)
        for (int k = 0; k < 30; ++k) {
          const int first = m * per + (k * 7) % per;
          v.push_back({first, std::min(tasks - 1, first + 1 + k % 9), int64_t(256) << (k % 8)});
        }
      v.push_back({0, tasks - 1, 1 << 16});  // and a few that live the whole step
      v.push_back({tasks / 3, tasks - 1, 1 << 12});
      INFO("micro-batches");
      CHECK(placeAndCompare(v, tasks, rng, stray) == 0);
    }
  }
}

TEST_CASE("Placement index: the first fit's edge cases", "[planner][memory]") {
  PlacedBuffers index(100);
  CHECK(index.lowestFit(0, 99, 256) == 0);  // nothing placed
  index.add({0, 512, 10, 20});
  CHECK(index.lowestFit(21, 30, 512) == 0);   // after it in time
  CHECK(index.lowestFit(0, 9, 512) == 0);     // before it
  CHECK(index.lowestFit(20, 20, 256) == 512);  // shares its last task
  index.add({1024, 256, 0, 99});
  CHECK(index.lowestFit(15, 15, 512) == 512);   // the gap [512, 1024) fits exactly
  CHECK(index.lowestFit(15, 15, 768) == 1280);  // it does not fit a larger one
}
