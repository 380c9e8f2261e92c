// bench/materialized_attention: the roofline's times for kernels no
// calibration measures, against a GPU's measured ones: attention with its
// scores materialized (schedule.materialized_attention, the published
// Megatron rows) and plain GEMMs over their depth. The measurements come
// from bench/peers/materialized_attention_torch.py run on the GPU; this
// prints, per shape, the measured time beside the model's with its GEMM
// shape factor (RooflineParams::gemm_depth_half) and without it, so the
// factor is judged against the same measurements in the same run.
//
//   bench_materialized_attention [--gpu MODEL] MEASURED.jsonl...
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "engine/plan/planner.h"
#include "simulator/cost/cost_model.h"
#include "simulator/topology/topology_presets.h"

using namespace tandem;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// The attention tasks of one layer of b x t tokens, h heads of width d.
Plan attentionLayer(int64_t b, int64_t h, int64_t t, int64_t d, double dropout) {
  JobSpec job = defaultJob();
  job.model.layers = 1;
  job.model.hidden = int(h * d);
  job.model.heads = int(h);
  job.model.seq_len = int(t);
  job.training.micro_batch = int(b);
  job.training.precision = Precision::BF16;
  job.parallel.data_parallel = 1;
  job.schedule.materialized_attention = true;
  job.model.attention_dropout = dropout;
  return buildPlan(job);
}

const Task& firstOf(const Plan& plan, OpKind op) {
  for (const Task& t : plan.programs.at(0).tasks)
    if (t.op == op) return t;
  throw std::runtime_error("the plan has no " + std::string(toString(op)) + " task");
}

Task gemm(int64_t rows, int64_t cols, int64_t depth) {
  Task t;
  t.kind = TaskKind::Kernel;
  t.op = OpKind::Matmul;
  t.name = "gemm";
  t.attrs.m = rows, t.attrs.n = cols, t.attrs.k = depth;
  t.flops = 2.0 * double(rows) * double(cols) * double(depth);
  t.bytes_read = 2 * (rows * depth + depth * cols);
  t.bytes_written = 2 * rows * cols;
  return t;
}

double errPct(double model, double real) { return 100.0 * (model - real) / real; }

