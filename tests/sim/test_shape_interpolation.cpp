// Times of unmeasured shapes from the two measured ones around them
// (simulator/cost/shape_interpolation.h), alone and inside the calibrated cost model.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>

#include "simulator/cost/cost_model.h"
#include "simulator/cost/shape_interpolation.h"

using namespace tandem;
using namespace tandem::sim;

namespace {

// A device of 1 PFLOP/s bf16 and this memory bandwidth.
DeviceSpec petaflopDevice(double hbm_gbps) {
  DeviceSpec dev;
  dev.bf16_flops = 1e15;
  dev.hbm_gbps = hbm_gbps;
  return dev;
}

Task kernelTask(OpKind op) {
  Task t;
  t.kind = TaskKind::Kernel;
  t.op = op;
  return t;
}

}  // namespace

TEST_CASE("shape keys split into their fields", "[calibration][interpolation]") {
  const ShapeFields f = parseShapeKey("m=16384 n=3072 k=768 epi=gelu");
  REQUIRE(f.size() == 4);
  CHECK(f[0] == std::make_pair(std::string("m"), std::string("16384")));
  CHECK(f[3] == std::make_pair(std::string("epi"), std::string("gelu")));
  CHECK(parseShapeKey("").empty());
}

TEST_CASE("a shape between two measured ones takes the line through them", "[calibration][interpolation]") {
  const ShapeInterpolator between({{"m=8192 n=50304 k=768", 793'725},
                                   {"m=16384 n=50304 k=768", 1'599'567},
                                   {"m=4096 n=50304 k=768", 400'000},
                                   {"m=12288 n=768 k=768", 26'000},
                                   {"m=8192 n=3072 k=768 epi=gelu", 86'940},
                                   {"m=16384 n=3072 k=768 epi=gelu", 172'134},
                                   {"b=8 t=1024 c=768 h=12", 49'598},
                                   {"b=16 t=1024 c=768 h=12", 102'306},
                                   {"m=9999 n=1 k=1", -1}});
  // Halfway from 8192 to 16384 (the nearest pair, not 4096's).
  CHECK(between.ns("m=12288 n=50304 k=768") == (793'725 + 1'599'567 + 1) / 2);
  CHECK(between.ns("m=10240 n=50304 k=768") == 995'186);  // a quarter of the way: 793725 + 805842 / 4
  CHECK(between.ns("b=12 t=1024 c=768 h=12") == (49'598 + 102'306) / 2);
  CHECK(between.ns("m=12288 n=3072 k=768 epi=gelu") == (86'940 + 172'134) / 2);
  // Not between two measured shapes: outside them, or off in two fields, or
  // another epilogue, or another field list.
  CHECK_FALSE(between.ns("m=32768 n=50304 k=768"));
  CHECK_FALSE(between.ns("m=2048 n=50304 k=768"));
  CHECK_FALSE(between.ns("m=12288 n=50304 k=1024"));
  CHECK_FALSE(between.ns("m=12288 n=3072 k=768"));
  CHECK_FALSE(between.ns("m=12288 n=3072 k=768 epi=dgelu"));
  CHECK_FALSE(between.ns("b=12 t=1024 c=768"));
  // An entry without a time (fit or efficiencies only) is no end point.
  CHECK_FALSE(between.ns("m=9000 n=1 k=1"));
  CHECK_FALSE(ShapeInterpolator().ns("m=1 n=1 k=1"));
}

TEST_CASE("the nearest shape key: same fields and words, least log distance", "[calibration][interpolation]") {
  const std::vector<std::string> measured = {"m=8192 n=50304 k=768", "m=4096 n=50304 k=1280", "m=16384 n=768 k=768",
                                             "m=16384 n=3072 k=768 epi=gelu", "b=16 t=1024 c=768 h=12"};
  // Off in two fields from both vocabulary shapes: ln(8192/8192) + ln(1024/768)
  // = 0.29 against ln(2) + ln(1280/1024) = 0.92.
  CHECK(nearestShapeKey("m=8192 n=50304 k=1024", measured) == "m=8192 n=50304 k=768");
  CHECK(nearestShapeKey("m=4096 n=50304 k=1024", measured) == "m=4096 n=50304 k=1280");
  CHECK(nearestShapeKey("m=12288 n=3072 k=768 epi=gelu", measured) == "m=16384 n=3072 k=768 epi=gelu");
  CHECK(nearestShapeKey("b=4 t=1024 c=1280 h=20", measured) == "b=16 t=1024 c=768 h=12");
  // Another epilogue, or another field list, is not comparable.
  CHECK_FALSE(nearestShapeKey("m=16384 n=3072 k=768 epi=dgelu", measured));
  CHECK_FALSE(nearestShapeKey("m=1 c=768", measured));
  CHECK_FALSE(nearestShapeKey("m=1 n=1 k=1", {}));
}

TEST_CASE("the nearest shape key with one field weighed less", "[calibration][interpolation]") {
  // A weight gradient dW [6400, 1600] over 8192 tokens: evenly weighed, the
  // shape twice as deep is as far as ln 2 = 0.69 and the other output shape
  // ln(6400/6144) + ln(2048/1600) = 0.29 nearer; the depth (m) weighed 0.1,
  // 0.07 against 0.29.
  const std::vector<std::string> measured = {"m=16384 n=6400 k=1600", "m=8192 n=6144 k=2048"};
  CHECK(nearestShapeKey("m=8192 n=6400 k=1600", measured) == "m=8192 n=6144 k=2048");
  CHECK(nearestShapeKey("m=8192 n=6400 k=1600", measured, "m", 0.1) == "m=16384 n=6400 k=1600");
  CHECK(nearestShapeKey("m=8192 n=6400 k=1600", measured, "n", 0.1) == "m=8192 n=6144 k=2048");
  // Weight 1 is the plain distance; fields not named keep theirs.
  CHECK(nearestShapeKey("m=8192 n=6400 k=1600", measured, "m", 1.0) == "m=8192 n=6144 k=2048");
  CHECK(nearestShapeKey("m=8192 n=6400 k=1600", measured, "x", 0.1) == "m=8192 n=6144 k=2048");
}

TEST_CASE("the calibrated cost model reads unmeasured shapes off their neighbours", "[calibration][interpolation]") {
  const char* yaml = R"(
version: 1
launch_overhead_ns: 1000
ops:
  matmul:
    fit: {base_ns: 0, ns_per_gflop: 1000, ns_per_mb: 0}
    shapes:
      "m=8192 n=768 k=768": {ns: 18000}
      "m=16384 n=768 k=768": {ns: 34000}
)";
  const RooflineCostModel model(RooflineParams::defaults(), parseCalibration(yaml, "cal.yaml"));
  const DeviceSpec dev = petaflopDevice(1000);
  Task mm = kernelTask(OpKind::Matmul);
  mm.attrs.n = mm.attrs.k = 768;
  mm.attrs.m = 12288;
  mm.flops = 2.0 * 12288 * 768 * 768;
  REQUIRE(shapeKey(mm) == "m=12288 n=768 k=768");
  CHECK(model.taskNs(mm, dev, Precision::BF16) == 26000);
  mm.attrs.m = 16384;  // measured itself
  CHECK(model.taskNs(mm, dev, Precision::BF16) == 34000);
  // Past the measured shapes: the op kind's fit, but no faster than the
  // fastest measured shape ran (the fit's 1 PFLOP/s would take 38655 ns;
  // m=16384 ran at 2 * 16384 * 768 * 768 FLOPs in 34000 ns, twice as many
  // take 68000).
  mm.attrs.m = 32768;
  mm.flops = 2.0 * 32768 * 768 * 768;
  CHECK(std::llround(1000 * mm.flops * 1e-9) == 38655);
  CHECK(model.taskNs(mm, dev, Precision::BF16) == 68000);
  // A fit slower than that bound gives its own time.
  std::string slower = yaml;
  slower.replace(slower.find("ns_per_gflop: 1000"), 18, "ns_per_gflop: 3000");
  const RooflineCostModel slow(RooflineParams::defaults(), parseCalibration(slower, "slow.yaml"));
  CHECK(slow.taskNs(mm, dev, Precision::BF16) == int64_t(std::llround(3000 * mm.flops * 1e-9)));
}

TEST_CASE("unmeasured shapes take their measured neighbours' efficiency", "[calibration][interpolation]") {
  // Peaks: 1 GFLOP per us and 1 MB per us, so a shape's ideal time in ns is
  // 1000 x max(GFLOP, MB); launches 500 ns.
  const PeakRates peaks{1e6, 1000.0};
  const int64_t launch = 500;
  auto measured = [&](double gflop, double slowness) {
    return ShapeWork{launch + int64_t(std::llround(1000 * gflop * slowness)), gflop, 0.1};
  };
  const WorkInterpolator w({{"m=8192 n=768 k=768", measured(8, 1.5)},
                            {"m=32768 n=768 k=768", measured(32, 1.2)},
                            {"m=8192 n=768 k=768 epi=gelu", measured(8, 3.0)},
                            {"b=8 t=1024 c=768 h=12", measured(10, 2.0)},     // heads 64 wide
                            {"b=4 t=1024 c=1536 h=12", measured(10, 1.25)}});  // heads 128 wide
  // Between 8192 and 32768 in m, halfway in log m: the geometric mean of
  // the two slownesses, sqrt(1.5 x 1.2), on the shape's own ideal time.
  CHECK(w.ns("m=16384 n=768 k=768", 16, 0.1, peaks, launch) ==
        launch + int64_t(std::ceil(16000 * std::sqrt(1.5 * 1.2))));
  // Past the measured ones: the trend through the nearest neighbours, a
  // line in ln m fitted with weights 1 / (d^2 + 0.01) (d = ln 2 to
  // m=32768, ln 8 to m=8192) and its slope held back by a ridge of 0.1,
  // read at m=65536: faster than either neighbour, as the trend says.
  {
    const double x1 = -std::log(2.0), x2 = -std::log(8.0), l1 = std::log(1.2), l2 = std::log(1.5);
    double w1 = 1 / (x1 * x1 + 0.01), w2 = 1 / (x2 * x2 + 0.01);
    const double sum = w1 + w2;
    w1 /= sum, w2 /= sum;
    const double sx = w1 * x1 + w2 * x2, sxx = w1 * x1 * x1 + w2 * x2 * x2 + 0.1;
    const double sl = w1 * l1 + w2 * l2, sxl = w1 * x1 * l1 + w2 * x2 * l2;
    const double slow = std::exp((sl * sxx - sx * sxl) / (sxx - sx * sx));
    CHECK(slow < 1.2);
    CHECK(w.ns("m=65536 n=768 k=768", 64, 0.1, peaks, launch) == launch + int64_t(std::ceil(64000 * slow)));
  }
  // The trend carries no further than 10% beyond its neighbours' slowness:
  // a steep one (4.0 at m=1024, 2.4 at 2048) read at a million rows.
  const WorkInterpolator steep({{"m=1024 n=768 k=768", measured(1, 4.0)}, {"m=2048 n=768 k=768", measured(2, 2.4)}});
  const auto far = steep.ns("m=1048576 n=768 k=768", 1024, 0.1, peaks, launch);
  REQUIRE(far);
  CHECK(std::abs(*far - (launch + 1024000 * 2.4 / 1.1)) <= 2);
  // The epilogue is part of the kernel: only its own kind answers.
  const auto gelu = w.ns("m=16384 n=768 k=768 epi=gelu", 16, 0.1, peaks, launch);
  REQUIRE(gelu);
  CHECK(std::abs(*gelu - (launch + 16000 * 3)) <= 1);
  CHECK_FALSE(w.ns("m=16384 n=768 k=768 epi=dgelu", 16, 0.1, peaks, launch));
  // Attention: a shape with heads 128 wide takes the 128-wide kernel's
  // efficiency although the 64-wide shape is nearer in its numbers.
  CHECK(w.ns("b=8 t=1024 c=2048 h=16", 20, 0.1, peaks, launch) == launch + 25000);
  // No shape runs faster than the peaks: a neighbour measured faster than
  // its ideal time lends a slowness of 1 at most.
  const WorkInterpolator fast({{"m=1024 n=1024 k=1024", ShapeWork{launch + 500, 2.0, 0.1}}});
  CHECK(fast.ns("m=2048 n=1024 k=1024", 4.0, 0.2, peaks, launch) == launch + 4000);
  // Where a shape lies outside the measured ones: m past 32768; an
  // attention's key/value heads in flight (b x kv) and sequence, against
  // the 64-wide heads measured (b x kv 96, sequence 1024).
  CHECK(w.fieldsBeyondMeasured("m=65536 n=768 k=768") == std::vector<std::string>{"m"});
  CHECK(w.fieldsBeyondMeasured("m=16384 n=768 k=768").empty());
  CHECK(w.fieldsBeyondMeasured("b=1 t=65536 c=768 h=12") == std::vector<std::string>{"bkv", "t"});
  CHECK(w.fieldsBeyondMeasured("b=8 t=1024 c=768 h=12").empty());
  CHECK(w.fieldsBeyondMeasured("elements=1000").empty());  // no shape of its form
  // Shapes without work, or of another form, give nothing.
  CHECK_FALSE(WorkInterpolator({{"m=1 n=1 k=1", ShapeWork{100, 0, 0}}}).ns("m=2 n=1 k=1", 1, 1, peaks, 0));
  CHECK_FALSE(w.ns("elements=1000", 0, 1, peaks, launch));
}

TEST_CASE("a calibration that records shapes' work interpolates efficiencies, not times",
          "[calibration][interpolation]") {
  // GEMMs of 8192 and 32768 rows at 1.5 and 1.2 times their ideal time on
  // a 1 PFLOP/s device, beyond a fixed 1000 ns per kernel (the fit's constant).
  const double g8 = 2.0 * 8192 * 768 * 768 * 1e-9, g32 = 4 * g8;
  const std::string yaml = fmt::format(R"(
version: 1
launch_overhead_ns: 1000
ops:
  matmul:
    fit: {{base_ns: 1000, ns_per_gflop: 1000, ns_per_mb: 0}}
    shapes:
      "m=8192 n=768 k=768": {{ns: {}, gflop: {}, mb: 1, from: sweep}}
      "m=32768 n=768 k=768": {{ns: {}, gflop: {}, mb: 1, from: runs}}
)",
                                       1000 + std::llround(g8 * 1e3 * 1.5), g8, 1000 + std::llround(g32 * 1e3 * 1.2),
                                       g32);
  const Calibration cal = parseCalibration(yaml, "cal.yaml");
  CHECK(cal.ops.at(OpKind::Matmul).shapes.at("m=8192 n=768 k=768").origin == ShapeOrigin::Sweep);
  CHECK(cal.ops.at(OpKind::Matmul).shapes.at("m=32768 n=768 k=768").origin == ShapeOrigin::Runs);
  const RooflineCostModel model(RooflineParams::defaults(), cal);
  const DeviceSpec dev = petaflopDevice(1e6);  // so fast that every GEMM here is bound by its FLOPs
  Task mm = kernelTask(OpKind::Matmul);
  mm.attrs.n = mm.attrs.k = 768;
  mm.attrs.m = 16384;
  mm.flops = 2.0 * 16384 * 768 * 768;
  const RooflineCostModel::TaskTime t = model.taskTime(mm, dev, Precision::BF16);
  CHECK(t.source == TimeSource::Interpolated);
  // sqrt(1.5 x 1.2) = 1.342 times the ideal 19.3 us; a line through the two
  // times would say (1.5 x 9.66 + 1.2 x 38.65) / 2 + 1 = 31.4 us.
  const double ideal = mm.flops / 1e6;
  CHECK(std::fabs(double(t.ns) - (1000 + ideal * std::sqrt(1.5 * 1.2))) < 3);
  // A bad origin is named with its line.
  std::string bad = yaml;
  bad.replace(bad.find("from: runs"), 10, "from: lab ");
  CHECK_THROWS_WITH(parseCalibration(bad, "cal.yaml"), Catch::Contains("cal.yaml:9:") && Catch::Contains("from"));
}

TEST_CASE("a norm's rows are read off shapes of the same kernel path", "[calibration][interpolation]") {
  // Layernorm backwards of 8192 rows on a 1000 GB/s device: rows of 768
  // (the warp-per-row kernel) at 4 times their ideal time, rows of 2048 and
  // 4096 (a block per row) at 1.25 and 1.5 times. Rows of 1024 lie between
  // 768 and 2048 but run the block-per-row kernel: its shapes' efficiency,
  // not a line through the warp kernel's.
  auto mb = [](int c) { return 3.0 * 8192 * c * 2 * 1e-6; };
  auto ns = [&](int c, double slowness) { return 1000 + std::llround(mb(c) * 1e3 * slowness); };
  const std::string yaml = fmt::format(R"(
version: 1
launch_overhead_ns: 1000
ops:
  layernorm_bwd:
    fit: {{base_ns: 1000, ns_per_gflop: 0, ns_per_mb: 1000}}
    shapes:
      "m=8192 c=768": {{ns: {}, gflop: 0, mb: {}, from: sweep}}
      "m=8192 c=2048": {{ns: {}, gflop: 0, mb: {}, from: sweep}}
      "m=8192 c=4096": {{ns: {}, gflop: 0, mb: {}, from: sweep}}
)",
                                       ns(768, 4.0), mb(768), ns(2048, 1.25), mb(2048), ns(4096, 1.5), mb(4096));
  const RooflineCostModel model(RooflineParams::defaults(), parseCalibration(yaml, "cal.yaml"));
  const DeviceSpec dev = petaflopDevice(1000);
  Task ln = kernelTask(OpKind::LayerNormBwd);
  ln.attrs.m = 8192;
  ln.attrs.c = 1024;
  ln.bytes_read = int64_t(mb(1024) * 1e6);
  const RooflineCostModel::TaskTime t = model.taskTime(ln, dev, Precision::BF16);
  CHECK(t.source == TimeSource::Interpolated);
  const double ideal = mb(1024) * 1e3;
  // On the block-per-row shapes' trend (slower as the rows widen), so a
  // little below 2048's 1.25; far below the warp kernel's 4.
  CHECK(double(t.ns - 1000) / ideal > 1.1);
  CHECK(double(t.ns - 1000) / ideal < 1.25);

  // The executor's layernorm backward takes a block per row from 769 on:
  // rows of 1024 and 4096 (both on it, at 1.25 and 2 times their ideal)
  // bound the reading for 2048, in the logarithm of the width.
  std::string wide = yaml;
  wide.replace(wide.find("\"m=8192 c=2048\""), 15, "\"m=8192 c=1024\"");
  wide.replace(wide.find(std::to_string(ns(2048, 1.25))), std::to_string(ns(2048, 1.25)).size(),
               std::to_string(ns(1024, 1.25)));
  wide.replace(wide.find(fmt::format("{}", mb(2048))), fmt::format("{}", mb(2048)).size(), fmt::format("{}", mb(1024)));
  wide.replace(wide.find(std::to_string(ns(4096, 1.5))), std::to_string(ns(4096, 1.5)).size(),
               std::to_string(ns(4096, 2.0)));
  const RooflineCostModel wide_model(RooflineParams::defaults(), parseCalibration(wide, "wide.yaml"));
  ln.attrs.c = 2048;
  ln.bytes_read = int64_t(mb(2048) * 1e6);
  const double at_2048 = double(wide_model.taskNs(ln, dev, Precision::BF16) - 1000) / (mb(2048) * 1e3);
  CHECK(at_2048 == Approx(std::sqrt(1.25 * 2.0)).epsilon(0.02));
}
