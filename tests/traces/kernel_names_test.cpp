// Kernel names as shown: demangled, in full for one kernel and compact in
// lanes and tables, for our kernels, CUTLASS's and cuBLAS's, names another
// tool already demangled (nsys), and labels that only look like signatures.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <sstream>

#include "test_fixtures.h"
#include "traces/analysis/analysis.h"
#include "traces/analysis/kernel_names.h"
#include "traces/analysis/report_format.h"
#include "traces/export/chrome_export.h"
#include "traces/store/trace_reader.h"

using namespace tandem::traces;

TEST_CASE("kernel symbols demangle in full and compact, other names pass through", "[names]") {
  // Our attention kernel as CUPTI recorded it: an anonymous namespace, template arguments.
  const char* ours = "_ZN6tandem4cuda45_GLOBAL__N__98f1803f_12_attention_cu_0e0b481d22attentionForwardKernelIfLi16EEEvPT_PviPKS3_iiif";
  CHECK(demangledName(ours) ==
        "void tandem::cuda::(anonymous namespace)::attentionForwardKernel<float, 16>(float*, void*, int, float const*, "
        "int, int, int, float)");
  CHECK(compactName(ours) == "tandem::cuda::attentionForwardKernel<float, 16>");
  // A function without template arguments, and cuBLAS's CUTLASS kernels.
  CHECK(compactName("_ZN6tandem4cuda45_GLOBAL__N__98279acc_12_layernorm_cu_80422fea25layernormPartialSumKernelEPfPKfS4_l") ==
        "tandem::cuda::layernormPartialSumKernel");
  CHECK(compactName("_ZN7cutlass7Kernel2I41cutlass_80_simt_sgemm_64x64_8x5_nt_align1EEvNT_6ParamsE") ==
        "cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nt_align1>");
  // cuBLAS's own kernels and NCCL's are C names; API calls and copies are labels.
  for (const char* plain : {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1",
                            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "cudaEventSynchronize",
                            "Memcpy DtoH (Device -> Pinned)", "[CUDA memset]", "layer3.attn.qkv.fwd.mb0"}) {
    INFO(plain);
    CHECK(demangledName(plain) == plain);
    CHECK(compactName(plain) == plain);
  }
  // nsys writes demangled signatures: the compact form drops void and the parameters.
  CHECK(compactName("void gemm_kernel<128, 256>(float*, float const*)") == "gemm_kernel<128, 256>");
  CHECK(compactName("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)") ==
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  // Not a valid symbol: shown as recorded.
  CHECK(demangledName("_Z_not_a_symbol") == "_Z_not_a_symbol");
}

TEST_CASE("a real capture's report and export show no mangled symbol", "[names][real]") {
  TraceReader reader(testing::fixtureCopy("real-tiny-h200.sqlite"));
  const int64_t run = reader.defaultRunId();
  int mangled = 0;
  for (const std::string& s : reader.strings()) mangled += s.starts_with("_Z");
  REQUIRE(mangled > 10);  // the fixture has our kernels' and CUTLASS's symbols
  const RunReport report = analyzeRun(reader, run);
  REQUIRE_FALSE(report.by_name.empty());
  int with_symbol = 0;
  for (const KernelStat& s : report.by_name) {
    INFO(s.symbol);
    CHECK_FALSE(s.key.starts_with("_Z"));
    CHECK(s.key == compactName(s.symbol));
    with_symbol += s.symbol.starts_with("_Z");
  }
  CHECK(with_symbol > 0);
  const std::string text = reportToText(report);
  CHECK(text.find("_ZN") == std::string::npos);
  std::ostringstream out;
  exportChromeTrace(reader, run, out);
  const auto doc = nlohmann::json::parse(out.str());
  int slices_with_symbol = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e.at("ph") != "X") continue;
    CHECK_FALSE(e.at("name").get<std::string>().starts_with("_Z"));
    if (e.contains("args") && e["args"].contains("symbol")) {
      ++slices_with_symbol;
      // The whole demangled signature, of which the slice's name is the compact form.
      const std::string symbol = e["args"]["symbol"].get<std::string>();
      CHECK_FALSE(symbol.starts_with("_Z"));
      CHECK(compactName(symbol) == e.at("name").get<std::string>());
    }
  }
  CHECK(slices_with_symbol > 0);
}
