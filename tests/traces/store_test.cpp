// The trace file itself: round trips, appending runs, windows, crash safety
// and the errors for files that are not (whole) tandem traces.
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>
#include <fstream>

#include "traces/store/atomic_output.h"
#include "traces/store/schema.h"
#include "traces/store/trace_reader.h"
#include "traces/test_fixtures.h"

using namespace tandem::traces;
using namespace tandem::traces::testing;

namespace {

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string errorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const TraceError& e) {
    return e.what();
  }
  return "";
}

void rawSql(const std::string& path, const std::string& statements) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, statements.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

}  // namespace

TEST_CASE("activities, streams and side tables round-trip through a file", "[store]") {
  std::string path = tempTracePath("roundtrip.sqlite");
  writeOverlapFixture(path);
  TraceReader r(path);
  auto runs = r.runs();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].kind == RunKind::Simulated);
  CHECK(runs[0].name == "overlap-fixture");
  CHECK(runs[0].world_size == 2);
  int64_t run = r.defaultRunId();
  CHECK(r.activityCount(run) == 15);
  CHECK(r.streams(run).size() == 7);

  Track t = r.loadTrack(run, 0, 0);
  REQUIRE(t.size() == 4);
  CHECK(t.start_ns == std::vector<int64_t>{0, 150, 300, 450});
  CHECK(r.string(t.name[0]) == "gemm_fwd");
  CHECK(t.flops[0] == 2e5);
  CHECK(t.phase[2] == Phase::Recompute);
  CHECK(t.correlation_id[1] == 11);

  // Geometry and every field come back through the row interface.
  int seen = 0;
  r.forEachActivity(run, [&](const ActivityRow& a) {
    if (a.name == "gemm_fwd" && a.rank == 0) {
      ++seen;
      REQUIRE(a.geometry.has_value());
      CHECK(a.geometry->grid_x == 128);
      CHECK(a.geometry->block_x == 256);
      CHECK(a.geometry->registers_per_thread == 168);
      CHECK(a.geometry->shared_memory_bytes == 213024);
      CHECK(a.geometry->cluster_x == 2);
      CHECK(a.task_id == 1);
      CHECK(a.device == 0);
    }
    if (a.name == "gemm_bwd") CHECK_FALSE(a.geometry.has_value());
  });
  CHECK(seen == 1);


  auto tasks = r.planTasks(run);
  REQUIRE(tasks.size() == 14);
  auto t2 = std::find_if(tasks.begin(), tasks.end(),
                         [](const PlanTaskRow& p) { return p.rank == 0 && p.task_id == 2; });
  REQUIRE(t2 != tasks.end());
  CHECK(t2->deps == std::vector<int64_t>{1, 7});
  CHECK(t2->op == "matmul_bwd_data");
  CHECK(t2->name == "layer0.fc.bwd");
  CHECK(r.steps(run).size() == 2);
  auto counters = r.counters(run);
  REQUIRE(counters.size() == 2);
  CHECK(counters[1].value == 4096);
  CHECK(r.ranges(run).size() == 2);
  CHECK(r.clocks(run).size() == 2);
  auto stats = r.stats(run);
  REQUIRE(stats.size() == 1);
  CHECK(stats[0].name == "sim.events");
  CHECK(stats[0].value == 12);
}

TEST_CASE("a file without the kernel resources table reads with the geometry alone", "[store][schema]") {
  std::string path = tempTracePath("no-resources.sqlite");
  writeOverlapFixture(path);
  const int64_t run = TraceReader(path).defaultRunId();
  // A file written before kernel resources were stored (no table) reads
  // with the geometry alone; a writer that opens it adds the table.
  rawSql(path, "DROP TABLE kernel_resources");
  {
    TraceReader old(path);
    old.forEachActivity(run, [&](const ActivityRow& a) {
      if (a.name == "gemm_fwd" && a.rank == 0) {
        REQUIRE(a.geometry.has_value());
        CHECK(a.geometry->grid_x == 128);
        CHECK_FALSE(a.geometry->hasResources());
      }
    });
  }
  int64_t appended = 0;
  {
    TraceWriter w(path);
    appended = w.beginRun({});
    ActivityRow k = act(0, 0, 0, 100, ActivityKind::Kernel, "gemm");
    k.geometry = LaunchGeometry{132, 1, 1, 384, 1, 1};
    k.geometry->registers_per_thread = 90;
    k.geometry->shared_memory_bytes = 1024;
    w.addActivity(k);
  }
  TraceReader reader(path);
  CHECK(reader.activityCount(run) == 15);
  int seen = 0;
  reader.forEachActivity(appended, [&](const ActivityRow& a) {
    ++seen;
    REQUIRE(a.geometry.has_value());
    CHECK(a.geometry->registers_per_thread == 90);
    CHECK(a.geometry->shared_memory_bytes == 1024);
  });
  CHECK(seen == 1);
}

