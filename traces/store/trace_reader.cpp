#include "traces/store/trace_reader.h"

#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <thread>

#include "traces/store/schema.h"
#include "traces/store/sqlite_util.h"

namespace tandem::traces {

namespace {

const char* kTrackColumns =
    "start_ns, end_ns, kind, name, task_id, phase, layer, micro_batch, correlation_id, bytes, flops";

const char* kTrackColumnsLean = "start_ns, end_ns, kind, name, task_id, phase, correlation_id, bytes, flops";

// Appends the current row of a kTrackColumnsLean query.
void appendLeanRow(Track& t, const sql::Stmt& s, int first) {
  t.start_ns.push_back(s.colInt(first + 0));
  t.end_ns.push_back(s.colInt(first + 1));
  t.kind.push_back(static_cast<ActivityKind>(s.colInt(first + 2)));
  t.name.push_back(static_cast<int32_t>(s.colInt(first + 3)));
  t.task_id.push_back(s.colInt(first + 4));
  t.phase.push_back(static_cast<Phase>(s.colInt(first + 5)));
  t.correlation_id.push_back(s.colInt(first + 6));
  t.bytes.push_back(s.colInt(first + 7));
  t.flops.push_back(s.colDouble(first + 8));
}

// Appends the current row (columns as kTrackColumns, starting at `first`).
void appendRow(Track& t, const sql::Stmt& s, int first) {
  t.start_ns.push_back(s.colInt(first + 0));
  t.end_ns.push_back(s.colInt(first + 1));
  t.kind.push_back(static_cast<ActivityKind>(s.colInt(first + 2)));
  t.name.push_back(static_cast<int32_t>(s.colInt(first + 3)));
  t.task_id.push_back(s.colInt(first + 4));
  t.phase.push_back(static_cast<Phase>(s.colInt(first + 5)));
  t.layer.push_back(static_cast<int32_t>(s.colInt(first + 6)));
  t.micro_batch.push_back(static_cast<int32_t>(s.colInt(first + 7)));
  t.correlation_id.push_back(s.colInt(first + 8));
  t.bytes.push_back(s.colInt(first + 9));
  t.flops.push_back(s.colDouble(first + 10));
}

// A row's time and duration as the analyses may use them: both times
// within the store's range and the duration's magnitude no more than it.
// Returns the duration's magnitude, or -1 when the row is out of range.
int64_t durationInRange(int64_t start_ns, int64_t end_ns) {
  int64_t d = 0;
  if (!traceTimeInRange(start_ns) || !traceTimeInRange(end_ns) || __builtin_sub_overflow(end_ns, start_ns, &d))
    return -1;
  d = d < 0 ? -d : d;
  return d <= kMaxTraceTimeNs ? d : -1;
}

// Sums of durations (or of spans) over rows a reader hands out, bounded by
// the store's range so that no analysis's sum over them can overflow: a
// real trace stays far below (2^62 ns are 146 years).
class DurationSum {
 public:
  // False once the sum leaves the range.
  bool add(int64_t magnitude) { return !__builtin_add_overflow(sum_, magnitude, &sum_) && sum_ <= kMaxTraceTimeNs; }

 private:
  int64_t sum_ = 0;
};

std::string outOfRange(const char* what, int64_t start_ns, int64_t end_ns) {
  return fmt::format("{} from {} to {} ns is outside the trace's range (times within +-2^62 ns, durations up to "
                     "2^62 ns; the trace is damaged)",
                     what, start_ns, end_ns);
}

std::string sumOutOfRange(const char* what) {
  return fmt::format("the {} add up to more than 2^62 ns (the trace is damaged)", what);
}

}  // namespace

size_t Track::lowerBound(int64_t t_ns) const {
  return static_cast<size_t>(std::lower_bound(start_ns.begin(), start_ns.end(), t_ns) - start_ns.begin());
}

struct TraceReader::Impl {
  sql::Db db;
  std::vector<std::string> strings;
  bool strings_loaded = false;
  int schema_version = 0;
  bool kernel_resources = false;  // the file has the kernel_resources table

