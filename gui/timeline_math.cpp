#include "gui/timeline_math.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace tandem::gui {

int64_t TimeMapping::toTime(double x_px) const {
  return start_ns + int64_t(std::llround((x_px - x0_px) * nsPerPx()));
}

TimeMapping zoomAt(const TimeMapping& m, double x_px, double factor) {
  TimeMapping r = m;
  const double window = double(m.end_ns - m.start_ns);
  double next = std::max(double(kMinWindowNs), window * factor);
  // The time under the cursor stays under the cursor.
  const double frac = std::clamp((x_px - m.x0_px) / m.width_px, 0.0, 1.0);
  const double anchor = double(m.start_ns) + frac * window;
  r.start_ns = int64_t(std::llround(anchor - frac * next));
  r.end_ns = r.start_ns + int64_t(std::llround(next));
  return r;
}

TimeMapping panBy(const TimeMapping& m, double dx_px) {
  TimeMapping r = m;
  const int64_t shift = int64_t(std::llround(dx_px * m.nsPerPx()));
  r.start_ns -= shift;
  r.end_ns -= shift;
  return r;
}

TimeMapping clampTo(const TimeMapping& m, int64_t lo_ns, int64_t hi_ns) {
  TimeMapping r = m;
  const int64_t window = m.end_ns - m.start_ns;
  const int64_t span = hi_ns - lo_ns;
  // Allow a little air on both sides so the first and last slices can sit
  // away from the edge, but never scroll the whole run out of sight.
  const int64_t margin = std::max<int64_t>(span / 20, kMinWindowNs);
  if (window >= span + 2 * margin) {
    r.start_ns = lo_ns - margin;
    r.end_ns = hi_ns + margin;
    return r;
  }
  if (r.start_ns < lo_ns - margin) {
    r.start_ns = lo_ns - margin;
    r.end_ns = r.start_ns + window;
  }
  if (r.end_ns > hi_ns + margin) {
    r.end_ns = hi_ns + margin;
    r.start_ns = r.end_ns - window;
  }
  return r;
}

int64_t tickStep(int64_t window_ns, double width_px, double min_spacing_px) {
  if (window_ns <= 0 || width_px <= 0) return 1;
  const double min_ns = double(window_ns) * min_spacing_px / width_px;
  int64_t decade = 1;
  while (true) {
    for (int64_t mult : {1, 2, 5}) {
      const int64_t step = decade * mult;
      if (double(step) >= min_ns) return step;
    }
    if (decade > INT64_MAX / 100) return decade * 10;
    decade *= 10;
  }
}

std::string formatTick(int64_t offset_ns, int64_t step_ns) {
  if (offset_ns == 0) return "0";
  step_ns = std::max<int64_t>(step_ns, 1);
  const uint64_t a = offset_ns < 0 ? uint64_t(-(offset_ns + 1)) + 1 : uint64_t(offset_ns);
  struct Unit {
    uint64_t ns;
    int digits;  // log10(ns)
    const char* name;
  };
  static constexpr Unit kUnits[] = {{1000000000, 9, "s"}, {1000000, 6, "ms"}, {1000, 3, "us"}, {1, 0, "ns"}};
  const Unit* u = &kUnits[3];
  for (const Unit& c : kUnits)
    if (a >= c.ns) {
      u = &c;
      break;
    }
  // Decimals that resolve the step in this unit: a 1-2-5 step of
  // m x 10^e ns needs digits - e of them (none when the step is a whole unit).
  int e = 0;
  for (int64_t s = step_ns; s % 10 == 0; s /= 10) ++e;
  const int decimals = std::max(0, u->digits - e);
  std::string out = offset_ns < 0 ? "-" : "";
  out += std::to_string(a / u->ns);
  if (decimals > 0) {
    uint64_t frac = a % u->ns;
    for (int k = 0; k < u->digits - decimals; ++k) frac /= 10;
    const std::string f = std::to_string(frac);
    out.push_back('.');
    out.append(size_t(decimals) - f.size(), '0');
    out.append(f);
  }
  out.push_back(' ');
  out.append(u->name);
  return out;
}

