#include "simulator/cost/shape_interpolation.h"

#include <algorithm>
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

// The measured shapes nearest below and above `want` in its numeric field
// `f`, every other field the same (positive numbers only); null where there
// is none. Both interpolators read between such a pair.
template <class Shape>
struct Bracket {
  const Shape* below = nullptr;
  const Shape* above = nullptr;
  double x = 0, below_x = 0, above_x = 0;
};
template <class Shape, class Skip>
Bracket<Shape> bracketIn(const ShapeFields& want, const std::vector<Shape>& shapes, size_t f, const Skip& skip) {
  Bracket<Shape> b;
  const std::optional<double> x = numberOf(want[f].second);
  if (!x || *x <= 0) return b;
  b.x = *x;
  for (const Shape& s : shapes) {
    if (skip(s) || !sameExcept(want, s.fields, f)) continue;
    const std::optional<double> v = numberOf(s.fields[f].second);
    if (!v || *v <= 0 || *v == *x) continue;
    if (*v < *x && (!b.below || *v > b.below_x)) b.below = &s, b.below_x = *v;
    if (*v > *x && (!b.above || *v < b.above_x)) b.above = &s, b.above_x = *v;
  }
  return b;
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
  return nearestShapeKey(key, candidates, {}, 1.0);
}

std::optional<std::string> nearestShapeKey(const std::string& key, const std::vector<std::string>& candidates,
                                           std::string_view lighter_field, double weight) {
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
        distance += (want[i].first == lighter_field ? weight : 1.0) * std::fabs(std::log(*x / *y));
      else
        comparable = want[i].second == have[i].second;
    }
    if (comparable && (!best || distance < best_distance)) best = c, best_distance = distance;
  }
  return best;
}

double PeakRates::idealNs(double gflop, double mb) const {
  const double compute = flop_per_ns > 0 ? gflop * 1e9 / flop_per_ns : 0;
  const double memory = bytes_per_ns > 0 ? mb * 1e6 / bytes_per_ns : 0;
  return std::max(compute, memory);
}

namespace {

// The widest pair of measured shapes a shape between them is read off.
constexpr double kMaxBracketRatio = 4.0;

// Sum of |ln(a / b)| over the numeric fields, or nothing when the keys
// differ in form or in a field that is not a number.
std::optional<double> logDistance(const ShapeFields& a, const ShapeFields& b) {
  if (a.size() != b.size()) return std::nullopt;
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first) return std::nullopt;
    const std::optional<double> x = parseFiniteNumber(a[i].second), y = parseFiniteNumber(b[i].second);
    if (x && y && *x > 0 && *y > 0) d += std::fabs(std::log(*x / *y));
    else if (a[i].second != b[i].second) return std::nullopt;
  }
  return d;
}

// A measured neighbour of the shape asked for: its log distance, its ln
// slowness and ln(its value / the asked value) per numeric field.
struct Neighbour {
  double distance = 0, log_slowness = 0;
  std::vector<double> offsets;
};

// ln(b / a) for each field of a that is a positive number (a and b of one form).
std::vector<double> logOffsets(const ShapeFields& a, const ShapeFields& b) {
  std::vector<double> out;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::optional<double> x = parseFiniteNumber(a[i].second), y = parseFiniteNumber(b[i].second);
    if (x && y && *x > 0 && *y > 0) out.push_back(std::log(*y / *x));
  }
  return out;
}

