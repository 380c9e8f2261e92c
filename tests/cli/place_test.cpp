// tandem place and tandem run --placement on the command line
// (simulator/placement/): the acceptance case of issue 52 (4 PCIe GPUs with
// NVLink bridges between GPU 0-2 and 1-3, tensor parallel 2 x data parallel
// 2) from the preset and from `nvidia-smi topo -m`, the map file, and bad
// input in one line naming the file and line.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_util.h"
#include "tests/traces/test_fixtures.h"

using namespace tandem;
using namespace tandem::cli::testing;

namespace {

const std::string kTp2Dp2 = "place default --set parallel.tensor_parallel=2 --set parallel.data_parallel=2 ";

std::string fixture(const std::string& name) {
  return (std::filesystem::path(TANDEM_SOURCE_DIR) / "tests" / "sim" / "fixtures" / name).string();
}

std::string writeText(const std::string& name, const std::string& text) {
  const std::string path = traces::testing::tempTracePath(name);
  std::ofstream(path) << text;
  return path;
}

std::vector<std::string> gpusOf(const nlohmann::json& doc) {
  std::vector<std::string> out;
  for (const auto& r : doc["ranks"]) out.push_back(r["gpu"]);
  return out;
}

}  // namespace

TEST_CASE("tandem place pairs the bridged GPUs and prints the simulated gain", "[cli][place]") {
  const std::string map = traces::testing::tempTracePath("map.yaml");
  const auto text = runTandem(kTp2Dp2 + "--topology pcie4-nvbridge --calibration none --out " + shellQuote(map), map);
  INFO(text.out << text.err);
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("tp 0       0,1                      gpu0,gpu2"));
  CHECK_THAT(text.out, Catch::Contains("tp 1       2,3                      gpu1,gpu3"));
  CHECK_THAT(text.out, Catch::Contains("25 -> 100"));
  CHECK_THAT(text.out, Catch::Contains("rank -> GPU      0:gpu0 1:gpu2 2:gpu1 3:gpu3"));
  CHECK_THAT(text.out, Catch::Contains("simulated step   identity "));
  CHECK_THAT(text.out, Catch::Contains("% faster"));
  CHECK_THAT(text.out, Catch::Contains("map written to " + map));
  const std::string yaml = readFile(map);
  CHECK_THAT(yaml, Catch::Contains("- {rank: 1, gpu: gpu2, host: host0, local: 2}"));
  CHECK_THAT(yaml, Catch::Contains("world_size: 4"));

  const auto json = runTandem(kTp2Dp2 + "--topology pcie4-nvbridge --calibration none --json", map + ".json");
  REQUIRE(json.exit_code == 0);
  const auto doc = nlohmann::json::parse(json.out);
  CHECK(doc["proposal_chosen"] == true);
  CHECK(doc["chosen_step_ns"].get<int64_t>() < doc["identity_step_ns"].get<int64_t>());
  CHECK(doc["gain_pct"].get<double>() > 10);
  CHECK(gpusOf(doc) == std::vector<std::string>{"gpu0", "gpu2", "gpu1", "gpu3"});

  // The same machine from what its nvidia-smi prints, as `tandem topo import` reads it.
  const auto smi = runTandem(kTp2Dp2 + "--nvidia-smi " + fixture("pcie4-nvbridge-topo-m.txt") +
                                 " --model A100-PCIE-80GB --calibration none --json",
                             map + ".smi");
  INFO(smi.err);
  REQUIRE(smi.exit_code == 0);
  const auto smi_doc = nlohmann::json::parse(smi.out);
  CHECK(smi_doc["proposal_chosen"] == true);
  CHECK(gpusOf(smi_doc) == std::vector<std::string>{"gpu0", "gpu2", "gpu1", "gpu3"});
}

TEST_CASE("tandem place keeps the identity on a DGX and says so", "[cli][place]") {
  const auto r = runTandem("place default --set parallel.tensor_parallel=4 --set parallel.data_parallel=2 "
                           "--topology dgx-h100 --calibration none",
                           traces::testing::tempTracePath("dgx"));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("no better map found, the identity stays"));
  CHECK_THAT(r.out, Catch::Contains("rank -> GPU      0:gpu0 1:gpu1 2:gpu2"));
}