AxisLabels axisLabels(const TimeMapping& m, int64_t origin_ns, bool relative, double min_spacing_px) {
  AxisLabels out;
  out.step_ns = tickStep(m.end_ns - m.start_ns, m.width_px, min_spacing_px);
  const int64_t step = out.step_ns;
  // The first multiple of the step (from the origin) at or after the start.
  int64_t first = m.start_ns - origin_ns;
  first = first >= 0 ? (first + step - 1) / step * step : -((-first) / step * step);
  first += origin_ns;
  for (int64_t t = first; t <= m.end_ns; t += step) {
    const int64_t offset = relative ? t - first : t - origin_ns;
    std::string label = relative && offset > 0 ? std::string("+") : std::string();
    label.append(formatTick(offset, step));
    out.ticks.push_back({t, std::move(label)});
  }
  if (relative) out.base = formatTick(first - origin_ns, step);
  return out;
}

std::string formatDuration(int64_t ns) {
  char buf[64];
  const double a = std::fabs(double(ns));
  auto fmt = [&](double v, const char* unit) {
    // Up to three significant digits without trailing zeros.
    if (std::fabs(v - std::round(v)) < 1e-9)
      std::snprintf(buf, sizeof buf, "%.0f %s", v, unit);
    else if (std::fabs(v) >= 100)
      std::snprintf(buf, sizeof buf, "%.0f %s", v, unit);
    else if (std::fabs(v) >= 10)
      std::snprintf(buf, sizeof buf, "%.1f %s", v, unit);
    else
      std::snprintf(buf, sizeof buf, "%.2f %s", v, unit);
    std::string s = buf;
    // "1.50 ms" -> "1.5 ms"
    auto space = s.find(' ');
    auto dot = s.find('.');
    if (dot != std::string::npos && dot < space) {
      size_t cut = space;
      while (cut > dot + 1 && s[cut - 1] == '0') --cut;
      if (cut == dot + 1) --cut;
      s.erase(cut, space - cut);
    }
    return s;
  };
  if (a >= 1e9) return fmt(double(ns) / 1e9, "s");
  if (a >= 1e6) return fmt(double(ns) / 1e6, "ms");
  if (a >= 1e3) return fmt(double(ns) / 1e3, "us");
  return fmt(double(ns), "ns");
}

size_t firstIndex(const std::vector<int64_t>& max_end_ns, int64_t t0_ns) {
  return size_t(std::upper_bound(max_end_ns.begin(), max_end_ns.end(), t0_ns) - max_end_ns.begin());
}

size_t lastIndex(const std::vector<int64_t>& start_ns, int64_t t1_ns) {
  return size_t(std::lower_bound(start_ns.begin(), start_ns.end(), t1_ns) - start_ns.begin());
}

int64_t hitTest(const Track& track, int64_t t_ns, int64_t tolerance_ns) {
  const size_t n = track.size();
  if (n == 0) return -1;
  const size_t first = firstIndex(track.max_end_ns, t_ns - tolerance_ns);
  const size_t last = lastIndex(track.start_ns, t_ns + tolerance_ns + 1);
  int64_t best = -1;
  int64_t best_dist = INT64_MAX;
  // Scan from the latest start backwards: the innermost containing slice is
  // found first. The candidate window is small except for deep nesting.
  for (size_t i = last; i-- > first;) {
    const int64_t s = track.start_ns[i];
    const int64_t e = track.end_ns[i];
    if (s <= t_ns && t_ns < e) return int64_t(i);
    const int64_t dist = t_ns < s ? s - t_ns : t_ns - e + 1;
    if (dist <= tolerance_ns && dist < best_dist) {
      best_dist = dist;
      best = int64_t(i);
    }
  }
  return best;
}

