// profiler::meanPowerFromEnergy on hand-made samples: NVML's energy counter
// moves in steps about 100 ms apart, and the mean power must come from the
// time between its moves, not between arbitrary readings.
#include <catch2/catch.hpp>

#include "profiler/power_sampler.h"

using tandem::profiler::meanPowerFromEnergy;
using tandem::profiler::PowerSample;

namespace {

// Samples every 10 ms from 0 to 1000 ms of a counter that moves every 100
// ms (at 5, 105, 205, ... ms) by 70 J: 700 W.
std::vector<PowerSample> steppedCounter() {
  std::vector<PowerSample> v;
  for (uint64_t ms = 0; ms <= 1000; ms += 10) {
    PowerSample s;
    s.ts = ms * 1'000'000;
    const uint64_t moves = ms < 5 ? 0 : (ms - 5) / 100 + 1;  // moves seen by this reading
    s.energy_mj = 1e6 + 70000.0 * double(moves);
    v.push_back(s);
  }
  return v;
}

}  // namespace

TEST_CASE("mean power from the energy counter's moves", "[power]") {
  const std::vector<PowerSample> v = steppedCounter();
  // The first reading after each move is at 10, 110, ... ms: 100 ms apart.
  CHECK(meanPowerFromEnergy(v, 0, 1'000'000'000) == Approx(700.0));
  // A window that starts just after a move and ends just before one: the
  // first and last readings inside it would span 280 ms for 2 moves (500 W);
  // between the moves inside (at 210 and 310 ms) it is 700 W.
  CHECK(meanPowerFromEnergy(v, 120'000'000, 400'000'000) == Approx(700.0));
  // Fewer than two moves inside: no figure.
  CHECK(meanPowerFromEnergy(v, 120'000'000, 200'000'000) < 0);
  CHECK(meanPowerFromEnergy({}, 0, 1) < 0);
  // Readings without the counter (-1) are skipped.
  std::vector<PowerSample> gaps = v;
  for (size_t i = 0; i < gaps.size(); i += 3) gaps[i].energy_mj = -1;
  CHECK(meanPowerFromEnergy(gaps, 0, 1'000'000'000) > 0);
}
