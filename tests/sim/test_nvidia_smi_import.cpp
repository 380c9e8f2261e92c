// `nvidia-smi topo -m` / `nvlink -s` import: the measured 2xH200 machine,
// an 8-GPU NVSwitch box, a PCIe box with NICs, and bad inputs.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "simulator/topology/nvidia_smi_import.h"
#include "simulator/topology/routing.h"
#include "simulator/topology/topology_yaml.h"

using namespace tandem::sim;

namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::filesystem::path(TANDEM_SOURCE_DIR) / "tests" / "sim" / "fixtures" / name, std::ios::binary);
  REQUIRE(in);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string topoError(const std::string& text) {
  try {
    parseNvidiaSmiTopo(text, "topo.txt");
  } catch (const TopologyError& e) {
    return e.what();
  }
  return "";
}

int countKind(const Topology& t, NodeKind kind) {
  int n = 0;
  for (const auto& s : t.switches) n += s.kind == kind;
  return n;
}

std::vector<std::string> routeNames(const Topology& t, const Router& r, int a, int b) {
  std::vector<std::string> out{t.nodeName(a)};
  for (int li : r.route(a, b)) out.push_back(t.nodeName(t.links[size_t(li)].dst));
  return out;
}

const char* kTwo = "\tGPU0\tGPU1\tCPU Affinity\n"
                   "GPU0\t X \tNV4\t0-7\n"
                   "GPU1\tNV4\t X \t0-7\n";

}  // namespace

TEST_CASE("the measured 2xH200 machine imports as 2 GPUs joined by 18 x 26.562 GB/s", "[import]") {
  NvidiaSmiMatrix m = parseNvidiaSmiTopo(fixture("h200x2-topo-m.txt"), "h200x2-topo-m.txt");
  REQUIRE(m.names == std::vector<std::string>{"GPU0", "GPU1"});
  CHECK(m.codes[0][1] == "NV18");
  CHECK(m.attribute_names == std::vector<std::string>{"CPU Affinity", "NUMA Affinity", "GPU NUMA ID"});
  CHECK(m.attributes[0].at("CPU Affinity") == "0-31");
  CHECK(m.attributes[0].at("NUMA Affinity") == "0");
  CHECK(m.attributes[1].at("GPU NUMA ID") == "N/A");
  NvlinkStatus nv = parseNvidiaSmiNvlink(fixture("h200x2-nvlink-s.txt"), "h200x2-nvlink-s.txt");
  REQUIRE(nv.gpus.size() == 2);
  CHECK(nv.gpus[1].name == "NVIDIA H200");
  CHECK(nv.gpus[1].link_gbps.size() == 18);

  Topology t = importNvidiaSmi(m, &nv, {});
  REQUIRE(t.devices.size() == 2);
  CHECK(t.devices[0].model == "H200");
  CHECK(t.devices[0].sm_count == 132);
  CHECK(countKind(t, NodeKind::NvSwitch) == 0);
  Router r(t);
  const auto& path = r.route(0, 1);
  REQUIRE(path.size() == 1);
  const Link& l = t.links[size_t(path[0])];
  CHECK(l.kind == LinkKind::NvLink);
  CHECK(l.lanes == 18);
  CHECK(l.gbps == Approx(18 * 26.562));
  CHECK(r.bottleneckGbps(1, 0) == Approx(18 * 26.562));
  // Both GPUs are on NUMA node 0: one CPU.
  CHECK(countKind(t, NodeKind::Cpu) == 1);
}

TEST_CASE("an 8-GPU NVSwitch box with rail NICs", "[import]") {
  NvidiaSmiMatrix m = parseNvidiaSmiTopo(fixture("dgx8-topo-m.txt"), "dgx8-topo-m.txt");
  REQUIRE(m.names.size() == 16);  // escape codes around the header are gone
  CHECK(m.names.front() == "GPU0");
  CHECK(m.attribute_names.back() == "GPU NUMA ID");
  CHECK(m.nic_legend.at("NIC7") == "mlx5_7");
  NvlinkStatus nv = parseNvidiaSmiNvlink(fixture("dgx8-nvlink-s.txt"), "dgx8-nvlink-s.txt");
  Topology t = importNvidiaSmi(m, &nv, {});
  REQUIRE(t.devices.size() == 8);
  CHECK(t.devices[0].model == "H100");
  // NV18 to 7 peers is 126 links for a GPU that has 18: an NVSwitch.
  CHECK(countKind(t, NodeKind::NvSwitch) == 1);
  CHECK(countKind(t, NodeKind::Nic) == 8);
  CHECK(countKind(t, NodeKind::Cpu) == 2);
  CHECK(countKind(t, NodeKind::HostBridge) == 4);
  CHECK(countKind(t, NodeKind::PcieSwitch) == 12);  // 4 parents, 8 leaves
  Router r(t);
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      if (a != b) {
        CHECK(r.route(a, b).size() == 2);
        CHECK(r.bottleneckGbps(a, b) == Approx(18 * 26.562));
      }
  for (int g = 0; g < 8; ++g) CHECK(t.nodeName(r.nicFor(g)) == "nic" + std::to_string(g));
  // PIX: GPU0 and NIC0 share one switch; PXB: NIC1 is two switches further;
  // SYS: NIC4 is across the sockets.
  int nic0 = t.findNode("nic0"), nic1 = t.findNode("nic1"), nic4 = t.findNode("nic4");
  CHECK(r.route(0, nic0).size() == 2);
  CHECK(r.route(0, nic1).size() == 4);
  auto far = routeNames(t, r, 0, nic4);
  CHECK(std::find(far.begin(), far.end(), "cpu0") != far.end());
  CHECK(std::find(far.begin(), far.end(), "cpu1") != far.end());
}

