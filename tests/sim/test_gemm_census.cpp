// The GEMM census (simulator/calibrate/gemm_census.h) off the GPU: its grid,
// its trace read back from a real SQLite file written as the census writes
// it, its section of a calibration file, and how the cost model reads a
// GEMM's blocks and tile off it.
#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "simulator/calibrate/gemm_census.h"
#include "simulator/cost/cost_model.h"
#include "tests/traces/test_fixtures.h"
#include "traces/store/trace_writer.h"

using namespace tandem;

namespace {

Task gemm(OpKind op, int64_t m, int64_t n, int64_t k, Epilogue epi = Epilogue::None) {
  Task t;
  t.kind = TaskKind::Kernel;
  t.op = op;
  t.epilogue = epi;
  t.attrs.m = m, t.attrs.n = n, t.attrs.k = k;
  return t;
}

sim::DeviceSpec h100() {
  sim::DeviceSpec d;
  d.sm_count = 132;
  return d;
}

// A census trace as runner/gemm_census_run.cpp writes one: a run named
// gemm-census, a plan task per problem named by its shape key, each task's
// kernel with its launch geometry; `extra` adds a task without a kernel.
std::string censusTrace(const std::string& name, const std::string& run_name, bool extra_task) {
  const std::string path = traces::testing::tempTracePath(name);
  traces::TraceWriter w(path);
  traces::RunInfo r;
  r.kind = traces::RunKind::Real;
  r.name = run_name;
  r.devices_json = R"([{"index": 0, "name": "NVIDIA H100 80GB HBM3", "sm_count": 132}])";
  w.beginRun(r);
  struct Row {
    const char* key;
    const char* op;
    const char* kernel;
    int grid, cluster;
  };
  const Row rows[] = {
      {"m=8192 n=5120 k=1280", "matmul_bwd_weight", "nvjet_sm90_tst_128x160_64x5_2x4_h_bz_NTT", 120, 8},
      {"m=8192 n=1280 k=5120 epi=residual", "matmul", "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_TNT", 132, 2},
  };
  int64_t id = 0;
  for (const Row& row : rows) {
    traces::PlanTaskRow t;
    t.task_id = id;
    t.name = row.key;
    t.op = row.op;
    w.addPlanTask(t);
    traces::ActivityRow a;
    a.start_ns = 1000 * (id + 1);
    a.end_ns = a.start_ns + 500;
    a.name = row.kernel;
    a.task_id = id;
    traces::LaunchGeometry g;
    g.grid_x = row.grid, g.grid_y = 1, g.grid_z = 1;
    g.block_x = 384, g.block_y = 1, g.block_z = 1;
    g.registers_per_thread = 168;
    g.shared_memory_bytes = 213220;
    g.cluster_x = row.cluster, g.cluster_y = 1, g.cluster_z = 1;
    a.geometry = g;
    w.addActivity(a);
    // A short kernel of the same task (a memset-like helper) is not its main one.
    a.start_ns = a.end_ns + 10;
    a.end_ns = a.start_ns + 5;
    a.name = "helper";
    a.geometry->grid_x = 1;
    w.addActivity(a);
    ++id;
  }
  if (extra_task) {
    traces::PlanTaskRow t;
    t.task_id = id;
    t.name = "m=2048 n=512 k=512";
    t.op = "matmul_bwd_data";
    w.addPlanTask(t);
  }
  return path;
}

}  // namespace

TEST_CASE("GEMM census: the grid's problems are GEMMs named by their tasks' shape keys", "[calibrate][census]") {
  const std::vector<GemmProblem> full = sim::gemmCensusGrid("full");
  REQUIRE(full.size() > 1000);
  std::set<std::string> names;
  std::set<OpKind> ops;
  for (const GemmProblem& p : full) {
    const Task t = gemm(p.op, p.m, p.n, p.k, p.epilogue);
    CHECK(p.name == sim::shapeKey(t));
    CHECK(sim::costOpKind(t) == p.op);
    CHECK(2.0 * double(p.m) * double(p.n) * double(p.k) <= 4e12);
    CHECK(names.insert(std::to_string(int(p.op)) + p.name).second);  // no problem twice
    if (p.epilogue == Epilogue::Residual || p.epilogue == Epilogue::Gelu) CHECK(p.op == OpKind::Matmul);
    if (p.epilogue == Epilogue::DGelu) CHECK(p.op == OpKind::MatmulBwdData);
    ops.insert(p.op);
  }
  CHECK(ops == std::set<OpKind>{OpKind::Matmul, OpKind::MatmulBwdData, OpKind::MatmulBwdWeight});
  // The shapes whose kernels the sweep's neighbours got wrong are in it: a
  // GPT-2 774M MLP weight gradient, a GPT-2 2.7B attention projection's.
  CHECK(names.count(std::to_string(int(OpKind::MatmulBwdWeight)) + "m=16384 n=5120 k=1280"));
  CHECK(names.count(std::to_string(int(OpKind::MatmulBwdWeight)) + "m=4096 n=2560 k=2560"));
  CHECK(sim::gemmCensusGrid("smoke").size() == 3);
  CHECK_THROWS_WITH(sim::gemmCensusGrid("huge"), Catch::Contains("full, smoke"));
}