// x of A x = b for a small symmetric positive definite A (Gaussian
// elimination with partial pivoting; A is regularised, so never singular).
std::vector<double> solveSmall(std::vector<std::vector<double>> a, std::vector<double> b) {
  const size_t n = b.size();
  for (size_t c = 0; c < n; ++c) {
    size_t pivot = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[pivot][c])) pivot = r;
    std::swap(a[c], a[pivot]);
    std::swap(b[c], b[pivot]);
    for (size_t r = c + 1; r < n; ++r) {
      const double f = a[r][c] / a[c][c];
      for (size_t k = c; k < n; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  std::vector<double> x(n);
  for (size_t c = n; c-- > 0;) {
    double s = b[c];
    for (size_t k = c + 1; k < n; ++k) s -= a[c][k] * x[k];
    x[c] = s / a[c][c];
  }
  return x;
}

// The ln slowness at the asked shape from its nearest neighbours: a plane
// in the logarithms of the fields, fitted by least squares weighted
// 1 / (distance^2 + 0.01) over the eight nearest (and those tied with the
// eighth), its slopes held back (ridge 0.1) where the neighbours say
// little about them; the plane's value at the asked shape, kept within 10%
// of the neighbours' own slowness (an attention's efficiency rises with the
// sequence and levels off: heads 128 wide, grouped, 345 TFLOP/s at 4096,
// 410-465 at 8192, 443-449 from 16384 to 65536; the trend from 4096 and
// 8192 alone would go on rising).
// Where the asked shape lies beyond the measured ones (an attention at a
// sequence longer than any measured), this follows their trend, where a
// weighted mean of the neighbours would stop at the last of them: with the
// measured attention shapes of sequences from 4096 up left out and read off
// the shorter ones (bench_shape_reading, the 48-point H100 sweep), median
// error 26.5% forward and 12.0% backward by the mean, 11.3% and 6.4% by
// the plane; over every measured shape left out in turn the mean error
// goes from 5.50% to 5.16% (docs/accuracy.md).
double localTrend(std::vector<Neighbour>& near) {
  constexpr size_t kNeighbours = 8;
  constexpr double kRidge = 0.1, kDistanceFloor = 0.01;
  const double kBeyondNeighbours = std::log(1.1);
  std::sort(near.begin(), near.end(), [](const Neighbour& a, const Neighbour& b) { return a.distance < b.distance; });
  // Shapes on a grid tie in distance: all those tied with the eighth count,
  // so that the reading does not depend on which of them is listed first.
  size_t k = std::min(kNeighbours, near.size());
  while (k < near.size() && near[k].distance <= near[k - 1].distance + 1e-9) ++k;
  const size_t n = 1 + near[0].offsets.size();  // intercept, then a slope per field
  std::vector<std::vector<double>> a(n, std::vector<double>(n, 0.0));
  std::vector<double> b(n, 0.0);
  double sum_w = 0, lo = near[0].log_slowness, hi = lo;
  for (size_t i = 0; i < k; ++i) sum_w += 1.0 / (near[i].distance * near[i].distance + kDistanceFloor);
  for (size_t i = 0; i < k; ++i) {
    const Neighbour& nb = near[i];
    const double w = 1.0 / (nb.distance * nb.distance + kDistanceFloor) / sum_w;
    std::vector<double> row = {1.0};
    row.insert(row.end(), nb.offsets.begin(), nb.offsets.end());
    for (size_t r = 0; r < n; ++r) {
      for (size_t c = 0; c < n; ++c) a[r][c] += w * row[r] * row[c];
      b[r] += w * row[r] * nb.log_slowness;
    }
    lo = std::min(lo, nb.log_slowness);
    hi = std::max(hi, nb.log_slowness);
  }
  for (size_t r = 1; r < n; ++r) a[r][r] += kRidge;
  const double at = solveSmall(std::move(a), std::move(b))[0];
  return std::clamp(at, lo - kBeyondNeighbours, hi + kBeyondNeighbours);
}

}  // namespace

ShapeFields efficiencyFields(const ShapeFields& f) {
  // An attention shape (b t c h, kv where grouped): its kernel's efficiency
  // follows the sequence (the causal triangle's tiles), the key/value heads
  // in flight, b x kv (each query tile streams its head's keys and values,
  // and grouped heads share theirs), the head width (another kernel) and the
  // grouping h / kv, not b and h apart. Measured on one H100: at sequence
  // 4096, 128 ungrouped heads run at 191 TFLOP/s and 256 heads in groups of
  // 8 (32 key/value heads) at 378; read by b x h instead, the grouped
  // shapes' neighbours mislead (a Llama 3 8B layer at sequence 16384: its
  // attention forward 46% slow by b x h, 1% fast by b x kv).
  double b = 0, t = 0, c = 0, h = 0, kv = 0;
  bool other = false;
  for (const auto& [name, value] : f) {
    const std::optional<double> v = parseFiniteNumber(value);
    if (!v) {
      other = true;
      continue;
    }
    if (name == "b") b = *v;
    else if (name == "t") t = *v;
    else if (name == "c") c = *v;
    else if (name == "h") h = *v;
    else if (name == "kv") kv = *v;
    else other = true;
  }
  if (other || b <= 0 || t <= 0 || c <= 0 || h <= 0) return f;
  std::string head = "w";  // a word: compared, not measured (appended: GCC 12 warns wrongly on "w" + string)
  head += std::to_string(int64_t(c / h));
  // Grouped heads are another kernel path as far as efficiency goes: each
  // key/value tile serves the group's query heads. Measured on one H100 at
  // sequence 4096, heads 128 wide: 128 ungrouped heads 191 TFLOP/s, grouped
  // ones 345-354; at 32768 ungrouped 205, grouped (65536) 449. Read across,
  // the ungrouped 32768 shape made Llama 3 8B's layer at 65536 33% slow.
  if (kv > 0 && kv < h) head += "-grouped";
  const double kv_heads = kv > 0 ? kv : h;
  ShapeFields out = {{"bkv", std::to_string(int64_t(b * kv_heads))}, {"t", std::to_string(int64_t(t))}, {"head", head}};
  if (kv > 0) out.emplace_back("group", std::to_string(int64_t(h / kv)));
  return out;
}

WorkInterpolator::WorkInterpolator(const std::map<std::string, ShapeWork>& measured) {
  for (const auto& [key, w] : measured)
    if (w.ns > 0 && (w.gflop > 0 || w.mb > 0)) shapes_.push_back({efficiencyFields(parseShapeKey(key)), w});
}

std::optional<int64_t> WorkInterpolator::ns(const std::string& key, double gflop, double mb, const PeakRates& peaks,
                                            int64_t fixed_ns) const {
  return nsOf(efficiencyFields(parseShapeKey(key)), gflop, mb, peaks, fixed_ns, [](const Shape&) { return false; });
}

