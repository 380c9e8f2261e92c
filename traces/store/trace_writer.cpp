#include "traces/store/trace_writer.h"

#include <fmt/core.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <future>
#include <map>
#include <unordered_map>

#include "traces/store/schema.h"
#include "traces/store/sqlite_util.h"

namespace tandem::traces {

namespace {

// Lets the intern table look up a string_view without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Per-track extents, kept in memory and written with each batch so that
// time-window queries can bound how far back a long activity may start.
struct TrackExtent {
  uint32_t index = 0;  // dense, in order of the track's first row in the run
  int64_t count = 0;
  int64_t min_start_ns = INT64_MAX;
  int64_t max_end_ns = INT64_MIN;
  int64_t max_duration_ns = 0;
};

// An activity waiting for its batch: numbers only, the name already interned.
struct PendingActivity {
  uint32_t track;  // TrackExtent::index
  int32_t rank, device, stream, layer, micro_batch;
  uint8_t kind, phase;
  int32_t geometry;  // index into the pending geometry, -1 if none
  int64_t start_ns, end_ns, seq, name, task_id, correlation_id, bytes;
  double flops;
};

// Rows per multi-row INSERT: SQLite's per-statement cost is paid once for
// all. 1M activities on the 2-core CPU machine: 32 rows 1.1-1.2 M/s, 64 1.26,
// 128 1.29-1.33, 256 1.31-1.32 (docs/benchmarks.md).
constexpr int kRowsPerInsert = 128;
constexpr int kActivityColumns = 16;

struct PendingStat {
  int64_t value = 0;
  Severity severity = Severity::Info;
  std::string description;
};

}  // namespace

struct TraceWriter::Impl {
  std::string path;
  WriterOptions options;
  sql::Db db;
  sql::Stmt insert_string, insert_run, insert_stream, insert_activity, insert_range, insert_counter, insert_step,
      insert_stat, insert_extent, insert_geometry, insert_resources, insert_task, insert_dep, insert_collective, insert_clock;
  std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>> strings;
  int64_t next_string_id = 1;
  std::map<std::string, PendingStat, std::less<>> stats;
  std::map<std::pair<int, int>, TrackExtent> extents;
  std::vector<PendingActivity> pending;
  // Buffers kept between batches (a fresh one per batch cost page faults on
  // every batch): the sorted copy the caller builds, and the buffer of the
  // last written batch, given back by the writer thread (read after wait()).
  std::vector<PendingActivity> sorted_scratch, recycled;
  std::vector<uint32_t> track_offsets;
  std::vector<LaunchGeometry> pending_geometry;
  sql::Stmt insert_activities, insert_chunk;
  int64_t next_activity_id = 1;
  std::pair<int, int> last_track{INT32_MIN, INT32_MIN};
  TrackExtent* last_extent = nullptr;
  int64_t run = -1;
  int64_t seq = 0;
  int64_t rows_in_batch = 0;
  int64_t rows_total = 0;
  bool in_transaction = false;
  std::vector<std::pair<int64_t, std::string>> pending_strings;
  // The batch being written by the background thread. Declared last so that
  // it is waited for before the connection and statements are destroyed.
  std::future<void> inflight;