TEST_CASE("tandem place: bad input in one line", "[cli][place]") {
  const std::string scratch = traces::testing::tempTracePath("bad");
  const auto none = runTandem("place default", scratch);
  CHECK(none.exit_code == 1);
  CHECK_THAT(none.err, Catch::Contains("say which machine: --topology NAME|FILE or --nvidia-smi FILE"));
  const auto both = runTandem("place default --topology dgx-h100 --nvidia-smi x.txt", scratch);
  CHECK(both.exit_code != 0);
  CHECK_THAT(both.err, Catch::Contains("excludes"));
  const std::string smi = writeText("bad-topo.txt", "\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV9\t X \n");
  const auto bad_smi = runTandem("place default --nvidia-smi " + smi + " --model A100-PCIE-80GB", scratch);
  CHECK(bad_smi.exit_code == 1);
  CHECK_THAT(bad_smi.err, Catch::Contains(smi + ":3: matrix is not symmetric"));
  const auto big = runTandem("place default --set parallel.data_parallel=16 --topology dgx-h100", scratch);
  CHECK(big.exit_code == 1);
  CHECK_THAT(big.err, Catch::Contains("the plan has 16 ranks but topology 'dgx-h100' has 8 GPUs"));
  const auto help = runTandem("place --help", scratch);
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Catch::Contains("--topology pcie4-nvbridge --out map.yaml"));
  CHECK_THAT(help.out, Catch::Contains("--placement map.yaml"));
}

TEST_CASE("tandem run --placement refuses bad maps before looking for GPUs", "[cli][place][run]") {
  const std::string scratch = traces::testing::tempTracePath("run");
  const std::string bad = writeText("bad-map.yaml", "world_size: 2\nranks:\n"
                                                    "  - {rank: 0, gpu: gpu0, host: host0, local: 0}\n"
                                                    "  - {rank: 0, gpu: gpu1, host: host0, local: 1}\n");
  const auto r = runTandem("run default --set parallel.data_parallel=2 --placement " + bad, scratch,
                           "CUDA_VISIBLE_DEVICES=");
  if (r.err.find("built without CUDA") != std::string::npos) SUCCEED("no CUDA in this build: run refuses first");
  else {
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains("run: --placement: " + bad + ":4: rank 0 is placed twice (first on line 3)"));
    const std::string four = writeText("map4.yaml", "world_size: 4\nranks:\n"
                                                    "  - {rank: 0, gpu: gpu0, host: host0, local: 0}\n"
                                                    "  - {rank: 1, gpu: gpu2, host: host0, local: 2}\n"
                                                    "  - {rank: 2, gpu: gpu1, host: host0, local: 1}\n"
                                                    "  - {rank: 3, gpu: gpu3, host: host0, local: 3}\n");
    const auto wrong = runTandem("run default --set parallel.data_parallel=2 --placement " + four, scratch,
                                 "CUDA_VISIBLE_DEVICES=");
    CHECK_THAT(wrong.err, Catch::Contains(four + ": the map places 4 ranks but the job has 2"));
    // A good map is applied (said before the GPUs are looked for; none are visible here).
    const auto good = runTandem("run default --set parallel.data_parallel=4 --placement " + four, scratch,
                                "CUDA_VISIBLE_DEVICES=");
    CHECK_THAT(good.out, Catch::Contains("run: placement from " + four +
                                         ": rank 0 -> GPU 0, rank 1 -> GPU 2, rank 2 -> GPU 1, rank 3 -> GPU 3"));
  }
}

