#include "traces/store/schema.h"

#include <fmt/core.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace tandem::traces {

namespace {

// Activities are appended in batches; inside a batch the writer sorts them by
// (rank, stream, start) so that each track's rows of the batch get one
// contiguous id range, recorded in activity_chunks with its time extent.
// Loading a track or a time window is then a few id-range scans, and the
// writer only ever appends to the table (no secondary index to maintain),
// which is what makes millions of rows per second possible. Small tables
// use WITHOUT ROWID primary keys.
const char* kSchemaSql = R"SQL(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE strings(id INTEGER PRIMARY KEY, value TEXT NOT NULL UNIQUE);
CREATE TABLE activity_kinds(code INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE phases(code INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE runs(
  id INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL, job_yaml TEXT, job_hash TEXT,
  topology TEXT, host TEXT, devices_json TEXT, tool_version TEXT,
  created_unix_ns INTEGER, world_size INTEGER NOT NULL, topology_yaml TEXT, plan_format INTEGER);
CREATE TABLE streams(
  run INTEGER NOT NULL, rank INTEGER NOT NULL, stream INTEGER NOT NULL, kind TEXT NOT NULL,
  name TEXT NOT NULL, device INTEGER, PRIMARY KEY(run, rank, stream)) WITHOUT ROWID;
CREATE TABLE activities(
  id INTEGER PRIMARY KEY, run INTEGER NOT NULL, rank INTEGER NOT NULL, stream INTEGER NOT NULL,
  start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, device INTEGER, kind INTEGER NOT NULL,
  name INTEGER NOT NULL, task_id INTEGER, phase INTEGER, layer INTEGER, micro_batch INTEGER,
  correlation_id INTEGER, bytes INTEGER, flops REAL);
CREATE TABLE activity_chunks(
  run INTEGER NOT NULL, rank INTEGER NOT NULL, stream INTEGER NOT NULL, first_id INTEGER NOT NULL,
  last_id INTEGER NOT NULL, count INTEGER NOT NULL, min_start_ns INTEGER NOT NULL,
  max_start_ns INTEGER NOT NULL, max_end_ns INTEGER NOT NULL,
  PRIMARY KEY(run, rank, stream, first_id)) WITHOUT ROWID;
CREATE TABLE activity_geometry(
  activity INTEGER PRIMARY KEY, grid_x INTEGER, grid_y INTEGER, grid_z INTEGER,
  block_x INTEGER, block_y INTEGER, block_z INTEGER);
CREATE TABLE track_stats(
  run INTEGER NOT NULL, rank INTEGER NOT NULL, stream INTEGER NOT NULL, activity_count INTEGER NOT NULL,
  min_start_ns INTEGER NOT NULL, max_end_ns INTEGER NOT NULL, max_duration_ns INTEGER NOT NULL,
  PRIMARY KEY(run, rank, stream)) WITHOUT ROWID;
CREATE TABLE ranges(
  run INTEGER NOT NULL, rank INTEGER NOT NULL, start_ns INTEGER NOT NULL, seq INTEGER NOT NULL,
  end_ns INTEGER NOT NULL, name INTEGER NOT NULL, depth INTEGER NOT NULL, domain TEXT NOT NULL,
  PRIMARY KEY(run, rank, start_ns, seq)) WITHOUT ROWID;
CREATE TABLE counters(
  run INTEGER NOT NULL, rank INTEGER NOT NULL, name INTEGER NOT NULL, ts_ns INTEGER NOT NULL,
  seq INTEGER NOT NULL, value REAL NOT NULL, PRIMARY KEY(run, rank, name, ts_ns, seq)) WITHOUT ROWID;
CREATE TABLE steps(
  run INTEGER NOT NULL, rank INTEGER NOT NULL, step INTEGER NOT NULL, start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL, PRIMARY KEY(run, rank, step)) WITHOUT ROWID;
CREATE TABLE stats(
  run INTEGER NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL, severity TEXT NOT NULL,
  description TEXT NOT NULL, PRIMARY KEY(run, name)) WITHOUT ROWID;
CREATE TABLE plan_tasks(
  run INTEGER NOT NULL, rank INTEGER NOT NULL, task_id INTEGER NOT NULL, name INTEGER NOT NULL,
  op TEXT NOT NULL, phase INTEGER NOT NULL, layer INTEGER, micro_batch INTEGER, stream INTEGER,
  flops REAL, bytes INTEGER, PRIMARY KEY(run, rank, task_id)) WITHOUT ROWID;
CREATE TABLE plan_deps(
  run INTEGER NOT NULL, rank INTEGER NOT NULL, task_id INTEGER NOT NULL, dep_task_id INTEGER NOT NULL,
  PRIMARY KEY(run, rank, task_id, dep_task_id)) WITHOUT ROWID;
CREATE TABLE collectives(
  run INTEGER NOT NULL, rank INTEGER NOT NULL, task_id INTEGER, op TEXT NOT NULL, grp TEXT NOT NULL,
  bytes INTEGER, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL);
CREATE INDEX collectives_by_rank ON collectives(run, rank, start_ns);
CREATE TABLE clocks(
  run INTEGER NOT NULL, rank INTEGER NOT NULL, source TEXT NOT NULL, cupti_ns INTEGER,
  realtime_ns INTEGER, monotonic_ns INTEGER, offset_ns INTEGER NOT NULL);
)SQL";

// Schema 2: the plan facts a run keeps (docs/trace-schema.md, "Plan facts").
// Created with a new file and by the migration of a schema-1 file alike.
const char* kPlanFactsSql = R"SQL(
CREATE TABLE run_recompute(
  run INTEGER NOT NULL, layer INTEGER NOT NULL, policy TEXT NOT NULL, bytes_kept INTEGER NOT NULL,
  bytes_saved INTEGER NOT NULL, extra_flops REAL NOT NULL, extra_ns INTEGER,
  PRIMARY KEY(run, layer)) WITHOUT ROWID;
CREATE TABLE run_memory(
  run INTEGER NOT NULL, program INTEGER NOT NULL, first_rank INTEGER NOT NULL, rank_count INTEGER NOT NULL,
  arena_bytes INTEGER NOT NULL, peak_bytes INTEGER NOT NULL, lower_bound_bytes INTEGER NOT NULL,
  activation_peak_bytes INTEGER NOT NULL, gpu_run_bytes INTEGER NOT NULL,
  PRIMARY KEY(run, program)) WITHOUT ROWID;
CREATE TABLE run_memory_categories(
  run INTEGER NOT NULL, program INTEGER NOT NULL, category TEXT NOT NULL, bytes INTEGER NOT NULL,
  PRIMARY KEY(run, program, category)) WITHOUT ROWID;
CREATE TABLE run_plans(run INTEGER PRIMARY KEY, encoding TEXT NOT NULL, plan BLOB NOT NULL);
)SQL";

// A kernel's resources per block (LaunchGeometry), beside its geometry.
// Added within schema 2: files without the table read as they are (no
// resources), a writer that opens one adds it, and a reader that predates
// the table ignores it.
const char* kKernelResourcesSql = R"SQL(
CREATE TABLE IF NOT EXISTS kernel_resources(
  activity INTEGER PRIMARY KEY, registers_per_thread INTEGER NOT NULL, shared_memory_bytes INTEGER NOT NULL,
  cluster_x INTEGER NOT NULL, cluster_y INTEGER NOT NULL, cluster_z INTEGER NOT NULL);
)SQL";

}  // namespace

