// Nsight Systems SQLite export import. Tables are found by name prefix
// (CUPTI_ACTIVITY_KIND_KERNEL, ..._MEMCPY, ..._MEMSET, ..._SYNCHRONIZATION,
// ..._RUNTIME, NVTX_EVENTS, TARGET_INFO_GPU, StringIds) and columns by name,
// so exports of different nsys versions load alike; the export's
// EXPORT_SCHEMA_VERSION (META_DATA_EXPORT or EXPORT_META_DATA) is recorded.
// Each CUDA device becomes a rank (in device id order); each (device, CUDA
// stream) a stream; runtime calls land on their host thread of the rank
// whose GPU work they launched (matched by correlation id).
#include <fmt/core.h>

#include <filesystem>
#include <map>
#include <set>
#include <unordered_map>

#include "traces/importers/importers.h"
#include "traces/importers/step_names.h"
#include "traces/store/schema.h"
#include "traces/store/sqlite_util.h"
#include "traces/store/trace_writer.h"
#include "traces/trackers/stats.h"
#include "traces/trackers/track_ids.h"

namespace tandem::traces {

namespace {

// NVTX event types in nsys exports: push/pop and start/end ranges.
constexpr int kNvtxPushPopRange = 59;
constexpr int kNvtxStartEndRange = 60;

class NsysImporter {
 public:
  NsysImporter(std::string path, TraceWriter& w)
      : path_(std::move(path)), w_(w), db_(checked(path_), SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX) {}

  ImportResult run(const std::string& run_name) {
    try {
      sql::Stmt s(db_, "SELECT name FROM sqlite_master WHERE type='table'");
      while (s.step()) tables_.insert(s.colText(0));
    } catch (const TraceError&) {
      fail("not a readable SQLite database (truncated or damaged?)");
    }
    kernel_ = table("CUPTI_ACTIVITY_KIND_KERNEL");
    if (kernel_.empty() && table("CUPTI_ACTIVITY_KIND_MEMCPY").empty())
      fail("not an Nsight Systems export: no CUPTI_ACTIVITY_KIND_KERNEL or _MEMCPY table (was CUDA traced?)");
    if (table("StringIds").empty()) fail("not an Nsight Systems export: missing table StringIds");
    loadStrings();
    std::string schema = exportSchemaVersion();

    RunInfo info;
    info.kind = RunKind::Imported;
    info.name = run_name.empty() ? std::filesystem::path(path_).filename().string() : run_name;
    info.tool_version = "nsys export schema " + schema;
    info.devices_json = devicesJson();
    mapDevices();
    info.world_size = std::max<int>(1, static_cast<int>(rank_of_device_.size()));
    result_.run = w_.beginRun(info);
    result_.format = "nsys";
    result_.ranks = info.world_size;
    if (schema == "unknown")
      w_.incrementStat(stats::kNsysNoSchemaVersion.row(1));

    gpuTable(kernel_, ActivityKind::Kernel);
    gpuTable(table("CUPTI_ACTIVITY_KIND_MEMCPY"), ActivityKind::Memcpy);
    gpuTable(table("CUPTI_ACTIVITY_KIND_MEMSET"), ActivityKind::Memset);
    gpuTable(table("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"), ActivityKind::Sync);
    runtimeTable(table("CUPTI_ACTIVITY_KIND_RUNTIME"));
    nvtxTable(table("NVTX_EVENTS"));
    int skipped = 0;
    for (const auto& t : tables_)
      if (!used_.count(t) && (t.starts_with("CUPTI_") || t.starts_with("NVTX_") || t.starts_with("OSRT_"))) ++skipped;
    if (skipped > 0)
      w_.setStat(stats::kNsysTablesNotImported.row(skipped));
    if (result_.activities == 0) fail("no GPU activity found (kernel, memcpy and memset tables are empty)");
    writeStreams();
    for (const auto& [key, span] : steps_) {
      w_.addStep({key.first, key.second, span.first, span.second});
      ++result_.steps;
    }
    w_.flush();
    return result_;
  }

 private:
  static const std::string& checked(const std::string& p) {
    if (!std::filesystem::exists(p)) throw TraceError(fmt::format("{}: no such file", p));
    checkSqliteHeader(p);
    return p;
  }

  [[noreturn]] void fail(const std::string& what) const { throw TraceError(fmt::format("{}: {}", path_, what)); }

  // The first table whose name starts with the prefix ("" if none).
  std::string table(const std::string& prefix) {
    if (tables_.count(prefix)) return used(prefix);
    for (const auto& t : tables_)
      if (t.starts_with(prefix)) return used(t);
    return "";
  }
  std::string used(const std::string& t) {
    used_.insert(t);
    return t;
  }

