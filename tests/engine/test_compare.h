#pragma once
// Comparisons the engine tests share.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tandem::test {

// ||a - ref|| / ||ref|| (ref's norm taken as at least 1e-30), in double;
// infinite when the sizes differ, so that any tolerance check fails.
inline double relativeDifference(const std::vector<float>& a, const std::vector<float>& ref) {
  if (a.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    norm += double(ref[i]) * ref[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

}  // namespace tandem::test
