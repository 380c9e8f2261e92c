#pragma once
// Small hand-built traces shared by the trace store tests and the CLI golden
// tests. Every figure they produce is worked out by hand in the tests.

#include <cstdlib>
#include <filesystem>
#include <string>

#include "traces/store/trace_writer.h"

namespace tandem::traces::testing {

// A fresh path under the system temp folder (removed first if present).
inline std::string tempTracePath(const std::string& name) {
  namespace fs = std::filesystem;
  // One folder per test program, removed when the program exits.
  struct Dir {
    fs::path path = fs::temp_directory_path() / ("tandem-trace-tests-" + std::to_string(::getpid()));
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static Dir dir_holder;
  const fs::path& dir = dir_holder.path;
  fs::create_directories(dir);
  fs::path p = dir / name;
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(p.string() + suffix);
  return p.string();
}

// A temporary copy of a committed file of tests/traces/fixtures/: readers may
// create -wal/-shm files beside a database, so tests never open the original.
inline std::string fixtureCopy(const std::string& name) {
  const std::string copy = tempTracePath(name);
  std::filesystem::copy_file(std::string(TANDEM_SOURCE_DIR) + "/tests/traces/fixtures/" + name, copy,
                             std::filesystem::copy_options::overwrite_existing);
  return copy;
}

inline ActivityRow act(int rank, int stream, int64_t start, int64_t end, ActivityKind kind, const std::string& name,
                       int64_t task = -1, Phase phase = Phase::None) {
  ActivityRow a;
  a.rank = rank;
  a.device = rank;
  a.stream = stream;
  a.start_ns = start;
  a.end_ns = end;
  a.kind = kind;
  a.name = name;
  a.task_id = task;
  a.phase = phase;
  return a;
}

inline PlanTaskRow task(int rank, int64_t id, const std::string& name, const std::string& op, Phase phase,
                        int stream, std::vector<int64_t> deps) {
  PlanTaskRow t;
  t.rank = rank;
  t.task_id = id;
  t.name = name;
  t.op = op;
  t.phase = phase;
  t.stream = stream;
  t.deps = std::move(deps);
  return t;
}

// Two ranks, five streams on rank 0 (two compute, comm, copy, host thread),
// overlapping compute, communication and copies. Figures (ns), rank 0:
//   compute U = [0,120) [130,140) [150,350) [450,500) = 380
//   comm    U = [250,400) = 150, overlap with compute [250,350) = 100 (66.667 %)
//   memcpy  [90,160), not under compute or comm: [120,130) [140,150) = 20
//   span 500, busy 450, idle 50; recompute [300,350) = 50 (10 %)
//   idle gaps: stream 0 100->150 host wait (launch at 140), 350->450 other
//   (launch at 200); stream 4 120->130 kernel wait (< 30 ns)
// rank 1: compute [0,330) [420,470) = 380, comm [290,420) = 130,
//   overlap [290,330) = 40 (30.769 %), span 470, idle 0; it enters the
//   all-reduce (task 4) 40 ns after rank 0.
inline void writeOverlapFixture(const std::string& path) {
  using K = ActivityKind;
  using P = Phase;
  TraceWriter w(path, WriterOptions{.batch_rows = 7, .truncate = true});
  RunInfo info;
  info.kind = RunKind::Simulated;
  info.name = "overlap-fixture";
  info.job_hash = "abc123";
  info.world_size = 2;
  w.beginRun(info);
  w.addStream({0, 0, StreamKind::Compute, "compute", 0});
  w.addStream({0, 1, StreamKind::Comm, "nccl", 0});
  w.addStream({0, 2, StreamKind::Copy, "copy", 0});
  w.addStream({0, 3, StreamKind::Host, "main thread", -1});
  w.addStream({0, 4, StreamKind::Compute, "side", 0});
  w.addStream({1, 0, StreamKind::Compute, "compute", 1});
  w.addStream({1, 1, StreamKind::Comm, "nccl", 1});

  ActivityRow fwd = act(0, 0, 0, 100, K::Kernel, "gemm_fwd", 1, P::Forward);
  fwd.flops = 2e5;  // 2e5 flop in 100 ns = 2 TFLOP/s
  fwd.geometry = LaunchGeometry{128, 1, 1, 256, 1, 1};
  fwd.geometry->registers_per_thread = 168;
  fwd.geometry->shared_memory_bytes = 213024;
  fwd.geometry->cluster_x = 2, fwd.geometry->cluster_y = 1, fwd.geometry->cluster_z = 1;
  w.addActivity(fwd);
  ActivityRow bwd = act(0, 0, 150, 300, K::Kernel, "gemm_bwd", 2, P::Backward);
  bwd.correlation_id = 11;
  w.addActivity(bwd);
  w.addActivity(act(0, 0, 300, 350, K::Kernel, "gelu_recompute", 3, P::Recompute));
  ActivityRow opt = act(0, 0, 450, 500, K::Kernel, "adamw", 6, P::Optimizer);
  opt.correlation_id = 13;
  w.addActivity(opt);
  ActivityRow ar = act(0, 1, 250, 400, K::Collective, "ncclAllReduce", 4, P::Comm);
  ar.bytes = 300;  // 300 bytes in 150 ns = 2 GB/s
  w.addActivity(ar);
  ActivityRow h2d = act(0, 2, 90, 160, K::Memcpy, "Memcpy HtoD");
  h2d.bytes = 7000;
  w.addActivity(h2d);
  ActivityRow l11 = act(0, 3, 140, 145, K::Host, "cudaLaunchKernel");
  l11.correlation_id = 11;
  w.addActivity(l11);
  ActivityRow l13 = act(0, 3, 200, 210, K::Host, "cudaLaunchKernel");
  l13.correlation_id = 13;
  w.addActivity(l13);
  w.addActivity(act(0, 4, 50, 120, K::Kernel, "elementwise", 5, P::Forward));
  w.addActivity(act(0, 4, 130, 140, K::Kernel, "elementwise", 7, P::Forward));

  w.addActivity(act(1, 0, 0, 100, K::Kernel, "gemm_fwd", 1, P::Forward));
  w.addActivity(act(1, 0, 100, 280, K::Kernel, "gemm_bwd", 2, P::Backward));
  w.addActivity(act(1, 0, 280, 330, K::Kernel, "gelu_recompute", 3, P::Recompute));
  w.addActivity(act(1, 0, 420, 470, K::Kernel, "adamw", 6, P::Optimizer));
  w.addActivity(act(1, 1, 290, 420, K::Collective, "ncclAllReduce", 4, P::Comm));

  for (int rank = 0; rank < 2; ++rank) {
    w.addPlanTask(task(rank, 1, "layer0.fc.fwd", "matmul", P::Forward, 0, {}));
    w.addPlanTask(task(rank, 5, "layer0.add.fwd", "add", P::Forward, 4, {}));
    w.addPlanTask(task(rank, 7, "layer0.add2.fwd", "add", P::Forward, 4, {5}));
    w.addPlanTask(task(rank, 2, "layer0.fc.bwd", "matmul_bwd_data", P::Backward, 0, {1, 7}));
    w.addPlanTask(task(rank, 3, "layer0.gelu.recompute", "gelu", P::Recompute, 0, {2}));
    w.addPlanTask(task(rank, 4, "bucket0.all_reduce", "all_reduce", P::Comm, 1, {2}));
    w.addPlanTask(task(rank, 6, "adamw", "adamw", P::Optimizer, 0, {3, 4}));
  }
  w.addStep({0, 0, 0, 500});
  w.addStep({1, 0, 0, 470});
  w.addCounter({0, "memory.in_use_bytes", 0, 1024});
  w.addCounter({0, "memory.in_use_bytes", 250, 4096});
  w.addRange({0, 0, 500, "step 0", 0, ""});
  w.addRange({0, 0, 120, "forward", 1, ""});
  w.addClock({0, "sim", 0, 0, 0, 0});
  w.addClock({1, "sim", 0, 0, 0, 0});
  w.setStat({"sim.events", 12, Severity::Info, "events simulated"});
}

}  // namespace tandem::traces::testing