TEST_CASE("time-window queries return exactly the activities overlapping the window", "[store]") {
  std::string path = tempTracePath("window.sqlite");
  {
    TraceWriter w(path);
    w.beginRun({});
    // One long activity that starts well before the window and many short ones.
    w.addActivity(act(0, 0, 0, 10'000, ActivityKind::Kernel, "long"));
    for (int i = 0; i < 1000; ++i) w.addActivity(act(0, 0, i * 100, i * 100 + 50, ActivityKind::Kernel, "short"));
  }
  TraceReader r(path);
  Track t = r.loadWindow(1, 0, 0, 5'020, 5'260);
  // short ones at 5000 (ends 5050), 5100, 5200, plus the long one.
  REQUIRE(t.size() == 4);
  CHECK(t.start_ns == std::vector<int64_t>{0, 5000, 5100, 5200});
  Track none = r.loadWindow(1, 0, 0, 200'000, 300'000);
  CHECK(none.size() == 0);
  Track edge = r.loadWindow(1, 0, 0, 5'050, 5'100);  // half-open: neither 5000-5050 nor 5100-5150
  CHECK(edge.start_ns == std::vector<int64_t>{0});
}

TEST_CASE("opening an existing file appends a new run and keeps interned names", "[store]") {
  std::string path = tempTracePath("append.sqlite");
  writeOverlapFixture(path);
  {
    TraceWriter w(path);
    RunInfo info;
    info.kind = RunKind::Real;
    info.name = "second";
    int64_t id = w.beginRun(info);
    CHECK(id == 2);
    w.addActivity(act(0, 0, 10, 20, ActivityKind::Kernel, "gemm_fwd"));
    w.addActivity(act(0, 0, 30, 40, ActivityKind::Kernel, "new_kernel"));
  }
  TraceReader r(path);
  REQUIRE(r.runs().size() == 2);
  CHECK(r.defaultRunId() == 2);
  CHECK(r.activityCount(1) == 15);
  Track t = r.loadTrack(2, 0, 0);
  REQUIRE(t.size() == 2);
  CHECK(r.string(t.name[0]) == "gemm_fwd");
  CHECK(r.string(t.name[1]) == "new_kernel");
  // The same name maps to one string id in both runs.
  Track first = r.loadTrack(1, 0, 0);
  CHECK(first.name[0] == t.name[0]);
}

TEST_CASE("a finished trace is one file, and reading it adds none", "[store]") {
  namespace fs = std::filesystem;
  std::string path = tempTracePath("one_file.sqlite");
  auto sideFiles = [&] { return int(fs::exists(path + "-wal")) + int(fs::exists(path + "-shm")); };
  writeOverlapFixture(path);
  CHECK(sideFiles() == 0);
  {
    TraceReader r(path);
    CHECK(r.activityCount(r.defaultRunId()) == 15);
  }
  CHECK(sideFiles() == 0);
  // A trace in a folder that may not be written (copied to a read-only
  // share) still opens. Root writes anywhere, so only other users can test it.
  if (geteuid() != 0) {
    const fs::path dir = fs::path(path).parent_path() / "read_only_share";
    fs::create_directories(dir);
    const std::string shared = (dir / "t.sqlite").string();
    fs::copy_file(path, shared, fs::copy_options::overwrite_existing);
    fs::permissions(dir, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                    fs::perm_options::remove);
    {
      TraceReader r(shared);
      CHECK(r.activityCount(r.defaultRunId()) == 15);
    }
    fs::permissions(dir, fs::perms::owner_write, fs::perm_options::add);
  } else {
    WARN("running as root: the read-only folder case is not tested");
  }
  // While a reader has the file open the writer cannot leave WAL mode; it
  // closes at once anyway and the file stays readable.
  {
    TraceReader reader(path);
    {
      TraceWriter w(path);
      w.beginRun({});
      w.addActivity(act(0, 0, 10, 20, ActivityKind::Kernel, "k"));
    }
    CHECK(reader.runs().size() == 2);
  }
  TraceReader r(path);
  CHECK(r.activityCount(2) == 1);
}

TEST_CASE("appending through a temporary copy keeps runs still in the trace's WAL", "[store]") {
  namespace fs = std::filesystem;
  std::string path = tempTracePath("append_wal.sqlite");
  writeOverlapFixture(path);
  auto appendRun = [](const std::string& file, const std::string& name) {
    TraceWriter w(file);
    RunInfo info;
    info.name = name;
    w.beginRun(info);
    w.addActivity(act(0, 0, 10, 20, ActivityKind::Kernel, "k"));
  };
  {
    // A reader that opened the file while it was being written keeps it in
    // WAL mode: the second run stays in the WAL.
    auto w = std::make_unique<TraceWriter>(path);
    RunInfo info;
    info.name = "second";
    w->beginRun(info);
    w->addActivity(act(0, 0, 10, 20, ActivityKind::Kernel, "k"));
    w->flush();
    TraceReader reader(path);
    CHECK(reader.runs().size() == 2);
    w.reset();
    REQUIRE(fs::exists(path + "-wal"));
    REQUIRE(fs::file_size(path + "-wal") > 0);
    // What `tandem simulate --out` does with an existing file.
    AtomicOutput out(path, /*copy_existing=*/true);
    appendRun(out.tempPath(), "third");
    out.commit();
  }
  TraceReader r(path);
  const auto runs = r.runs();
  REQUIRE(runs.size() == 3);
  CHECK(runs[1].name == "second");
  CHECK(runs[2].name == "third");
  CHECK(r.activityCount(1) == 15);
}

TEST_CASE("a crashed writer leaves every committed batch readable", "[store]") {
  std::string path = tempTracePath("crash.sqlite");
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child writes 25 rows in batches of 10 and dies without flushing.
    // Adding a stream waits for the batch being written in the background,
    // so exactly two batches are committed when it dies.
    TraceWriter* w = new TraceWriter(path, WriterOptions{.batch_rows = 10, .truncate = true});
    w->beginRun({});
    for (int i = 0; i < 25; ++i) w->addActivity(act(0, 0, i * 10, i * 10 + 5, ActivityKind::Kernel, "k"));
    w->addStream({0, 0, StreamKind::Compute, "compute", 0});
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  TraceReader r(path);
  CHECK(r.loadTrack(1, 0, 0).size() == 20);
  // A window query still works without the extents of the lost batch.
  CHECK(r.loadWindow(1, 0, 0, 0, 1000).size() == 20);
}

TEST_CASE("files that are not whole tandem traces give one-line errors", "[store][errors]") {
  std::string path = tempTracePath("bad.sqlite");

  SECTION("missing file") {
    auto msg = errorOf([&] { TraceReader r(path); });
    CHECK_THAT(msg, Catch::Contains("no such trace file"));
  }
  SECTION("text file") {
    writeBytes(path, "hello, this is not a database at all, but it is long enough to hold a header......"
                     "..............................");
    auto msg = errorOf([&] { TraceReader r(path); });
    CHECK_THAT(msg, Catch::Contains("not a SQLite database"));
    auto wmsg = errorOf([&] { TraceWriter w(path); });
    CHECK_THAT(wmsg, Catch::Contains("not a SQLite database"));
  }
  SECTION("truncated file") {
    writeOverlapFixture(path);
    auto size = std::filesystem::file_size(path);
    REQUIRE(size > 8192);
    std::filesystem::resize_file(path, size / 2 + 100);
    auto msg = errorOf([&] { TraceReader r(path); });
    CHECK_THAT(msg, Catch::Contains("truncated or damaged"));
  }
  SECTION("foreign schema") {
    rawSql(path, "CREATE TABLE TARGET_INFO_GPU(id INTEGER); CREATE TABLE StringIds(id INTEGER, value TEXT);");
    auto msg = errorOf([&] { TraceReader r(path); });
    CHECK_THAT(msg, Catch::Contains("foreign schema"));
    auto wmsg = errorOf([&] { TraceWriter w(path); });
    CHECK_THAT(wmsg, Catch::Contains("foreign schema"));
  }
  SECTION("newer schema") {
    writeOverlapFixture(path);
    rawSql(path, "PRAGMA user_version=99;");
    auto msg = errorOf([&] { TraceReader r(path); });
    CHECK_THAT(msg, Catch::Contains("schema version 99 is newer"));
  }
  SECTION("unknown run and empty file") {
    { TraceWriter w(path); }
    TraceReader r(path);
    CHECK_THAT(errorOf([&] { r.defaultRunId(); }), Catch::Contains("holds no runs"));
    CHECK_THAT(errorOf([&] { r.run(7); }), Catch::Contains("no run with id 7"));
  }
  SECTION("damaged references: names, kinds and phases outside their tables") {
    const std::pair<const char*, const char*> damages[] = {
        {"DELETE FROM strings;", "which the strings table lacks (the trace is damaged)"},
        {"UPDATE strings SET id = 4611686018427387904 WHERE id = (SELECT MAX(id) FROM strings);",
         "the strings table is damaged: ids"},
        {"UPDATE activities SET kind = 200 WHERE id = (SELECT MIN(id) FROM activities);",
         "has kind 200, which is not an activity kind"},
        {"UPDATE activities SET phase = 77 WHERE id = (SELECT MIN(id) FROM activities);",
         "has phase 77, which is not a phase"},
    };
    for (const auto& [damage, message] : damages) {
      INFO(damage);
      writeOverlapFixture(path);
      rawSql(path, damage);
      CHECK_THAT(errorOf([&] {
                   TraceReader r(path);
                   r.loadRun(r.defaultRunId());
                 }),
                 Catch::Contains(message));
    }
  }
  SECTION("damaged times: beyond the store's range, overlong, or adding up beyond it") {
    // Each damage and the reader's call that meets it; the analyses add
    // durations and spans up, so the reader refuses what would overflow.
    struct Damage {
      const char* sql;
      std::function<void(TraceReader&, int64_t)> read;
      const char* message;
    };
    const auto loadRun = [](TraceReader& r, int64_t run) { r.loadRun(run); };
    const auto eachActivity = [](TraceReader& r, int64_t run) { r.forEachActivity(run, [](const ActivityRow&) {}); };
    const Damage damages[] = {
        {"UPDATE activities SET start_ns = -9223372036854775808 WHERE id = (SELECT MIN(id) FROM activities);", loadRun,
         "an activity from -9223372036854775808 to"},
        {"UPDATE activities SET end_ns = 4611686018427387904, start_ns = -4611686018427387904 "
         "WHERE id = (SELECT MIN(id) FROM activities);",
         loadRun, "is outside the trace's range (times within +-2^62 ns, durations up to 2^62 ns"},
        {"UPDATE activities SET start_ns = 0, end_ns = 3000000000000000000;", loadRun,
         "the activities' durations add up to more than 2^62 ns"},
        {"UPDATE activities SET start_ns = -9223372036854775808 WHERE id = (SELECT MIN(id) FROM activities);",
         eachActivity, "run 1, rank 0: an activity from -9223372036854775808"},
        {"INSERT INTO steps VALUES (1, 0, 99, 100, -9223372036854775808);",
         [](TraceReader& r, int64_t run) { r.steps(run); }, "run 1, rank 0: a step from 100 to -9223372036854775808"},
        {"INSERT INTO ranges VALUES (1, 1, -9223372036854775808, 0, 5, 1, 0, 'd');",
         [](TraceReader& r, int64_t run) { r.ranges(run); }, "run 1, rank 1: a range from -9223372036854775808 to 5"},
        {"INSERT INTO ranges VALUES (1, 0, 0, 0, 3000000000000000000, 1, 0, 'd'), "
         "(1, 0, 1, 1, 3000000000000000000, 1, 0, 'd');",
         [](TraceReader& r, int64_t run) { r.ranges(run); }, "the ranges add up to more than 2^62 ns"},
        {"INSERT INTO collectives VALUES (1, 1, 4, 'all_reduce', 'dp', 64, 0, -9223372036854775807);",
         [](TraceReader& r, int64_t run) { r.collectives(run); }, "run 1, rank 1: a collective from 0 to"},
        {"INSERT INTO counters VALUES (1, 0, 1, 9223372036854775807, 0, 1.0);",
         [](TraceReader& r, int64_t run) { r.counters(run); }, "a counter sample from 9223372036854775807"},
    };
    for (const Damage& d : damages) {
      INFO(d.sql);
      writeOverlapFixture(path);
      rawSql(path, d.sql);
      CHECK_THAT(errorOf([&] {
                   TraceReader r(path);
                   d.read(r, r.defaultRunId());
                 }),
                 Catch::Contains(d.message) && Catch::Contains("the trace is damaged)"));
    }
    // Ranks whose spans add up beyond the range: each alone is fine.
    writeOverlapFixture(path);
    rawSql(path,
           "UPDATE activities SET start_ns = -3000000000000000000, end_ns = -2999999999999999990 "
           "WHERE id = (SELECT MIN(id) FROM activities WHERE rank = 0); "
           "UPDATE activities SET start_ns = 3000000000000000000, end_ns = 3000000000000000010 "
           "WHERE id = (SELECT MIN(id) FROM activities WHERE rank = 1);");
    CHECK_THAT(errorOf([&] {
                 TraceReader r(path);
                 r.loadRun(r.defaultRunId());
               }),
               Catch::Contains("the ranks' time spans add up to more than 2^62 ns"));
  }
  SECTION("writing without a run or a reversed interval") {
    TraceWriter w(path, WriterOptions{.truncate = true});
    CHECK_THAT(errorOf([&] { w.addActivity(act(0, 0, 0, 1, ActivityKind::Kernel, "k")); }),
               Catch::Contains("beginRun"));
    w.beginRun({});
    CHECK_THAT(errorOf([&] { w.addActivity(act(0, 0, 10, 5, ActivityKind::Kernel, "k")); }),
               Catch::Contains("ends (5) before it starts (10)"));
    // Times beyond +-2^62 ns (a damaged import) are refused before any arithmetic on them.
    CHECK_THAT(errorOf([&] { w.addActivity(act(0, 0, INT64_MIN, 950, ActivityKind::Kernel, "k")); }),
               Catch::Contains("activity 'k' has time -9223372036854775808 ns, outside the trace's range of +-2^62 ns"));
    CHECK_THAT(errorOf([&] { w.addRange({0, 0, INT64_MAX, "r", 1, "d"}); }),
               Catch::Contains("range 'r' has time 9223372036854775807 ns"));
    CHECK_THAT(errorOf([&] { w.addCounter({0, "c", INT64_MAX, 1.0}); }),
               Catch::Contains("counter sample 'c' has time"));
    // Steps and collectives too: the reader refuses them as well.
    CHECK_THAT(errorOf([&] { w.addStep({0, 3, 0, INT64_MIN}); }), Catch::Contains("step '3' has time"));
    CHECK_THAT(errorOf([&] { w.addCollective({0, 4, "all_reduce", "dp", 64, INT64_MIN, 0}); }),
               Catch::Contains("collective 'all_reduce' has time -9223372036854775808 ns"));
  }
}

TEST_CASE("enum spellings round-trip", "[store]") {
  for (int k = 0; k <= static_cast<int>(ActivityKind::Host); ++k)
    CHECK(parseActivityKind(toString(static_cast<ActivityKind>(k))) == static_cast<ActivityKind>(k));
  for (int p = 0; p <= static_cast<int>(Phase::Data); ++p)
    CHECK(parsePhase(toString(static_cast<Phase>(p))) == static_cast<Phase>(p));
  CHECK_FALSE(parseRunKind("fake").has_value());
  // Codes read from a damaged file are spelled "?", not read past the table.
  CHECK(toString(static_cast<ActivityKind>(200)) == "?");
  CHECK(toString(static_cast<Phase>(77)) == "?");
  CHECK(toString(static_cast<StreamKind>(9)) == "?");
  CHECK(toString(static_cast<Severity>(9)) == "?");
}

TEST_CASE("tracks come back sorted whatever order the writer saw, also when read in parallel", "[store]") {
  std::string path = tempTracePath("order.sqlite");
  const int n = 90'000;  // x 3 tracks: above the row count where loadRun reads with two connections
  {
    TraceWriter w(path, WriterOptions{.batch_rows = 20'000, .truncate = true});
    w.beginRun({});
    for (int i = 0; i < n; ++i) {
      // Track (0,0) in time order, track (0,1) backwards, track (1,0) in shuffled blocks.
      w.addActivity(act(0, 0, i * 10, i * 10 + 5, ActivityKind::Kernel, "a", i));
      w.addActivity(act(0, 1, (n - i) * 10, (n - i) * 10 + 5, ActivityKind::Kernel, "b", i));
      int64_t shuffled = static_cast<int64_t>((i * 7919) % n);
      w.addActivity(act(1, 0, shuffled * 10, shuffled * 10 + 5, ActivityKind::Collective, "c", i));
    }
  }
  TraceReader r(path);
  auto all = r.loadRun(1);
  REQUIRE(all.size() == 3);
  for (const auto& t : all) {
    INFO("track " << t.rank << "/" << t.stream);
    REQUIRE(t.size() == static_cast<size_t>(n));
    CHECK(std::is_sorted(t.start_ns.begin(), t.start_ns.end()));
    Track single = r.loadTrack(1, t.rank, t.stream);
    CHECK(single.start_ns == t.start_ns);
    CHECK(single.task_id == t.task_id);
    CHECK(single.end_ns == t.end_ns);
  }
  // The backwards track: [990,995) ends before the window, [2000,2005) starts at its end.
  Track window = r.loadWindow(1, 0, 1, 1000, 2000);
  REQUIRE(window.size() == 100);
  CHECK(window.start_ns.front() == 1000);
  CHECK(window.start_ns.back() == 1990);
  CHECK(std::is_sorted(window.start_ns.begin(), window.start_ns.end()));
}
