// The report's window: a run's steps, one step, or the whole run, and what
// lies outside it (analysis.h, ReportWindow).
#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>

#include "traces/analysis/kernel_names.h"
#include "traces/analysis/parts.h"

namespace tandem::traces::detail {

Window chooseWindow(const std::vector<StepRow>& steps, const AnalysisOptions& options, const std::string& path,
                    int64_t run) {
  Window w;
  if (options.window == ReportWindow::WholeRun) {
    w.steps = steps;
    w.report.covers = "the whole run";
    return w;
  }
  if (steps.empty()) {
    if (options.step >= 0)
      throw TraceError(fmt::format("{}: run {} has no recorded steps, so there is no step {} to report on", path,
                                   run, options.step));
    w.report.covers = "the whole run: no steps recorded";
    return w;
  }
  std::set<int> indices;
  for (const StepRow& st : steps) indices.insert(st.step);
  if (options.step >= 0 && !indices.count(options.step))
    throw TraceError(fmt::format("{}: run {} has steps {}-{}; step {} is not one of them", path, run,
                                 *indices.begin(), *indices.rbegin(), options.step));
  for (const StepRow& st : steps) {
    if (options.step >= 0 && st.step != options.step) continue;
    w.steps.push_back(st);
    auto [it, fresh] = w.by_rank.emplace(st.rank, std::make_pair(st.start_ns, st.end_ns));
    if (!fresh) {
      it->second.first = std::min(it->second.first, st.start_ns);
      it->second.second = std::max(it->second.second, st.end_ns);
    }
  }
  w.report.whole_run = false;
  w.report.one_step = options.step >= 0;
  w.report.first_step = options.step >= 0 ? options.step : *indices.begin();
  w.report.last_step = options.step >= 0 ? options.step : *indices.rbegin();
  w.report.covers = w.report.first_step == w.report.last_step
                        ? fmt::format("step {}", w.report.first_step)
                        : fmt::format("steps {}-{}", w.report.first_step, w.report.last_step);
  return w;
}

std::vector<Track> keepInside(std::vector<Track> tracks, Window& window, const std::vector<std::string>& strings,
                              const CategoryTable& categories) {
  if (window.by_rank.empty()) return tracks;
  std::map<int32_t, int64_t> outside_ns;  // name id -> GPU time outside
  WindowReport& r = window.report;
  for (Track& t : tracks) {
    const auto it = window.by_rank.find(t.rank);
    if (it == window.by_rank.end()) continue;  // a rank without steps is reported whole
    const auto [from, to] = it->second;
    Track in;
    in.rank = t.rank;
    in.stream = t.stream;
    for (size_t i = 0; i < t.size(); ++i) {
      // In the window: what starts in it, and what started before it and
      // runs into it (a collective of the step before, still running); the
      // breakdowns clip both to the window and its steps, as they clip
      // what runs past the end.
      const bool starts_inside = t.start_ns[i] >= from && t.start_ns[i] < to;
      const bool runs_into = t.start_ns[i] < from && t.end_ns[i] > from;
      if (starts_inside || runs_into) {
        // Columns a load without details leaves empty stay empty.
        auto keep = [i](auto& dst, const auto& src) {
          if (!src.empty()) dst.push_back(src[i]);
        };
        keep(in.start_ns, t.start_ns);
        keep(in.end_ns, t.end_ns);
        keep(in.kind, t.kind);
        keep(in.name, t.name);
        keep(in.task_id, t.task_id);
        keep(in.phase, t.phase);
        keep(in.layer, t.layer);
        keep(in.micro_batch, t.micro_batch);
        keep(in.correlation_id, t.correlation_id);
        keep(in.bytes, t.bytes);
        keep(in.flops, t.flops);
        continue;
      }
      if (categories.of(t.kind[i], t.name[i]) == Category::Host) continue;  // GPU work only
      const int64_t d = t.end_ns[i] - t.start_ns[i];
      if (t.start_ns[i] < from) {
        ++r.before_activities;
        r.before_gpu_ns += d;
      } else {
        ++r.after_activities;
        r.after_gpu_ns += d;
      }
      outside_ns[t.name[i]] += d;
    }
    t = std::move(in);
  }
  // Names that differ only in their parameters share a compact name.
  std::map<std::string, int64_t> by_name;
  for (const auto& [name, ns] : outside_ns) by_name[compactName(strings[size_t(name)])] += ns;
  r.top_outside.assign(by_name.begin(), by_name.end());
  std::sort(r.top_outside.begin(), r.top_outside.end(),
            [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
  if (r.top_outside.size() > 5) r.top_outside.resize(5);
  tracks.erase(std::remove_if(tracks.begin(), tracks.end(), [](const Track& t) { return t.size() == 0; }),
               tracks.end());
  return tracks;
}

}  // namespace tandem::traces::detail