std::vector<std::string> WorkInterpolator::fieldsBeyondMeasured(const std::string& key) const {
  const ShapeFields want = efficiencyFields(parseShapeKey(key));
  std::vector<double> lo(want.size(), 0), hi(want.size(), 0);
  bool any = false;
  for (const Shape& s : shapes_) {
    if (!logDistance(want, s.fields)) continue;
    for (size_t i = 0; i < want.size(); ++i) {
      const std::optional<double> v = parseFiniteNumber(s.fields[i].second);
      if (!v) continue;
      lo[i] = any ? std::min(lo[i], *v) : *v;
      hi[i] = any ? std::max(hi[i], *v) : *v;
    }
    any = true;
  }
  std::vector<std::string> beyond;
  if (!any) return beyond;
  for (size_t i = 0; i < want.size(); ++i) {
    const std::optional<double> x = parseFiniteNumber(want[i].second);
    if (x && (*x < lo[i] || *x > hi[i])) beyond.push_back(want[i].first);
  }
  return beyond;
}

std::vector<double> WorkInterpolator::leaveOneOutErrors(const PeakRates& peaks, int64_t fixed_ns) const {
  std::vector<double> errors;
  for (const ReadError& e : readErrors(peaks, fixed_ns, [](const ShapeFields& read, const ShapeFields& other) {
         return &read == &other;
       }))
    errors.push_back(std::fabs(e.error));
  return errors;
}

std::vector<WorkInterpolator::ReadError> WorkInterpolator::readErrors(const PeakRates& peaks, int64_t fixed_ns,
                                                                      const Hidden& hidden) const {
  std::vector<ReadError> errors;
  for (const Shape& s : shapes_) {
    const std::optional<int64_t> read = nsOf(s.fields, s.work.gflop, s.work.mb, peaks, fixed_ns,
                                             [&](const Shape& other) { return hidden(s.fields, other.fields); });
    if (read && s.work.ns > 0) errors.push_back({s.fields, double(*read) / double(s.work.ns) - 1.0});
  }
  return errors;
}

std::optional<int64_t> WorkInterpolator::nsOf(const ShapeFields& want, double gflop, double mb, const PeakRates& peaks,
                                              int64_t fixed_ns, const std::function<bool(const Shape&)>& skip) const {
  const double ideal = peaks.idealNs(gflop, mb);
  if (shapes_.empty() || ideal <= 0) return std::nullopt;
  // ln(slowness) of a measured shape; nothing when its ideal time is 0.
  auto logSlowness = [&](const Shape& s) -> std::optional<double> {
    const double own = peaks.idealNs(s.work.gflop, s.work.mb);
    if (own <= 0) return std::nullopt;
    return std::log(std::max(double(s.work.ns - fixed_ns), 1.0) / own);
  };
  auto timeAt = [&](double log_slowness) {
    return fixed_ns + int64_t(std::ceil(ideal * std::max(1.0, std::exp(log_slowness))));
  };
  // Between two shapes that differ from it in one number.
  for (size_t f = 0; f < want.size(); ++f) {
    const Bracket<Shape> b = bracketIn(want, shapes_, f, skip);
    // Neighbours far apart say little about what lies between them (an
    // attention's efficiency at sequence 4096 is not the log-mean of 512's
    // and 8192's): those leave it to the nearest neighbours below.
    if (!b.below || !b.above || b.above_x / b.below_x > kMaxBracketRatio) continue;
    const auto lb = logSlowness(*b.below), la = logSlowness(*b.above);
    if (!lb || !la) continue;
    const double w = std::log(b.x / b.below_x) / std::log(b.above_x / b.below_x);
    return timeAt((1 - w) * *lb + w * *la);
  }
  // The trend through the nearest measured neighbours.
  std::vector<Neighbour> near;
  for (const Shape& s : shapes_) {
    if (skip(s)) continue;
    const std::optional<double> d = logDistance(want, s.fields);
    const std::optional<double> l = d ? logSlowness(s) : std::nullopt;
    if (d && l) near.push_back({*d, *l, logOffsets(want, s.fields)});
  }
  if (near.empty()) return std::nullopt;
  return timeAt(localTrend(near));
}

ShapeInterpolator::ShapeInterpolator(const std::map<std::string, int64_t>& measured_ns) {
  for (const auto& [key, ns] : measured_ns)
    if (ns >= 0) shapes_.push_back({parseShapeKey(key), ns});
}

std::optional<int64_t> ShapeInterpolator::ns(const std::string& key) const {
  if (shapes_.empty()) return std::nullopt;
  const ShapeFields want = parseShapeKey(key);
  for (size_t f = 0; f < want.size(); ++f) {
    const Bracket<Shape> b = bracketIn(want, shapes_, f, [](const Shape&) { return false; });
    if (b.below && b.above) {
      const double w = (b.x - b.below_x) / (b.above_x - b.below_x);
      return int64_t(std::llround(double(b.below->ns) + w * double(b.above->ns - b.below->ns)));
    }
  }
  return std::nullopt;
}

}  // namespace tandem::sim
