// PyTorch profiler (Kineto) trace import. The file is a Chrome trace JSON
// object: "traceEvents" (complete events "X" with ts/dur in microseconds,
// metadata "M", flows "s"/"f"), "deviceProperties" and "distributedInfo".
#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <vector>
#include <unistd.h>
#include <zlib.h>

#include "traces/importers/importers.h"
#include "traces/importers/step_names.h"
#include "traces/store/merge.h"
#include "traces/store/trace_writer.h"
#include "traces/trackers/stats.h"
#include "traces/trackers/track_ids.h"

namespace tandem::traces {

namespace {

using Json = nlohmann::json;

// Whether the file starts with gzip's magic bytes.
bool isGzip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char magic[2] = {0, 0};
  in.read(reinterpret_cast<char*>(magic), 2);
  return in.gcount() == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}


std::string typeName(const Json& j) { return j.type_name(); }

bool containsNoCase(std::string_view s, std::string_view needle) {
  auto it = std::search(s.begin(), s.end(), needle.begin(), needle.end(),
                        [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
  return it != s.end();
}

class KinetoImporter {
 public:
  KinetoImporter(std::string path, TraceWriter& w) : path_(std::move(path)), w_(w) {}

  ImportResult run(const std::string& run_name) {
    Json root = parse();
    const Json* events = &root;
    if (root.is_object()) {
      auto it = root.find("traceEvents");
      if (it == root.end()) fail("missing field 'traceEvents' (not a PyTorch profiler trace?)");
      if (!it->is_array()) fail(fmt::format("field 'traceEvents' must be an array, got {}", typeName(*it)));
      events = &*it;
    } else if (!root.is_array()) {
      fail(fmt::format("expected a JSON object with 'traceEvents', got {}", typeName(root)));
    }
    if (root.is_object()) readHeader(root);

    RunInfo info;
    info.kind = RunKind::Imported;
    info.name = run_name.empty() ? std::filesystem::path(path_).filename().string() : run_name;
    info.devices_json = devices_;
    info.tool_version = fmt::format("kineto schema {}", schema_);
    info.world_size = world_size_;
    result_.run = w_.beginRun(info);
    result_.format = "kineto";
    result_.ranks = 1;
    // Times are microseconds after the trace's own base, which differs
    // between ranks: the base is the rank's clock offset, so that merging
    // per-rank files (importKinetoFolder) puts them on one clock.
    if (base_ns_) w_.addClock(ClockRow{rank_, "kineto", 0, 0, 0, *base_ns_});

    // Metadata first so that streams get their names.
    for (size_t i = 0; i < events->size(); ++i) {
      const Json& e = (*events)[i];
      if (!e.is_object()) fail(fmt::format("traceEvents[{}] must be an object, got {}", i, typeName(e)));
      std::string ph = field<std::string>(e, i, "ph");
      if (ph == "M") metadata(e);
    }
    for (size_t i = 0; i < events->size(); ++i) {
      const Json& e = (*events)[i];
      std::string ph = e["ph"].get<std::string>();
      if (ph == "X")
        complete(e, i);
      else if (ph != "M")
        w_.incrementStat(stats::kKinetoSkippedPhase.row(ph, 1));
    }
    if (result_.activities == 0)
      fail("no GPU or CPU activity found (no complete 'X' events of a known category)");
    writeStreams();
    writeRanges();
    writeSteps();
    w_.flush();
    return result_;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw TraceError(fmt::format("{}: {}", path_, what)); }

  Json parse() {
    if (isGzip(path_)) {
      // PyTorch's profiler writes .json.gz when asked to (export_chrome_trace
      // to a name ending in .gz, tensorboard_trace_handler(use_gzip=True)).
      const std::string text = gunzip();
      try {
        return Json::parse(text);
      } catch (const Json::parse_error& e) {
        fail(fmt::format("not valid JSON inside the gzip stream (byte {}): {}", e.byte, e.what()));
      }
    }
    std::ifstream in(path_, std::ios::binary);
    if (!in) fail("cannot open file");
    try {
      return Json::parse(in);
    } catch (const Json::parse_error& e) {
      fail(fmt::format("not valid JSON (byte {}): {}", e.byte, e.what()));
    }
  }

  // The whole decompressed text; a damaged or truncated stream is named.
  std::string gunzip() const {
    gzFile gz = gzopen(path_.c_str(), "rb");
    if (gz == nullptr) fail("cannot open file");
    std::string text;
    std::vector<char> buf(size_t(1) << 20);
    while (true) {
      const int n = gzread(gz, buf.data(), unsigned(buf.size()));
      if (n < 0) {
        int code = 0;
        const std::string why = gzerror(gz, &code);
        gzclose(gz);
        fail("damaged gzip stream: " + why);
      }
      if (n == 0) break;
      text.append(buf.data(), size_t(n));
    }
    // A stream cut short reads as its end; zlib says so at close.
    if (gzclose(gz) != Z_OK) fail("the gzip stream ends early (a truncated file)");
    return text;
  }

  template <typename T>
  T field(const Json& e, size_t i, const char* name) const {
    auto it = e.find(name);
    if (it == e.end()) fail(fmt::format("traceEvents[{}]: missing field '{}'", i, name));
    if constexpr (std::is_same_v<T, std::string>) {
      if (!it->is_string())
        fail(fmt::format("traceEvents[{}]: field '{}' must be a string, got {}", i, name, typeName(*it)));
    } else {
      if (!it->is_number())
        fail(fmt::format("traceEvents[{}]: field '{}' must be a number, got {}", i, name, typeName(*it)));
    }
    return it->get<T>();
  }

  void readHeader(const Json& root) {
    if (auto it = root.find("schemaVersion"); it != root.end() && it->is_number_integer()) schema_ = it->get<int>();
    if (auto it = root.find("baseTimeNanoseconds"); it != root.end() && it->is_number_integer()) {
      const int64_t base = it->get<int64_t>();
      if (!traceTimeInRange(base)) fail(fmt::format("baseTimeNanoseconds {} lies outside the trace's range", base));
      base_ns_ = base;
    }
    if (auto it = root.find("deviceProperties"); it != root.end()) devices_ = it->dump();
    if (auto it = root.find("distributedInfo"); it != root.end() && it->is_object()) {
      if (auto r = it->find("rank"); r != it->end() && r->is_number_integer()) rank_ = r->get<int>();
      if (auto ws = it->find("world_size"); ws != it->end() && ws->is_number_integer()) world_size_ = ws->get<int>();
    }
  }

  static std::string idOf(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

  void metadata(const Json& e) {
    auto name = e.find("name");
    auto args = e.find("args");
    if (name == e.end() || args == e.end() || !args->is_object() || !name->is_string()) return;
    if (*name == "thread_name" && args->contains("name") && (*args)["name"].is_string() && e.contains("tid"))
      thread_names_[{idOf(e.value("pid", Json(0))), idOf(e["tid"])}] = (*args)["name"].get<std::string>();
  }

  int hostStream(const Json& e) {
    std::pair<std::string, std::string> key{idOf(e.value("pid", Json(0))), idOf(e.value("tid", Json(0)))};
    auto it = host_streams_.find(key);
    if (it != host_streams_.end()) return it->second;
    const int id = host_tracks_.idOf(key.first + "/" + key.second);
    host_streams_[key] = id;
    return id;
  }

  // Microseconds to ns; a time beyond the trace's range (a damaged file)
  // is refused here, before any sum of two of them could overflow.
  int64_t ns(double us, size_t i, const char* field) {
    const double v = std::round(us * 1000.0);
    if (!floatTraceTimeInRange(v))
      fail(fmt::format("traceEvents[{}]: field '{}' ({} us) is outside the trace's range of +-2^62 ns", i, field, us));
    return int64_t(v);
  }

  void complete(const Json& e, size_t i) {
    std::string name = field<std::string>(e, i, "name");
    double ts = field<double>(e, i, "ts");
    double dur = field<double>(e, i, "dur");
    if (dur < 0) fail(fmt::format("traceEvents[{}]: field 'dur' must not be negative ({})", i, dur));
    std::string cat = e.contains("cat") && e["cat"].is_string() ? e["cat"].get<std::string>() : "";
    const Json empty = Json::object();
    const Json& args = e.contains("args") && e["args"].is_object() ? e["args"] : empty;
    auto num = [&](const char* key, int64_t fallback) -> int64_t {
      auto it = args.find(key);
      if (it == args.end() || !it->is_number()) return fallback;
      if (it->is_number_float()) {  // converting an out-of-range double would be undefined
        const double v = it->get<double>();
        if (!floatTraceTimeInRange(v)) fail(fmt::format("traceEvents[{}]: args.{} ({}) is out of range", i, key, v));
        return int64_t(v);
      }
      return it->get<int64_t>();
    };
    ActivityRow a;
    a.rank = rank_;
    a.start_ns = ns(ts, i, "ts");
    if (__builtin_add_overflow(a.start_ns, ns(dur, i, "dur"), &a.end_ns))
      fail(fmt::format("traceEvents[{}]: ts + dur lies outside the trace's range of +-2^62 ns", i));
    a.name = name;
    a.correlation_id = num("correlation", -1);
    if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") {
      int64_t stream = num("stream", -1);
      if (stream < 0) {
        if (e.contains("tid") && e["tid"].is_number_integer()) {
          stream = e["tid"].get<int64_t>();
        } else {
          fail(fmt::format("traceEvents[{}]: GPU event '{}' has neither a numeric args.stream nor tid", i, name));
        }
      }
      a.stream = importedStreamTrack(stream, device_tracks_);
      gpu_streams_[a.stream].source = stream;
      a.device = static_cast<int>(
          num("device", e.contains("pid") && e["pid"].is_number_integer() ? e["pid"].get<int64_t>() : -1));
      if (cat == "kernel") {
        bool nccl = containsNoCase(name, "nccl");
        a.kind = nccl ? ActivityKind::Collective : ActivityKind::Kernel;
        auto g = args.find("grid");
        auto b = args.find("block");
        if (g != args.end() && b != args.end() && g->is_array() && b->is_array() && g->size() == 3 && b->size() == 3 &&
            std::all_of(g->begin(), g->end(), [](const Json& v) { return v.is_number_integer(); }) &&
            std::all_of(b->begin(), b->end(), [](const Json& v) { return v.is_number_integer(); }))
        {
          a.geometry = LaunchGeometry{(*g)[0].get<int>(), (*g)[1].get<int>(), (*g)[2].get<int>(),
                                      (*b)[0].get<int>(), (*b)[1].get<int>(), (*b)[2].get<int>()};
          // What each block holds, where the profiler wrote it: registers
          // per thread (at most 255 on NVIDIA GPUs), shared memory (below
          // 1 MiB per block), a cluster of up to 16 blocks per side.
          auto regs = args.find("registers per thread");
          auto shared = args.find("shared memory");
          if (regs != args.end() && shared != args.end() && regs->is_number_integer() &&
              shared->is_number_integer()) {
            const int64_t r = regs->get<int64_t>(), sh = shared->get<int64_t>();
            if (r < 0 || r > 255 || sh < 0 || sh > (int64_t(1) << 20))
              fail(fmt::format("traceEvents[{}]: args \"registers per thread\" ({}) or \"shared memory\" ({}) "
                               "is out of range (0-255 registers, 0-1 MiB)",
                               i, r, sh));
            a.geometry->registers_per_thread = int(r);
            a.geometry->shared_memory_bytes = int(sh);
            auto cl = args.find("cluster");
            if (cl != args.end() && cl->is_array() && cl->size() == 3 &&
                std::all_of(cl->begin(), cl->end(),
                            [](const Json& v) { return v.is_number_integer() && v.get<int64_t>() >= 0 &&
                                                       v.get<int64_t>() <= 16; })) {
              a.geometry->cluster_x = (*cl)[0].get<int>();
              a.geometry->cluster_y = (*cl)[1].get<int>();
              a.geometry->cluster_z = (*cl)[2].get<int>();
            }
          }
        }
        auto& s = gpu_streams_[a.stream];
        s.device = a.device;
        (nccl ? s.comm : s.compute) = true;
      } else {
        a.kind = cat == "gpu_memcpy" ? ActivityKind::Memcpy : ActivityKind::Memset;
        a.bytes = num("bytes", 0);
        auto& s = gpu_streams_[a.stream];
        s.device = a.device;
        s.copy = true;
      }
    } else if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "cpu_op") {
      a.kind = ActivityKind::Host;
      a.stream = hostStream(e);
    } else if (cat == "user_annotation" || cat == "gpu_user_annotation") {
      RangeRow r{rank_, a.start_ns, a.end_ns, name, 0, cat == "gpu_user_annotation" ? "gpu" : ""};
      ranges_[cat == "gpu_user_annotation" ? -1 - num("stream", 0) : hostStream(e)].push_back(r);
      noteProfilerStep(name, a.start_ns, a.end_ns, cat == "gpu_user_annotation");
      return;
    } else {
      w_.incrementStat(stats::kKinetoSkippedCategory.row(cat.empty() ? std::string("none") : cat, 1));
      return;
    }
    w_.addActivity(a);
    ++result_.activities;
  }

  void writeStreams() {
    for (const auto& [id, s] : gpu_streams_) {
      StreamKind kind = s.compute ? StreamKind::Compute : (s.comm ? StreamKind::Comm : StreamKind::Copy);
      w_.addStream({rank_, id, kind, fmt::format("stream {}", s.source), s.device});
    }
    for (const auto& [key, id] : host_streams_) {
      auto it = thread_names_.find(key);
      w_.addStream({rank_, id, StreamKind::Host, it != thread_names_.end() ? it->second : "thread " + key.second, -1});
    }
  }

  // torch.profiler marks each step as "ProfilerStep#N", once on the CPU
  // and, where a GPU ran its work, once per stream on the GPU.
  void noteProfilerStep(const std::string& name, int64_t start, int64_t end, bool gpu) {
    const std::optional<int> step = stepNumberOf(name);
    if (!step) return;
    auto& [lo, hi] = profiler_steps_[*step][gpu ? 1 : 0];
    lo = lo == 0 && hi == 0 ? start : std::min(lo, start);
    hi = std::max(hi, end);
  }

  // A step per ProfilerStep#N: its GPU span where the trace has one (the
  // work the step launched, as the GPU ran it), else its CPU span.
  void writeSteps() {
    for (const auto& [step, spans] : profiler_steps_) {
      const auto& [lo, hi] = spans[1].second > spans[1].first ? spans[1] : spans[0];
      if (hi <= lo) continue;
      w_.addStep({rank_, step, lo, hi});
      ++result_.steps;
    }
  }

  // Depth = how many earlier ranges of the same thread still enclose this one.
  void writeRanges() {
    for (auto& [track, list] : ranges_) {
      std::stable_sort(list.begin(), list.end(), [](const RangeRow& a, const RangeRow& b) {
        return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
      });
      std::vector<int64_t> open_ends;
      for (auto& r : list) {
        while (!open_ends.empty() && open_ends.back() <= r.start_ns) open_ends.pop_back();
        r.depth = static_cast<int>(open_ends.size());
        open_ends.push_back(r.end_ns);
        w_.addRange(r);
        ++result_.ranges;
      }
    }
  }

  struct GpuStream {
    int64_t source = -1;  // the trace's own stream id
    int device = -1;
    bool compute = false, comm = false, copy = false;
  };

  std::string path_;
  TraceWriter& w_;
  ImportResult result_;
  int schema_ = 0;
  int rank_ = 0;
  std::optional<int64_t> base_ns_;  // baseTimeNanoseconds, where the trace has it
  int world_size_ = 1;
  std::string devices_;
  std::map<std::pair<std::string, std::string>, std::string> thread_names_;
  std::map<std::pair<std::string, std::string>, int> host_streams_;
  TrackNumbering host_tracks_{kHostThreadTracks};
  TrackNumbering device_tracks_{kDeviceStreamTracks};
  std::map<int, GpuStream> gpu_streams_;
  std::map<int64_t, std::vector<RangeRow>> ranges_;
  std::map<int, std::array<std::pair<int64_t, int64_t>, 2>> profiler_steps_;  // N -> {CPU span, GPU span}
};

}  // namespace

ImportResult importKineto(const std::string& path, TraceWriter& writer, const std::string& run_name) {
  return KinetoImporter(path, writer).run(run_name);
}

ImportResult importKinetoFolder(const std::string& dir, TraceWriter& writer, const std::string& run_name) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool json = name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
    const bool gz = name.size() > 8 && name.compare(name.size() - 8, 8, ".json.gz") == 0;
    if (e.is_regular_file() && (json || gz)) files.push_back(e.path().string());
  }
  if (ec) throw TraceError(fmt::format("{}: cannot list the folder: {}", dir, ec.message()));
  if (files.empty()) throw TraceError(fmt::format("{}: no PyTorch profiler traces (*.json, *.json.gz) in the folder", dir));
  std::sort(files.begin(), files.end());
  // Each file into a trace of its own in a scratch folder, removed after.
  const fs::path scratch = fs::temp_directory_path() / fmt::format("tandem-import-{}-{}", ::getpid(), files.size());
  fs::create_directories(scratch);
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(p, ignored);
    }
  } cleanup{scratch};
  std::vector<std::string> parts;
  ImportResult result;
  result.format = "kineto";
  for (size_t i = 0; i < files.size(); ++i) {
    parts.push_back((scratch / fmt::format("rank-file-{}.sqlite", i)).string());
    TraceWriter part(parts.back(), WriterOptions{.truncate = true});
    const ImportResult r = importKineto(files[i], part, "");
    result.activities += r.activities;
    result.ranges += r.ranges;
    result.steps += r.steps;
  }
  try {
    const MergeResult m = mergeTraces(parts, writer);
    result.run = m.run;
    result.ranks = m.ranks;
  } catch (const TraceError& e) {
    throw TraceError(fmt::format("{}: {} (each file must be one rank: distributedInfo.rank)", dir, e.what()));
  }
  (void)run_name;  // the merged run is named by the merge
  return result;
}

