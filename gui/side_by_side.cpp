#include "gui/side_by_side.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

namespace tandem::gui {
namespace {

void shiftLane(IntervalLane& lane, int64_t shift) {
  for (int64_t& t : lane.start_ns) t += shift;
  for (int64_t& t : lane.end_ns) t += shift;
  lane.finalize();
}

}  // namespace

SideBySide sideBySide(const TimelineData& a, const TimelineData& b, int step_a, int step_b,
                      const std::string& label_a, const std::string& label_b) {
  SideBySide s;
  s.step_a = step_a >= 0 && size_t(step_a) < a.steps.size() ? step_a : a.medianStep();
  s.step_b = step_b >= 0 && size_t(step_b) < b.steps.size() ? step_b : b.medianStep();
  const int64_t at_a = s.step_a >= 0 ? a.steps[size_t(s.step_a)].start_ns : a.begin_ns;
  const int64_t at_b = s.step_b >= 0 ? b.steps[size_t(s.step_b)].start_ns : b.begin_ns;
  s.shift_ns = at_a - at_b;

  auto d = std::make_shared<TimelineData>();
  d->run_label = label_a + " beside " + label_b;
  d->names = a.names;
  d->symbols = a.symbols;
  d->tracks = a.tracks;
  d->ranks = a.ranks;
  d->steps = a.steps;
  d->task_facts = a.task_facts;
  for (RankLanes& r : d->ranks) r.title = label_a + " rank " + std::to_string(r.rank);
  s.first_b_track = d->tracks.size();
  s.first_b_rank = d->ranks.size();
  s.b_rank_offset = int(a.task_facts.size());
  for (const RankLanes& r : a.ranks) s.b_rank_offset = std::max(s.b_rank_offset, r.rank + 1);

  // B's names interned into A's table; its facts after A's ranks.
  NameTable names(d->names);
  std::vector<int32_t> name_of(b.names.size());
  for (size_t i = 0; i < b.names.size(); ++i) name_of[i] = names.intern(b.names[i]);
  d->task_facts.resize(size_t(s.b_rank_offset));
  for (const auto& facts : b.task_facts) {
    d->task_facts.push_back(facts);
    for (TaskFacts& f : d->task_facts.back())
      if (f.name_id >= 0) f.name_id = name_of[size_t(f.name_id)];
  }
  for (const Track& t : b.tracks) {
    Track c = t;
    c.rank = t.rank + s.b_rank_offset;
    for (int64_t& x : c.start_ns) x += s.shift_ns;
    for (int64_t& x : c.end_ns) x += s.shift_ns;
    for (int32_t& n : c.name_id) n = name_of[size_t(n)];
    c.finalize();
    d->tracks.push_back(std::move(c));
  }
  for (const RankLanes& r : b.ranks) {
    RankLanes c = r;
    c.title = label_b + " rank " + std::to_string(r.rank);
    c.rank = r.rank + s.b_rank_offset;
    for (int& t : c.tracks) t += int(s.first_b_track);
    shiftLane(c.overlap, s.shift_ns);
    shiftLane(c.phases, s.shift_ns);
    for (CounterLane& counter : c.counters) {
      for (int64_t& x : counter.t_ns) x += s.shift_ns;
      counter.finalize();
    }
    d->ranks.push_back(std::move(c));
  }
  for (StepMark m : b.steps) {
    m.start_ns += s.shift_ns;
    m.end_ns += s.shift_ns;
    s.steps_b.push_back(m);
  }
  d->begin_ns = std::min(a.begin_ns, b.begin_ns + s.shift_ns);
  d->end_ns = std::max(a.end_ns, b.end_ns + s.shift_ns);
  s.data = std::move(d);
  return s;
}

SliceRef twinOf(const SideBySide& s, SliceRef slice) {
  const TimelineData& d = *s.data;
  if (!slice.valid() || size_t(slice.track) >= d.tracks.size()) return {};
  const Track& from = d.tracks[size_t(slice.track)];
  if (size_t(slice.index) >= from.size()) return {};
  const int32_t task = from.task_id[size_t(slice.index)];
  if (task < 0) return {};
  const bool in_a = size_t(slice.track) < s.first_b_track;
  // The step as far from the aligned one, on the other side.
  const int64_t t = from.start_ns[size_t(slice.index)];
  const int k = in_a ? d.stepAt(t) : stepIndexAt(s.steps_b, t);
  const int aligned_from = in_a ? s.step_a : s.step_b, aligned_to = in_a ? s.step_b : s.step_a;
  const std::vector<StepMark>& other_steps = in_a ? s.steps_b : d.steps;
  const int rank = in_a ? from.rank + s.b_rank_offset : from.rank - s.b_rank_offset;
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  if (k >= 0 && aligned_from >= 0 && aligned_to >= 0) {
    const int other = k - aligned_from + aligned_to;
    if (other < 0 || size_t(other) >= other_steps.size()) return {};
    lo = other_steps[size_t(other)].start_ns;
    hi = other_steps[size_t(other)].end_ns;
  }
  const size_t first = in_a ? s.first_b_track : 0, last = in_a ? d.tracks.size() : s.first_b_track;
  SliceRef best;
  int64_t best_start = INT64_MAX;
  for (size_t ti = first; ti < last; ++ti) {
    const Track& c = d.tracks[ti];
    if (c.rank != rank) continue;
    for (size_t i = c.lowerBoundStart(lo); i < c.size() && c.start_ns[i] < hi; ++i)
      if (c.task_id[i] == task && c.start_ns[i] < best_start) {
        best = {int(ti), int64_t(i)};
        best_start = c.start_ns[i];
        break;  // the first on this track; another track may hold an earlier one
      }
  }
  return best;
}

PaintClass differenceClass(double r) {
  if (r < 0.8) return PaintClass::MuchShorter;
  if (r < 0.95) return PaintClass::Shorter;
  if (r <= 1.05) return PaintClass::Alike;
  if (r <= 1.25) return PaintClass::Longer;
  return PaintClass::MuchLonger;
}

int colourByDifference(SideBySide& s, bool on) {
  TimelineData& d = *s.data;
  if (!on) {
    for (Track& t : d.tracks) t.paint.clear();
    return 0;
  }
  // (run's own rank, task, step relative to the aligned one) -> time.
  using Key = std::tuple<int, int32_t, int>;
  std::map<Key, int64_t> time[2];
  auto keyOf = [&](size_t track, size_t i) -> std::optional<Key> {
    const Track& t = d.tracks[track];
    const bool in_a = track < s.first_b_track;
    if (t.task_id[i] < 0) return std::nullopt;
    const int k = in_a ? d.stepAt(t.start_ns[i]) : stepIndexAt(s.steps_b, t.start_ns[i]);
    const int aligned = in_a ? s.step_a : s.step_b;
    const int rel = k >= 0 && aligned >= 0 ? k - aligned : 0;
    if (k < 0 && aligned >= 0) return std::nullopt;  // outside the steps
    return Key{in_a ? t.rank : t.rank - s.b_rank_offset, t.task_id[i], rel};
  };
  for (size_t ti = 0; ti < d.tracks.size(); ++ti) {
    const Track& t = d.tracks[ti];
    for (size_t i = 0; i < t.size(); ++i)
      if (const auto key = keyOf(ti, i)) time[ti < s.first_b_track ? 0 : 1][*key] += t.end_ns[i] - t.start_ns[i];
  }
  int matched = 0;
  for (const auto& [key, ns] : time[0]) matched += time[1].count(key) > 0;
  for (size_t ti = 0; ti < d.tracks.size(); ++ti) {
    Track& t = d.tracks[ti];
    t.paint.assign(t.size(), uint8_t(PaintClass::Other));
    for (size_t i = 0; i < t.size(); ++i) {
      const auto key = keyOf(ti, i);
      if (!key) continue;
      const auto a = time[0].find(*key), b = time[1].find(*key);
      if (a == time[0].end() || b == time[1].end() || a->second <= 0) continue;
      t.paint[i] = uint8_t(differenceClass(double(b->second) / double(a->second)));
    }
  }
  return matched;
}

}  // namespace tandem::gui