  Impl(const std::string& p, WriterOptions o)
      : path(p), options(o), db(openFile(p, o), SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX) {
    configureForWriting(db);
    prepareSchema(db, /*for_write=*/true);
    insert_string = sql::Stmt(db, "INSERT INTO strings(id, value) VALUES(?,?)");
    insert_run = sql::Stmt(db,
        "INSERT INTO runs(kind,name,job_yaml,job_hash,topology,host,devices_json,tool_version,"
        "created_unix_ns,world_size,topology_yaml,plan_format) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)");
    insert_stream = sql::Stmt(db, "INSERT OR REPLACE INTO streams VALUES(?,?,?,?,?,?)");
    std::string one = "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
    std::string many = "INSERT INTO activities VALUES" + one;
    for (int i = 1; i < kRowsPerInsert; ++i) many += "," + one;
    insert_activity = sql::Stmt(db, "INSERT INTO activities VALUES" + one);
    insert_activities = sql::Stmt(db, many);
    insert_chunk = sql::Stmt(db, "INSERT INTO activity_chunks VALUES(?,?,?,?,?,?,?,?,?)");
    insert_geometry = sql::Stmt(db, "INSERT INTO activity_geometry VALUES(?,?,?,?,?,?,?)");
    insert_resources = sql::Stmt(db, "INSERT INTO kernel_resources VALUES(?,?,?,?,?,?)");
    next_activity_id = db.queryInt("SELECT COALESCE(MAX(id), 0) + 1 FROM activities", 1);
    insert_range = sql::Stmt(db, "INSERT INTO ranges VALUES(?,?,?,?,?,?,?,?)");
    insert_counter = sql::Stmt(db, "INSERT INTO counters VALUES(?,?,?,?,?,?)");
    insert_step = sql::Stmt(db, "INSERT OR REPLACE INTO steps VALUES(?,?,?,?,?)");
    insert_stat = sql::Stmt(db, "INSERT OR REPLACE INTO stats VALUES(?,?,?,?,?)");
    insert_extent = sql::Stmt(db, "INSERT OR REPLACE INTO track_stats VALUES(?,?,?,?,?,?,?)");
    insert_task = sql::Stmt(db, "INSERT OR REPLACE INTO plan_tasks VALUES(?,?,?,?,?,?,?,?,?,?,?)");
    insert_dep = sql::Stmt(db, "INSERT OR IGNORE INTO plan_deps VALUES(?,?,?,?)");
    insert_collective = sql::Stmt(db, "INSERT INTO collectives VALUES(?,?,?,?,?,?,?,?)");
    insert_clock = sql::Stmt(db, "INSERT INTO clocks VALUES(?,?,?,?,?,?,?)");
    sql::Stmt all(db, "SELECT id, value FROM strings");
    while (all.step()) {
      int64_t id = all.colInt(0);
      strings.emplace(all.colText(1), id);
      if (id >= next_string_id) next_string_id = id + 1;
    }
  }

  static const std::string& openFile(const std::string& p, const WriterOptions& o) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (o.truncate) {
      for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(p + suffix, ec);
    } else if (fs::exists(p, ec) && fs::file_size(p, ec) > 0) {
      checkSqliteHeader(p);
    }
    return p;
  }

  void requireRun() const {
    if (run < 0) throw TraceError(fmt::format("{}: beginRun() must be called before adding rows", path));
  }

  void requireTimes(const char* what, const std::string& name, int64_t start_ns, int64_t end_ns) const {
    for (int64_t t : {start_ns, end_ns})
      if (!traceTimeInRange(t))
        throw TraceRowError(fmt::format("{} '{}' has time {} ns, outside the trace's range of +-2^62 ns", what, name, t));
  }

  void begin() {
    if (!in_transaction) {
      db.exec("BEGIN");
      in_transaction = true;
    }
  }

  // Waits for the background batch (rethrowing its failure); every use of
  // the connection from the caller's thread goes through here first.
  void wait() {
    if (inflight.valid()) inflight.get();
  }

  void beginDirect() {
    wait();
    begin();
  }

  void bindActivity(sql::Stmt& s, int slot, const PendingActivity& r, int64_t id) {
    int c = slot * kActivityColumns;
    s.bind(c + 1, id);
    s.bind(c + 2, run);
    s.bind(c + 3, r.rank);
    s.bind(c + 4, r.stream);
    s.bind(c + 5, r.start_ns);
    s.bind(c + 6, r.end_ns);
    s.bind(c + 7, r.device);
    s.bind(c + 8, static_cast<int>(r.kind));
    s.bind(c + 9, r.name);
    s.bind(c + 10, r.task_id);
    s.bind(c + 11, static_cast<int>(r.phase));
    s.bind(c + 12, r.layer);
    s.bind(c + 13, r.micro_batch);
    s.bind(c + 14, r.correlation_id);
    s.bind(c + 15, r.bytes);
    s.bind(c + 16, r.flops);
  }