size_t lowerBoundStart(const int64_t* start_ns, size_t lo, size_t hi, int64_t t,
                       const std::vector<int64_t>* start_sample) {
  constexpr size_t S = kSampleStride;
  if (start_sample && !start_sample->empty() && hi - lo > 2 * S) {
    // Samples strictly inside (lo, hi): k in [lo / S + 1, (hi - 1) / S + 1).
    const int64_t* sample = start_sample->data();
    const size_t klo = lo / S + 1;
    const size_t khi = std::min((hi - 1) / S + 1, start_sample->size());
    if (klo < khi) {
      const size_t k = size_t(std::lower_bound(sample + klo, sample + khi, t) - sample);
      // Every sample before k is < t, so the answer lies after (k-1)*S; the
      // sample at k (if any) is >= t, so the answer is at most k*S.
      const size_t blo = std::max(lo, (k - 1) * S);
      const size_t bhi = k < khi ? std::min(hi, k * S) : hi;
      return size_t(std::lower_bound(start_ns + blo, start_ns + bhi, t) - start_ns);
    }
  }
  return size_t(std::lower_bound(start_ns + lo, start_ns + hi, t) - start_ns);
}

void coalesce(const int64_t* start_ns, const int64_t* end_ns, const int64_t* max_end_ns, size_t n,
              const TimeMapping& m, double merge_px, std::vector<LaneBox>& out,
              const std::vector<int64_t>* start_sample) {
  out.clear();
  if (n == 0) return;
  const double ns_per_px = m.nsPerPx();
  size_t i = size_t(std::upper_bound(max_end_ns, max_end_ns + n, m.start_ns) - max_end_ns);
  const size_t last = lowerBoundStart(start_ns, 0, n, m.end_ns, start_sample);
  const double right = m.x0_px + m.width_px;
  while (i < last) {
    const double x0 = m.toX(start_ns[i]);
    const double x1 = m.toX(end_ns[i]);
    if (x1 - x0 >= merge_px) {
      out.push_back({float(std::max(x0, m.x0_px - 1)), float(std::min(x1, right + 1)), uint32_t(i), 1});
      ++i;
      continue;
    }
    // Fold every slice that starts within merge_px of this one.
    const int64_t limit = start_ns[i] + int64_t(std::ceil(merge_px * ns_per_px));
    size_t j = lowerBoundStart(start_ns, i + 1, last, limit, start_sample);
    // The box ends where its slices end; on disjoint lanes the running
    // maximum at j-1 is exactly the last slice's end.
    int64_t box_end = std::max(max_end_ns[j - 1], end_ns[i]);
    if (m.toX(box_end) - x0 > 2 * merge_px) {
      // The run holds a slice that is wide on its own: fold only the narrow
      // slices before it, so it keeps its own colour and label.
      size_t k = i + 1;
      box_end = end_ns[i];
      while (k < j && m.toX(end_ns[k]) - m.toX(start_ns[k]) < merge_px) box_end = std::max(box_end, end_ns[k++]);
      j = k;
    }
    double bx1 = std::max(m.toX(box_end), x0 + 1.0);
    out.push_back({float(std::max(x0, m.x0_px - 1)), float(std::min(bx1, right + 1)), uint32_t(i),
                   uint32_t(j - i)});
    i = j;
  }
}

void unionOf(const Track& track, std::vector<int64_t>& starts, std::vector<int64_t>& ends) {
  starts.clear();
  ends.clear();
  const size_t n = track.size();
  size_t i = 0;
  while (i < n) {
    int64_t s = track.start_ns[i];
    int64_t e = track.end_ns[i];
    ++i;
    while (i < n && track.start_ns[i] <= e) {
      e = std::max(e, track.end_ns[i]);
      ++i;
    }
    starts.push_back(s);
    ends.push_back(e);
  }
}

void unionMerge(std::vector<int64_t>& a_starts, std::vector<int64_t>& a_ends,
                const std::vector<int64_t>& b_starts, const std::vector<int64_t>& b_ends) {
  if (b_starts.empty()) return;
  std::vector<int64_t> rs, re;
  rs.reserve(a_starts.size() + b_starts.size());
  re.reserve(a_starts.size() + b_starts.size());
  size_t i = 0, j = 0;
  while (i < a_starts.size() || j < b_starts.size()) {
    int64_t s, e;
    if (j >= b_starts.size() || (i < a_starts.size() && a_starts[i] <= b_starts[j])) {
      s = a_starts[i];
      e = a_ends[i++];
    } else {
      s = b_starts[j];
      e = b_ends[j++];
    }
    if (!re.empty() && s <= re.back()) {
      re.back() = std::max(re.back(), e);
    } else {
      rs.push_back(s);
      re.push_back(e);
    }
  }
  a_starts.swap(rs);
  a_ends.swap(re);
}