TEST_CASE("a PCIe box with NICs", "[import]") {
  NvidiaSmiMatrix m = parseNvidiaSmiTopo(fixture("pcie4-topo-m.txt"), "pcie4-topo-m.txt");
  NvidiaSmiImportOptions options;
  options.model = "A100-PCIE-80GB";
  options.name = "box";
  Topology t = importNvidiaSmi(m, nullptr, options);
  CHECK(t.name == "box");
  REQUIRE(t.devices.size() == 4);
  CHECK(countKind(t, NodeKind::NvSwitch) == 0);
  CHECK(countKind(t, NodeKind::HostBridge) == 1);
  CHECK(countKind(t, NodeKind::PcieSwitch) == 2);
  CHECK(countKind(t, NodeKind::Cpu) == 2);
  Router r(t);
  // PIX pair: one switch; PHB pair: up to the host bridge and down again.
  CHECK(routeNames(t, r, 0, 1) == std::vector<std::string>{"gpu0", "pcie0", "gpu1"});
  CHECK(routeNames(t, r, 1, 2) == std::vector<std::string>{"gpu1", "pcie0", "hostbridge0", "pcie1", "gpu2"});
  CHECK(r.bottleneckGbps(0, 3) == Approx(25));  // Gen4 for A100
  CHECK(r.nicFor(0) == t.findNode("nic0"));
  CHECK(r.nicFor(2) == t.findNode("nic0"));
  auto to_nic1 = routeNames(t, r, 3, t.findNode("nic1"));
  CHECK(to_nic1.back() == "nic1");
  CHECK(to_nic1[to_nic1.size() - 2] == "cpu1");
  // Without a model and without nvlink -s there is no way to know the GPU.
  CHECK_THROWS_WITH(importNvidiaSmi(m, nullptr, {}), Catch::Contains("--model"));
}

TEST_CASE("tabs turned into spaces still parse", "[import]") {
  std::string text = "        GPU0    GPU1    CPU Affinity    NUMA Affinity\n"
                     "GPU0     X      NV2     0-7     0\n"
                     "GPU1    NV2      X      0-7     0\n";
  NvidiaSmiMatrix m = parseNvidiaSmiTopo(text, "spaces.txt");
  CHECK(m.codes[1][0] == "NV2");
  CHECK(m.attributes[1].at("CPU Affinity") == "0-7");
  CHECK(m.attributes[1].at("NUMA Affinity") == "0");
  // Windows line ends and a byte order mark are tolerated too.
  NvidiaSmiMatrix w =
      parseNvidiaSmiTopo("\xEF\xBB\xBF\tGPU0\tGPU1\r\nGPU0\t X \tSYS\r\nGPU1\tSYS\t X \r\n", "crlf.txt");
  CHECK(w.codes[0][1] == "SYS");
  // SYS: the GPUs sit on two sockets and meet across the CPU interconnect.
  NvidiaSmiImportOptions options;
  options.model = "H100";
  Topology t = importNvidiaSmi(w, nullptr, options);
  Router r(t);
  CHECK(routeNames(t, r, 0, 1) == std::vector<std::string>{"gpu0", "cpu0", "cpu1", "gpu1"});
  CHECK(r.bottleneckGbps(0, 1) == Approx(55));
}

