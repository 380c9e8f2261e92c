#include "gui/timeline_data.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "gui/timeline_math.h"

namespace tandem::gui {

void Track::reserve(size_t n) {
  start_ns.reserve(n);
  end_ns.reserve(n);
  name_id.reserve(n);
  task_id.reserve(n);
  task_kind.reserve(n);
  phase.reserve(n);
  layer.reserve(n);
  micro_batch.reserve(n);
}

void Track::append(int64_t start, int64_t end, int32_t name, int32_t task, TaskKind kind, Phase ph,
                   int layer_index, int mb) {
  start_ns.push_back(start);
  end_ns.push_back(std::max(start, end));
  name_id.push_back(name);
  task_id.push_back(task);
  task_kind.push_back(uint8_t(kind));
  phase.push_back(uint8_t(ph));
  layer.push_back(int16_t(layer_index));
  micro_batch.push_back(int16_t(mb));
}

namespace {

template <typename T>
void permute(std::vector<T>& v, const std::vector<uint32_t>& order) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < order.size(); ++i) out[i] = v[order[i]];
  v.swap(out);
}

}  // namespace

void Track::finalize() {
  const size_t n = size();
  if (!std::is_sorted(start_ns.begin(), start_ns.end())) {
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return start_ns[a] < start_ns[b]; });
    permute(start_ns, order);
    permute(end_ns, order);
    permute(name_id, order);
    permute(task_id, order);
    permute(task_kind, order);
    permute(phase, order);
    permute(layer, order);
    permute(micro_batch, order);
  }
  start_sample = sampleStarts(start_ns);
  max_end_ns.resize(n);
  int64_t running = INT64_MIN;
  for (size_t i = 0; i < n; ++i) {
    running = std::max(running, end_ns[i]);
    max_end_ns[i] = running;
  }
}

std::vector<int64_t> sampleStarts(const std::vector<int64_t>& start_ns) {
  std::vector<int64_t> out;
  out.reserve(start_ns.size() / kSampleStride + 1);
  for (size_t i = 0; i < start_ns.size(); i += kSampleStride) out.push_back(start_ns[i]);
  return out;
}

void CounterLane::finalize() {
  if (!std::is_sorted(t_ns.begin(), t_ns.end())) {
    std::vector<size_t> order(t_ns.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return t_ns[a] < t_ns[b]; });
    std::vector<int64_t> t(order.size());
    std::vector<double> v(order.size());
    for (size_t i = 0; i < order.size(); ++i) t[i] = t_ns[order[i]], v[i] = value[order[i]];
    t_ns = std::move(t);
    value = std::move(v);
  }
  if (value.empty()) return;
  const auto [lo, hi] = std::minmax_element(value.begin(), value.end());
  min = *lo;
  max = *hi;
}

std::pair<size_t, size_t> CounterLane::visible(int64_t start_ns, int64_t end_ns) const {
  size_t first = size_t(std::lower_bound(t_ns.begin(), t_ns.end(), start_ns) - t_ns.begin());
  size_t last = size_t(std::upper_bound(t_ns.begin(), t_ns.end(), end_ns) - t_ns.begin());
  if (first > 0) --first;
  if (last < t_ns.size()) ++last;
  return {first, last};
}

void IntervalLane::finalize() {
  start_sample = sampleStarts(start_ns);
  nonzero_prefix_ns.assign(size() + 1, 0);
  length_prefix_ns.assign(size() + 1, 0);
  for (size_t i = 0; i < size(); ++i) {
    const int64_t len = end_ns[i] - start_ns[i];
    nonzero_prefix_ns[i + 1] = nonzero_prefix_ns[i] + (code[i] != 0 ? len : 0);
    length_prefix_ns[i + 1] = length_prefix_ns[i] + len;
  }
}

int64_t IntervalLane::nonzeroLength(size_t first, size_t count) const {
  if (nonzero_prefix_ns.size() != size() + 1) return 0;
  return nonzero_prefix_ns[first + count] - nonzero_prefix_ns[first];
}

int64_t IntervalLane::totalLength(size_t first, size_t count) const {
  if (length_prefix_ns.size() != size() + 1) return 0;
  return length_prefix_ns[first + count] - length_prefix_ns[first];
}

size_t TimelineData::sliceCount() const {
  size_t n = 0;
  for (const auto& t : tracks) n += t.size();
  return n;
}

