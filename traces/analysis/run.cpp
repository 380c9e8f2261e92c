// analyzeRun: loads one run and assembles every analysis into a RunReport.
#include <fmt/core.h>

#include <algorithm>
#include <future>
#include <map>
#include <set>

#include "traces/analysis/parts.h"

namespace tandem::traces {

namespace {

void accumulate(Breakdown& total, const Breakdown& b) {
  total.span_ns += b.span_ns;
  total.busy_ns += b.busy_ns;
  total.idle_ns += b.idle_ns;
  total.compute_ns += b.compute_ns;
  total.comm_ns += b.comm_ns;
  total.memcpy_ns += b.memcpy_ns;
  total.sync_ns += b.sync_ns;
  total.overlap_ns += b.overlap_ns;
  total.exposed_comm_ns += b.exposed_comm_ns;
  total.p2p_ns += b.p2p_ns;
  total.exposed_p2p_ns += b.exposed_p2p_ns;
  total.memcpy_exclusive_ns += b.memcpy_exclusive_ns;
  total.sync_exclusive_ns += b.sync_exclusive_ns;
  total.recompute_ns += b.recompute_ns;
}

}  // namespace

RunReport analyzeRun(TraceReader& reader, int64_t run, const AnalysisOptions& options) {
  RunReport report;
  report.run = reader.run(run);
  std::vector<Track> tracks = reader.loadRun(run, /*with_details=*/false);
  for (const auto& t : tracks) report.activity_count += static_cast<int64_t>(t.size());
  if (report.activity_count == 0)
    throw TraceError(fmt::format("{}: run {} ('{}') has no activities to report on", reader.path(), run,
                                 report.run.name));
  const auto& strings = reader.strings();
  CategoryTable categories(options.classifier, strings);

  // Everything below describes the window (the steps, by default); what
  // lies outside it is summarized in report.window.
  detail::Window window = detail::chooseWindow(reader.steps(run), options, reader.path(), run);
  tracks = detail::keepInside(std::move(tracks), window, strings, categories);
  report.window = window.report;

  std::vector<detail::RankTracks> ranks;
  for (const auto& t : tracks) {
    if (ranks.empty() || ranks.back().rank != t.rank) ranks.push_back({t.rank, {}});
    ranks.back().tracks.push_back(&t);
  }

  // The critical path's thread reads the recorded steps while this one may
  // add synthesized ones to its own copy below.
  const std::vector<StepRow> recorded_steps = window.steps;
  std::vector<StepRow> steps = recorded_steps;
  std::vector<PlanTaskRow> plan = reader.planTasks(run);
  std::vector<CollectiveRow> collectives = reader.collectives(run);

  // The kernel table, the critical path and the stream waits are
  // independent of the per-rank unions: they run on their own threads while
  // this one builds the unions.
  const std::vector<StreamRow> streams = reader.streams(run);
  auto kernels = std::async(std::launch::async, [&] {
    RunReport part;
    detail::kernelStatistics(ranks, categories, strings, plan, streams, recorded_steps, options, part);
    return part;
  });
  auto path = std::async(std::launch::async, [&] {
    return detail::criticalPath(ranks, categories, strings, plan, recorded_steps, options.critical_path_tasks);
  });
  auto waits = std::async(std::launch::async, [&] {
    return detail::streamWaits(ranks, categories, strings, plan, recorded_steps, streams, options.stream_wait_pairs);
  });

  // The executor's set-up before the first step (initial weights copied in,
  // GEMM algorithms timed) is no part of the run's time: the rank's span,
  // breakdown and idle time leave its track out (the kernel table keeps it,
  // as the op "set-up").
  std::set<std::pair<int, int>> setup_tracks;  // (rank, stream)
  for (const StreamRow& st : streams)
    if (st.name == kSetupStreamName) setup_tracks.insert({st.rank, st.stream});
  std::map<int, RankSets> sets;
  for (const auto& all : ranks) {
    detail::RankTracks rk{all.rank, {}};
    for (const Track* t : all.tracks)
      if (!setup_tracks.count({t->rank, t->stream})) rk.tracks.push_back(t);
    RankReport rr;
    rr.rank = rk.rank;
    for (const Track* t : all.tracks) rr.activities += static_cast<int64_t>(t->size());
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (const Track* t : rk.tracks) {
      for (size_t i = 0; i < t->size(); ++i) {
        if (categories.of(t->kind[i], t->name[i]) == Category::Host) continue;
        first = std::min(first, t->start_ns[i]);
        last = std::max(last, t->end_ns[i]);
      }
    }
    if (first > last) first = last = 0;  // host activity only
    if (const auto w = window.by_rank.find(rk.rank); w != window.by_rank.end()) {
      // The steps' span: idle counts inside the window only.
      first = w->second.first;
      last = w->second.second;
    }
    rr.first_ns = first;
    rr.last_ns = last;
    RankSets& s = sets[rk.rank] = buildRankSets(rk.tracks, categories);
    rr.breakdown = breakdownOf(s, first, last);
    rr.idle = detail::idleBreakdownOf(rk, categories, options.kernel_wait_threshold_ns);
    accumulate(report.total, rr.breakdown);
    report.ranks.push_back(rr);
  }
  Breakdown& t = report.total;
  t.overlap_pct = t.comm_ns > 0 ? 100.0 * static_cast<double>(t.overlap_ns) / static_cast<double>(t.comm_ns) : 0.0;
  t.recompute_share_pct =
      t.span_ns > 0 ? 100.0 * static_cast<double>(t.recompute_ns) / static_cast<double>(t.span_ns) : 0.0;

  if (steps.empty()) {
    report.step_time.synthesized = true;
    for (const auto& rr : report.ranks) steps.push_back({rr.rank, 0, rr.first_ns, rr.last_ns});
  }
  std::vector<int64_t> durations;
  std::map<int, int64_t> slowest;
  for (const auto& st : steps) {
    StepReport sr{st.rank, st.step, st.start_ns, st.end_ns, {}};
    auto it = sets.find(st.rank);
    if (it != sets.end())
      sr.breakdown = breakdownOf(it->second, st.start_ns, st.end_ns);
    else
      sr.breakdown.span_ns = sr.breakdown.idle_ns = st.end_ns - st.start_ns;
    durations.push_back(st.end_ns - st.start_ns);
    slowest[st.step] = std::max(slowest[st.step], st.end_ns - st.start_ns);
    report.steps.push_back(sr);
  }
  report.step_time.duration_ns = distributionOf(std::move(durations));
  std::vector<int64_t> maxima;
  for (auto [step, d] : slowest) maxima.push_back(d);
  report.step_time.max_over_ranks_ns = distributionOf(std::move(maxima));

  report.idle_gaps = detail::idleGaps(ranks, categories, strings, plan, recorded_steps, options.idle_gap_pairs);
  report.stream_waits = waits.get();
  report.stragglers = detail::stragglers(ranks, categories, collectives);
  RunReport part = kernels.get();
  report.by_op = std::move(part.by_op);
  report.by_name = std::move(part.by_name);
  report.host_calls = std::move(part.host_calls);
  report.attribution = std::move(part.attribution);
  report.critical_path = path.get();
  report.stats = reader.stats(run);
  return report;
}

}  // namespace tandem::traces