  explicit Impl(const std::string& path) : db(checked(path), SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX) {
    schema_version = prepareSchema(db, /*for_write=*/false);
    kernel_resources = hasTable(db, "kernel_resources");
  }

  // The runs' columns; a schema-1 file (read as it is: a reader never
  // migrates) has neither the topology text nor the plan format.
  std::string runQuery() const {
    return schema_version >= 2
               ? "SELECT id, kind, name, job_yaml, job_hash, topology, host, devices_json, tool_version, "
                 "created_unix_ns, world_size, topology_yaml, plan_format FROM runs"
               : "SELECT id, kind, name, job_yaml, job_hash, topology, host, devices_json, tool_version, "
                 "created_unix_ns, world_size, NULL, NULL FROM runs";
  }

  static const std::string& checked(const std::string& path) {
    if (!std::filesystem::exists(path)) throw TraceError(fmt::format("{}: no such trace file", path));
    checkSqliteHeader(path);
    return path;
  }

  void loadStrings() {
    if (strings_loaded) return;
    // The writer numbers strings from 1 without gaps; ids far beyond the
    // count mean a damaged table (and would size the lookup by the id).
    sql::Stmt range(db, "SELECT COUNT(*), MIN(id), MAX(id) FROM strings");
    if (range.step() && range.colInt(0) > 0) {
      const int64_t count = range.colInt(0), lo = range.colInt(1), hi = range.colInt(2);
      if (lo < 0 || hi > 2 * count + 16)
        throw TraceError(fmt::format("{}: the strings table is damaged: ids {} to {} for {} strings", db.path(), lo,
                                     hi, count));
    }
    sql::Stmt s(db, "SELECT id, value FROM strings ORDER BY id");
    while (s.step()) {
      auto id = static_cast<size_t>(s.colInt(0));
      if (id >= strings.size()) strings.resize(id + 1);
      strings[id] = s.colText(1);
    }
    strings_loaded = true;
  }

  // Analyses index tables by an activity's kind, phase and name and add up
  // its times: a value outside them (a damaged file) is an error naming the
  // run and track, not a read past the end or an overflow. `durations`
  // gathers the run's durations when the caller checks a whole run.
  void checkTrack(const Track& t, int64_t run, DurationSum* durations = nullptr) {
    loadStrings();
    DurationSum own;
    if (durations == nullptr) durations = &own;
    for (size_t i = 0; i < t.size(); ++i) {
      const auto where = [&] { return fmt::format("{}: run {}, rank {} stream {}", db.path(), run, t.rank, t.stream); };
      const int64_t d = durationInRange(t.start_ns[i], t.end_ns[i]);
      if (d < 0)
        throw TraceError(fmt::format("{}: {}", where(), outOfRange("an activity", t.start_ns[i], t.end_ns[i])));
      if (!durations->add(d))
        throw TraceError(fmt::format("{}: {}", where(), sumOutOfRange("activities' durations")));
      if (t.name[i] < 0 || size_t(t.name[i]) >= strings.size())
        throw TraceError(fmt::format("{}: an activity names string {}, which the strings table lacks (the trace is "
                                     "damaged)",
                                     where(), t.name[i]));
      if (uint8_t(t.kind[i]) > uint8_t(ActivityKind::Host))
        throw TraceError(fmt::format("{}: an activity has kind {}, which is not an activity kind (the trace is "
                                     "damaged)",
                                     where(), int(t.kind[i])));
      if (uint8_t(t.phase[i]) > uint8_t(Phase::Data))
        throw TraceError(fmt::format("{}: an activity has phase {}, which is not a phase (the trace is damaged)",
                                     where(), int(t.phase[i])));
    }
  }

  // One row of steps, ranges, counters or activities read on its own.
  void checkRow(int64_t run, int rank, const char* what, int64_t start_ns, int64_t end_ns, DurationSum& durations,
                const char* sum_name) {
    const int64_t d = durationInRange(start_ns, end_ns);
    if (d < 0)
      throw TraceError(
          fmt::format("{}: run {}, rank {}: {}", db.path(), run, rank, outOfRange(what, start_ns, end_ns)));
    if (!durations.add(d)) throw TraceError(fmt::format("{}: run {}: {}", db.path(), run, sumOutOfRange(sum_name)));
  }