int32_t TimelineData::taskNameId(const Track& t, size_t i) const {
  const TaskFacts* facts = t.task_id[i] >= 0 ? factsFor(t.rank, t.task_id[i]) : nullptr;
  return facts != nullptr && facts->name_id >= 0 ? facts->name_id : t.name_id[i];
}

const TaskFacts* TimelineData::factsFor(int rank, int task) const {
  if (rank < 0 || size_t(rank) >= task_facts.size() || task < 0) return nullptr;
  const auto& facts = task_facts[size_t(rank)];
  if (size_t(task) >= facts.size() || !facts[size_t(task)].has_op) return nullptr;
  return &facts[size_t(task)];
}

int TimelineData::medianStep() const {
  if (steps.empty()) return -1;
  std::vector<int> order(steps.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = int(k);
  auto duration = [&](int k) { return steps[size_t(k)].end_ns - steps[size_t(k)].start_ns; };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return duration(a) < duration(b); });
  return order[(order.size() - 1) / 2];
}

int TimelineData::slowestStep() const {
  int best = -1;
  for (size_t k = 0; k < steps.size(); ++k)
    if (best < 0 || steps[k].end_ns - steps[k].start_ns > steps[size_t(best)].end_ns - steps[size_t(best)].start_ns)
      best = int(k);
  return best;
}

std::pair<int64_t, int64_t> TimelineData::stepsSpan() const {
  if (steps.empty()) return {begin_ns, end_ns};
  return {steps.front().start_ns, steps.back().end_ns};
}

int stepIndexAt(const std::vector<StepMark>& steps, int64_t t_ns) {
  auto it = std::upper_bound(steps.begin(), steps.end(), t_ns,
                             [](int64_t t, const StepMark& s) { return t < s.start_ns; });
  if (it == steps.begin()) return -1;
  --it;
  return t_ns < it->end_ns ? int(it - steps.begin()) : -1;
}

int TimelineData::stepAt(int64_t t_ns) const { return stepIndexAt(steps, t_ns); }

void TimelineData::finalize(bool compute_overlap) {
  for (auto& t : tracks) t.finalize();
  std::map<int, std::vector<int>> by_rank;
  for (size_t i = 0; i < tracks.size(); ++i) by_rank[tracks[i].rank].push_back(int(i));
  ranks.clear();
  begin_ns = INT64_MAX;
  end_ns = INT64_MIN;
  for (auto& [rank, ids] : by_rank) {
    std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) {
      const Track& ta = tracks[size_t(a)];
      const Track& tb = tracks[size_t(b)];
      if (ta.kind != tb.kind) return int(ta.kind) < int(tb.kind);
      return ta.stream < tb.stream;
    });
    RankLanes lanes;
    lanes.rank = rank;
    lanes.tracks = ids;
    std::vector<const Track*> compute, comm;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int id : ids) {
      const Track& t = tracks[size_t(id)];
      if (t.kind == StreamKind::Compute) compute.push_back(&t);
      if (t.kind == StreamKind::Comm) comm.push_back(&t);
      if (t.size() > 0) {
        lo = std::min(lo, t.start_ns.front());
        hi = std::max(hi, t.max_end_ns.back());
      }
    }
    if (compute_overlap) {
      OverlapResult ov = computeOverlap(compute, comm);
      lanes.overlap = std::move(ov.lane);
      lanes.compute_ns = ov.compute_ns;
      lanes.comm_ns = ov.comm_ns;
      lanes.hidden_ns = ov.hidden_ns;
      lanes.exposed_ns = ov.exposed_ns;
      lanes.overlap.finalize();
    }
    lanes.phases = computePhaseLane(compute);
    lanes.phases.finalize();
    lanes.span_ns = hi > lo ? hi - lo : 0;
    if (hi > lo) {
      begin_ns = std::min(begin_ns, lo);
      end_ns = std::max(end_ns, hi);
    }
    ranks.push_back(std::move(lanes));
  }
  if (begin_ns > end_ns) {
    begin_ns = 0;
    end_ns = 1;
  }
  std::sort(steps.begin(), steps.end(),
            [](const StepMark& a, const StepMark& b) { return a.start_ns < b.start_ns; });
}

NameTable::NameTable(std::vector<std::string>& names) : names_(names) {
  for (size_t i = 0; i < names_.size(); ++i) index_.emplace(names_[i], int32_t(i));
}

int32_t NameTable::intern(const std::string& name) {
  auto [it, inserted] = index_.emplace(name, int32_t(names_.size()));
  if (inserted) names_.push_back(name);
  return it->second;
}

}  // namespace tandem::gui