  void writeChunk(const PendingActivity& first, int64_t first_id, int64_t last_id, int64_t max_start,
                  int64_t max_end) {
    auto& c = insert_chunk;
    c.bind(1, run);
    c.bind(2, first.rank);
    c.bind(3, first.stream);
    c.bind(4, first_id);
    c.bind(5, last_id);
    c.bind(6, last_id - first_id + 1);
    c.bind(7, first.start_ns);
    c.bind(8, max_start);
    c.bind(9, max_end);
    c.run();
  }

  // Everything a batch commit writes, moved out of the caller's buffers so
  // that the caller can keep adding rows while the batch is written.
  struct Batch {
    std::vector<PendingActivity> acts;
    std::vector<LaunchGeometry> geometry;
    std::vector<std::pair<int64_t, std::string>> strings;
    std::vector<std::pair<std::pair<int, int>, TrackExtent>> extents;
    int64_t first_id = 0;
  };

  // Takes the rows added so far, ordered by (rank, stream, start, insertion)
  // on the caller's thread, so the writer thread only writes. Rows come in
  // time order per track from every producer: a counting sort by track, in
  // the tracks' (rank, stream) order, leaves a track's rows in insertion
  // order, and only a track whose starts go back needs sorting.
  Batch takeBatch() {
    Batch b;
    if (!pending.empty()) {
      b.extents.assign(extents.begin(), extents.end());
      orderByTrack(b.extents);
      b.acts.swap(sorted_scratch);
      sorted_scratch.clear();
    }
    pending.clear();
    b.geometry.swap(pending_geometry);
    b.strings.swap(pending_strings);
    b.first_id = next_activity_id;
    next_activity_id += static_cast<int64_t>(b.acts.size());
    return b;
  }

  // pending -> sorted_scratch, ordered as takeBatch says.
  void orderByTrack(const std::vector<std::pair<std::pair<int, int>, TrackExtent>>& by_key) {
    // Offsets of each track's rows, tracks in (rank, stream) order.
    track_offsets.assign(by_key.size() + 1, 0);
    std::vector<uint32_t> position(by_key.size());
    for (size_t k = 0; k < by_key.size(); ++k) position[by_key[k].second.index] = uint32_t(k);
    for (const PendingActivity& a : pending) ++track_offsets[position[a.track] + 1];
    for (size_t k = 1; k < track_offsets.size(); ++k) track_offsets[k] += track_offsets[k - 1];
    if (sorted_scratch.capacity() == 0) sorted_scratch.swap(recycled);  // the buffer the writer gave back
    sorted_scratch.resize(pending.size());
    std::vector<uint32_t> next(track_offsets.begin(), track_offsets.end() - 1);
    for (const PendingActivity& a : pending) sorted_scratch[next[position[a.track]]++] = a;
    for (size_t k = 0; k + 1 < track_offsets.size(); ++k) {
      auto first = sorted_scratch.begin() + track_offsets[k], last = sorted_scratch.begin() + track_offsets[k + 1];
      const bool in_order = std::is_sorted(
          first, last, [](const PendingActivity& x, const PendingActivity& y) { return x.start_ns < y.start_ns; });
      if (!in_order)
        std::sort(first, last, [](const PendingActivity& x, const PendingActivity& y) {
          return x.start_ns != y.start_ns ? x.start_ns < y.start_ns : x.seq < y.seq;
        });
    }
  }

