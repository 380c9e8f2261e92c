// bench/shape_reading: how well a kernel sweep's calibration reads shapes it
// did not measure, from its measured shapes alone (no GPU, no trace):
//   - per op kind, each measured shape read off the others (leave one out:
//     the figure `tandem simulate` prints under "read so");
//   - for the attention kinds, each measured shape of sequence >= 4096 read
//     off the shapes of shorter sequences only (every shape of its head
//     width at its sequence or longer hidden): the extrapolation a
//     long-context what-if asks of the model.
// Prints one JSON line per (op kind, test) and a table.
//
//   bench_shape_reading --calibration FILE [--gpu MODEL]
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "engine/spec/parse_number.h"
#include "simulator/cost/calibration_lookup.h"
#include "simulator/cost/cost_model.h"
#include "simulator/cost/shape_interpolation.h"
#include "simulator/topology/topology_presets.h"

using namespace tandem;

namespace {

constexpr double kLongSequence = 4096;

struct Summary {
  size_t n = 0;
  double median = 0, mean = 0, p90 = 0, signed_mean = 0;
};

Summary summarise(const std::vector<sim::WorkInterpolator::ReadError>& errors) {
  Summary s;
  std::vector<double> abs;
  for (const auto& e : errors) {
    abs.push_back(100 * std::fabs(e.error));
    s.signed_mean += 100 * e.error;
  }
  s.n = abs.size();
  if (abs.empty()) return s;
  std::sort(abs.begin(), abs.end());
  s.median = abs.size() % 2 ? abs[abs.size() / 2] : 0.5 * (abs[abs.size() / 2 - 1] + abs[abs.size() / 2]);
  for (double a : abs) s.mean += a;
  s.mean /= double(abs.size());
  s.signed_mean /= double(abs.size());
  s.p90 = abs[std::min(abs.size() - 1, size_t(std::ceil(0.9 * double(abs.size()))) - 1)];
  return s;
}

std::optional<std::string> field(const sim::ShapeFields& fields, const std::string& name) {
  for (const auto& [n, v] : fields)
    if (n == name) return v;
  return std::nullopt;
}

double sequence(const sim::ShapeFields& fields) {
  const auto t = field(fields, "t");
  return t ? parseFiniteNumber(*t).value_or(0) : 0;
}

void report(const std::string& op, const std::string& test, const Summary& s) {
  fmt::print("{:<20} {:<34} shapes {:>4}  median {:>6.2f}%  mean {:>6.2f}%  p90 {:>6.2f}%  signed mean {:>+7.2f}%\n", op,
             test, s.n, s.median, s.mean, s.p90, s.signed_mean);
  fmt::print(
      "{{\"bench\":\"shape_reading\",\"op\":\"{}\",\"test\":\"{}\",\"shapes\":{},\"median_abs_error_pct\":{:.2f},"
      "\"mean_abs_error_pct\":{:.2f},\"p90_abs_error_pct\":{:.2f},\"mean_error_pct\":{:.2f}}}\n",
      op, test, s.n, s.median, s.mean, s.p90, s.signed_mean);
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "--calibration FILE [--gpu MODEL]";
  std::string calibration, gpu;
  bench::ArgReader args("bench_shape_reading", usage, argc, argv);
  while (args.next()) {
    if (args.is("--calibration")) calibration = args.text();
    else if (args.is("--gpu")) gpu = args.text();
    else args.unknown();
  }
  if (calibration.empty()) {
    fmt::print(stderr, "usage: bench_shape_reading {}\n", usage);
    return 2;
  }
  try {
    const sim::Calibration cal = sim::loadCalibration(sim::calibrationPath(calibration));
    if (gpu.empty()) gpu = cal.gpu;
    const std::optional<sim::DeviceSpec> device = sim::gpuModelSpec(gpu);
    if (!device) {
      fmt::print(stderr, "bench_shape_reading: {}: give --gpu (one of the known models: {})\n",
                 gpu.empty() ? "the calibration names no GPU" : "unknown GPU '" + gpu + "'",
                 fmt::join(sim::knownGpuModels(), ", "));
      return 2;
    }
    const sim::RooflineCostModel model(sim::RooflineParams::defaults(), cal);
    fmt::print("{} on {}: measured shapes read off the others\n", calibration, gpu);
    std::vector<sim::WorkInterpolator::ReadError> all;
    for (const auto& [op, oc] : cal.ops) {
      const sim::WorkInterpolator* w = model.workInterpolator(op);
      if (!w) continue;
      const std::string name(toString(op));
      const sim::PeakRates peaks = model.peakRates(*device, Precision::BF16);
      const int64_t fixed = model.fixedNs(op);
      const auto loo = w->readErrors(
          peaks, fixed, [](const sim::ShapeFields& read, const sim::ShapeFields& other) { return &read == &other; });
      all.insert(all.end(), loo.begin(), loo.end());
      report(name, "leave one out", summarise(loo));
      if (op != OpKind::Attention && op != OpKind::AttentionBwd) continue;
      // Hide, for each shape, every shape of its head width at its sequence
      // or longer; score only the shapes of long sequences.
      auto longer = w->readErrors(peaks, fixed, [](const sim::ShapeFields& read, const sim::ShapeFields& other) {
        return field(read, "head") == field(other, "head") && sequence(other) >= sequence(read);
      });
      longer.erase(std::remove_if(longer.begin(), longer.end(),
                                  [](const auto& e) { return sequence(e.fields) < kLongSequence; }),
                   longer.end());
      report(name, "longer sequences hidden (t>=4096)", summarise(longer));
    }
    report("all", "leave one out", summarise(all));
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_shape_reading: {}\n", e.what());
    return 1;
  }
  return 0;
}