ImportFormat detectImportFormat(const std::string& path) {
  if (std::filesystem::is_directory(path))
    throw TraceError(fmt::format("{}: is a folder, not a PyTorch profiler JSON or Nsight Systems SQLite export", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TraceError(fmt::format("{}: cannot open file", path));
  char head[16] = {};
  in.read(head, sizeof head);
  auto n = static_cast<size_t>(in.gcount());
  if (n == 16 && std::string_view(head, 16) == std::string_view("SQLite format 3\0", 16)) return ImportFormat::Nsys;
  if (isGzip(path)) return ImportFormat::Kineto;  // PyTorch's .json.gz
  for (size_t i = 0; i < n; ++i) {
    if (std::isspace(static_cast<unsigned char>(head[i]))) continue;
    if (head[i] == '{' || head[i] == '[') return ImportFormat::Kineto;
    break;
  }
  throw TraceError(fmt::format("{}: unrecognised trace format (expected PyTorch profiler JSON or an Nsight Systems "
                               "SQLite export)",
                               path));
}

ImportResult importTrace(const std::string& path, TraceWriter& writer, ImportFormat format,
                         const std::string& run_name) {
  if (std::filesystem::is_directory(path) && format != ImportFormat::Nsys)
    return importKinetoFolder(path, writer, run_name);
  if (format == ImportFormat::Auto) format = detectImportFormat(path);
  try {
    return format == ImportFormat::Nsys ? importNsys(path, writer, run_name) : importKineto(path, writer, run_name);
  } catch (const TraceRowError& e) {
    // A row the store refuses came from this input, not from the output.
    throw TraceError(fmt::format("{}: {}", path, e.what()));
  }
}

}  // namespace tandem::traces
