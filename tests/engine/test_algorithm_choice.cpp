// The rule that picks a timed GEMM algorithm (engine/cuda/algorithm_choice.h).
#include <catch2/catch.hpp>

#include "engine/cuda/algorithm_choice.h"

using tandem::cuda::chooseAlgorithm;
using tandem::cuda::withGraphNodeCost;

TEST_CASE("algorithm choice keeps the first choice unless another is clearly faster", "[gemm][tuning]") {
  // 2% faster: within the 3% margin, the first choice stays.
  CHECK(chooseAlgorithm({1.00, 0.98, 1.10}, 0.03) == 0);
  // 10% faster: the fastest is taken, not merely the first that beats it.
  CHECK(chooseAlgorithm({1.00, 0.95, 0.90, 0.93}, 0.03) == 2);
  // The first choice is the fastest.
  CHECK(chooseAlgorithm({0.80, 0.95, 0.90}, 0.03) == 0);
  // Exactly at the margin: not clearly faster.
  CHECK(chooseAlgorithm({1.00, 0.97}, 0.03) == 0);
}

TEST_CASE("algorithm choice skips candidates that could not run", "[gemm][tuning]") {
  // The first choice failed: the fastest of the others, whatever their order.
  CHECK(chooseAlgorithm({-1.0, 0.95, 0.90, 0.99}, 0.03) == 2);
  CHECK(chooseAlgorithm({0.0, 0.90, 0.95}, 0.03) == 1);
  // A failed candidate is never chosen, even with a "time" below the others.
  CHECK(chooseAlgorithm({1.00, -5.0, 0.99}, 0.03) == 0);
  // Nothing ran, or nothing to choose from: the first choice.
  CHECK(chooseAlgorithm({-1.0, -1.0}, 0.03) == 0);
  CHECK(chooseAlgorithm({}, 0.03) == 0);
}

TEST_CASE("algorithm choice charges the graph nodes a launch adds", "[gemm][tuning]") {
  // First choice 0.090 ms with a memset node, the second as fast without:
  // charged 2.5 us, the first is 2.7% slower, within the margin; at 4 us
  // it is 4.3% slower and the second wins.
  const std::vector<double> ms{0.090, 0.0905, 0.100};
  const std::vector<int> extra{1, 0, 0};
  CHECK(chooseAlgorithm(withGraphNodeCost(ms, extra, 0.0025), 0.03) == 0);
  CHECK(chooseAlgorithm(withGraphNodeCost(ms, extra, 0.004), 0.03) == 1);
  // Charges add up per node, and only measured candidates are charged.
  const std::vector<double> charged = withGraphNodeCost({0.05, -1.0, 0.0}, {2, 3, 1}, 0.001);
  CHECK(charged[0] == Approx(0.052));
  CHECK(charged[1] == -1.0);
  CHECK(charged[2] == 0.0);
  // Without node counts (or a zero charge) nothing changes.
  CHECK(withGraphNodeCost(ms, {}, 0.0025) == ms);
  CHECK(withGraphNodeCost(ms, extra, 0.0) == ms);
}
