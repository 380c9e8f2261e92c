// `tandem topo list | show | import` through the real binary (TANDEM_BIN, or
// the build tree's cli/tandem).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

#include "simulator/topology/routing.h"
#include "simulator/topology/topology_yaml.h"

namespace fs = std::filesystem;

namespace {

struct Result {
  int rc = -1;
  std::string out;
  std::string err;
};

std::string tandemBin() {
  if (const char* env = std::getenv("TANDEM_BIN")) return env;
  return (fs::path(TANDEM_BINARY_DIR) / "cli" / "tandem").string();
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path scratch() {
  fs::path dir = fs::path(TANDEM_BINARY_DIR) / "test_topology_cli";
  fs::create_directories(dir);
  return dir;
}

Result runTandem(const std::string& args) {
  const std::string bin = tandemBin();
  REQUIRE(fs::exists(bin));
  fs::path err = scratch() / "stderr.txt";
  std::string cmd = "'" + bin + "' " + args + " 2>'" + err.string() + "'";
  Result r;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  int status = pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = slurp(err);
  return r;
}

std::string fixture(const std::string& name) {
  return (fs::path(TANDEM_SOURCE_DIR) / "tests" / "sim" / "fixtures" / name).string();
}

}  // namespace

TEST_CASE("topo list names every preset", "[cli][topology]") {
  Result r = runTandem("topo list");
  REQUIRE(r.rc == 0);
  for (const char* name : {"h200x2-nv18", "dgx-h100", "dgx-h200", "pcie-4gpu", "hgx-a100", "pcie4-nvbridge",
                           "<N>xdgx-h100", "<N>xdgx-h200", "<N>xdgx-a100", "<N>xgrand-teton-500w", "<N>xgrand-teton-700w", "<N>xdgx-b200",
                           "<N>xgb200-nvl72", "<N>xgb300-nvl72"})
    CHECK(r.out.find(name) != std::string::npos);
  Result j = runTandem("topo list --json");
  REQUIRE(j.rc == 0);
  auto doc = nlohmann::json::parse(j.out);
  CHECK(doc.size() == 14);
  CHECK(doc[0]["name"] == "h200x2-nv18");
}

TEST_CASE("topo show prints bottlenecks per GPU pair", "[cli][topology]") {
  Result r = runTandem("topo show h200x2-nv18 --json");
  REQUIRE(r.rc == 0);
  auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["devices"].size() == 2);
  CHECK(doc["pairs_scope"] == "all");
  REQUIRE(doc["pairs"].size() == 2);
  CHECK(doc["pairs"][0]["bottleneck_gbps"].get<double>() == Approx(478.116));
  CHECK(doc["links"]["nvlink"]["connections"] == 1);

  Result text = runTandem("topo show pcie-4gpu");
  REQUIRE(text.rc == 0);
  CHECK(text.out.find("bottleneck GB/s") != std::string::npos);
  CHECK(text.out.find("4 x A100-PCIE-80GB") != std::string::npos);

  Result big = runTandem("topo show 16xdgx-h100 --json");
  REQUIRE(big.rc == 0);
  auto cluster = nlohmann::json::parse(big.out);
  CHECK(cluster["devices"].size() == 128);
  CHECK(cluster["pairs_scope"] == "from_first_device");
  CHECK(cluster["pairs"].size() == 127);
}

TEST_CASE("topo show reports bad files with file:line on one line", "[cli][topology][errors]") {
  fs::path bad = scratch() / "bad.yaml";
  std::ofstream(bad) << "devices:\n  - {name: g0, model: H100}\n  - {name: g1, model: H100}\nlinks:\n"
                        "  - {a: g0, b: g1, kind: nvlink, gbps: -1}\n";
  Result r = runTandem("topo show '" + bad.string() + "'");
  CHECK(r.rc != 0);
  CHECK(r.err.find(bad.string() + ":5:") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  Result missing = runTandem("topo show no-such-topology");
  CHECK(missing.rc != 0);
  CHECK(missing.err.find("neither a preset") != std::string::npos);
}

TEST_CASE("topo import writes a topology that loads back", "[cli][import]") {
  fs::path out = scratch() / "h200x2.yaml";
  fs::remove(out);
  Result r = runTandem("topo import --nvidia-smi '" + fixture("h200x2-topo-m.txt") + "' --nvlink '" +
                    fixture("h200x2-nvlink-s.txt") + "' --out '" + out.string() + "' --json");
  REQUIRE(r.rc == 0);
  auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["devices"] == 2);
  CHECK(doc["model"] == "H200");
  tandem::sim::Topology t = tandem::sim::loadTopologyFile(out.string());
  tandem::sim::Router router(t);
  REQUIRE(router.route(0, 1).size() == 1);
  CHECK(t.links[size_t(router.route(0, 1)[0])].lanes == 18);
  CHECK(router.bottleneckGbps(0, 1) == Approx(18 * 26.562));

  fs::path pcie = scratch() / "pcie.yaml";
  Result p = runTandem("topo import --nvidia-smi '" + fixture("pcie4-topo-m.txt") + "' --model A100-PCIE-80GB --out '" +
                    pcie.string() + "'");
  REQUIRE(p.rc == 0);
  CHECK(p.out.find("4 x A100-PCIE-80GB") != std::string::npos);
  Result shown = runTandem("topo show '" + pcie.string() + "'");
  CHECK(shown.rc == 0);
  CHECK(shown.out.find("host_bridge 1") != std::string::npos);
}

TEST_CASE("topo import of bad input fails cleanly and writes nothing", "[cli][import][errors]") {
  fs::path in = scratch() / "ragged.txt";
  std::ofstream(in) << "\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\n";
  fs::path out = scratch() / "never.yaml";
  fs::remove(out);
  Result r = runTandem("topo import --nvidia-smi '" + in.string() + "' --model H100 --out '" + out.string() + "'");
  CHECK(r.rc != 0);
  CHECK(r.err.find(in.string() + ":3: ragged row") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK_FALSE(fs::exists(out));
  // Nothing half-written next to it either.
  for (const auto& e : fs::directory_iterator(scratch()))
    CHECK(e.path().filename().string().find(".tmp") == std::string::npos);

  // An existing output survives a failed import untouched.
  std::ofstream(out) << "keep me\n";
  Result again = runTandem("topo import --nvidia-smi '" + in.string() + "' --model H100 --out '" + out.string() + "'");
  CHECK(again.rc != 0);
  CHECK(slurp(out) == "keep me\n");
  fs::remove(out);

  Result no_model =
      runTandem("topo import --nvidia-smi '" + fixture("pcie4-topo-m.txt") + "' --out '" + out.string() + "'");
  CHECK(no_model.rc != 0);
  CHECK(no_model.err.find("--model") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
}