TEST_CASE("GEMM census: a census trace read back as kernels by shape key", "[calibrate][census]") {
  const sim::GemmCensus c = sim::readGemmCensus(censusTrace("census_read.sqlite", sim::kGemmCensusRunName, true));
  CHECK(c.gpu == "NVIDIA H100 80GB HBM3");
  CHECK(c.problems == 3);
  CHECK(c.without_kernel == 1);
  const sim::CostEntry& w = c.kernels.at(OpKind::MatmulBwdWeight).at("m=8192 n=5120 k=1280");
  CHECK(w.blocks == 120);  // the longest kernel's, not the helper's
  CHECK(w.cluster == 8);
  CHECK(w.threads == 384);
  CHECK(w.registers == 168);
  CHECK(w.shared_bytes == 213220);
  REQUIRE(w.tile);
  CHECK(*w.tile == sim::GemmTile{128, 160});
  CHECK(w.ns < 0);  // geometry only
  CHECK(c.kernels.at(OpKind::Matmul).at("m=8192 n=1280 k=5120 epi=residual").blocks == 132);

  // A trace without a census run says so, naming the file.
  const std::string other = censusTrace("census_other.sqlite", "gpt2-124m", false);
  CHECK_THROWS_WITH(sim::readGemmCensus(other), Catch::Contains(other) && Catch::Contains("no GEMM census"));
}

TEST_CASE("GEMM census: its section of a calibration file parses back and replaces an older one",
          "[calibrate][census]") {
  const sim::GemmCensus c = sim::readGemmCensus(censusTrace("census_yaml.sqlite", sim::kGemmCensusRunName, false));
  const std::string section = sim::gemmKernelsYaml(c.kernels, "two shapes");
  const std::string base = "# my profile\nversion: 1\nops:\n  matmul:\n    ns: 1000\n";
  const std::string once = sim::withGemmKernels(base, section);
  CHECK(once.rfind(base, 0) == 0);  // every line of the file kept
  const sim::Calibration cal = sim::parseCalibration(once, "census.yaml");
  CHECK(cal.gemm_kernels.at(OpKind::MatmulBwdWeight).at("m=8192 n=5120 k=1280").blocks == 120);
  CHECK(cal.gemm_kernels.at(OpKind::MatmulBwdWeight).at("m=8192 n=5120 k=1280").tile == sim::GemmTile{128, 160});
  CHECK(cal.ops.at(OpKind::Matmul).all_shapes.ns == 1000);
  // A second census replaces the first, wherever it stood.
  const std::string moved = sim::withGemmKernels(once, "") + "launch_overhead_ns: 5\n";
  const std::string twice = sim::withGemmKernels(sim::withGemmKernels(once, section) + "launch_overhead_ns: 5\n",
                                                 sim::gemmKernelsYaml({}, "none"));
  CHECK(twice.find("m=8192 n=5120 k=1280") == std::string::npos);
  CHECK(twice.find("launch_overhead_ns: 5\n") != std::string::npos);
  CHECK(moved.find("gemm_kernels") == std::string::npos);
}

