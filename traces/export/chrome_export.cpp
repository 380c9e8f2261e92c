#include "traces/export/chrome_export.h"

#include <fmt/core.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "traces/analysis/kernel_names.h"
#include "traces/store/trace_reader.h"

namespace tandem::traces {

namespace {

using Json = nlohmann::ordered_json;

// Trace Event Format timestamps are microseconds; keep nanosecond precision.
double us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

struct TaskSpan {
  int stream = 0;
  int64_t first_start = INT64_MAX;  // first activity of the task
  int64_t last_start = INT64_MIN;   // last activity of the task
  int last_stream = 0;
  int first_stream = 0;
};

class EventWriter {
 public:
  explicit EventWriter(std::ostream& out) : out_(out) { out_ << "{\"traceEvents\":[\n"; }
  void add(const Json& event) {
    if (!first_) out_ << ",\n";
    first_ = false;
    out_ << event.dump();
  }
  void finish(const Json& other) {
    out_ << "\n],\"displayTimeUnit\":\"ns\",\"otherData\":" << other.dump() << "}\n";
  }

 private:
  std::ostream& out_;
  bool first_ = true;
};

}  // namespace

ChromeExportSummary exportChromeTrace(TraceReader& reader, int64_t run, std::ostream& out) {
  RunInfo info = reader.run(run);
  if (reader.activityCount(run) == 0)
    throw TraceError(fmt::format("{}: run {} ('{}') has no activities to export", reader.path(), run, info.name));
  ChromeExportSummary summary;
  EventWriter w(out);

  std::set<int> ranks;
  std::set<std::pair<int, int>> threads;
  for (const auto& s : reader.streams(run)) {
    ranks.insert(s.rank);
    threads.insert({s.rank, s.stream});
    w.add(Json{{"name", "thread_name"}, {"ph", "M"}, {"pid", s.rank}, {"tid", s.stream},
               {"args", {{"name", fmt::format("{} ({})", s.name, toString(s.kind))}}}});
    w.add(Json{{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", s.rank}, {"tid", s.stream},
               {"args", {{"sort_index", s.stream}}}});
  }

  std::map<std::pair<int, int64_t>, TaskSpan> tasks;
  reader.forEachActivity(run, [&](const ActivityRow& a) {
    if (!threads.count({a.rank, a.stream})) {
      // A track without a stream row still gets a named thread.
      threads.insert({a.rank, a.stream});
      w.add(Json{{"name", "thread_name"}, {"ph", "M"}, {"pid", a.rank}, {"tid", a.stream},
                 {"args", {{"name", fmt::format("stream {}", a.stream)}}}});
    }
    ranks.insert(a.rank);
    Json args = Json::object();
    if (a.task_id >= 0) args["task"] = a.task_id;
    if (a.phase != Phase::None) args["phase"] = std::string(toString(a.phase));
    if (a.layer >= 0) args["layer"] = a.layer;
    if (a.micro_batch >= 0) args["micro_batch"] = a.micro_batch;
    if (a.bytes > 0) args["bytes"] = a.bytes;
    if (a.flops > 0) args["flops"] = a.flops;
    if (a.correlation_id >= 0) args["correlation"] = a.correlation_id;
    if (a.geometry) {
      const auto& g = *a.geometry;
      args["grid"] = Json::array({g.grid_x, g.grid_y, g.grid_z});
      args["block"] = Json::array({g.block_x, g.block_y, g.block_z});
      // Named as PyTorch's profiler names them, so `tandem import` reads them back.
      if (g.hasResources()) {
        args["registers per thread"] = g.registers_per_thread;
        args["shared memory"] = g.shared_memory_bytes;
        if (g.cluster_x > 0) args["cluster"] = Json::array({g.cluster_x, g.cluster_y, g.cluster_z});
      }
    }
    // The compact name on the slice, the whole demangled symbol beside it.
    const std::string shown = compactName(a.name);
    if (shown != a.name) args["symbol"] = demangledName(a.name);
    w.add(Json{{"name", shown}, {"cat", std::string(toString(a.kind))}, {"ph", "X"}, {"ts", us(a.start_ns)},
               {"dur", us(a.end_ns - a.start_ns)}, {"pid", a.rank}, {"tid", a.stream}, {"args", args}});
    ++summary.slices;
    if (a.task_id >= 0) {
      TaskSpan& t = tasks[{a.rank, a.task_id}];
      if (a.start_ns < t.first_start) t.first_start = a.start_ns, t.first_stream = a.stream;
      if (a.start_ns > t.last_start) t.last_start = a.start_ns, t.last_stream = a.stream;
    }
  });

  // Flows: a dependency whose producer ran on another stream is an event wait.
  int64_t flow_id = 1;
  for (const auto& task : reader.planTasks(run)) {
    auto consumer = tasks.find({task.rank, task.task_id});
    if (consumer == tasks.end()) continue;
    for (int64_t dep : task.deps) {
      auto producer = tasks.find({task.rank, dep});
      if (producer == tasks.end() || producer->second.last_stream == consumer->second.first_stream) continue;
      std::string name = fmt::format("wait {} -> {}", dep, task.task_id);
      w.add(Json{{"name", name}, {"cat", "dependency"}, {"ph", "s"}, {"id", flow_id},
                 {"ts", us(producer->second.last_start)}, {"pid", task.rank}, {"tid", producer->second.last_stream}});
      w.add(Json{{"name", name}, {"cat", "dependency"}, {"ph", "f"}, {"bp", "e"}, {"id", flow_id},
                 {"ts", us(consumer->second.first_start)}, {"pid", task.rank},
                 {"tid", consumer->second.first_stream}});
      ++flow_id;
      ++summary.flows;
    }
  }

  std::set<int> annotated, stepped;
  for (const auto& r : reader.ranges(run)) {
    if (annotated.insert(r.rank).second)
      w.add(Json{{"name", "thread_name"}, {"ph", "M"}, {"pid", r.rank}, {"tid", kChromeAnnotationTid},
                 {"args", {{"name", "annotations"}}}});
    Json args{{"depth", r.depth}};
    if (!r.domain.empty()) args["domain"] = r.domain;
    w.add(Json{{"name", r.name}, {"cat", "range"}, {"ph", "X"}, {"ts", us(r.start_ns)},
               {"dur", us(r.end_ns - r.start_ns)}, {"pid", r.rank}, {"tid", kChromeAnnotationTid}, {"args", args}});
    ++summary.slices;
  }
  for (const auto& s : reader.steps(run)) {
    if (stepped.insert(s.rank).second)
      w.add(Json{{"name", "thread_name"}, {"ph", "M"}, {"pid", s.rank}, {"tid", kChromeStepTid},
                 {"args", {{"name", "steps"}}}});
    w.add(Json{{"name", fmt::format("step {}", s.step)}, {"cat", "step"}, {"ph", "X"}, {"ts", us(s.start_ns)},
               {"dur", us(s.end_ns - s.start_ns)}, {"pid", s.rank}, {"tid", kChromeStepTid},
               {"args", {{"step", s.step}}}});
    ++summary.slices;
  }
  for (const auto& c : reader.counters(run)) {
    w.add(Json{{"name", c.name}, {"ph", "C"}, {"ts", us(c.ts_ns)}, {"pid", c.rank}, {"args", {{"value", c.value}}}});
    ++summary.counters;
  }
  for (int rank : ranks) {
    w.add(Json{
        {"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", fmt::format("rank {}", rank)}}}});
    w.add(Json{{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"args", {{"sort_index", rank}}}});
  }
  summary.processes = static_cast<int>(ranks.size());
  summary.threads = static_cast<int>(threads.size() + annotated.size() + stepped.size());
  w.finish(Json{{"tandem_run", run},
                {"run_kind", std::string(toString(info.kind))},
                {"run_name", info.name},
                {"job_hash", info.job_hash},
                {"world_size", info.world_size}});
  return summary;
}

}  // namespace tandem::traces