  std::set<std::string> columns(const std::string& t) {
    std::set<std::string> out;
    sql::Stmt s(db_, fmt::format("PRAGMA table_info(\"{}\")", t));
    while (s.step()) out.insert(s.colText(1));
    return out;
  }

  void require(const std::string& t, const std::set<std::string>& have, std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (!have.count(n)) fail(fmt::format("table {}: missing column '{}'", t, n));
  }

  void loadStrings() {
    sql::Stmt s(db_, "SELECT id, value FROM StringIds");
    while (s.step()) strings_[s.colInt(0)] = s.colText(1);
  }

  std::string str(int64_t id) {
    auto it = strings_.find(id);
    if (it != strings_.end()) return it->second;
    w_.incrementStat(stats::kNsysUnknownStringId.row(1));
    return fmt::format("<string {}>", id);
  }

  std::string exportSchemaVersion() {
    for (const char* prefix : {"META_DATA_EXPORT", "EXPORT_META_DATA"}) {
      std::string t = table(prefix);
      if (t.empty()) continue;
      auto cols = columns(t);
      if (!cols.count("name") || !cols.count("value")) continue;
      sql::Stmt s(db_, fmt::format("SELECT value FROM \"{}\" WHERE name='EXPORT_SCHEMA_VERSION'", t));
      if (s.step()) return s.colText(0);
    }
    return "unknown";
  }

  std::string devicesJson() {
    std::string t = table("TARGET_INFO_GPU");
    if (t.empty()) return "";
    auto cols = columns(t);
    if (!cols.count("id")) return "";
    bool has_name = cols.count("name") > 0;
    sql::Stmt s(db_, fmt::format("SELECT id{} FROM \"{}\" ORDER BY id", has_name ? ", name" : "", t));
    std::string out = "[";
    while (s.step()) {
      if (out.size() > 1) out += ",";
      std::string name = has_name ? s.colText(1) : "";
      std::string escaped;
      for (char c : name) {
        if (c == '"' || c == '\\') escaped += '\\';
        escaped += c;
      }
      out += fmt::format("{{\"id\":{},\"name\":\"{}\"}}", s.colInt(0), escaped);
    }
    return out + "]";
  }