  // Writes a batch and commits the open transaction. Activities go in sorted
  // by (rank, stream, start): each track's rows get consecutive ids,
  // described by one activity_chunks row.
  void writeBatch(Batch& b) {
    begin();
    for (const auto& [id, value] : b.strings) {
      insert_string.bind(1, id);
      insert_string.bind(2, std::string_view(value));
      insert_string.run();
    }
    auto& acts = b.acts;  // ordered by takeBatch
    size_t n = acts.size();
    size_t i = 0;
    for (; i + kRowsPerInsert <= n; i += kRowsPerInsert) {
      for (int k = 0; k < kRowsPerInsert; ++k)
        bindActivity(insert_activities, k, acts[i + k], b.first_id + static_cast<int64_t>(i) + k);
      insert_activities.run();
    }
    for (; i < n; ++i) {
      bindActivity(insert_activity, 0, acts[i], b.first_id + static_cast<int64_t>(i));
      insert_activity.run();
    }
    size_t chunk_begin = 0;
    int64_t max_end = INT64_MIN;
    for (size_t k = 0; k < n; ++k) {
      const auto& r = acts[k];
      int64_t id = b.first_id + static_cast<int64_t>(k);
      if (r.geometry >= 0) {
        const LaunchGeometry& g = b.geometry[static_cast<size_t>(r.geometry)];
        insert_geometry.bind(1, id);
        int values[6] = {g.grid_x, g.grid_y, g.grid_z, g.block_x, g.block_y, g.block_z};
        for (int v = 0; v < 6; ++v) insert_geometry.bind(2 + v, values[v]);
        insert_geometry.run();
        if (g.hasResources()) {
          insert_resources.bind(1, id);
          const int res[5] = {g.registers_per_thread, g.shared_memory_bytes, g.cluster_x, g.cluster_y, g.cluster_z};
          for (int v = 0; v < 5; ++v) insert_resources.bind(2 + v, res[v]);
          insert_resources.run();
        }
      }
      max_end = std::max(max_end, r.end_ns);
      bool last_of_track = k + 1 == n || acts[k + 1].rank != r.rank || acts[k + 1].stream != r.stream;
      if (last_of_track) {
        writeChunk(acts[chunk_begin], b.first_id + static_cast<int64_t>(chunk_begin), id, r.start_ns, max_end);
        chunk_begin = k + 1;
        max_end = INT64_MIN;
      }
    }
    for (const auto& [key, e] : b.extents) {
      insert_extent.bind(1, run);
      insert_extent.bind(2, key.first);
      insert_extent.bind(3, key.second);
      insert_extent.bind(4, e.count);
      insert_extent.bind(5, e.min_start_ns);
      insert_extent.bind(6, e.max_end_ns);
      insert_extent.bind(7, e.max_duration_ns);
      insert_extent.run();
    }
    db.exec("COMMIT");
    in_transaction = false;
  }

  // Commits everything added so far, on this thread.
  void commit() {
    wait();
    Batch b = takeBatch();
    writeBatch(b);
    rows_in_batch = 0;
  }

  // A finished file goes back to a rollback journal: its WAL is merged into
  // it and removed. In WAL mode every reader, read-only ones too, creates
  // -wal and -shm files next to the trace (left behind after `tandem
  // report`), and cannot open it at all where it may not create them (a
  // read-only folder). WAL is for the time the file is written (crash safety,
  // readers beside the writer). While another connection has the file open
  // (the GUI following a run) the switch is not possible and the file stays
  // in WAL mode: no waiting for it.
  void leaveWalMode() noexcept {
    sqlite3_busy_timeout(db.handle(), 0);
    sqlite3_exec(db.handle(), "PRAGMA journal_mode=DELETE", nullptr, nullptr, nullptr);
  }

  // Called after each row: a full batch is handed to a background thread
  // (after the previous one finished), so a crash loses at most the batches
  // not yet committed and the caller keeps producing meanwhile.
  void counted() {
    ++rows_total;
    if (++rows_in_batch < options.batch_rows) return;
    rows_in_batch = 0;
    wait();
    inflight = std::async(std::launch::async, [this, b = takeBatch()]() mutable {
      writeBatch(b);
      b.acts.clear();
      recycled = std::move(b.acts);
    });
  }

