// bench/kernel_model: the cost model's kernel times against a profiled
// run's, task by task, without simulating: per op kind the median and
// worst relative error, split by where each prediction came from (a
// measured shape, interpolation, the op kind's fit, the roofline), and the
// worst tasks with their shapes. The step time hides errors that cancel;
// this shows them (issue 49's per-op target). Prints one JSON line per
// (run, op kind) and a table; and for the GEMMs how often the kernel's
// thread blocks the model reads (CostModel::kernelBlocks: the sweep's
// shapes and the GEMM census) are those the trace recorded, and whether
// they leave SMs free as the traced ones do (what the replay's kernel
// sharing reads).
//
//   bench_kernel_model --calibration FILE [--worst N] RUN.sqlite...
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "plan_trace/plan_facts.h"
#include "simulator/calibrate/main_kernel.h"
#include "simulator/cost/gemm_tiles.h"
#include "simulator/cost/calibration_lookup.h"
#include "simulator/cost/cost_model.h"
#include "simulator/topology/topology_presets.h"
#include "traces/analysis/compare.h"
#include "traces/store/trace_reader.h"

using namespace tandem;

namespace {

struct Point {
  std::string name, shape;
  double real_ns = 0, model_ns = 0;
  sim::TimeSource source = sim::TimeSource::Roofline;
  double errPct() const { return 100.0 * (model_ns - real_ns) / real_ns; }
};

const char* sourceName(sim::TimeSource s) {
  switch (s) {
    case sim::TimeSource::Measured: return "measured";
    case sim::TimeSource::Interpolated: return "interpolated";
    case sim::TimeSource::OpKindFit: return "fit";
    case sim::TimeSource::Roofline: return "roofline";
    case sim::TimeSource::NoKernel: return "none";
  }
  return "?";
}

// A GEMM kind's tasks whose blocks the model reads as traced.
struct BlocksTally {
  int tasks = 0, same = 0, same_room = 0;  // same_room: both fill every SM, or both leave some
  void add(int traced, int modelled, int sms) {
    ++tasks;
    same += traced == modelled;
    same_room += (traced < sms) == (modelled > 0 && modelled < sms);
  }
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Reads the calibration and each run, prints the tables and JSON lines;
// throws on a file it cannot read.
int reportRuns(const std::string& calibration, size_t worst, const std::vector<std::string>& runs) {
  const sim::Calibration cal = sim::loadCalibration(sim::calibrationPath(calibration));
  const sim::RooflineCostModel model(sim::RooflineParams::defaults(), cal);
  // The peaks of the GPU the calibration measured: an interpolated memory-
  // bound kernel of an H100 profile is read against the H100's bandwidth,
  // not an H200's (until a calibration names no GPU, the H200's).
  const std::optional<sim::DeviceSpec> device = sim::gpuModelSpec(cal.gpu.empty() ? "H200" : cal.gpu);
  if (!device) {
    fmt::print(stderr, "bench_kernel_model: the calibration's GPU '{}' is not a known model\n", cal.gpu);
    return 2;
  }
  std::map<std::string, std::vector<double>> all_by_op;
  std::map<std::string, BlocksTally> all_blocks;
  for (const std::string& path : runs) {
    traces::TraceReader reader(path);
    const int64_t run = reader.defaultRunId();
    const Plan plan = plan_trace::planOfRun(reader, run);
    const auto times = traces::taskTimesPerStep(reader, run);
    const auto kernels = sim::mainKernelsByTask(reader, run);
    std::map<std::string, BlocksTally> blocks_by_op;
    std::map<int64_t, const Task*> by_id;
    for (const Task& t : plan.programs.at(0).tasks) by_id[t.id] = &t;
    std::map<std::string, std::vector<Point>> by_op;
    for (const auto& [key, t] : times) {
      if (key.first != 0 || t.ns <= 0) continue;
      const auto it = by_id.find(key.second);
      if (it == by_id.end() || it->second->kind != TaskKind::Kernel || it->second->collective) continue;
      const Task& task = *it->second;
      const auto tt = model.taskTime(task, *device, plan.job.training.precision);
      if (tt.source == sim::TimeSource::NoKernel) continue;
      if (const auto k = kernels.find(key); k != kernels.end() && sim::gemmOutputTiles(task) > 0 && task.fused_into < 0) {
        const std::string op(toString(sim::costOpKind(task)));
        const int modelled = model.kernelBlocks(task, *device);
        for (auto* tally : {&blocks_by_op[op], &all_blocks[op]}) tally->add(k->second.blocks, modelled, device->sm_count);
      }
      by_op[std::string(toString(sim::costOpKind(task)))].push_back(
          {task.name, sim::shapeKey(task), t.ns, double(tt.ns), tt.source});
    }
    const std::string job = std::filesystem::path(path).stem().string();
    double total_real = 0;
    for (const auto& [op, pts] : by_op)
      for (const Point& p : pts) total_real += p.real_ns;
    for (auto& [op, pts] : by_op) {
      std::vector<double> errs;
      std::map<std::string, std::vector<double>> by_source;
      double real = 0, modelled = 0;
      for (const Point& p : pts) {
        errs.push_back(std::fabs(p.errPct()));
        by_source[sourceName(p.source)].push_back(std::fabs(p.errPct()));
        real += p.real_ns;
        modelled += p.model_ns;
        all_by_op[op].push_back(std::fabs(p.errPct()));
      }
      std::string sources;
      for (const auto& [s, v] : by_source) sources += fmt::format(" {} {} ({:.1f}%)", s, v.size(), median(v));
      fmt::print("{:<40} {:<18} share {:>5.1f}%  tasks {:>4}  median |err| {:>6.2f}%  sum {:>+7.2f}% {}\n", job, op,
                 100 * real / total_real, pts.size(), median(errs), 100 * (modelled - real) / real, sources);
      std::sort(pts.begin(), pts.end(),
                [](const Point& a, const Point& b) { return std::fabs(a.errPct()) > std::fabs(b.errPct()); });
      for (size_t i = 0; i < pts.size() && i < worst; ++i)
        fmt::print("    {:<34} {:<40} real {:>9.1f} us model {:>9.1f} us {:>+7.1f}% ({})\n", pts[i].name,
                   pts[i].shape, pts[i].real_ns / 1e3, pts[i].model_ns / 1e3, pts[i].errPct(),
                   sourceName(pts[i].source));
    }
    for (const auto& [op, b] : blocks_by_op)
      fmt::print("{:<40} {:<18} blocks as traced in {} of {} tasks, SMs left free or not as traced in {}\n", job, op,
                 b.same, b.tasks, b.same_room);
  }
  for (const auto& [op, b] : all_blocks)
    fmt::print("{{\"bench\":\"kernel_model\",\"op\":\"{}\",\"gemm_tasks\":{},\"blocks_as_traced\":{},"
               "\"room_as_traced\":{}}}\n",
               op, b.tasks, b.same, b.same_room);
  for (const auto& [op, v] : all_by_op)
    fmt::print("{{\"bench\":\"kernel_model\",\"op\":\"{}\",\"tasks\":{},\"median_abs_error_pct\":{:.2f}}}\n", op,
               v.size(), median(v));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string calibration;
  size_t worst = 3;
  std::vector<std::string> runs;
  bench::ArgReader args("bench_kernel_model", "--calibration FILE [--worst N] RUN.sqlite...", argc, argv, 1);
  while (args.next()) {
    if (args.is("--calibration")) calibration = args.text();
    else if (args.is("--worst")) worst = size_t(args.integer(0, 1000));
    else if (args.flag().rfind("--", 0) == 0) args.unknown();
    else runs.push_back(args.flag());
  }
  if (calibration.empty() || runs.empty()) {
    fmt::print(stderr, "usage: bench_kernel_model --calibration FILE [--worst N] RUN.sqlite...\n");
    return 2;
  }
  try {
    return reportRuns(calibration, worst, runs);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_kernel_model: {}\n", e.what());
    return 1;
  }
}
