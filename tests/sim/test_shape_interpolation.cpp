// Times of unmeasured shapes from the two measured ones around them
// (simulator/cost/shape_interpolation.h), alone and inside the calibrated cost model.
#include <catch2/catch.hpp>

#include "simulator/cost/cost_model.h"
#include "simulator/cost/shape_interpolation.h"

using namespace tandem;
using namespace tandem::sim;

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
  DeviceSpec dev;
  dev.bf16_flops = 1e15;
  dev.hbm_gbps = 1000;
  Task mm;
  mm.kind = TaskKind::Kernel;
  mm.op = OpKind::Matmul;
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