  // Ids are assigned here; the rows reach the file with the next batch.
  int64_t intern(std::string_view s) {
    auto it = strings.find(s);
    if (it != strings.end()) return it->second;
    int64_t id = next_string_id++;
    strings.emplace(std::string(s), id);
    pending_strings.emplace_back(id, std::string(s));
    return id;
  }

  TrackExtent& extentOf(int rank, int stream) {
    std::pair<int, int> key{rank, stream};
    if (key != last_track || !last_extent) {
      auto [it, fresh] = extents.try_emplace(key);
      if (fresh) it->second.index = uint32_t(extents.size() - 1);
      last_extent = &it->second;
      last_track = key;
    }
    return *last_extent;
  }

  void writeStats() {
    if (stats.empty() || run < 0) return;
    beginDirect();
    for (const auto& [name, st] : stats) {
      insert_stat.bind(1, run);
      insert_stat.bind(2, std::string_view(name));
      insert_stat.bind(3, st.value);
      insert_stat.bind(4, toString(st.severity));
      insert_stat.bind(5, std::string_view(st.description));
      insert_stat.run();
    }
  }
};

TraceWriter::TraceWriter(const std::string& path, WriterOptions options)
    : impl_(std::make_unique<Impl>(path, options)) {}

TraceWriter::~TraceWriter() {
  try {
    flush();
  } catch (...) {
    // A destructor must not throw; the last batch is lost, earlier ones stay.
    return;
  }
  impl_->leaveWalMode();
}

int64_t TraceWriter::beginRun(const RunInfo& info) {
  auto& m = *impl_;
  if (m.run >= 0) flush();
  m.stats.clear();
  m.extents.clear();
  m.last_extent = nullptr;
  m.beginDirect();
  auto& s = m.insert_run;
  s.bind(1, toString(info.kind));
  s.bind(2, std::string_view(info.name));
  s.bind(3, std::string_view(info.job_yaml));
  s.bind(4, std::string_view(info.job_hash));
  s.bind(5, std::string_view(info.topology));
  s.bind(6, std::string_view(info.host));
  s.bind(7, std::string_view(info.devices_json));
  s.bind(8, std::string_view(info.tool_version));
  s.bind(9, info.created_unix_ns);
  s.bind(10, info.world_size);
  s.bind(11, std::string_view(info.topology_yaml));
  s.bind(12, info.plan_format);
  s.run();
  m.run = sqlite3_last_insert_rowid(m.db.handle());
  m.seq = 0;
  // The run row is committed at once so that readers see the run even if the
  // process dies before the first batch is full.
  m.commit();
  return m.run;
}

int64_t TraceWriter::runId() const { return impl_->run; }