namespace {

int64_t sum(const std::vector<int64_t>& s, const std::vector<int64_t>& e) {
  int64_t total = 0;
  for (size_t i = 0; i < s.size(); ++i) total += e[i] - s[i];
  return total;
}

void pushInterval(IntervalLane& lane, int64_t s, int64_t e, uint8_t code) {
  if (e <= s) return;
  if (!lane.code.empty() && lane.code.back() == code && lane.end_ns.back() == s) {
    lane.end_ns.back() = e;
    return;
  }
  lane.start_ns.push_back(s);
  lane.end_ns.push_back(e);
  lane.code.push_back(code);
}

}  // namespace

OverlapResult computeOverlap(const std::vector<const Track*>& compute,
                             const std::vector<const Track*>& comm) {
  std::vector<int64_t> cs, ce, ms, me, ts, te;
  for (const Track* t : compute) {
    unionOf(*t, ts, te);
    unionMerge(cs, ce, ts, te);
  }
  for (const Track* t : comm) {
    unionOf(*t, ts, te);
    unionMerge(ms, me, ts, te);
  }
  OverlapResult r;
  r.compute_ns = sum(cs, ce);
  r.comm_ns = sum(ms, me);
  // Walk the communication intervals, cutting each where compute begins or
  // ends: pieces under compute are hidden, the rest exposed.
  size_t c = 0;
  for (size_t k = 0; k < ms.size(); ++k) {
    int64_t pos = ms[k];
    const int64_t end = me[k];
    while (c < cs.size() && ce[c] <= pos) ++c;
    size_t cc = c;
    while (pos < end) {
      if (cc >= cs.size() || cs[cc] >= end) {
        pushInterval(r.lane, pos, end, uint8_t(OverlapCode::Exposed));
        r.exposed_ns += end - pos;
        pos = end;
      } else if (cs[cc] > pos) {
        pushInterval(r.lane, pos, cs[cc], uint8_t(OverlapCode::Exposed));
        r.exposed_ns += cs[cc] - pos;
        pos = cs[cc];
      } else {
        const int64_t stop = std::min(end, ce[cc]);
        pushInterval(r.lane, pos, stop, uint8_t(OverlapCode::Hidden));
        r.hidden_ns += stop - pos;
        pos = stop;
        if (ce[cc] <= pos) ++cc;
      }
    }
  }
  return r;
}

IntervalLane computePhaseLane(const std::vector<const Track*>& compute) {
  IntervalLane lane;
  // With one compute stream (the usual case) walk it directly; with several,
  // walk them merged by start time.
  std::vector<size_t> pos(compute.size(), 0);
  while (true) {
    int pick = -1;
    for (size_t k = 0; k < compute.size(); ++k) {
      if (pos[k] < compute[k]->size() &&
          (pick < 0 || compute[k]->start_ns[pos[k]] < compute[size_t(pick)]->start_ns[pos[size_t(pick)]]))
        pick = int(k);
    }
    if (pick < 0) break;
    const Track& t = *compute[size_t(pick)];
    const size_t i = pos[size_t(pick)]++;
    const uint8_t ph = t.phase[i];
    if (!lane.code.empty() && lane.code.back() == ph) {
      lane.end_ns.back() = std::max(lane.end_ns.back(), t.end_ns[i]);
    } else {
      if (!lane.end_ns.empty() && lane.end_ns.back() > t.start_ns[i])
        lane.end_ns.back() = t.start_ns[i];  // keep the lane disjoint
      lane.start_ns.push_back(t.start_ns[i]);
      lane.end_ns.push_back(t.end_ns[i]);
      lane.code.push_back(ph);
    }
  }
  return lane;
}

}  // namespace tandem::gui