bool hasTable(sql::Db& db, const char* name) {
  sql::Stmt s(db, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?");
  s.bind(1, std::string_view(name));
  return s.step();
}

namespace {

void createSchema(sql::Db& db) {
  db.exec("BEGIN");
  db.exec(kSchemaSql);
  db.exec(kPlanFactsSql);
  db.exec(kKernelResourcesSql);
  db.exec(fmt::format("INSERT INTO meta VALUES('format','tandem-traces'),('schema_version','{}')",
                      kTraceSchemaVersion));
  for (int k = 0; k <= static_cast<int>(ActivityKind::Host); ++k)
    db.exec(fmt::format("INSERT INTO activity_kinds VALUES({},'{}')", k,
                        toString(static_cast<ActivityKind>(k))));
  for (int p = 0; p <= static_cast<int>(Phase::Data); ++p)
    db.exec(fmt::format("INSERT INTO phases VALUES({},'{}')", p, toString(static_cast<Phase>(p))));
  db.exec(fmt::format("PRAGMA application_id={}", kTraceApplicationId));
  db.exec(fmt::format("PRAGMA user_version={}", kTraceSchemaVersion));
  db.exec("COMMIT");
}

// Schema 1 -> 2, in one transaction: the runs' topology text and plan
// format columns and the plan facts tables. A schema-1 run whose topology
// column holds a whole topology file (it held a name or the file's text)
// has the text moved to topology_yaml. Runs written before keep no plan
// facts: readers say so rather than plan their jobs again.
void migrateFromVersion1(sql::Db& db) {
  db.exec("BEGIN");
  db.exec("ALTER TABLE runs ADD COLUMN topology_yaml TEXT");
  db.exec("ALTER TABLE runs ADD COLUMN plan_format INTEGER");
  db.exec("UPDATE runs SET topology_yaml = topology, topology = '' WHERE instr(topology, char(10)) > 0");
  db.exec(kPlanFactsSql);
  db.exec(fmt::format("UPDATE meta SET value='{}' WHERE key='schema_version'", kTraceSchemaVersion));
  db.exec(fmt::format("PRAGMA user_version={}", kTraceSchemaVersion));
  db.exec("COMMIT");
}

}  // namespace

void checkSqliteHeader(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  if (ec) throw TraceError(fmt::format("{}: cannot read trace file: {}", path, ec.message()));
  std::ifstream in(path, std::ios::binary);
  std::array<unsigned char, 100> h{};
  in.read(reinterpret_cast<char*>(h.data()), h.size());
  if (in.gcount() < 100 || std::memcmp(h.data(), "SQLite format 3\0", 16) != 0)
    throw TraceError(fmt::format("{}: not a SQLite database (expected a tandem trace file)", path));
  uint32_t page_size = (h[16] << 8) | h[17];
  if (page_size == 1) page_size = 65536;
  auto be32 = [&](int off) {
    return (uint32_t(h[off]) << 24) | (uint32_t(h[off + 1]) << 16) | (uint32_t(h[off + 2]) << 8) | h[off + 3];
  };
  uint32_t pages = be32(28);
  bool count_valid = pages != 0 && be32(24) == be32(92);
  if (page_size < 512 || size % page_size != 0 || (count_valid && uint64_t(pages) * page_size > size))
    throw TraceError(fmt::format("{}: truncated or damaged SQLite file ({} bytes, header expects {})", path,
                                 size, uint64_t(pages) * page_size));
}

int prepareSchema(sql::Db& db, bool for_write) {
  const std::string& path = db.path();
  int64_t app = 0, version = 0, tables = 0;
  try {
    app = db.queryInt("PRAGMA application_id");
    version = db.queryInt("PRAGMA user_version");
    tables = db.queryInt("SELECT COUNT(*) FROM sqlite_master");
  } catch (const TraceError&) {
    throw TraceError(fmt::format("{}: not a readable SQLite database (truncated or damaged?)", path));
  }
  if (tables == 0 && app == 0) {
    if (!for_write) throw TraceError(fmt::format("{}: empty database, no trace runs in it", path));
    createSchema(db);
    return kTraceSchemaVersion;
  }
  if (app != kTraceApplicationId || !hasTable(db, "meta") || !hasTable(db, "activities"))
    throw TraceError(fmt::format("{}: foreign schema: not a tandem trace file (application_id {:#x}, "
                                 "expected {:#x}); use `tandem import` for nsys or PyTorch traces",
                                 path, app, kTraceApplicationId));
  if (version > kTraceSchemaVersion)
    throw TraceError(fmt::format("{}: trace schema version {} is newer than this tandem reads (up to {})",
                                 path, version, kTraceSchemaVersion));
  if (version < 1)
    throw TraceError(fmt::format("{}: trace schema version {} is not supported (expected {})", path, version,
                                 kTraceSchemaVersion));
  if (version == 1 && for_write) {
    migrateFromVersion1(db);
    db.exec(kKernelResourcesSql);
    return kTraceSchemaVersion;
  }
  if (for_write) db.exec(kKernelResourcesSql);
  return int(version);
}

void configureForWriting(sql::Db& db) {
  // Larger pages mean fewer b-tree levels and splits for ten-million-row
  // tables; it only takes effect on a new file.
  db.exec("PRAGMA page_size=16384");
  db.exec("PRAGMA journal_mode=WAL");
  // NORMAL in WAL mode: a committed transaction survives a crash of the
  // process; only an OS crash or power loss may lose the last commits.
  db.exec("PRAGMA synchronous=NORMAL");
  db.exec("PRAGMA cache_size=-65536");  // 64 MiB
  db.exec("PRAGMA temp_store=MEMORY");
}

}  // namespace tandem::traces