void TraceWriter::setPlanFacts(const PlanFacts& facts) {
  auto& m = *impl_;
  m.requireRun();
  m.beginDirect();
  // Replaces what an earlier call wrote for this run: one set of facts per run.
  for (const char* table : {"run_recompute", "run_memory", "run_memory_categories", "run_plans"}) {
    sql::Stmt del(m.db, fmt::format("DELETE FROM {} WHERE run=?", table));
    del.bind(1, m.run);
    del.run();
  }
  sql::Stmt recompute(m.db, "INSERT INTO run_recompute VALUES(?,?,?,?,?,?,?)");
  for (const RecomputeRow& r : facts.recompute) {
    recompute.bind(1, m.run);
    recompute.bind(2, r.layer);
    recompute.bind(3, std::string_view(r.policy));
    recompute.bind(4, r.bytes_kept);
    recompute.bind(5, r.bytes_saved);
    recompute.bind(6, r.extra_flops);
    if (r.extra_ns >= 0) recompute.bind(7, r.extra_ns);
    else recompute.bindNull(7);
    recompute.run();
  }
  sql::Stmt memory(m.db, "INSERT INTO run_memory VALUES(?,?,?,?,?,?,?,?,?)");
  sql::Stmt category(m.db, "INSERT OR REPLACE INTO run_memory_categories VALUES(?,?,?,?)");
  for (const MemoryRow& r : facts.memory) {
    const int64_t values[] = {m.run, r.program, r.first_rank, r.rank_count, r.arena_bytes, r.peak_bytes,
                              r.lower_bound_bytes, r.activation_peak_bytes, r.gpu_run_bytes};
    for (int k = 0; k < 9; ++k) memory.bind(k + 1, values[k]);
    memory.run();
    for (const auto& [name, bytes] : r.by_category) {
      category.bind(1, m.run);
      category.bind(2, r.program);
      category.bind(3, std::string_view(name));
      category.bind(4, bytes);
      category.run();
    }
  }
  if (!facts.plan_blob.empty()) {
    sql::Stmt plan(m.db, "INSERT INTO run_plans VALUES(?,?,?)");
    plan.bind(1, m.run);
    plan.bind(2, std::string_view(facts.plan_encoding));
    plan.bindBlob(3, facts.plan_blob);
    plan.run();
  }
}

void TraceWriter::addStream(const StreamRow& r) {
  auto& m = *impl_;
  m.requireRun();
  m.beginDirect();
  auto& s = m.insert_stream;
  s.bind(1, m.run);
  s.bind(2, r.rank);
  s.bind(3, r.stream);
  s.bind(4, toString(r.kind));
  s.bind(5, std::string_view(r.name));
  s.bind(6, r.device);
  s.run();
  m.counted();
}

void TraceWriter::addActivity(const ActivityRow& r) {
  auto& m = *impl_;
  m.requireRun();
  m.requireTimes("activity", r.name, r.start_ns, r.end_ns);
  if (r.end_ns < r.start_ns)
    throw TraceError(fmt::format("{}: activity '{}' ends ({}) before it starts ({})", m.path, r.name, r.end_ns,
                                 r.start_ns));
  int64_t name = m.intern(r.name);
  int64_t seq = m.seq++;
  int32_t geometry = -1;
  if (r.geometry) {
    geometry = static_cast<int32_t>(m.pending_geometry.size());
    m.pending_geometry.push_back(*r.geometry);
  }
  TrackExtent& e = m.extentOf(r.rank, r.stream);
  m.pending.push_back({e.index, r.rank, r.device, r.stream, r.layer, r.micro_batch, static_cast<uint8_t>(r.kind),
                       static_cast<uint8_t>(r.phase), geometry, r.start_ns, r.end_ns, seq, name, r.task_id,
                       r.correlation_id, r.bytes, r.flops});
  ++e.count;
  e.min_start_ns = std::min(e.min_start_ns, r.start_ns);
  e.max_end_ns = std::max(e.max_end_ns, r.end_ns);
  e.max_duration_ns = std::max(e.max_duration_ns, r.end_ns - r.start_ns);
  m.counted();
}

void TraceWriter::addRange(const RangeRow& r) {
  auto& m = *impl_;
  m.requireRun();
  m.requireTimes("range", r.name, r.start_ns, r.end_ns);
  int64_t name = m.intern(r.name);
  m.beginDirect();
  auto& s = m.insert_range;
  s.bind(1, m.run);
  s.bind(2, r.rank);
  s.bind(3, r.start_ns);
  s.bind(4, m.seq++);
  s.bind(5, r.end_ns);
  s.bind(6, name);
  s.bind(7, r.depth);
  s.bind(8, std::string_view(r.domain));
  s.run();
  m.counted();
}