int report(std::optional<std::string> gpu, const std::vector<std::string>& files) {
  const sim::RooflineCostModel shaped(sim::RooflineParams::defaults(), {});
  sim::RooflineParams flat_params = sim::RooflineParams::defaults();
  flat_params.gemm_depth_half = 0;
  flat_params.gemm_outputs_half_per_sm = 0;
  const sim::RooflineCostModel flat(flat_params, {});
  std::vector<double> att_shaped, att_flat;
  // GEMMs: each measured time over the deepest one's at the same output
  // size, against the model's same ratio (the level is the op kind's
  // efficiency; the factor claims only the shape).
  struct GemmPoint {
    int64_t rows, cols, depth;
    double real_ns, shaped_ns, flat_ns;
  };
  std::vector<GemmPoint> gemms;
  std::optional<sim::DeviceSpec> device;
  for (const std::string& path : files) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error(path + ": cannot open");
    std::string line;
    for (int line_no = 1; std::getline(in, line); ++line_no) {
      if (line.empty() || line[0] != '{') continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const std::exception& e) {
        throw std::runtime_error(fmt::format("{}:{}: not a JSON line ({})", path, line_no, e.what()));
      }
      const std::string kind = j.value("bench", "");
      if (kind != "materialized_attention_torch" && kind != "gemm_depth_torch") continue;
      if (!device) {
        const std::string name = gpu ? *gpu : j.value("gpu", "");
        device = sim::gpuModelSpec(name);
        if (!device) throw std::runtime_error(fmt::format("{}:{}: '{}' is not a known GPU model", path, line_no, name));
      }
      if (kind == "gemm_depth_torch") {
        const Task t = gemm(j.at("rows"), j.at("cols"), j.at("depth"));
        gemms.push_back({t.attrs.m, t.attrs.n, t.attrs.k, double(j.at("ms")) * 1e6,
                         double(shaped.taskNs(t, *device, Precision::BF16)),
                         double(flat.taskNs(t, *device, Precision::BF16))});
        continue;
      }
      const int64_t b = j.at("b"), h = j.at("h"), t = j.at("t"), d = j.at("d");
      const Plan plan = attentionLayer(b, h, t, d, j.at("dropout"));
      for (const auto& [op, field] : {std::pair{OpKind::Attention, "forward_ms"}, {OpKind::AttentionBwd, "backward_ms"}}) {
        const Task& task = firstOf(plan, op);
        const double real = double(j.at(field)) * 1e6;
        const double with = double(shaped.taskNs(task, *device, Precision::BF16));
        const double without = double(flat.taskNs(task, *device, Precision::BF16));
        att_shaped.push_back(std::fabs(errPct(with, real)));
        att_flat.push_back(std::fabs(errPct(without, real)));
        fmt::print("{{\"bench\":\"materialized_attention\",\"gpu\":\"{}\",\"op\":\"{}\",\"b\":{},\"h\":{},\"t\":{},\"d\":{},"
                   "\"measured_us\":{:.1f},\"model_us\":{:.1f},\"error_pct\":{:.1f},\"model_without_shape_factor_us\":{:.1f},"
                   "\"error_without_pct\":{:.1f}}}\n",
                   device->model, toString(op), b, h, t, d, real / 1e3, with / 1e3, errPct(with, real), without / 1e3,
                   errPct(without, real));
      }
    }
  }
  if (!device) throw std::runtime_error("no measurement lines (bench materialized_attention_torch or gemm_depth_torch)");
  std::vector<double> gemm_shaped, gemm_flat;
  for (const GemmPoint& g : gemms) {
    const GemmPoint* deepest = &g;
    for (const GemmPoint& o : gemms)
      if (o.rows == g.rows && o.cols == g.cols && o.depth > deepest->depth) deepest = &o;
    // Time per FLOP relative to the deepest GEMM of the same output size.
    auto rel = [&](double ns, double deep_ns) { return (ns / double(g.depth)) / (deep_ns / double(deepest->depth)); };
    const double real = rel(g.real_ns, deepest->real_ns);
    const double with = rel(g.shaped_ns, deepest->shaped_ns), without = rel(g.flat_ns, deepest->flat_ns);
    if (&g != deepest) {
      gemm_shaped.push_back(std::fabs(errPct(with, real)));
      gemm_flat.push_back(std::fabs(errPct(without, real)));
    }
    fmt::print("{{\"bench\":\"gemm_depth\",\"gpu\":\"{}\",\"rows\":{},\"cols\":{},\"depth\":{},\"measured_us\":{:.2f},"
               "\"slowness_vs_deepest\":{:.3f},\"model_slowness\":{:.3f},\"model_without_shape_factor_slowness\":{:.3f}}}\n",
               device->model, g.rows, g.cols, g.depth, g.real_ns / 1e3, real, with, without);
  }
  fmt::print("{{\"bench\":\"materialized_attention_summary\",\"gpu\":\"{}\",\"attention_tasks\":{},"
             "\"median_abs_error_pct\":{:.1f},\"median_abs_error_without_shape_factor_pct\":{:.1f},"
             "\"gemm_points\":{},\"gemm_slowness_median_abs_error_pct\":{:.1f},"
             "\"gemm_slowness_median_abs_error_without_shape_factor_pct\":{:.1f}}}\n",
             device->model, att_shaped.size(), median(att_shaped), median(att_flat), gemm_shaped.size(),
             median(gemm_shaped), median(gemm_flat));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<std::string> gpu;
  std::vector<std::string> files;
  bench::ArgReader args("bench_materialized_attention", "[--gpu MODEL] MEASURED.jsonl...", argc, argv, 1);
  while (args.next()) {
    if (args.is("--gpu")) gpu = args.text();
    else if (args.flag().rfind("--", 0) == 0) args.unknown();
    else files.push_back(args.flag());
  }
  if (files.empty()) {
    fmt::print(stderr, "usage: bench_materialized_attention [--gpu MODEL] MEASURED.jsonl...\n");
    return 2;
  }
  try {
    return report(gpu, files);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_materialized_attention: {}\n", e.what());
    return 1;
  }
}