  // Ranks in device id order over every device that ran GPU work.
  void mapDevices() {
    std::set<int64_t> devices;
    for (const char* prefix :
         {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"}) {
      std::string t = table(prefix);
      if (t.empty() || !columns(t).count("deviceId")) continue;
      sql::Stmt s(db_, fmt::format("SELECT DISTINCT deviceId FROM \"{}\"", t));
      while (s.step()) devices.insert(s.colInt(0));
    }
    if (devices.empty()) devices.insert(0);
    for (int64_t d : devices) rank_of_device_.emplace(d, static_cast<int>(rank_of_device_.size()));
  }

  void gpuTable(const std::string& t, ActivityKind kind) {
    if (t.empty()) return;
    auto cols = columns(t);
    require(t, cols, {"start", "end", "deviceId", "streamId"});
    std::string name_col = kind != ActivityKind::Kernel ? ""
                           : cols.count("demangledName")  ? "demangledName"
                           : cols.count("shortName")      ? "shortName"
                                                          : "";
    if (kind == ActivityKind::Kernel && name_col.empty())
      fail(fmt::format("table {}: missing column 'demangledName'", t));
    bool geometry = kind == ActivityKind::Kernel && cols.count("gridX") && cols.count("blockZ");
    // Newer exports also carry each block's registers and shared memory.
    bool resources = geometry && cols.count("registersPerThread") && cols.count("staticSharedMemory") &&
                     cols.count("dynamicSharedMemory");
    auto opt = [&](const char* c) { return cols.count(c) ? std::string(c) : std::string("NULL"); };
    std::string q = fmt::format(
        "SELECT start, \"end\", deviceId, streamId, {}, {}, {}, {} FROM \"{}\" ORDER BY start", opt("correlationId"),
        kind == ActivityKind::Kernel ? name_col : opt("bytes"), kind == ActivityKind::Memcpy ? opt("copyKind") : "NULL",
        geometry ? std::string("gridX, gridY, gridZ, blockX, blockY, blockZ") +
                       (resources ? ", registersPerThread, staticSharedMemory, dynamicSharedMemory" : "")
                 : std::string("NULL"),
        t);
    sql::Stmt s(db_, q);
    ActivityRow a;
    a.kind = kind;
    while (s.step()) {
      int64_t start = s.colInt(0), end = s.colInt(1);
      if (start == 0 && end == 0) {
        w_.incrementStat(stats::kNsysNoTimestamp.row(1));
        continue;
      }
      if (end < start) {
        w_.incrementStat(stats::kNsysNegativeDuration.row(1));
        continue;
      }
      int64_t device = s.colInt(2);
      a.rank = rank_of_device_.at(device);
      a.device = static_cast<int>(device);
      a.stream = importedStreamTrack(s.colInt(3), device_tracks_);
      a.start_ns = start;
      a.end_ns = end;
      a.correlation_id = s.colIsNull(4) ? -1 : s.colInt(4);
      a.bytes = 0;
      a.geometry.reset();
      StreamUse& use = streams_[{a.rank, a.stream}];
      use.device = a.device;
      use.source = s.colInt(3);
      if (kind == ActivityKind::Kernel) {
        a.name = str(s.colInt(5));
        bool nccl = a.name.find("nccl") != std::string::npos || a.name.find("NCCL") != std::string::npos;
        a.kind = nccl ? ActivityKind::Collective : ActivityKind::Kernel;
        (nccl ? use.comm : use.compute) = true;
        if (geometry)
          a.geometry = LaunchGeometry{static_cast<int>(s.colInt(7)),  static_cast<int>(s.colInt(8)),
                                      static_cast<int>(s.colInt(9)),  static_cast<int>(s.colInt(10)),
                                      static_cast<int>(s.colInt(11)), static_cast<int>(s.colInt(12))};
        if (geometry && resources && !s.colIsNull(13) && !s.colIsNull(14) && !s.colIsNull(15)) {
          a.geometry->registers_per_thread = static_cast<int>(s.colInt(13));
          a.geometry->shared_memory_bytes = static_cast<int>(s.colInt(14) + s.colInt(15));
        }
      } else if (kind == ActivityKind::Memcpy || kind == ActivityKind::Memset) {
        a.bytes = s.colIsNull(5) ? 0 : s.colInt(5);
        a.name = kind == ActivityKind::Memset ? "[CUDA memset]" : memcpyName(s.colIsNull(6) ? -1 : s.colInt(6));
        use.copy = true;
      } else {
        a.name = "[CUDA synchronization]";
      }
      if (a.correlation_id >= 0) rank_of_correlation_[a.correlation_id] = a.rank;
      w_.addActivity(a);
      ++result_.activities;
    }
  }

  // CUPTI memcpy kinds (CUpti_ActivityMemcpyKind).
  static std::string memcpyName(int64_t kind) {
    switch (kind) {
      case 1: return "[CUDA memcpy HtoD]";
      case 2: return "[CUDA memcpy DtoH]";
      case 3: return "[CUDA memcpy HtoA]";
      case 4: return "[CUDA memcpy AtoH]";
      case 5: return "[CUDA memcpy AtoA]";
      case 6: return "[CUDA memcpy AtoD]";
      case 7: return "[CUDA memcpy DtoA]";
      case 8: return "[CUDA memcpy DtoD]";
      case 9: return "[CUDA memcpy HtoH]";
      case 10: return "[CUDA memcpy PtoP]";
      default: return "[CUDA memcpy]";
    }
  }

  int hostStream(int rank, int64_t global_tid) {
    auto [it, fresh] = host_streams_.emplace(std::make_pair(rank, global_tid), 0);
    if (fresh) it->second = host_tracks_.idOf(std::to_string(rank) + "/" + std::to_string(global_tid));
    return it->second;
  }

  void runtimeTable(const std::string& t) {
    if (t.empty()) return;
    auto cols = columns(t);
    require(t, cols, {"start", "end", "globalTid", "correlationId", "nameId"});
    sql::Stmt s(db_, fmt::format("SELECT start, \"end\", globalTid, correlationId, nameId FROM \"{}\" "
                                 "ORDER BY start", t));
    ActivityRow a;
    a.kind = ActivityKind::Host;
    while (s.step()) {
      auto rank = rank_of_correlation_.find(s.colInt(3));
      if (rank == rank_of_correlation_.end()) {
        // Calls that launched nothing (cudaStreamSynchronize, cudaMalloc...)
        // belong to the thread's rank when known, else rank 0.
        auto known = rank_of_thread_.find(s.colInt(2));
        a.rank = known != rank_of_thread_.end() ? known->second : 0;
      } else {
        a.rank = rank->second;
        rank_of_thread_[s.colInt(2)] = a.rank;
      }
      a.start_ns = s.colInt(0);
      a.end_ns = std::max(a.start_ns, s.colInt(1));
      a.stream = hostStream(a.rank, s.colInt(2));
      a.correlation_id = s.colInt(3);
      a.name = str(s.colInt(4));
      w_.addActivity(a);
      ++result_.activities;
    }
  }

  void nvtxTable(const std::string& t) {
    if (t.empty()) return;
    auto cols = columns(t);
    require(t, cols, {"start", "end", "eventType", "globalTid"});
    bool text_id = cols.count("textId") > 0, text = cols.count("text") > 0;
    std::string q = fmt::format("SELECT start, \"end\", eventType, globalTid, {}, {}, {} FROM \"{}\" "
                                "ORDER BY globalTid, start",
                                text ? "text" : "NULL", text_id ? "textId" : "NULL",
                                cols.count("domainId") ? "domainId" : "0", t);
    sql::Stmt s(db_, q);
    std::map<int64_t, std::vector<int64_t>> open_ends;  // per thread
    while (s.step()) {
      int64_t type = s.colInt(2);
      if (type != kNvtxPushPopRange && type != kNvtxStartEndRange) {
        w_.incrementStat(stats::kNsysNvtxSkippedEventType.row(std::to_string(type), 1));
        continue;
      }
      if (s.colIsNull(1)) {
        w_.incrementStat(stats::kNsysNvtxUnterminatedRange.row(1));
        continue;
      }
      RangeRow r;
      int64_t tid = s.colInt(3);
      auto known = rank_of_thread_.find(tid);
      r.rank = known != rank_of_thread_.end() ? known->second : 0;
      r.start_ns = s.colInt(0);
      r.end_ns = s.colInt(1);
      r.name = !s.colIsNull(4) ? s.colText(4) : (!s.colIsNull(5) ? str(s.colInt(5)) : "");
      int64_t domain = s.colInt(6);
      r.domain = domain == 0 ? "" : fmt::format("domain {}", domain);
      auto& ends = open_ends[tid];
      while (!ends.empty() && ends.back() <= r.start_ns) ends.pop_back();
      r.depth = type == kNvtxPushPopRange ? static_cast<int>(ends.size()) : 0;
      if (type == kNvtxPushPopRange) ends.push_back(r.end_ns);
      // A step range (tandem's "step N", torch's "ProfilerStep#N"): the
      // union of its spans on the rank's threads.
      if (const std::optional<int> step = stepNumberOf(r.name)) {
        auto [it, fresh] = steps_.try_emplace({r.rank, *step}, r.start_ns, r.end_ns);
        if (!fresh) it->second = {std::min(it->second.first, r.start_ns), std::max(it->second.second, r.end_ns)};
      }
      w_.addRange(r);
      ++result_.ranges;
    }
  }

  void writeStreams() {
    for (const auto& [key, use] : streams_) {
      StreamKind kind = use.compute ? StreamKind::Compute : (use.comm ? StreamKind::Comm : StreamKind::Copy);
      w_.addStream({key.first, key.second, kind, fmt::format("CUDA stream {}", use.source), use.device});
    }
    for (const auto& [key, id] : host_streams_)
      w_.addStream({key.first, id, StreamKind::Host, fmt::format("thread {}", key.second & 0xFFFFFF), -1});
  }

  struct StreamUse {
    int64_t source = -1;  // the export's own stream id
    int device = -1;
    bool compute = false, comm = false, copy = false;
  };

  std::string path_;
  TraceWriter& w_;
  sql::Db db_;
  std::set<std::string> tables_, used_;
  std::string kernel_;
  std::unordered_map<int64_t, std::string> strings_;
  std::map<int64_t, int> rank_of_device_;
  std::unordered_map<int64_t, int> rank_of_correlation_;
  std::unordered_map<int64_t, int> rank_of_thread_;
  std::map<std::pair<int, int64_t>, int> host_streams_;
  TrackNumbering host_tracks_{kHostThreadTracks};
  TrackNumbering device_tracks_{kDeviceStreamTracks};
  std::map<std::pair<int, int>, StreamUse> streams_;
  std::map<std::pair<int, int>, std::pair<int64_t, int64_t>> steps_;  // (rank, step) -> span of its ranges
  ImportResult result_;
};

}  // namespace

ImportResult importNsys(const std::string& path, TraceWriter& writer, const std::string& run_name) {
  return NsysImporter(path, writer).run(run_name);
}

}  // namespace tandem::traces
