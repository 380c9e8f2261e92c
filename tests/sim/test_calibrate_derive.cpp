// A calibration of one GPU rescaled to another (simulator/calibrate/calibrate_derive.h).
#include <catch2/catch.hpp>

#include "simulator/calibrate/calibrate_derive.h"
#include "simulator/topology/topology_presets.h"

using namespace tandem;
using namespace tandem::sim;

TEST_CASE("the H100 derived from the H200: memory-bound kernels slower by the bandwidth, GEMMs alike",
          "[calibrate][derive]") {
  const char* yaml = R"(# measured on one H200
version: 1
gpu: "NVIDIA H200"
launch_overhead_ns: 900
comm_slowdown: 1.3
ops:
  layernorm:
    fit: {base_ns: 2000, ns_per_gflop: 0, ns_per_mb: 250}
    shapes:
      "m=8192 c=4096": {ns: 60000, gflop: 0.2, mb: 201.3, from: sweep}
  matmul:
    fit: {base_ns: 3000, ns_per_gflop: 1200, ns_per_mb: 10}
    shapes:
      "m=8192 n=4096 k=4096": {ns: 403000, gflop: 274.9, mb: 134.2, from: sweep}
  gelu:
    ns: 0
collectives:
  - {op: all_reduce, ranks: 2, latency_ns: 12000, gbps: 300}
)";
  const DeviceSpec h200 = *gpuModelSpec("H200"), h100 = *gpuModelSpec("H100");
  const CalibrationResult r = deriveCalibration(yaml, "h200.yaml", h200, h100, "NVIDIA H100");
  const Calibration back = parseCalibration(calibrationToYaml(r), "h100.yaml");
  CHECK(back.gpu == "NVIDIA H100");
  CHECK(back.launch_overhead_ns == 900);
  // The layernorm moves 201 MB in 58 us beyond its fixed 2 us: bound by
  // memory on both GPUs, so 4800 / 3350 times as long.
  const CostEntry& ln = back.ops.at(OpKind::LayerNorm).shapes.at("m=8192 c=4096");
  CHECK(ln.ns == std::llround(2000 + 58000 * 4800.0 / 3350.0));
  CHECK(back.ops.at(OpKind::LayerNorm).all_shapes.ns_per_mb == Approx(250 * 4800.0 / 3350.0));
  // The GEMM is bound by its FLOPs on both (275 GFLOP at 989 TFLOP/s is
  // 278 us; 134 MB at 3350 GB/s is 40 us): the same time.
  CHECK(back.ops.at(OpKind::Matmul).shapes.at("m=8192 n=4096 k=4096").ns == 403000);
  CHECK(back.ops.at(OpKind::Matmul).shapes.at("m=8192 n=4096 k=4096").gflop == Approx(274.9));
  // A kind fused away stays fused; the collectives are kept.
  CHECK(back.ops.at(OpKind::Gelu).all_shapes.ns == 0);
  REQUIRE(back.collectives.size() == 1);
  CHECK(back.collectives[0].gbps == Approx(300));
  CHECK(back.comm_slowdown == Approx(1.3));
  // The header says where it came from.
  CHECK_THAT(calibrationToYaml(r), Catch::Contains("derived for the NVIDIA H100 from h200.yaml"));

  // A calibration whose shapes do not record their work cannot be rescaled.
  std::string old = yaml;
  old.replace(old.find(", gflop: 0.2, mb: 201.3"), 23, "");
  CHECK_THROWS_WITH(deriveCalibration(old, "old.yaml", h200, h100, "NVIDIA H100"),
                    Catch::Contains("m=8192 c=4096") && Catch::Contains("no recorded work"));
}

TEST_CASE("a measured FP8 speedup table is written back, kept for a GPU of the same FP8 ratio and dropped for one "
          "without FP8",
          "[calibrate][derive][fp8]") {
  const char* yaml = R"(version: 1
gpu: "NVIDIA H200"
fp8_gemm_speedup:
  matmul: [[12.5, 1.21], [800, 1.58]]
  matmul_bwd_weight: [[40, 1.3]]
ops:
  matmul:
    fit: {base_ns: 3000, ns_per_gflop: 1200, ns_per_mb: 10}
    shapes:
      "m=8192 n=4096 k=4096": {ns: 403000, gflop: 274.9, mb: 134.2, from: sweep}
)";
  const DeviceSpec h200 = *gpuModelSpec("H200"), h100 = *gpuModelSpec("H100"), a100 = *gpuModelSpec("A100-80GB");
  const CalibrationResult to_h100 = deriveCalibration(yaml, "h200.yaml", h200, h100, "NVIDIA H100");
  const Calibration back = parseCalibration(calibrationToYaml(to_h100), "h100.yaml");
  REQUIRE(back.fp8_gemm_speedup.size() == 2);
  const auto& fwd = back.fp8_gemm_speedup.at(OpKind::Matmul);
  REQUIRE(fwd.size() == 2);
  CHECK(fwd[0].first == Approx(12.5));
  CHECK(fwd[1].second == Approx(1.58));
  CHECK(back.fp8_gemm_speedup.at(OpKind::MatmulBwdWeight)[0].second == Approx(1.3));
  CHECK_THAT(calibrationToYaml(to_h100), Catch::Contains("fp8_gemm_speedup kept"));

  const CalibrationResult to_a100 = deriveCalibration(yaml, "h200.yaml", h200, a100, "NVIDIA A100-80GB");
  CHECK(parseCalibration(calibrationToYaml(to_a100), "a100.yaml").fp8_gemm_speedup.empty());
  CHECK_THAT(calibrationToYaml(to_a100), Catch::Contains("fp8_gemm_speedup dropped"));
}
