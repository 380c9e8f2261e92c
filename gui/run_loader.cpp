#include "gui/run_loader.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <thread>
#include <unordered_map>

#include "gui/timeline_palette.h"
#include "traces/analysis/kernel_names.h"
#include "traces/importers/importers.h"
#include "traces/store/atomic_output.h"
#include "traces/store/trace_reader.h"
#include "traces/store/trace_writer.h"

namespace tandem::gui {

namespace {

uint8_t taskKindOf(traces::ActivityKind k) {
  switch (k) {
    case traces::ActivityKind::Kernel: return uint8_t(TaskKind::Kernel);
    case traces::ActivityKind::Memcpy:
    case traces::ActivityKind::Memset: return uint8_t(TaskKind::Memcpy);
    case traces::ActivityKind::Collective: return uint8_t(TaskKind::Collective);
    case traces::ActivityKind::Send:
    case traces::ActivityKind::Recv: return uint8_t(TaskKind::SendRecv);
    case traces::ActivityKind::Sync:
    case traces::ActivityKind::Host: return uint8_t(TaskKind::Host);
  }
  return uint8_t(TaskKind::Kernel);
}

template <typename Out, typename In>
void copyInto(std::vector<Out>& out, const std::vector<In>& in) {
  out.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = static_cast<Out>(in[i]);
}

// Hidden and exposed interval sets merged into one sorted lane.
IntervalLane laneFrom(const traces::IntervalSet& hidden, const traces::IntervalSet& exposed) {
  IntervalLane lane;
  const auto& h = hidden.intervals();
  const auto& e = exposed.intervals();
  lane.start_ns.reserve(h.size() + e.size());
  size_t i = 0, j = 0;
  while (i < h.size() || j < e.size()) {
    const bool take_h = j >= e.size() || (i < h.size() && h[i].first <= e[j].first);
    const auto& iv = take_h ? h[i++] : e[j++];
    lane.start_ns.push_back(iv.first);
    lane.end_ns.push_back(iv.second);
    lane.code.push_back(uint8_t(take_h ? OverlapCode::Hidden : OverlapCode::Exposed));
  }
  return lane;
}

// Where a load's percentages go: reading the activities takes most of it.
constexpr int kReadStartPct = 5, kReadEndPct = 75, kModelPct = 80, kAnalysisPct = 90;

// Reports to `options.progress` (if any) and throws LoadCancelled when it
// says stop.
void report(const LoadOptions& options, int pct, const std::string& stage) {
  if (options.progress && !options.progress(pct, stage)) throw LoadCancelled();
}

// 950, 12.3k, 10.0M
std::string countText(int64_t n) {
  char text[32];
  if (n < 10'000) std::snprintf(text, sizeof text, "%lld", static_cast<long long>(n));
  else if (n < 1'000'000) std::snprintf(text, sizeof text, "%.1fk", double(n) * 1e-3);
  else std::snprintf(text, sizeof text, "%.1fM", double(n) * 1e-6);
  return text;
}

// Reads every track of a run. Large runs are read through two connections
// at once (SQLite connections are independent), each taking every other
// track, which roughly halves the read on an otherwise idle machine; the
// calling thread reports progress after each of its tracks, and a
// cancellation stops both after their current track.
std::vector<traces::Track> readTracks(traces::TraceReader& reader, int64_t run, const LoadOptions& options) {
  const std::vector<traces::TrackInfo> infos = reader.tracks(run);
  int64_t total = 0;
  for (const auto& ti : infos) total += ti.activity_count;
  report(options, kReadStartPct, "reading " + countText(total) + " activities");
  if (total < options.parallel_from || infos.size() < 2) return reader.loadRun(run);
  std::vector<traces::Track> tracks(infos.size());
  std::atomic<int64_t> read{0};
  std::atomic<bool> stop{false};
  bool cancelled = false;  // set by the reporting (calling) thread only
  auto load = [&](size_t first, std::string* failure, bool reports) {
    try {
      traces::TraceReader own(reader.path());
      for (size_t i = first; i < infos.size() && !stop; i += 2) {
        tracks[i] = own.loadTrack(run, infos[i].rank, infos[i].stream);
        read += int64_t(tracks[i].size());
        if (reports && total > 0)
          report(options, kReadStartPct + int((kReadEndPct - kReadStartPct) * read / total),
                 "reading activities: " + countText(read) + " of " + countText(total));
      }
    } catch (const LoadCancelled&) {
      stop = true;
      cancelled = true;
    } catch (const std::exception& e) {
      stop = true;
      *failure = e.what();
    }
  };
  std::string error, helper_error;
  std::thread helper(load, 1, &helper_error, false);
  load(0, &error, true);
  helper.join();
  if (cancelled) throw LoadCancelled();
  if (!error.empty() || !helper_error.empty()) throw traces::TraceError(error.empty() ? helper_error : error);
  return tracks;
}

}  // namespace

std::string describeRun(const traces::RunInfo& info) {
  std::string s = "run " + std::to_string(info.id) + " · " + std::string(traces::toString(info.kind));
  if (!info.name.empty()) s += " · " + info.name;
  s += " · " + std::to_string(info.world_size) + (info.world_size == 1 ? " rank" : " ranks");
  return s;
}

std::string jobNameOf(const traces::RunInfo& info) {
  size_t at = 0;
  while (at < info.job_yaml.size()) {
    const size_t end = std::min(info.job_yaml.find('\n', at), info.job_yaml.size());
    const std::string_view line(info.job_yaml.data() + at, end - at);
    if (line.rfind("name:", 0) == 0) {
      std::string name(line.substr(5));
      name.erase(std::remove(name.begin(), name.end(), '"'), name.end());
      const size_t first = name.find_first_not_of(" \t"), last = name.find_last_not_of(" \t\r");
      return first == std::string::npos ? std::string() : name.substr(first, last - first + 1);
    }
    at = end + 1;
  }
  return info.job_hash.substr(0, 12);
}

namespace {

// Power from the energy counter. NVML's usual power reading is a one-second
// average on Ampere and newer GPUs (its documentation): at the start of a
// GPT-2 run on H200 it still read 225-470 W while the clock had already
// fallen to the power limit's 1695 MHz. (Profiles since the fourteenth
// session store the instantaneous reading where the driver has it; older
// ones the average: the energy counter serves both.) The energy counter moves about every
// 100 ms; its increase between two moves over the time between them is the
// power of that interval, drawn as a step. The profiler sees each move
// within one sampling period (10-16 ms), so an interval's power is known to
// about that share of its length (up to 15%).
CounterLane powerFromEnergy(std::vector<std::pair<int64_t, double>> samples) {
  CounterLane lane;
  lane.name = "gpu.energy_mj";
  lane.label = "power W";
  std::stable_sort(samples.begin(), samples.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<int64_t, double>> moves;  // first sample, then each change of value
  for (const auto& s : samples)
    if (moves.empty() || s.second != moves.back().second) moves.push_back(s);
  for (size_t k = 1; k < moves.size(); ++k) {
    const int64_t dt = moves[k].first - moves[k - 1].first;
    if (dt <= 0) continue;
    const double watts = (moves[k].second - moves[k - 1].second) / double(dt) * 1e6;  // mJ per ns
    lane.t_ns.push_back(moves[k - 1].first);
    lane.value.push_back(watts);
    lane.t_ns.push_back(moves[k].first);
    lane.value.push_back(watts);
  }
  return lane;
}

// The counters drawn under each rank's lanes: the profiler's GPU samples,
// power (from the energy counter where there is one) and SM clock. (The
// limit reasons are a bit mask: left out.)
void attachCounters(TimelineData& data, const std::vector<traces::CounterRow>& rows) {
  struct Samples {
    std::vector<std::pair<int64_t, double>> power, clock, energy;
  };
  std::map<int, Samples> by_rank;
  for (const auto& c : rows) {
    if (c.name == "gpu.power_w") by_rank[c.rank].power.push_back({c.ts_ns, c.value});
    else if (c.name == "gpu.sm_clock_mhz") by_rank[c.rank].clock.push_back({c.ts_ns, c.value});
    else if (c.name == "gpu.energy_mj") by_rank[c.rank].energy.push_back({c.ts_ns, c.value});
  }
  auto laneOf = [](const char* name, const char* label, const std::vector<std::pair<int64_t, double>>& samples) {
    CounterLane lane;
    lane.name = name;
    lane.label = label;
    for (const auto& [t, v] : samples) lane.t_ns.push_back(t), lane.value.push_back(v);
    return lane;
  };
  for (auto& rank : data.ranks) {
    auto it = by_rank.find(rank.rank);
    if (it == by_rank.end()) continue;
    CounterLane power = powerFromEnergy(it->second.energy);
    if (power.size() < 4) power = laneOf("gpu.power_w", "power W (NVML)", it->second.power);
    CounterLane clock = laneOf("gpu.sm_clock_mhz", "SM clock MHz", it->second.clock);
    for (CounterLane* lane : {&power, &clock}) {
      if (lane->size() < 2) continue;  // one sample draws no line
      lane->finalize();
      rank.counters.push_back(std::move(*lane));
    }
  }
}

using StreamRows = std::map<std::pair<int, int>, traces::StreamRow>;
using TracksByRank = std::map<int, std::vector<const traces::Track*>>;

// The timeline's lanes from the store's tracks, and the GPU tracks of each
// rank for the analysis.
TracksByRank addTimelineTracks(TimelineData& data, const std::vector<traces::Track>& tracks,
                               const StreamRows& streams) {
  TracksByRank by_rank;
  for (const auto& src : tracks) {
    auto it = streams.find({src.rank, src.stream});
    // Host threads are not GPU lanes; the breakdown leaves them out as well.
    if (it != streams.end() && it->second.kind == StreamKind::Host) continue;
    by_rank[src.rank].push_back(&src);
    Track t;
    t.rank = src.rank;
    t.stream = src.stream;
    t.kind = it != streams.end() ? it->second.kind : StreamKind::Compute;  // host tracks skipped above
    t.label = it != streams.end() && !it->second.name.empty() ? it->second.name
                                                              : "stream " + std::to_string(src.stream);
    t.start_ns = src.start_ns;
    t.end_ns = src.end_ns;
    t.name_id = src.name;
    copyInto(t.task_id, src.task_id);
    copyInto(t.layer, src.layer);
    copyInto(t.micro_batch, src.micro_batch);
    t.task_kind.resize(src.size());
    t.phase.resize(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      t.task_kind[i] = taskKindOf(src.kind[i]);
      t.phase[i] = uint8_t(src.phase[i]);
    }
    data.tracks.push_back(std::move(t));
  }
  return by_rank;
}

// Plan facts per task; activities fill in what the plan rows lack.
void addTaskFacts(TimelineData& data, traces::TraceReader& reader, int64_t run,
                  const std::vector<traces::Track>& tracks) {
  int max_rank = 0;
  for (const auto& t : tracks) max_rank = std::max(max_rank, t.rank);
  data.task_facts.resize(size_t(max_rank) + 1);
  auto slot = [&](int rank, int64_t task) -> TaskFacts* {
    if (rank < 0 || task < 0 || task > 50'000'000) return nullptr;
    auto& v = data.task_facts[size_t(rank)];
    if (size_t(task) >= v.size()) v.resize(size_t(task) + 1);
    return &v[size_t(task)];
  };
  // Plan task names join the string table (a real run's activities carry
  // kernel names; a comparison matches tasks by their plan names).
  std::unordered_map<std::string, int32_t> name_ids;
  auto nameId = [&](const std::string& name) {
    if (name_ids.empty())
      for (size_t i = 0; i < data.names.size(); ++i) name_ids.emplace(data.names[i], int32_t(i));
    auto [it, fresh] = name_ids.emplace(name, int32_t(data.names.size()));
    if (fresh) data.names.push_back(name);
    return it->second;
  };
  for (const auto& pt : reader.planTasks(run)) {
    if (pt.rank > max_rank) continue;
    if (TaskFacts* f = slot(pt.rank, pt.task_id)) {
      f->flops = pt.flops;
      f->bytes = pt.bytes;
      if (auto op = parseOpKind(pt.op)) f->op = *op;
      f->has_op = true;
      if (!pt.name.empty()) f->name_id = nameId(pt.name);
    }
  }
  for (const auto& src : tracks)
    for (size_t i = 0; i < src.size(); ++i) {
      TaskFacts* f = slot(src.rank, src.task_id[i]);
      if (!f || f->has_op) continue;
      f->flops = src.flops[i];
      f->bytes = src.bytes[i];
      f->op = src.kind[i] == traces::ActivityKind::Collective ? OpKind::AllReduce : OpKind::Add;
      f->has_op = true;
    }
}

// One step marker per step number, spanning that step on every rank.
void addStepMarks(TimelineData& data, const std::vector<traces::StepRow>& step_rows) {
  std::map<int, StepMark> steps;
  for (const auto& s : step_rows) {
    auto [it, fresh] = steps.try_emplace(s.step, StepMark{s.step, s.start_ns, s.end_ns});
    if (!fresh) {
      it->second.start_ns = std::min(it->second.start_ns, s.start_ns);
      it->second.end_ns = std::max(it->second.end_ns, s.end_ns);
    }
  }
  for (const auto& [k, s] : steps) data.steps.push_back(s);
}

// The store's interval sets of every rank. The store's classification
// decides what is compute and communication. Ranks are independent: two
// threads share them.
std::vector<traces::RankSets> analyseRanks(const TimelineData& data, TracksByRank& by_rank,
                                           const std::vector<std::string>& strings) {
  traces::CategoryTable categories(traces::Classifier(), strings);
  std::vector<traces::RankSets> rank_sets(data.ranks.size());
  auto analyse = [&](size_t first, size_t step) {
    for (size_t r = first; r < data.ranks.size(); r += step)
      rank_sets[r] = traces::buildRankSets(by_rank[data.ranks[r].rank], categories);
  };
  {
    std::thread helper(analyse, 1, 2);
    analyse(0, 2);
    helper.join();
  }
  return rank_sets;
}

// A rank's overlap lane and totals from its interval sets, and its
// breakdown over its whole span and over its recorded steps.
RankBreakdown summariseRank(RankLanes& lanes, const traces::RankSets& sets,
                            const std::vector<const traces::Track*>& rank_tracks,
                            const std::vector<traces::StepRow>& step_rows) {
  lanes.overlap = laneFrom(sets.overlap, sets.exposed_comm);
  lanes.overlap.finalize();
  lanes.compute_ns = sets.compute.length();
  lanes.comm_ns = sets.comm.length();
  lanes.hidden_ns = sets.overlap.length();
  lanes.exposed_ns = sets.exposed_comm.length();
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const auto* t : rank_tracks)
    if (t->size()) {
      lo = std::min(lo, t->start_ns.front());
      for (int64_t e : t->end_ns) hi = std::max(hi, e);
    }
  RankBreakdown b{lanes.rank, traces::breakdownOf(sets, lo, hi), {}, 0};
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const auto& s : step_rows)
    if (s.rank == lanes.rank) {
      first = std::min(first, s.start_ns);
      last = std::max(last, s.end_ns);
      ++b.steps;
    }
  if (b.steps > 0) {
    b.in_steps = traces::breakdownOf(sets, first, last);
    // The rank's header describes its steps, as tandem report does.
    lanes.compute_ns = b.in_steps.compute_ns;
    lanes.comm_ns = b.in_steps.comm_ns;
    lanes.hidden_ns = b.in_steps.overlap_ns;
    lanes.exposed_ns = b.in_steps.exposed_comm_ns;
    lanes.totals_in_steps = true;
  }
  return b;
}

}  // namespace

LoadedRun loadRun(traces::TraceReader& reader, int64_t run, const LoadOptions& options) {
  LoadedRun out;
  out.path = reader.path();
  if (run < 0) run = reader.defaultRunId();
  out.info = reader.run(run);
  out.facts = reader.planFacts(run, /*with_plan=*/false);
  out.schema_version = reader.schemaVersion();
  for (traces::StatRow& st : reader.stats(run))
    if (st.severity != traces::Severity::Info) out.warnings.push_back(std::move(st));
  auto data = std::make_shared<TimelineData>();
  data->run_label = describeRun(out.info);
  data->symbols = reader.strings();
  data->names.reserve(data->symbols.size());
  for (const std::string& s : data->symbols) data->names.push_back(traces::compactName(s));

  StreamRows streams;
  for (const auto& s : reader.streams(run)) streams[{s.rank, s.stream}] = s;
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto t0 = Clock::now();
  std::vector<traces::Track> tracks = readTracks(reader, run, options);
  out.timings.read_s = seconds(t0);
  report(options, kReadEndPct, "building the timeline");
  t0 = Clock::now();
  size_t total = 0;
  for (const auto& t : tracks) total += t.size();
  if (total == 0)
    throw LoadError(reader.path() + ": run " + std::to_string(run) + " has no activities to show");

  TracksByRank by_rank = addTimelineTracks(*data, tracks, streams);
  addTaskFacts(*data, reader, run, tracks);
  const std::vector<traces::StepRow> step_rows = reader.steps(run);
  addStepMarks(*data, step_rows);

  report(options, kModelPct, "building the timeline");
  data->finalize(/*compute_overlap=*/false);
  attachCounters(*data, reader.counters(run));
  out.timings.model_s = seconds(t0);
  t0 = Clock::now();
  report(options, kAnalysisPct, "computing overlap and breakdown");

  const std::vector<traces::RankSets> rank_sets = analyseRanks(*data, by_rank, reader.strings());
  for (size_t r = 0; r < data->ranks.size(); ++r) {
    auto& lanes = data->ranks[r];
    out.breakdown.push_back(summariseRank(lanes, rank_sets[r], by_rank[lanes.rank], step_rows));
  }
  out.timings.analysis_s = seconds(t0);
  out.timeline = std::move(data);
  report(options, 100, "done");
  return out;
}

std::string traceDatabaseFor(const std::string& path) {
  try {
    traces::TraceReader probe(path);
    return path;
  } catch (const traces::TraceError& not_a_trace) {
    namespace fs = std::filesystem;
    traces::ImportFormat format;
    try {
      format = traces::detectImportFormat(path);
    } catch (const traces::TraceError&) {
      throw not_a_trace;
    }
    // One import per file version, kept in the temp folder and reused.
    const fs::path dir = fs::temp_directory_path() / "tandem-gui-imports";
    fs::create_directories(dir);
    const auto stamp = fs::last_write_time(path).time_since_epoch().count();
    const size_t key = std::hash<std::string>{}(fs::absolute(path).string() + "@" + std::to_string(stamp));
    const fs::path out = dir / (fs::path(path).filename().string() + "-" + std::to_string(key) + ".sqlite");
    if (fs::exists(out)) return out.string();
    try {
      traces::AtomicOutput output(out.string());
      {
        traces::TraceWriter writer(output.tempPath());
        traces::importTrace(path, writer, format);
      }
      output.commit();
    } catch (const traces::TraceError&) {
      // A SQLite file that is neither ours nor an Nsight Systems export is
      // best described by the store's own error; JSON by the importer's.
      if (format == traces::ImportFormat::Nsys) throw not_a_trace;
      throw;
    }
    return out.string();
  }
}

LoadedRun loadRunFile(const std::string& path, int64_t run, const LoadOptions& options) {
  report(options, 0, "opening " + std::filesystem::path(path).filename().string());
  traces::TraceReader reader(traceDatabaseFor(path));
  return loadRun(reader, run, options);
}

std::vector<RankBreakdown> breakdownFromTimeline(const TimelineData& data) {
  std::vector<RankBreakdown> out;
  for (const auto& r : data.ranks) {
    traces::Breakdown b;
    b.span_ns = r.span_ns;
    b.compute_ns = r.compute_ns;
    b.comm_ns = r.comm_ns;
    b.overlap_ns = r.hidden_ns;
    b.exposed_comm_ns = r.exposed_ns;
    b.busy_ns = r.compute_ns + r.exposed_ns;
    b.idle_ns = std::max<int64_t>(0, b.span_ns - b.busy_ns);
    b.overlap_pct = r.comm_ns > 0 ? 100.0 * double(r.hidden_ns) / double(r.comm_ns) : 0.0;
    for (int id : r.tracks) {
      const Track& t = data.tracks[size_t(id)];
      for (size_t i = 0; i < t.size(); ++i)
        if (t.phase[i] == uint8_t(Phase::Recompute)) b.recompute_ns += t.end_ns[i] - t.start_ns[i];
    }
    b.recompute_share_pct = b.span_ns > 0 ? 100.0 * double(b.recompute_ns) / double(b.span_ns) : 0.0;
    out.push_back({r.rank, b, {}, 0});
  }
  return out;
}

}  // namespace tandem::gui