  RunInfo runFrom(const sql::Stmt& s) {
    RunInfo r;
    r.id = s.colInt(0);
    r.kind = parseRunKind(s.colText(1)).value_or(RunKind::Imported);
    r.name = s.colText(2);
    r.job_yaml = s.colText(3);
    r.job_hash = s.colText(4);
    r.topology = s.colText(5);
    r.host = s.colText(6);
    r.devices_json = s.colText(7);
    r.tool_version = s.colText(8);
    r.created_unix_ns = s.colInt(9);
    r.world_size = static_cast<int>(s.colInt(10));
    r.topology_yaml = s.colText(11);
    r.plan_format = static_cast<int>(s.colInt(12));
    // Schema 1 kept a topology file's whole text in the name's column.
    if (r.topology_yaml.empty() && r.topology.find('\n') != std::string::npos) std::swap(r.topology, r.topology_yaml);
    return r;
  }
};

TraceReader::TraceReader(const std::string& path) : impl_(std::make_unique<Impl>(path)) {}
TraceReader::~TraceReader() = default;

const std::string& TraceReader::path() const { return impl_->db.path(); }

int TraceReader::schemaVersion() const { return impl_->schema_version; }

std::vector<RunInfo> TraceReader::runs() {
  sql::Stmt s(impl_->db, impl_->runQuery() + " ORDER BY id");
  std::vector<RunInfo> out;
  while (s.step()) out.push_back(impl_->runFrom(s));
  return out;
}

RunInfo TraceReader::run(int64_t id) {
  sql::Stmt s(impl_->db, impl_->runQuery() + " WHERE id=?");
  s.bind(1, id);
  if (s.step()) return impl_->runFrom(s);
  std::string ids;
  for (const auto& r : runs()) ids += (ids.empty() ? "" : ", ") + std::to_string(r.id);
  throw TraceError(fmt::format("{}: no run with id {} (runs in the file: {})", path(), id,
                               ids.empty() ? "none" : ids));
}

int64_t TraceReader::defaultRunId() {
  int64_t id = impl_->db.queryInt("SELECT MAX(id) FROM runs", -1);
  if (id <= 0) throw TraceError(fmt::format("{}: the trace file holds no runs", path()));
  return id;
}

std::vector<StreamRow> TraceReader::streams(int64_t run) {
  sql::Stmt s(impl_->db, "SELECT rank, stream, kind, name, device FROM streams WHERE run=? ORDER BY rank, stream");
  s.bind(1, run);
  std::vector<StreamRow> out;
  while (s.step()) {
    StreamRow r;
    r.rank = static_cast<int>(s.colInt(0));
    r.stream = static_cast<int>(s.colInt(1));
    r.kind = parseStreamKind(s.colText(2)).value_or(StreamKind::Compute);
    r.name = s.colText(3);
    r.device = static_cast<int>(s.colInt(4));
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<TrackInfo> TraceReader::tracks(int64_t run) {
  sql::Stmt s(impl_->db,
              "SELECT rank, stream, activity_count, min_start_ns, max_end_ns, max_duration_ns FROM track_stats "
              "WHERE run=? ORDER BY rank, stream");
  s.bind(1, run);
  std::vector<TrackInfo> out;
  while (s.step()) {
    out.push_back({static_cast<int>(s.colInt(0)), static_cast<int>(s.colInt(1)), s.colInt(2), s.colInt(3),
                   s.colInt(4), s.colInt(5)});
  }
  return out;
}

int64_t TraceReader::activityCount(int64_t run) {
  sql::Stmt s(impl_->db, "SELECT COALESCE(SUM(count), 0) FROM activity_chunks WHERE run=?");
  s.bind(1, run);
  return s.step() ? s.colInt(0) : 0;
}

namespace {

struct Chunk {
  int rank, stream;
  int64_t first_id, last_id, min_start_ns, max_start_ns;
};

// Puts a track back in start order when its chunks overlap in time (a writer
// that emitted a track's activities out of order across batches).
void sortIfNeeded(Track& t, bool needed) {
  if (!needed) return;
  std::vector<size_t> order(t.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return t.start_ns[a] < t.start_ns[b]; });
  auto permute = [&](auto& v) {
    auto copy = v;
    for (size_t i = 0; i < order.size(); ++i) v[i] = copy[order[i]];
  };
  permute(t.start_ns), permute(t.end_ns), permute(t.kind), permute(t.name), permute(t.task_id);
  permute(t.phase), permute(t.correlation_id), permute(t.bytes);
  if (!t.layer.empty()) permute(t.layer), permute(t.micro_batch);
  permute(t.flops);
}

void reserve(Track& t, size_t n, bool with_details) {
  t.start_ns.reserve(n), t.end_ns.reserve(n), t.kind.reserve(n), t.name.reserve(n);
  t.task_id.reserve(n), t.phase.reserve(n);
  if (with_details) t.layer.reserve(n), t.micro_batch.reserve(n);
  t.correlation_id.reserve(n), t.bytes.reserve(n), t.flops.reserve(n);
}

}  // namespace

static std::vector<Chunk> chunksOf(sql::Db& db, int64_t run, int rank, int stream, int64_t t0, int64_t t1) {
  sql::Stmt s(db,
              "SELECT rank, stream, first_id, last_id, min_start_ns, max_start_ns FROM activity_chunks "
              "WHERE run=? AND rank=? AND stream=? AND max_end_ns > ? AND min_start_ns < ? ORDER BY first_id");
  s.bind(1, run);
  s.bind(2, rank);
  s.bind(3, stream);
  s.bind(4, t0);
  s.bind(5, t1);
  std::vector<Chunk> out;
  while (s.step())
    out.push_back({static_cast<int>(s.colInt(0)), static_cast<int>(s.colInt(1)), s.colInt(2), s.colInt(3), s.colInt(4),
                   s.colInt(5)});
  return out;
}

static Track loadChunks(sql::Db& db, int rank, int stream, const std::vector<Chunk>& chunks, int64_t t0, int64_t t1) {
  sql::Stmt s(db, fmt::format("SELECT {} FROM activities WHERE id BETWEEN ? AND ? AND start_ns < ? AND end_ns > ? "
                              "ORDER BY id",
                              kTrackColumns));
  Track t;
  t.rank = rank;
  t.stream = stream;
  bool unsorted = false;
  int64_t prev_max_start = INT64_MIN;
  for (const auto& c : chunks) {
    if (c.min_start_ns < prev_max_start) unsorted = true;
    prev_max_start = std::max(prev_max_start, c.max_start_ns);
    s.bind(1, c.first_id);
    s.bind(2, c.last_id);
    s.bind(3, t1);
    s.bind(4, t0);
    while (s.step()) appendRow(t, s, 0);
    s.reset();
  }
  sortIfNeeded(t, unsorted);
  return t;
}

Track TraceReader::loadTrack(int64_t run, int rank, int stream) {
  auto chunks = chunksOf(impl_->db, run, rank, stream, INT64_MIN, INT64_MAX);
  // A zero-length activity at INT64_MIN cannot exist; every real one passes.
  Track t = loadChunks(impl_->db, rank, stream, chunks, INT64_MIN, INT64_MAX);
  impl_->checkTrack(t, run);
  return t;
}

Track TraceReader::loadWindow(int64_t run, int rank, int stream, int64_t t0_ns, int64_t t1_ns) {
  auto chunks = chunksOf(impl_->db, run, rank, stream, t0_ns, t1_ns);
  Track t = loadChunks(impl_->db, rank, stream, chunks, t0_ns, t1_ns);
  impl_->checkTrack(t, run);
  return t;
}

std::vector<Track> TraceReader::loadRun(int64_t run, bool with_details) {
  // One pass over the run's id range; rows go to their track, then tracks
  // whose chunks overlap in time are re-sorted.
  std::map<std::pair<int, int>, size_t> index;
  std::vector<Track> out;
  std::vector<int64_t> prev_max_start;
  std::vector<char> unsorted;
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  {
    sql::Stmt c(impl_->db,
                "SELECT rank, stream, SUM(count), MIN(first_id), MAX(last_id) FROM activity_chunks WHERE run=? "
                "GROUP BY rank, stream ORDER BY rank, stream");
    c.bind(1, run);
    while (c.step()) {
      Track t;
      t.rank = static_cast<int>(c.colInt(0));
      t.stream = static_cast<int>(c.colInt(1));
      reserve(t, static_cast<size_t>(c.colInt(2)), with_details);
      lo = std::min(lo, c.colInt(3));
      hi = std::max(hi, c.colInt(4));
      index[{t.rank, t.stream}] = out.size();
      out.push_back(std::move(t));
    }
    sql::Stmt order(impl_->db,
                    "SELECT rank, stream, min_start_ns, max_start_ns FROM activity_chunks WHERE run=? "
                    "ORDER BY rank, stream, first_id");
    order.bind(1, run);
    prev_max_start.assign(out.size(), INT64_MIN);
    unsorted.assign(out.size(), 0);
    while (order.step()) {
      size_t k = index[{static_cast<int>(order.colInt(0)), static_cast<int>(order.colInt(1))}];
      if (order.colInt(2) < prev_max_start[k]) unsorted[k] = 1;
      prev_max_start[k] = std::max(prev_max_start[k], order.colInt(3));
    }
  }
  if (out.empty()) return out;
  // Large runs are read by two threads, each with its own connection over
  // half of the id range; the second half is appended after the first, so
  // every track keeps id order.
  const int64_t kParallelRows = 200'000;
  int workers = hi - lo + 1 >= kParallelRows && std::thread::hardware_concurrency() > 1 ? 2 : 1;
  std::vector<std::vector<Track>> partial(static_cast<size_t>(workers - 1));
  auto scan = [&](sql::Db& db, std::vector<Track>& into, int64_t from, int64_t to) {
    sql::Stmt s(db, fmt::format("SELECT rank, stream, {} FROM activities WHERE id BETWEEN ? AND ? AND run=? "
                                "ORDER BY id",
                                with_details ? kTrackColumns : kTrackColumnsLean));
    s.bind(1, from);
    s.bind(2, to);
    s.bind(3, run);
    Track* cur = nullptr;
    int cur_rank = INT32_MIN, cur_stream = INT32_MIN;
    while (s.step()) {
      int rank = static_cast<int>(s.colInt(0));
      int stream = static_cast<int>(s.colInt(1));
      if (rank != cur_rank || stream != cur_stream || !cur) {
        auto it = index.find({rank, stream});
        if (it == index.end()) continue;  // a row outside every chunk (cannot happen); skip defensively
        cur = &into[it->second];
        cur_rank = rank;
        cur_stream = stream;
      }
      if (with_details)
        appendRow(*cur, s, 2);
      else
        appendLeanRow(*cur, s, 2);
    }
  };
  int64_t split = workers == 1 ? hi : lo + (hi - lo) / 2;
  std::exception_ptr failure;
  std::thread helper;
  if (workers == 2) {
    partial[0].resize(out.size());
    helper = std::thread([&] {
      try {
        sql::Db second(impl_->db.path(), SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX);
        scan(second, partial[0], split + 1, hi);
      } catch (...) {
        failure = std::current_exception();
      }
    });
  }
  try {
    scan(impl_->db, out, lo, split);
  } catch (...) {
    if (helper.joinable()) helper.join();
    throw;
  }
  if (helper.joinable()) helper.join();
  if (failure) std::rethrow_exception(failure);
  for (auto& part : partial) {
    for (size_t k = 0; k < out.size(); ++k) {
      auto append = [](auto& dst, auto& src) { dst.insert(dst.end(), src.begin(), src.end()); };
      Track& d = out[k];
      Track& p = part[k];
      append(d.start_ns, p.start_ns), append(d.end_ns, p.end_ns), append(d.kind, p.kind), append(d.name, p.name);
      append(d.task_id, p.task_id), append(d.phase, p.phase), append(d.layer, p.layer);
      append(d.micro_batch, p.micro_batch), append(d.correlation_id, p.correlation_id), append(d.bytes, p.bytes);
      append(d.flops, p.flops);
      p = Track();
    }
  }
  DurationSum durations, spans;
  std::map<int, std::pair<int64_t, int64_t>> rank_span;  // first start, last end
  for (size_t k = 0; k < out.size(); ++k) {
    sortIfNeeded(out[k], unsorted[k]);
    const Track& t = out[k];
    impl_->checkTrack(t, run, &durations);
    if (t.size() == 0) continue;
    auto& span = rank_span.try_emplace(t.rank, t.start_ns.front(), t.end_ns.front()).first->second;
    for (size_t i = 0; i < t.size(); ++i) {
      span.first = std::min(span.first, t.start_ns[i]);
      span.second = std::max(span.second, t.end_ns[i]);
    }
  }
  // Breakdowns add the ranks' spans up.
  for (const auto& [rank, span] : rank_span) {
    const int64_t length = durationInRange(span.first, span.second);
    if (length < 0 || !spans.add(length))
      throw TraceError(fmt::format("{}: run {}: {}", path(), run, sumOutOfRange("ranks' time spans")));
  }
  return out;
}

void TraceReader::forEachActivity(int64_t run, const std::function<void(const ActivityRow&)>& fn) {
  impl_->loadStrings();
  const std::string resources =
      impl_->kernel_resources
          ? ", k.registers_per_thread, k.shared_memory_bytes, k.cluster_x, k.cluster_y, k.cluster_z "
            "FROM activities a LEFT JOIN activity_geometry g ON g.activity = a.id "
            "LEFT JOIN kernel_resources k ON k.activity = a.id "
          : ", NULL, NULL, NULL, NULL, NULL FROM activities a LEFT JOIN activity_geometry g ON g.activity = a.id ";
  sql::Stmt s(impl_->db,
              "SELECT a.rank, a.device, a.stream, a.start_ns, a.end_ns, a.kind, a.name, a.task_id, a.phase, a.layer, "
              "a.micro_batch, a.correlation_id, a.bytes, a.flops, g.grid_x, g.grid_y, g.grid_z, g.block_x, g.block_y, "
              "g.block_z" + resources + "WHERE a.run=? ORDER BY a.rank, a.stream, a.start_ns, a.id");
  s.bind(1, run);
  ActivityRow r;
  DurationSum durations;
  while (s.step()) {
    r.rank = static_cast<int>(s.colInt(0));
    r.device = static_cast<int>(s.colInt(1));
    r.stream = static_cast<int>(s.colInt(2));
    r.start_ns = s.colInt(3);
    r.end_ns = s.colInt(4);
    impl_->checkRow(run, r.rank, "an activity", r.start_ns, r.end_ns, durations, "activities' durations");
    r.kind = static_cast<ActivityKind>(s.colInt(5));
    r.name = string(s.colInt(6));
    r.task_id = s.colInt(7);
    r.phase = static_cast<Phase>(s.colInt(8));
    r.layer = static_cast<int>(s.colInt(9));
    r.micro_batch = static_cast<int>(s.colInt(10));
    r.correlation_id = s.colInt(11);
    r.bytes = s.colInt(12);
    r.flops = s.colDouble(13);
    if (s.colIsNull(14)) {
      r.geometry.reset();
    } else {
      r.geometry = LaunchGeometry{static_cast<int>(s.colInt(14)), static_cast<int>(s.colInt(15)),
                                  static_cast<int>(s.colInt(16)), static_cast<int>(s.colInt(17)),
                                  static_cast<int>(s.colInt(18)), static_cast<int>(s.colInt(19))};
      if (!s.colIsNull(20)) {
        r.geometry->registers_per_thread = static_cast<int>(s.colInt(20));
        r.geometry->shared_memory_bytes = static_cast<int>(s.colInt(21));
        r.geometry->cluster_x = static_cast<int>(s.colInt(22));
        r.geometry->cluster_y = static_cast<int>(s.colInt(23));
        r.geometry->cluster_z = static_cast<int>(s.colInt(24));
      }
    }
    fn(r);
  }
}

std::vector<StepRow> TraceReader::steps(int64_t run) {
  sql::Stmt s(impl_->db, "SELECT rank, step, start_ns, end_ns FROM steps WHERE run=? ORDER BY rank, step");
  s.bind(1, run);
  std::vector<StepRow> out;
  DurationSum durations;
  while (s.step()) {
    out.push_back({static_cast<int>(s.colInt(0)), static_cast<int>(s.colInt(1)), s.colInt(2), s.colInt(3)});
    impl_->checkRow(run, out.back().rank, "a step", out.back().start_ns, out.back().end_ns, durations, "steps");
  }
  return out;
}

std::vector<RangeRow> TraceReader::ranges(int64_t run) {
  sql::Stmt s(impl_->db,
              "SELECT rank, start_ns, end_ns, name, depth, domain FROM ranges WHERE run=? "
              "ORDER BY rank, start_ns, seq");
  s.bind(1, run);
  std::vector<RangeRow> out;
  DurationSum durations;
  while (s.step()) {
    out.push_back({static_cast<int>(s.colInt(0)), s.colInt(1), s.colInt(2), string(s.colInt(3)),
                   static_cast<int>(s.colInt(4)), s.colText(5)});
    impl_->checkRow(run, out.back().rank, "a range", out.back().start_ns, out.back().end_ns, durations, "ranges");
  }
  return out;
}

std::vector<CounterRow> TraceReader::counters(int64_t run) {
  sql::Stmt s(impl_->db,
              "SELECT rank, name, ts_ns, value FROM counters WHERE run=? ORDER BY rank, name, ts_ns, seq");
  s.bind(1, run);
  std::vector<CounterRow> out;
  DurationSum none;
  while (s.step()) {
    out.push_back({static_cast<int>(s.colInt(0)), string(s.colInt(1)), s.colInt(2), s.colDouble(3)});
    impl_->checkRow(run, out.back().rank, "a counter sample", out.back().ts_ns, out.back().ts_ns, none, "");
  }
  return out;
}

std::vector<StatRow> TraceReader::stats(int64_t run) {
  sql::Stmt s(impl_->db, "SELECT name, value, severity, description FROM stats WHERE run=? ORDER BY name");
  s.bind(1, run);
  std::vector<StatRow> out;
  while (s.step())
    out.push_back({s.colText(0), s.colInt(1), parseSeverity(s.colText(2)).value_or(Severity::Info), s.colText(3)});
  return out;
}

std::vector<PlanTaskRow> TraceReader::planTasks(int64_t run) {
  sql::Stmt s(impl_->db,
              "SELECT rank, task_id, name, op, phase, layer, micro_batch, stream, flops, bytes FROM plan_tasks "
              "WHERE run=? ORDER BY rank, task_id");
  s.bind(1, run);
  std::vector<PlanTaskRow> out;
  std::map<std::pair<int, int64_t>, size_t> index;
  while (s.step()) {
    PlanTaskRow t;
    t.rank = static_cast<int>(s.colInt(0));
    t.task_id = s.colInt(1);
    t.name = string(s.colInt(2));
    t.op = s.colText(3);
    t.phase = static_cast<Phase>(s.colInt(4));
    t.layer = static_cast<int>(s.colInt(5));
    t.micro_batch = static_cast<int>(s.colInt(6));
    t.stream = static_cast<int>(s.colInt(7));
    t.flops = s.colDouble(8);
    t.bytes = s.colInt(9);
    index[{t.rank, t.task_id}] = out.size();
    out.push_back(std::move(t));
  }
  sql::Stmt d(impl_->db,
              "SELECT rank, task_id, dep_task_id FROM plan_deps WHERE run=? ORDER BY rank, task_id, dep_task_id");
  d.bind(1, run);
  while (d.step()) {
    auto it = index.find({static_cast<int>(d.colInt(0)), d.colInt(1)});
    if (it != index.end()) out[it->second].deps.push_back(d.colInt(2));
  }
  return out;
}

std::vector<CollectiveRow> TraceReader::collectives(int64_t run) {
  sql::Stmt s(impl_->db,
              "SELECT rank, task_id, op, grp, bytes, start_ns, end_ns FROM collectives WHERE run=? "
              "ORDER BY rank, start_ns");
  s.bind(1, run);
  std::vector<CollectiveRow> out;
  DurationSum durations;
  while (s.step()) {
    out.push_back({static_cast<int>(s.colInt(0)), s.colInt(1), s.colText(2), s.colText(3), s.colInt(4), s.colInt(5),
                   s.colInt(6)});
    impl_->checkRow(run, out.back().rank, "a collective", out.back().start_ns, out.back().end_ns, durations,
                    "collectives' durations");
  }
  return out;
}

std::vector<ClockRow> TraceReader::clocks(int64_t run) {
  sql::Stmt s(impl_->db,
              "SELECT rank, source, cupti_ns, realtime_ns, monotonic_ns, offset_ns FROM clocks WHERE run=? "
              "ORDER BY rank");
  s.bind(1, run);
  std::vector<ClockRow> out;
  while (s.step())
    out.push_back({static_cast<int>(s.colInt(0)), s.colText(1), s.colInt(2), s.colInt(3), s.colInt(4), s.colInt(5)});
  return out;
}

const std::string& TraceReader::string(int64_t id) {
  impl_->loadStrings();
  static const std::string empty;
  if (id < 0 || static_cast<size_t>(id) >= impl_->strings.size()) return empty;
  return impl_->strings[static_cast<size_t>(id)];
}

const std::vector<std::string>& TraceReader::strings() {
  impl_->loadStrings();
  return impl_->strings;
}

PlanFacts TraceReader::planFacts(int64_t run, bool with_plan) {
  PlanFacts f;
  if (impl_->schema_version < 2) return f;
  auto& db = impl_->db;
  sql::Stmt r(db, "SELECT layer, policy, bytes_kept, bytes_saved, extra_flops, extra_ns FROM run_recompute "
                  "WHERE run=? ORDER BY layer");
  r.bind(1, run);
  while (r.step())
    f.recompute.push_back({static_cast<int>(r.colInt(0)), r.colText(1), r.colInt(2), r.colInt(3), r.colDouble(4),
                           r.colIsNull(5) ? int64_t(-1) : r.colInt(5)});
  sql::Stmt m(db, "SELECT program, first_rank, rank_count, arena_bytes, peak_bytes, lower_bound_bytes, "
                  "activation_peak_bytes, gpu_run_bytes FROM run_memory WHERE run=? ORDER BY program");
  m.bind(1, run);
  while (m.step()) {
    MemoryRow row;
    row.program = static_cast<int>(m.colInt(0));
    row.first_rank = static_cast<int>(m.colInt(1));
    row.rank_count = static_cast<int>(m.colInt(2));
    row.arena_bytes = m.colInt(3);
    row.peak_bytes = m.colInt(4);
    row.lower_bound_bytes = m.colInt(5);
    row.activation_peak_bytes = m.colInt(6);
    row.gpu_run_bytes = m.colInt(7);
    f.memory.push_back(std::move(row));
  }
  sql::Stmt c(db, "SELECT program, category, bytes FROM run_memory_categories WHERE run=? ORDER BY program, category");
  c.bind(1, run);
  while (c.step())
    for (MemoryRow& row : f.memory)
      if (row.program == c.colInt(0)) row.by_category.emplace_back(c.colText(1), c.colInt(2));
  if (!with_plan) return f;
  sql::Stmt p(db, "SELECT encoding, plan FROM run_plans WHERE run=?");
  p.bind(1, run);
  if (p.step()) {
    f.plan_encoding = p.colText(0);
    f.plan_blob = p.colBlob(1);
  }
  return f;
}

}  // namespace tandem::traces