TEST_CASE("GEMM census: bad sections fail with the file and line", "[calibrate][census]") {
  auto parse = [](const std::string& body) {
    return sim::parseCalibration("version: 1\ngemm_kernels:\n" + body, "bad.yaml");
  };
  CHECK_THROWS_WITH(parse("  layernorm:\n    \"m=1 n=2 k=3\": {blocks: 8}\n"),
                    Catch::Contains("bad.yaml:3") && Catch::Contains("not a GEMM op kind"));
  CHECK_THROWS_WITH(parse("  matmul:\n    \"m=1 n=2 k=3\": \"ns 100 blocks 8\"\n"),
                    Catch::Contains("bad.yaml:4") && Catch::Contains("unknown 'ns'"));
  CHECK_THROWS_WITH(parse("  matmul:\n    \"m=1 n=2 k=3\": \"tile 128x128\"\n"),
                    Catch::Contains("bad.yaml:4") && Catch::Contains("blocks is required"));
  CHECK_THROWS_WITH(parse("  matmul:\n    \"m=1 n=2 k=3\": \"blocks 1.5\"\n"),
                    Catch::Contains("bad.yaml:4") && Catch::Contains("whole number"));
  CHECK_THROWS_WITH(parse("  matmul:\n    \"m=1 n=2 k=3\": \"blocks 8 tile\"\n"),
                    Catch::Contains("'tile' has no value"));
  CHECK_THROWS_WITH(parse("  matmul:\n    \"m=1 n=2 k=3\": \"blocks 8 tile big\"\n"),
                    Catch::Contains("expected a GEMM tile"));
  CHECK_THROWS_WITH(parse("  matmul:\n    \"m=1 n=2 k=3\": {blocks: 8}\n"), Catch::Contains("blocks is required"));
  CHECK_THROWS_WITH(parse("  matmul: [1, 2]\n"), Catch::Contains("expected a map of shape keys"));
  CHECK_THROWS_WITH(sim::parseCalibration("version: 1\ngemm_kernels: 3\n", "bad.yaml"),
                    Catch::Contains("bad.yaml:2") && Catch::Contains("expected a map of GEMM op kinds"));
}

TEST_CASE("GEMM census: a shape's blocks and tile come from the census where the sweep did not time it",
          "[calibrate][census]") {
  // The sweep timed GPT-2 1.5B's MLP weight gradient (132 blocks); the
  // census found GPT-2 774M's (120 blocks in clusters of 8) and a 2.7B
  // attention projection's.
  const std::string sweep =
      "version: 1\nops:\n  matmul_bwd_weight:\n    shapes:\n"
      "      \"m=16384 n=4800 k=1600\": {ns: 430000, blocks: 132, tile: 128x256}\n";
  const std::string census = "gemm_kernels:\n  matmul_bwd_weight:\n"
                             "    \"m=16384 n=5120 k=1280\": \"blocks 120 tile 128x160 cluster 8\"\n"
                             "    \"m=4096 n=2560 k=2560\": \"blocks 120 tile 256x128 cluster 8\"\n"
                             "    \"m=16384 n=4800 k=1600\": \"blocks 128 tile 256x128\"\n";
  const sim::RooflineCostModel without(sim::RooflineParams::defaults(), sim::parseCalibration(sweep, "sweep.yaml"));
  const sim::RooflineCostModel with(sim::RooflineParams::defaults(),
                                    sim::parseCalibration(sweep + census, "census.yaml"));
  const Task fc = gemm(OpKind::MatmulBwdWeight, 8192, 5120, 1280);
  // Without the census: the swept neighbour's 132 blocks, no SM left.
  CHECK(without.kernelBlocks(fc, h100()) == 132);
  CHECK(without.spareSmShare(fc, h100()) == -1);
  // With it: the census's shape at another depth (the depth weighs 0.1).
  CHECK(with.kernelBlocks(fc, h100()) == 120);
  CHECK(with.spareSmShare(fc, h100()) == Approx(12.0 / 132));
  // Its tile gives the last round: 5120 / 128 x 1280 / 160 = 320 tiles on
  // 120 blocks, the third round 80 of them.
  const sim::LastRound lr = with.lastRound(fc, h100());
  CHECK(lr.share == Approx(1.0 / 3));
  CHECK(lr.spare == Approx(52.0 / 132));
  // A shape the sweep timed keeps the kernel its runs traced.
  CHECK(with.kernelBlocks(gemm(OpKind::MatmulBwdWeight, 16384, 4800, 1600), h100()) == 132);
  // An output of many waves of tiles: without the census the SMs are full
  // (a persistent GEMM of 600 tiles of 256 x 128); the census knows the
  // cluster-8 kernel leaves 12.
  const Task qkv = gemm(OpKind::MatmulBwdWeight, 4096, 7680, 2560);
  CHECK(without.kernelBlocks(qkv, h100()) == 132);
  const sim::RooflineCostModel qkv_census(
      sim::RooflineParams::defaults(),
      sim::parseCalibration(sweep + "gemm_kernels:\n  matmul_bwd_weight:\n"
                                    "    \"m=4096 n=7680 k=2560\": \"blocks 120 tile 128x160 cluster 8\"\n",
                            "qkv.yaml"));
  CHECK(qkv_census.kernelBlocks(qkv, h100()) == 120);
  // Other op kinds than the census's keep the old reading.
  CHECK(with.kernelBlocks(gemm(OpKind::MatmulBwdData, 8192, 5120, 1280), h100()) == -1);
}

