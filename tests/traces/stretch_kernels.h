#pragma once
// Test helper: a trace whose kernels of some op kinds ran slower. Every GPU
// activity of a plan task whose op starts with `op_prefix` ("matmul": the
// three GEMM roles) is made `factor` times as long, and everything of its
// rank that comes after it is pushed back by the time added so far (a GPU
// on which those kernels are slower and all else runs alike): activities,
// steps, ranges, counters and collectives, in place, in one transaction.
// Returns the number of activities stretched.

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "traces/store/sqlite_util.h"

namespace tandem::traces::testing {

inline int64_t stretchOpKernels(const std::string& path, int64_t run, const std::string& op_prefix, double factor) {
  sql::Db db(path, SQLITE_OPEN_READWRITE);
  db.exec("BEGIN");
  // Per rank, the stretched activities' original ends and the time each adds.
  struct Added {
    int64_t end_ns, extra_ns;
  };
  std::map<int64_t, std::vector<Added>> added;
  int64_t stretched = 0;
  {
    sql::Stmt q(db,
                "SELECT a.rank, a.start_ns, a.end_ns FROM activities a JOIN plan_tasks p ON p.run = a.run AND "
                "p.rank = a.rank AND p.task_id = a.task_id WHERE a.run = ? AND substr(p.op, 1, length(?)) = ?");
    q.bind(1, run);
    q.bind(2, op_prefix);
    q.bind(3, op_prefix);
    while (q.step()) {
      const int64_t d = q.colInt(2) - q.colInt(1);
      added[q.colInt(0)].push_back({q.colInt(2), int64_t(double(d) * (factor - 1.0) + 0.5)});
      ++stretched;
    }
  }
  // delay(rank, t): the time added by stretched activities that ended by t.
  std::map<int64_t, std::vector<int64_t>> ends, sums;
  for (auto& [rank, v] : added) {
    std::sort(v.begin(), v.end(), [](const Added& a, const Added& b) { return a.end_ns < b.end_ns; });
    int64_t total = 0;
    for (const Added& a : v) {
      ends[rank].push_back(a.end_ns);
      sums[rank].push_back(total += a.extra_ns);
    }
  }
  auto delay = [&](int64_t rank, int64_t t) -> int64_t {
    const auto e = ends.find(rank);
    if (e == ends.end()) return 0;
    const auto it = std::upper_bound(e->second.begin(), e->second.end(), t);
    return it == e->second.begin() ? 0 : sums.at(rank)[size_t(it - e->second.begin() - 1)];
  };
  // Each table's rows, moved; a table's rows are read whole before any is
  // written (ranges key on their start).
  // `select` gives the rank, `time_columns` times and `key_columns` keys;
  // `update` takes the moved times, then the keys.
  auto shift = [&](const std::string& select, const std::string& update, int time_columns, int key_columns) {
    struct Row {
      std::vector<int64_t> key;
      int64_t rank;
      std::vector<int64_t> times;
    };
    std::vector<Row> rows;
    sql::Stmt q(db, select);
    q.bind(1, run);
    while (q.step()) {
      Row r;
      r.rank = q.colInt(0);
      for (int i = 0; i < time_columns; ++i) r.times.push_back(q.colInt(1 + i));
      for (int i = 0; i < key_columns; ++i) r.key.push_back(q.colInt(1 + time_columns + i));
      rows.push_back(std::move(r));
    }
    sql::Stmt u(db, update);
    for (const Row& r : rows) {
      int index = 1;
      for (int64_t t : r.times) u.bind(index++, t + delay(r.rank, t));
      for (int64_t k : r.key) u.bind(index++, k);
      u.run();
    }
  };
  shift("SELECT rank, start_ns, end_ns, id FROM activities WHERE run = ?",
        "UPDATE activities SET start_ns = ?, end_ns = ? WHERE id = ?", 2, 1);
  shift("SELECT rank, start_ns, end_ns, run, rank, step FROM steps WHERE run = ?",
        "UPDATE steps SET start_ns = ?, end_ns = ? WHERE run = ? AND rank = ? AND step = ?", 2, 3);
  shift("SELECT rank, start_ns, end_ns, run, rank, start_ns, seq FROM ranges WHERE run = ? ORDER BY start_ns DESC",
        "UPDATE ranges SET start_ns = ?, end_ns = ? WHERE run = ? AND rank = ? AND start_ns = ? AND seq = ?", 2, 4);
  shift("SELECT rank, start_ns, end_ns, rowid FROM collectives WHERE run = ?",
        "UPDATE collectives SET start_ns = ?, end_ns = ? WHERE rowid = ?", 2, 1);
  shift("SELECT rank, ts_ns, run, rank, name, ts_ns, seq FROM counters WHERE run = ? ORDER BY ts_ns DESC",
        "UPDATE counters SET ts_ns = ? WHERE run = ? AND rank = ? AND name = ? AND ts_ns = ? AND seq = ?", 1, 5);
  // The readers' index of the activities by time.
  db.exec(
      "UPDATE activity_chunks SET "
      "min_start_ns = (SELECT MIN(start_ns) FROM activities a WHERE a.id BETWEEN first_id AND last_id AND "
      "a.run = activity_chunks.run AND a.rank = activity_chunks.rank AND a.stream = activity_chunks.stream), "
      "max_start_ns = (SELECT MAX(start_ns) FROM activities a WHERE a.id BETWEEN first_id AND last_id AND "
      "a.run = activity_chunks.run AND a.rank = activity_chunks.rank AND a.stream = activity_chunks.stream), "
      "max_end_ns = (SELECT MAX(end_ns) FROM activities a WHERE a.id BETWEEN first_id AND last_id AND "
      "a.run = activity_chunks.run AND a.rank = activity_chunks.rank AND a.stream = activity_chunks.stream)");
  db.exec("COMMIT");
  return stretched;
}

}  // namespace tandem::traces::testing