TEST_CASE("bad nvidia-smi inputs give one error with the line", "[import][errors]") {
  CHECK(topoError(kTwo) == "");
  SECTION("truncated matrix") {
    std::string e = topoError("\tGPU0\tGPU1\nGPU0\t X \tNV4\n\nLegend:\n");
    CHECK(e.find("topo.txt:3:") == 0);
    CHECK(e.find("truncated matrix: 1 of 2 rows (row 'GPU1' is missing)") != std::string::npos);
    e = topoError("\tGPU0\tGPU1\nGPU0\t X \tNV4");
    CHECK(e.find("truncated matrix") != std::string::npos);
  }
  SECTION("unknown legend code") {
    std::string e = topoError("\tGPU0\tGPU1\nGPU0\t X \tNVX\nGPU1\tNVX\t X \n");
    CHECK(e.find("topo.txt:2:") == 0);
    CHECK(e.find("unknown code 'NVX' in row GPU0, column GPU1") != std::string::npos);
    CHECK(e.find("X, SYS, NODE, PHB, PXB, PIX, NV#") != std::string::npos);
  }
  SECTION("ragged rows") {
    std::string e = topoError("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\n");
    CHECK(e.find("topo.txt:3:") == 0);
    CHECK(e.find("ragged row 'GPU1': 1 cells, expected 2") != std::string::npos);
    e = topoError("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\t0\t9\nGPU1\tNV4\t X \t0-7\n");
    CHECK(e.find("topo.txt:2:") == 0);
    CHECK(e.find("3 values after the matrix") != std::string::npos);
  }
  SECTION("no GPUs") {
    CHECK(topoError("\tNIC0\nNIC0\t X \n").find("topo.txt:1: no GPU columns") == 0);
    CHECK(topoError("").find("empty file") != std::string::npos);
    CHECK(topoError("Mon Nov 30 04:10:55 2026\n").find("no GPU columns") != std::string::npos);
  }
  SECTION("escape garbage") {
    std::string e = topoError("\t\x1b[4mGPU0\tGPU1\x1b[0m\nGPU0\t X \tNV4\nGPU1\tNV4\t\x1b]X \n");
    CHECK(e.find("topo.txt:3:") == 0);
    CHECK(e.find("malformed terminal escape sequence") != std::string::npos);
    e = topoError("\tGPU0\tGPU1\nGPU0\t X \tNV4\x07\nGPU1\tNV4\t X \n");
    CHECK(e.find("topo.txt:2: unexpected control character 0x07") == 0);
    e = topoError("\tGPU0\tGPU1\x1b");
    CHECK(e.find("topo.txt:1:") == 0);
  }
  SECTION("rows out of order, misplaced X, asymmetric") {
    CHECK(topoError("\tGPU0\tGPU1\nGPU1\tNV4\t X \nGPU0\t X \tNV4\n").find("topo.txt:2: row 'GPU1' where 'GPU0'") == 0);
    CHECK(topoError("\tGPU0\tGPU1\nGPU0\tNV4\tNV4\nGPU1\tNV4\t X \n").find("diagonal") != std::string::npos);
    CHECK(topoError("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV2\t X \n").find("not symmetric") != std::string::npos);
  }
  SECTION("nvlink -s errors") {
    auto nvError = [](const std::string& text) {
      try {
        parseNvidiaSmiNvlink(text, "nv.txt");
      } catch (const TopologyError& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    CHECK(nvError("\t Link 0: 25 GB/s\n").find("nv.txt:1: a 'Link' line before any 'GPU' line") == 0);
    CHECK(nvError("GPU 0: NVIDIA H100\n\t Link 0: fast\n").find("nv.txt:2:") == 0);
    CHECK(nvError("NVML: driver not loaded\n").find("nv.txt:1: unexpected line") == 0);
    CHECK(nvError("").find("no GPUs") != std::string::npos);
    NvlinkStatus s = parseNvidiaSmiNvlink("GPU 0: NVIDIA H100\n\t Link 0: <inactive>\n\t Link 1: 25 GB/s\n", "nv.txt");
    CHECK(s.gpus[0].link_gbps.size() == 1);
    // A GPU count that disagrees with the matrix.
    NvidiaSmiMatrix m = parseNvidiaSmiTopo(kTwo, "two.txt");
    CHECK_THROWS_WITH(importNvidiaSmi(m, &s, {}), Catch::Contains("lists 1 GPUs but the matrix has 2"));
  }
}

TEST_CASE("import writes YAML that loads back, from files", "[import]") {
  namespace fs = std::filesystem;
  fs::path fixtures = fs::path(TANDEM_SOURCE_DIR) / "tests" / "sim" / "fixtures";
  std::string yaml = importNvidiaSmiFilesToYaml((fixtures / "h200x2-topo-m.txt").string(),
                                                (fixtures / "h200x2-nvlink-s.txt").string(), {});
  CHECK(yaml.find("# Imported from `nvidia-smi topo -m`") == 0);
  Topology t = parseTopologyYaml(yaml, "imported.yaml");
  REQUIRE(t.devices.size() == 2);
  Router r(t);
  CHECK(r.bottleneckGbps(0, 1) == Approx(478.116));
  CHECK_THROWS_WITH(importNvidiaSmiFilesToYaml((fixtures / "absent.txt").string(), "", {}),
                    Catch::Contains("cannot open"));
  CHECK_THROWS_WITH(importNvidiaSmiFilesToYaml(fixtures.string(), "", {}),
                    Catch::Contains(fixtures.string() + ": is a folder, not a file of `nvidia-smi topo -m` output"));
}