namespace {

struct CliOutput {
  int status = -1;
  std::string text;
};

CliOutput tandemCli(const std::string& args) {
  const char* env = std::getenv("TANDEM_BIN");
  const std::string bin = env ? env : std::string(TANDEM_BINARY_DIR) + "/cli/tandem";
  CliOutput out;
  FILE* p = popen((bin + " " + args + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.text.append(buf, n);
  const int rc = pclose(p);
  out.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

std::string writeText(const std::string& name, const std::string& text) {
  const std::string path = traces::testing::tempTracePath(name);
  FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}

std::string readText(const std::string& path) {
  std::string text;
  FILE* f = std::fopen(path.c_str(), "r");
  REQUIRE(f != nullptr);
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

}  // namespace

TEST_CASE("tandem calibrate --gemm-census adds a census trace's kernels to a calibration", "[cli][census]") {
  const std::string trace = censusTrace("cli_census.sqlite", sim::kGemmCensusRunName, false);
  const std::string cal =
      writeText("cli_census_base.yaml", "# my profile\nversion: 1\ngpu: \"NVIDIA H100 80GB HBM3\"\nops: {}\n");
  const std::string out = traces::testing::tempTracePath("cli_census_out.yaml");
  const CliOutput ok = tandemCli("calibrate --gemm-census " + cal + " --out " + out + " " + trace);
  INFO(ok.text);
  REQUIRE(ok.status == 0);
  CHECK(ok.text.find("GEMM census of the NVIDIA H100 80GB HBM3: 2 shapes") != std::string::npos);
  const std::string yaml = readText(out);
  CHECK(yaml.rfind("# my profile\nversion: 1\n", 0) == 0);
  CHECK(yaml.find("gemm_kernels:  # the executor's GEMM kernels on the NVIDIA H100 80GB HBM3 at 2 shapes") !=
        std::string::npos);
  CHECK(sim::parseCalibration(yaml, out).gemm_kernels.at(OpKind::MatmulBwdWeight).size() == 1);
  // tandem simulate says the calibration it read has a census.
  const CliOutput sim = tandemCli("simulate tiny --topology dgx-h100 --calibration " + out);
  INFO(sim.text);
  CHECK(sim.text.find("cli_census_out.yaml (with a GEMM census of 2 shapes)") != std::string::npos);

  // Another GPU's calibration, two traces, or a trace without a census:
  // one line, exit 1, no file.
  const std::string h200 = writeText("cli_census_h200.yaml", "version: 1\ngpu: \"NVIDIA H200\"\nops: {}\n");
  const std::string bad = traces::testing::tempTracePath("cli_census_bad.yaml");
  const CliOutput other_gpu = tandemCli("calibrate --gemm-census " + h200 + " --out " + bad + " " + trace);
  CHECK(other_gpu.status == 1);
  CHECK(other_gpu.text.find("the census ran on the NVIDIA H100 80GB HBM3") != std::string::npos);
  const CliOutput two = tandemCli("calibrate --gemm-census " + cal + " --out " + bad + " " + trace + " " + trace);
  CHECK(two.status == 1);
  CHECK(two.text.find("reads one census trace") != std::string::npos);
  const std::string not_census = censusTrace("cli_not_census.sqlite", "gpt2-124m", false);
  const CliOutput none = tandemCli("calibrate --gemm-census " + cal + " --out " + bad + " " + not_census);
  CHECK(none.status == 1);
  CHECK(none.text.find("no GEMM census in it") != std::string::npos);
  CHECK(!std::filesystem::exists(bad));
}