void TraceWriter::addCounter(const CounterRow& r) {
  auto& m = *impl_;
  m.requireRun();
  m.requireTimes("counter sample", r.name, r.ts_ns, r.ts_ns);
  int64_t name = m.intern(r.name);
  m.beginDirect();
  auto& s = m.insert_counter;
  s.bind(1, m.run);
  s.bind(2, r.rank);
  s.bind(3, name);
  s.bind(4, r.ts_ns);
  s.bind(5, m.seq++);
  s.bind(6, r.value);
  s.run();
  m.counted();
}

void TraceWriter::addStep(const StepRow& r) {
  auto& m = *impl_;
  m.requireRun();
  m.requireTimes("step", std::to_string(r.step), r.start_ns, r.end_ns);
  m.beginDirect();
  auto& s = m.insert_step;
  s.bind(1, m.run);
  s.bind(2, r.rank);
  s.bind(3, r.step);
  s.bind(4, r.start_ns);
  s.bind(5, r.end_ns);
  s.run();
  m.counted();
}

void TraceWriter::addPlanTask(const PlanTaskRow& r) {
  auto& m = *impl_;
  m.requireRun();
  int64_t name = m.intern(r.name);
  m.beginDirect();
  auto& s = m.insert_task;
  s.bind(1, m.run);
  s.bind(2, r.rank);
  s.bind(3, r.task_id);
  s.bind(4, name);
  s.bind(5, std::string_view(r.op));
  s.bind(6, static_cast<int>(r.phase));
  s.bind(7, r.layer);
  s.bind(8, r.micro_batch);
  s.bind(9, r.stream);
  s.bind(10, r.flops);
  s.bind(11, r.bytes);
  s.run();
  for (int64_t dep : r.deps) {
    auto& d = m.insert_dep;
    d.bind(1, m.run);
    d.bind(2, r.rank);
    d.bind(3, r.task_id);
    d.bind(4, dep);
    d.run();
  }
  m.counted();
}

void TraceWriter::addCollective(const CollectiveRow& r) {
  auto& m = *impl_;
  m.requireRun();
  m.requireTimes("collective", r.op, r.start_ns, r.end_ns);
  m.beginDirect();
  auto& s = m.insert_collective;
  s.bind(1, m.run);
  s.bind(2, r.rank);
  s.bind(3, r.task_id);
  s.bind(4, std::string_view(r.op));
  s.bind(5, std::string_view(r.group));
  s.bind(6, r.bytes);
  s.bind(7, r.start_ns);
  s.bind(8, r.end_ns);
  s.run();
  m.counted();
}

void TraceWriter::addClock(const ClockRow& r) {
  auto& m = *impl_;
  m.requireRun();
  m.beginDirect();
  auto& s = m.insert_clock;
  s.bind(1, m.run);
  s.bind(2, r.rank);
  s.bind(3, std::string_view(r.source));
  s.bind(4, r.cupti_ns);
  s.bind(5, r.realtime_ns);
  s.bind(6, r.monotonic_ns);
  s.bind(7, r.offset_ns);
  s.run();
  m.counted();
}

void TraceWriter::setStat(const StatRow& r) {
  auto& m = *impl_;
  m.requireRun();
  m.stats[r.name] = PendingStat{r.value, r.severity, r.description};
}

void TraceWriter::incrementStat(std::string_view name, int64_t delta, Severity severity,
                                std::string_view description) {
  auto& m = *impl_;
  m.requireRun();
  auto it = m.stats.find(name);
  if (it == m.stats.end())
    it = m.stats.emplace(std::string(name), PendingStat{0, severity, std::string(description)}).first;
  it->second.value += delta;
}

void TraceWriter::incrementStat(const StatRow& delta) {
  incrementStat(delta.name, delta.value, delta.severity, delta.description);
}

int64_t TraceWriter::intern(std::string_view s) { return impl_->intern(s); }

void TraceWriter::flush() {
  impl_->writeStats();
  impl_->commit();
}

int64_t TraceWriter::rowsWritten() const { return impl_->rows_total; }
const std::string& TraceWriter::path() const { return impl_->path; }

}  // namespace tandem::traces
