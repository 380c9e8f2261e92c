#include "plan_trace/plan_rows.h"

#include <string>

namespace tandem::plan_trace {

std::vector<traces::PlanTaskRow> planTaskRows(int rank, const RankPlan& rp) {
  std::vector<int64_t> recorder(size_t(rp.num_events > 0 ? rp.num_events : 0), -1);
  for (const Task& t : rp.tasks)
    if (t.record_event >= 0 && t.record_event < rp.num_events) recorder[size_t(t.record_event)] = t.id;
  std::vector<int64_t> last_on_stream(rp.streams.size(), -1);
  std::vector<traces::PlanTaskRow> rows;
  rows.reserve(rp.tasks.size());
  for (const Task& t : rp.tasks) {
    traces::PlanTaskRow row;
    row.rank = rank;
    row.task_id = t.id;
    row.name = t.name;
    row.op = t.collective ? std::string(toString(t.collective->op)) : std::string(toString(t.op));
    row.phase = t.phase;
    row.layer = t.layer;
    row.micro_batch = t.micro_batch;
    row.stream = t.stream;
    row.flops = t.flops;
    row.bytes = t.collective ? t.collective->bytes : t.bytes_read + t.bytes_written;
    if (t.stream >= 0 && size_t(t.stream) < last_on_stream.size()) {
      if (last_on_stream[size_t(t.stream)] >= 0) row.deps.push_back(last_on_stream[size_t(t.stream)]);
      last_on_stream[size_t(t.stream)] = t.id;
    }
    for (int e : t.wait_events)
      if (e >= 0 && size_t(e) < recorder.size() && recorder[size_t(e)] >= 0) row.deps.push_back(recorder[size_t(e)]);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<int64_t> arenaLiveBytes(const RankPlan& rp) {
  const size_t n = rp.tasks.size();
  std::vector<int64_t> delta(n + 1, 0);
  int64_t always = 0;
  for (const Buffer& b : rp.buffers) {
    if (b.parent >= 0 || b.offset < 0) continue;
    if (b.persistent) {
      always += b.bytes;
      continue;
    }
    if (b.first_use < 0 || b.last_use < b.first_use || size_t(b.last_use) >= n) continue;
    delta[size_t(b.first_use)] += b.bytes;
    delta[size_t(b.last_use) + 1] -= b.bytes;
  }
  std::vector<int64_t> live(n);
  int64_t sum = always;
  for (size_t i = 0; i < n; ++i) live[i] = sum += delta[i];
  return live;
}

}  // namespace tandem::plan_trace
