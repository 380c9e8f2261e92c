#include "cli/calibrate_sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "engine/memory/gpu_footprint.h"
#include "engine/plan/gpu_support.h"
#include "engine/plan/planner.h"
#include "simulator/calibrate/sweep_grid.h"
#include "simulator/cost/cost_model.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology_presets.h"

namespace tandem::cli {
namespace {

namespace fs = std::filesystem;

std::string shellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::vector<sim::SweepPoint> selectedPoints(const SweepOptions& o) {
  std::vector<sim::SweepPoint> points;
  for (sim::SweepPoint& p : sim::sweepGrid(o.grid)) {
    bool wanted = o.parts.empty();
    for (const std::string& part : o.parts) wanted = wanted || sim::inPart(p, part);
    if (wanted) points.push_back(std::move(p));
  }
  if (points.empty())
    throw std::runtime_error(fmt::format("sweep grid '{}' has no points in the parts asked for", o.grid));
  return points;
}

// The dry run's line for one point: its plan's memory need against the GPU,
// or why the executor would refuse it.
int stepsFor(const sim::SweepPoint& p, const SweepOptions& o);

void describePoint(const sim::SweepPoint& p, const SweepOptions& o) {
  const double gpu_memory_gib = o.gpu_memory_gib;
  const Plan plan = buildPlan(sim::sweepJob(p));
  const double need_gib =
      double(gpu_footprint::runBytes(gpu_footprint::largestProgram(plan))) / double(int64_t(1) << 30);
  const auto refusal = gpuRunRefusal(plan);
  fmt::print("{:<44} {:>6} {:>6} {:>9.1f} GiB  {}\n", p.name, p.part, stepsFor(p, o), need_gib,
             refusal ? "refused: " + *refusal
                     : need_gib > gpu_memory_gib ? fmt::format("does not fit {:.0f} GiB", gpu_memory_gib) : "ok");
}

// The steps a point runs: o.steps, or as many as its step time (the
// roofline's estimate on one H200) takes to fill o.warm_seconds, at most
// 500 (the smallest points' kernels are bound by latency, not power).
int stepsFor(const sim::SweepPoint& p, const SweepOptions& o) {
  const Plan plan = buildPlan(sim::sweepJob(p));
  static const sim::Topology one_gpu = sim::loadTopology("h200x2-nv18");
  const sim::RooflineCostModel roofline;
  const double step_s = double(sim::simulatePlan(plan, one_gpu, roofline).step_ns) * 1e-9;
  if (step_s <= 0) return o.steps;
  return std::clamp(int(std::ceil(o.warm_seconds / step_s)), o.steps, 500);
}

}  // namespace

std::vector<std::string> runSweep(const SweepOptions& o) {
  const std::vector<sim::SweepPoint> points = selectedPoints(o);
  if (o.dry_run) {
    fmt::print("{:<44} {:>6} {:>6} {:>13}  {}\n", "point", "part", "steps", "GPU memory", "verdict");
    for (const sim::SweepPoint& p : points) describePoint(p, o);
    return {};
  }
  fs::create_directories(o.work_dir);
  // Resolved here: inside the shell std::system starts, /proc/self/exe
  // would be the shell.
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  std::vector<std::string> traces;
  std::vector<std::string> failed, not_started;
  for (size_t i = 0; i < points.size(); ++i) {
    const sim::SweepPoint& p = points[i];
    const fs::path trace = fs::path(o.work_dir) / (p.name + ".sqlite");
    const fs::path log = fs::path(o.work_dir) / (p.name + ".log");
    if (o.reuse && fs::exists(trace)) {
      fmt::print(stderr, "[{:>2}/{}] {} (kept from an earlier sweep)\n", i + 1, points.size(), p.name);
      traces.push_back(trace.string());
      continue;
    }
    if (o.time_limit_s > 0 && elapsed() > o.time_limit_s) {
      not_started.push_back(p.name);
      continue;
    }
    fs::remove(trace);
    const int steps = stepsFor(p, o);
    std::string cmd = fmt::format("{} run default --steps {} --profile --out {}", shellQuote(self), steps,
                                  shellQuote(trace.string()));
    for (const std::string& s : p.sets) cmd += " --set " + shellQuote(s);
    cmd += " > " + shellQuote(log.string()) + " 2>&1";
    const double t0 = elapsed();
    const int rc = std::system(cmd.c_str());
    const bool ok = rc == 0 && fs::exists(trace);
    fmt::print(stderr, "[{:>2}/{}] {:<44} {:>5} steps {:>6.1f} s{}\n", i + 1, points.size(), p.name, steps,
               elapsed() - t0, ok ? "" : "  FAILED, see " + log.string());
    if (ok) traces.push_back(trace.string());
    else failed.push_back(p.name);
  }
  fmt::print(stderr, "sweep: {} of {} points measured in {:.0f} s", traces.size(), points.size(), elapsed());
  if (!failed.empty()) fmt::print(stderr, "; {} failed", failed.size());
  if (!not_started.empty())
    fmt::print(stderr, "; {} not started within the time limit (run again with --reuse to add them)",
               not_started.size());
  fmt::print(stderr, "\n");
  if (traces.empty()) throw std::runtime_error("sweep: no point ran; see the logs in " + o.work_dir);
  return traces;
}

}  // namespace tandem::cli
