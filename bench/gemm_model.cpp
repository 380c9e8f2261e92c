// bench/gemm_model: the cost model's GEMM times against GEMMs measured
// alone on a GPU (bench_fp8_gemm's JSON lines: each shape's BF16 and FP8
// time at the power limit). For each shape the planner's task of that GEMM
// (attrs m = tokens, n = output features, k = input features, as every
// role of a linear layer carries them) is timed by the roofline defaults
// and, with --calibration, by a calibration, on the GPU model the lines
// name; per role the median and worst error of each, BF16 and FP8. A check
// of a derived or shipped profile on shapes its measurements did not have
// (the Llama 3.1 layers of bench_fp8_gemm), without a training run.
//
//   bench_gemm_model [--calibration NAME|FILE] MEASURED.jsonl...
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_args.h"
#include "simulator/cost/calibration_lookup.h"
#include "simulator/cost/cost_model.h"
#include "simulator/topology/topology_presets.h"

using namespace tandem;

namespace {

struct Shape {
  std::string model, gemm, role, gpu;
  int64_t m = 0, n = 0, k = 0;  // as bench_fp8_gemm's cuBLAS call (column major: m x n output)
  double bf16_us = 0, fp8_us = 0;
};

// The planner's task of the GEMM: attrs in the linear layer's terms
// (tokens, output features, input features), the same for its three roles.
Task taskOf(const Shape& s, bool fp8) {
  int64_t tokens = 0, out = 0, in = 0;
  OpKind op = OpKind::Matmul;
  if (s.role == "forward") tokens = s.n, out = s.m, in = s.k;                                  // y = x W^T
  else if (s.role == "backward_data") tokens = s.n, in = s.m, out = s.k, op = OpKind::MatmulBwdData;     // dx = dy W
  else tokens = s.k, in = s.m, out = s.n, op = OpKind::MatmulBwdWeight;                         // dW = dy^T x
  Task t;
  t.op = op;
  t.kind = TaskKind::Kernel;
  t.name = s.model + "." + s.gemm + "." + s.role;
  t.layer = 0;
  t.attrs.m = tokens;
  t.attrs.n = out;
  t.attrs.k = in;
  t.attrs.fp8 = fp8;
  t.flops = 2.0 * double(tokens) * double(out) * double(in);
  const int64_t el = fp8 ? 1 : 2;
  // Two operands read, one bf16 result written.
  const int64_t a = op == OpKind::Matmul ? tokens * in : tokens * out;
  const int64_t b = op == OpKind::MatmulBwdWeight ? tokens * in : out * in;
  const int64_t c = op == OpKind::Matmul ? tokens * out : op == OpKind::MatmulBwdData ? tokens * in : out * in;
  t.bytes_read = (a + b) * el;
  t.bytes_written = c * 2;
  return t;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::vector<Shape> readShapes(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read");
  std::vector<Shape> out;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.rfind("{\"bench\":\"fp8_gemm\",", 0) != 0) continue;  // the per-shape lines only
    try {
      const auto j = nlohmann::json::parse(line);
      Shape s;
      s.model = j.at("model");
      s.gemm = j.at("gemm");
      s.role = j.at("role");
      s.gpu = j.at("gpu");
      s.m = j.at("m"), s.n = j.at("n"), s.k = j.at("k");
      s.bf16_us = j.at("bf16_us"), s.fp8_us = j.at("fp8_us");
      if (s.role != "forward" && s.role != "backward_data" && s.role != "backward_weight")
        throw std::runtime_error("unknown role " + s.role);
      out.push_back(s);
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("{}:{}: {}", path, line_no, e.what()));
    }
  }
  if (out.empty()) throw std::runtime_error(path + ": no bench_fp8_gemm shape lines");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string calibration;
  std::vector<std::string> files;
  bench::ArgReader args("bench_gemm_model", "[--calibration NAME|FILE] MEASURED.jsonl...", argc, argv, 1);
  while (args.next()) {
    if (args.is("--calibration")) calibration = args.text();
    else if (args.flag().rfind("--", 0) == 0) args.unknown();
    else files.push_back(args.flag());
  }
  if (files.empty()) {
    fmt::print(stderr, "usage: bench_gemm_model [--calibration NAME|FILE] MEASURED.jsonl...\n");
    return 2;
  }
  try {
    std::vector<Shape> shapes;
    for (const std::string& f : files)
      for (Shape& s : readShapes(f)) shapes.push_back(std::move(s));
    std::vector<std::pair<std::string, std::unique_ptr<sim::RooflineCostModel>>> models;
    models.emplace_back("roofline", std::make_unique<sim::RooflineCostModel>());
    if (!calibration.empty()) {
      const std::string path = sim::calibrationPath(calibration);
      models.emplace_back(std::filesystem::path(path).filename().string(),
                          std::make_unique<sim::RooflineCostModel>(sim::RooflineParams::defaults(),
                                                                   sim::loadCalibration(path)));
    }
    for (const auto& [label, model_ptr] : models) {
      const sim::RooflineCostModel& model = *model_ptr;
      std::map<std::string, std::vector<double>> bf16_err, fp8_err;
      for (const Shape& s : shapes) {
        const std::optional<sim::DeviceSpec> gpu = sim::gpuModelSpec(s.gpu);
        if (!gpu) throw std::runtime_error("no GPU model for '" + s.gpu + "'");
        const double bf16 = double(model.taskNs(taskOf(s, false), *gpu, Precision::BF16)) / 1e3;
        const double fp8 = double(model.taskNs(taskOf(s, true), *gpu, Precision::BF16)) / 1e3;
        const double eb = 100 * (bf16 - s.bf16_us) / s.bf16_us, ef = 100 * (fp8 - s.fp8_us) / s.fp8_us;
        bf16_err[s.role].push_back(eb);
        fp8_err[s.role].push_back(ef);
        fmt::print("{{\"bench\":\"gemm_model\",\"model_of_time\":\"{}\",\"gpu\":\"{}\",\"layer\":\"{}\",\"gemm\":\"{}\","
                   "\"role\":\"{}\",\"gflop\":{:.1f},\"bf16_us\":{:.1f},\"bf16_predicted_us\":{:.1f},"
                   "\"bf16_error_pct\":{:.2f},\"fp8_us\":{:.1f},\"fp8_predicted_us\":{:.1f},\"fp8_error_pct\":{:.2f}}}\n",
                   label, s.gpu, s.model, s.gemm, s.role, 2e-9 * double(s.m) * double(s.n) * double(s.k), s.bf16_us,
                   bf16, eb, s.fp8_us, fp8, ef);
      }
      for (const auto& [role, errs] : bf16_err) {
        auto absMax = [](const std::vector<double>& v) {
          double m = 0;
          for (double x : v) m = std::max(m, std::fabs(x));
          return m;
        };
        fmt::print("{{\"bench\":\"gemm_model_summary\",\"model_of_time\":\"{}\",\"role\":\"{}\",\"shapes\":{},"
                   "\"bf16_median_error_pct\":{:.2f},\"bf16_max_abs_error_pct\":{:.2f},"
                   "\"fp8_median_error_pct\":{:.2f},\"fp8_max_abs_error_pct\":{:.2f}}}\n",
                   label, role, errs.size(), median(errs), absMax(errs), median(fp8_err.at(role)),
                   absMax(fp8_err.at(role)));
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_gemm_model: {}\n", e.what());
    return 1;
  }
  return 0;
}
