// bench_trace_ingest: writes a synthetic multi-rank trace through TraceWriter
// (activities interleaved across ranks and streams in time order, as the
// simulator emits them), then runs the full `tandem report` analysis and a
// few time-window queries on it. Prints one JSON line per measurement.
//
//   bench_trace_ingest [--activities N] [--ranks R] [--out FILE] [--keep] [--reuse]
// --reuse analyses an existing --out file (kept by an earlier --keep run).
#include <fmt/core.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "bench/bench_args.h"
#include "traces/analysis/analysis.h"
#include "traces/store/trace_reader.h"
#include "traces/store/trace_writer.h"

using namespace tandem::traces;

namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU time of this process (user + system): on a shared 2-core machine the
// wall clock also counts time spent waiting for a core.
double cpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t activities = 10'000'000;
  int ranks = 8;
  bool keep = false;
  bool reuse = false;  // analyse an existing --out file instead of writing one
  std::string out = (std::filesystem::temp_directory_path() / "tandem-bench-trace.sqlite").string();
  tandem::bench::ArgReader args("bench_trace_ingest", "[--activities N] [--ranks R] [--out FILE] [--keep] [--reuse]",
                                argc, argv);
  while (args.next()) {
    if (args.is("--activities")) activities = args.integer(1, int64_t(1) << 40);
    else if (args.is("--ranks")) ranks = int(args.integer(1, 100000));
    else if (args.is("--out")) out = args.text();
    else if (args.is("--keep")) keep = true;
    else if (args.is("--reuse")) reuse = keep = true;
    else args.unknown();
  }
  const int streams = 3;  // compute, comm, copy
  std::vector<std::string> names;
  for (int l = 0; l < 48; ++l)
    for (const char* op : {"sm90_xmma_gemm_bf16_fwd", "flash_attn_fwd", "layernorm_fwd", "gelu_bwd"})
      names.push_back(fmt::format("{}_layer{}", op, l));
  const char* comm_name = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL";

  auto t0 = std::chrono::steady_clock::now();
  double c0 = cpuSeconds();
  if (!reuse) {
    TraceWriter w(out, WriterOptions{.truncate = true});
    RunInfo info;
    info.kind = RunKind::Simulated;
    info.name = "bench";
    info.world_size = ranks;
    w.beginRun(info);
    for (int r = 0; r < ranks; ++r)
      for (int s = 0; s < streams; ++s) w.addStream({r, s, static_cast<StreamKind>(s), fmt::format("s{}", s), r});
    std::mt19937_64 rng(1);
    std::uniform_int_distribution<int64_t> dur(2'000, 90'000);
    std::vector<int64_t> clock(static_cast<size_t>(ranks * streams), 0);
    ActivityRow a;
    for (int64_t i = 0; i < activities; ++i) {
      int track = static_cast<int>(i % (ranks * streams));
      int r = track / streams, s = track % streams;
      int64_t& t = clock[static_cast<size_t>(track)];
      int64_t d = dur(rng);
      a.rank = r;
      a.device = r;
      a.stream = s;
      a.start_ns = t + (s == 0 ? 500 : 20'000);
      a.end_ns = a.start_ns + d;
      t = a.end_ns;
      a.kind = s == 0 ? ActivityKind::Kernel : (s == 1 ? ActivityKind::Collective : ActivityKind::Memcpy);
      a.name = s == 1 ? comm_name : (s == 2 ? "Memcpy DtoD" : names[static_cast<size_t>(i / 24) % names.size()]);
      a.task_id = i / (ranks * streams);
      a.phase = static_cast<Phase>(1 + (i / 1000) % 4);
      a.layer = static_cast<int>((i / 24) % 48);
      a.micro_batch = 0;
      a.correlation_id = i;
      a.bytes = s == 0 ? 0 : 1 << 20;
      a.flops = s == 0 ? 1e9 : 0;
      w.addActivity(a);
    }
    w.flush();
  }
  double ingest_s = secondsSince(t0);
  double ingest_cpu_s = cpuSeconds() - c0;
  auto file_bytes = std::filesystem::file_size(out);
  if (!reuse)
    fmt::print("{{\"bench\":\"trace_ingest\",\"activities\":{},\"ranks\":{},\"streams_per_rank\":{},\"seconds\":{:.3f},"
             "\"activities_per_s\":{:.0f},\"cpu_seconds\":{:.3f},\"activities_per_cpu_s\":{:.0f},\"file_bytes\":{},"
             "\"bytes_per_activity\":{:.1f}}}\n",
             activities, ranks, streams, ingest_s, static_cast<double>(activities) / ingest_s, ingest_cpu_s,
             static_cast<double>(activities) / ingest_cpu_s, file_bytes,
             static_cast<double>(file_bytes) / static_cast<double>(activities));
  std::fflush(stdout);

  TraceReader reader(out);
  auto t2 = std::chrono::steady_clock::now();
  double c2 = cpuSeconds();
  RunReport report = analyzeRun(reader, 1);
  double report_s = secondsSince(t2);
  double report_cpu_s = cpuSeconds() - c2;
  fmt::print("{{\"bench\":\"trace_report\",\"activities\":{},\"seconds\":{:.3f},\"cpu_seconds\":{:.3f},"
             "\"overlap_pct\":{:.2f},\"critical_path_tasks\":{}}}\n",
             report.activity_count, report_s, report_cpu_s, report.total.overlap_pct, report.critical_path.task_count);
  std::fflush(stdout);

  // Window queries: 1 ms windows at random places on rank 0's compute stream.
  auto info = reader.tracks(1);
  int64_t end = info.empty() ? 0 : info.front().max_end_ns;
  std::mt19937_64 rng(2);
  const int queries = 200;
  int64_t rows = 0;
  auto t3 = std::chrono::steady_clock::now();
  for (int q = 0; q < queries; ++q) {
    int64_t w0 = std::uniform_int_distribution<int64_t>(0, std::max<int64_t>(end - 1'000'000, 1))(rng);
    rows += static_cast<int64_t>(reader.loadWindow(1, 0, 0, w0, w0 + 1'000'000).size());
  }
  double window_s = secondsSince(t3);
  fmt::print("{{\"bench\":\"trace_window_query\",\"queries\":{},\"window_ns\":1000000,\"mean_rows\":{:.1f},"
             "\"mean_ms\":{:.3f}}}\n",
             queries, static_cast<double>(rows) / queries, window_s / queries * 1e3);
  if (!keep)
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(out + suffix);
  return 0;
}
