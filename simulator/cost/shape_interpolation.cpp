#include "simulator/cost/shape_interpolation.h"

#include <cmath>
#include <sstream>

#include "engine/spec/parse_number.h"

namespace tandem::sim {
namespace {

// The field's value as a number, when it is one.
std::optional<double> numberOf(const std::string& v) { return parseFiniteNumber(v); }

// Whether a and b have the same field names in the same order and agree on
// every field but `skip`.
bool sameExcept(const ShapeFields& a, const ShapeFields& b, size_t skip) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first) return false;
    if (i != skip && a[i].second != b[i].second) return false;
  }
  return true;
}

}  // namespace

ShapeFields parseShapeKey(const std::string& key) {
  ShapeFields fields;
  std::istringstream in(key);
  std::string token;
  while (in >> token) {
    const size_t eq = token.find('=');
    if (eq == std::string::npos)
      fields.emplace_back(token, "");
    else
      fields.emplace_back(token.substr(0, eq), token.substr(eq + 1));
  }
  return fields;
}

std::optional<std::string> nearestShapeKey(const std::string& key, const std::vector<std::string>& candidates) {
  const ShapeFields want = parseShapeKey(key);
  std::optional<std::string> best;
  double best_distance = 0;
  for (const std::string& c : candidates) {
    const ShapeFields have = parseShapeKey(c);
    if (have.size() != want.size()) continue;
    double distance = 0;
    bool comparable = true;
    for (size_t i = 0; i < want.size() && comparable; ++i) {
      if (want[i].first != have[i].first) {
        comparable = false;
        break;
      }
      const std::optional<double> x = numberOf(want[i].second), y = numberOf(have[i].second);
      if (x && y && *x > 0 && *y > 0)
        distance += std::fabs(std::log(*x / *y));
      else
        comparable = want[i].second == have[i].second;
    }
    if (comparable && (!best || distance < best_distance)) best = c, best_distance = distance;
  }
  return best;
}

ShapeInterpolator::ShapeInterpolator(const std::map<std::string, int64_t>& measured_ns) {
  for (const auto& [key, ns] : measured_ns)
    if (ns >= 0) shapes_.push_back({parseShapeKey(key), ns});
}

std::optional<int64_t> ShapeInterpolator::ns(const std::string& key) const {
  if (shapes_.empty()) return std::nullopt;
  const ShapeFields want = parseShapeKey(key);
  for (size_t f = 0; f < want.size(); ++f) {
    const std::optional<double> x = numberOf(want[f].second);
    if (!x) continue;
    const Shape* below = nullptr;
    const Shape* above = nullptr;
    double below_x = 0, above_x = 0;
    for (const Shape& s : shapes_) {
      if (!sameExcept(want, s.fields, f)) continue;
      const std::optional<double> v = numberOf(s.fields[f].second);
      if (!v || *v == *x) continue;
      if (*v < *x && (!below || *v > below_x)) below = &s, below_x = *v;
      if (*v > *x && (!above || *v < above_x)) above = &s, above_x = *v;
    }
    if (below && above) {
      const double w = (*x - below_x) / (above_x - below_x);
      return int64_t(std::llround(double(below->ns) + w * double(above->ns - below->ns)));
    }
  }
  return std::nullopt;
}

}  // namespace tandem::sim