TEST_CASE("tandem run --placement auto reads nvidia-smi", "[cli][place][run]") {
  const std::string scratch = traces::testing::tempTracePath("auto");
  // A stand-in nvidia-smi that prints the bridged machine.
  const std::string fake = writeText("fake-nvidia-smi", "#!/bin/sh\n"
                                                        "case \"$1\" in\n"
                                                        "  topo) cat '" + fixture("pcie4-nvbridge-topo-m.txt") + "' ;;\n"
                                                        "  --query-gpu=name) echo 'NVIDIA A100 80GB PCIe' ;;\n"
                                                        "  *) exit 6 ;;\n"
                                                        "esac\n");
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  const std::string env = "CUDA_VISIBLE_DEVICES= TANDEM_NVIDIA_SMI=" + fake;
  const auto r = runTandem("run default --set parallel.data_parallel=4 --placement auto", scratch, env);
  if (r.err.find("built without CUDA") != std::string::npos) {
    SUCCEED("no CUDA in this build: run refuses first");
    return;
  }
  INFO(r.out << r.err);
  CHECK_THAT(r.out, Catch::Contains("run: placement from auto (nvidia-smi topo -m, 4 x A100-PCIE-80GB: simulated step"));
  const auto big = runTandem("run default --set parallel.data_parallel=8 --placement auto", scratch, env);
  CHECK(big.exit_code == 1);
  CHECK_THAT(big.err, Catch::Contains("the job has 8 ranks and `nvidia-smi topo -m` shows 4 GPUs"));
  const auto missing = runTandem("run default --set parallel.data_parallel=2 --placement auto", scratch,
                                 "CUDA_VISIBLE_DEVICES= TANDEM_NVIDIA_SMI=/nonexistent/nvidia-smi");
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.err, Catch::Contains("--placement auto reads `/nonexistent/nvidia-smi topo -m`, which did not run"));
}

TEST_CASE("tandem run counts ranks: --gpus and --ranks-per-gpu against the job's model-parallel groups",
          "[cli][run]") {
  const std::string scratch = traces::testing::tempTracePath("ranks");
  const auto odd = runTandem("run tiny --set parallel.tensor_parallel=2 --gpus 3", scratch, "CUDA_VISIBLE_DEVICES=");
  if (odd.err.find("built without CUDA") != std::string::npos) {
    SUCCEED("no CUDA in this build: run refuses first");
    return;
  }
  CHECK(odd.exit_code == 1);
  CHECK_THAT(odd.err, Catch::Contains("run: 3 ranks (3 GPUs x 1 per GPU) are not a multiple of tensor x pipeline x "
                                      "context parallel = 2"));
  // Every rank on one GPU: the job's world must be the ranks per GPU.
  const auto wide = runTandem("run tiny --set parallel.tensor_parallel=2 --set parallel.data_parallel=2 "
                              "--ranks-per-gpu 2",
                              scratch, "CUDA_VISIBLE_DEVICES=");
  CHECK(wide.exit_code == 1);
  CHECK_THAT(wide.err, Catch::Contains("--ranks-per-gpu 2 puts every rank on one GPU: the job has 4 ranks"));
  const auto checkpointed = runTandem("run tiny --set parallel.tensor_parallel=2 --ranks-per-gpu 2 --checkpoint-dir " +
                                          scratch + "-ckpt --checkpoint-every 5",
                                      scratch, "CUDA_VISIBLE_DEVICES=");
  CHECK(checkpointed.exit_code == 1);
  CHECK_THAT(checkpointed.err, Catch::Contains("--ranks-per-gpu does not checkpoint"));
  // Profiling is no longer refused: it gets as far as looking for a GPU.
  const auto profiled = runTandem("run tiny --set parallel.tensor_parallel=2 --ranks-per-gpu 2 --profile --out " +
                                      scratch + ".sqlite",
                                  scratch, "CUDA_VISIBLE_DEVICES=");
  CHECK(profiled.exit_code == 1);
  CHECK_THAT(profiled.err, Catch::Contains("no CUDA GPU available"));
  CHECK_FALSE(std::filesystem::exists(scratch + ".sqlite"));
  // The right world gets as far as looking for a GPU (none visible here).
  const auto fits = runTandem("run tiny --set parallel.tensor_parallel=2 --ranks-per-gpu 2", scratch,
                              "CUDA_VISIBLE_DEVICES=");
  CHECK(fits.exit_code == 1);
  CHECK_THAT(fits.err, Catch::Contains("no CUDA GPU available"));
}
