// Presets: the embedded texts equal resources/topologies/, their figures, the
// generated DGX H100 clusters and MIG slicing.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "simulator/topology/routing.h"
#include "simulator/topology/topology_presets.h"
#include "simulator/topology/topology_yaml.h"

using namespace tandem::sim;

namespace {

std::string readFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int count(const Topology& t, NodeKind kind) {
  int n = 0;
  for (const auto& s : t.switches) n += s.kind == kind;
  return n;
}

}  // namespace

TEST_CASE("embedded presets equal the files in resources/topologies", "[presets]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(TANDEM_SOURCE_DIR) / "resources" / "topologies";
  auto names = fixedPresetNames();
  REQUIRE(names.size() == 6);
  for (const auto& name : names) {
    INFO(name);
    fs::path file = dir / (name + ".yaml");
    REQUIRE(fs::exists(file));
    CHECK(readFile(file) == std::string(*presetYaml(name)));
    Topology t = loadTopologyFile(file.string());
    CHECK(t.name == name);
    CHECK_FALSE(t.description.empty());
  }
  // Every .yaml in the folder is a preset (no file forgotten in the binary).
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml") continue;
    INFO(e.path().string());
    CHECK(presetYaml(e.path().stem().string()).has_value());
  }
}

TEST_CASE("h200x2-nv18 matches the measured machine", "[presets]") {
  Topology t = loadTopology("h200x2-nv18");
  REQUIRE(t.devices.size() == 2);
  for (const auto& d : t.devices) {
    CHECK(d.model == "H200");
    CHECK(d.memory_bytes == 143771LL * 1024 * 1024);
    CHECK(d.sm_count == 132);
    CHECK(d.bf16_flops == Approx(989e12));
    CHECK(d.hbm_gbps == Approx(4800));
  }
  Router r(t);
  const auto& path = r.route(0, 1);
  REQUIRE(path.size() == 1);
  const Link& l = t.links[size_t(path[0])];
  CHECK(l.kind == LinkKind::NvLink);
  CHECK(l.lanes == 18);
  CHECK(l.gbps == Approx(18 * 26.562));
}

TEST_CASE("8-GPU presets route GPU pairs through the NVSwitch", "[presets]") {
  struct Want {
    const char* name;
    const char* model;
    double gbps;
  };
  for (Want w : {Want{"dgx-h100", "H100", 450}, Want{"dgx-h200", "H200", 450}, Want{"hgx-a100", "A100-80GB", 300}}) {
    INFO(w.name);
    Topology t = loadTopology(w.name);
    REQUIRE(t.devices.size() == 8);
    CHECK(t.devices[3].model == w.model);
    CHECK(count(t, NodeKind::NvSwitch) == 1);
    Router r(t);
    for (int a = 0; a < 8; ++a)
      for (int b = 0; b < 8; ++b) {
        if (a == b) continue;
        const auto& path = r.route(a, b);
        REQUIRE(path.size() == 2);
        CHECK(t.links[size_t(path[0])].kind == LinkKind::NvLink);
        CHECK(r.bottleneckGbps(a, b) == Approx(w.gbps));
      }
  }
  CHECK(loadTopology("hgx-a100").devices[0].bf16_flops == Approx(312e12));
}

TEST_CASE("pcie-4gpu goes through one PCIe switch", "[presets]") {
  Topology t = loadTopology("pcie-4gpu");
  REQUIRE(t.devices.size() == 4);
  CHECK(count(t, NodeKind::PcieSwitch) == 1);
  CHECK(count(t, NodeKind::HostBridge) == 1);
  Router r(t);
  const auto& path = r.route(0, 3);
  REQUIRE(path.size() == 2);
  CHECK(t.nodeKind(t.links[size_t(path[0])].dst) == NodeKind::PcieSwitch);
  CHECK(r.bottleneckGbps(1, 2) == Approx(25));
}

TEST_CASE("generated DGX H100 clusters", "[presets][cluster]") {
  for (std::string name : {"4xdgx-h100", "4\xC3\x97" "dgx-h100"}) {
    Topology t = loadTopology(name);
    CHECK(t.name == "4xdgx-h100");
    CHECK(t.devices.size() == 32);
    CHECK(t.hosts.size() == 4);
    CHECK(count(t, NodeKind::Nic) == 32);
    CHECK(count(t, NodeKind::IbLeaf) == 8);   // one per rail
    CHECK(count(t, NodeKind::IbSpine) == 4);  // as many as hosts per leaf
  }
  SECTION("non-blocking: every leaf has as much uplink as downlink") {
    Topology t = makeDgxH100Cluster(40);  // two leaves per rail, the second half full
    int d = int(t.devices.size());
    CHECK(count(t, NodeKind::IbLeaf) == 16);
    for (size_t s = 0; s < t.switches.size(); ++s) {
      if (t.switches[s].kind != NodeKind::IbLeaf) continue;
      double down = 0, up = 0;
      for (const Link& l : t.links) {
        if (l.src != d + int(s)) continue;
        (t.nodeKind(l.dst) == NodeKind::IbSpine ? up : down) += l.gbps;
      }
      CHECK(up >= down);
      CHECK(down > 0);
    }
  }
  SECTION("rails: each GPU's NIC is its own rail, cross-host traffic stays on it") {
    Topology t = makeDgxH100Cluster(4);
    Router r(t);
    for (int g = 0; g < 8; ++g) CHECK(t.nodeName(r.nicFor(8 + g)) == "node1.nic" + std::to_string(g));
    const auto& path = r.route(3, 8 + 3);  // node0.gpu3 -> node1.gpu3
    std::vector<std::string> names;
    for (int li : path) names.push_back(t.nodeName(t.links[size_t(li)].dst));
    REQUIRE(names.size() == 6);
    CHECK(names[0] == "node0.pcie3");
    CHECK(names[1] == "node0.nic3");
    CHECK(names[2] == "leaf.rail3.0");
    CHECK(names[5] == "node1.gpu3");
    CHECK(r.bottleneckGbps(3, 11) == Approx(50));
    // Inside a host: NVSwitch.
    CHECK(r.route(0, 5).size() == 2);
  }
  CHECK_THROWS_AS(loadTopology("0xdgx-h100"), TopologyError);
  CHECK_THROWS_WITH(loadTopology("5xdgx-b900"), Catch::Contains("neither a preset"));
}

TEST_CASE("generated clusters on other fabrics: RoCE, oversubscribed, plain leaves", "[presets][cluster]") {
  auto uplinkRatio = [](const Topology& t) {  // a leaf's bandwidth down over up
    const int d = int(t.devices.size());
    double down = 0, up = 0;
    for (size_t s = 0; s < t.switches.size(); ++s) {
      if (t.switches[s].kind != NodeKind::IbLeaf) continue;
      for (const Link& l : t.links)
        if (l.src == d + int(s)) (t.nodeKind(l.dst) == NodeKind::IbSpine ? up : down) += l.gbps;
      break;  // the first leaf
    }
    return down / up;
  };
  const Topology roce = loadTopology("64xdgx-h100:fabric=roce");
  CHECK(roce.name == "64xdgx-h100:fabric=roce");
  CHECK_THAT(roce.description, Catch::Contains("RoCE") && Catch::Contains("ECMP"));
  int ethernet = 0, infiniband = 0;
  for (const Link& l : roce.links) {
    ethernet += l.kind == LinkKind::Ethernet;
    infiniband += l.kind == LinkKind::InfiniBand;
  }
  CHECK(ethernet > 0);
  CHECK(infiniband == 0);
  const Topology over = loadTopology("64xdgx-h100:oversubscription=4");
  CHECK(count(over, NodeKind::IbSpine) == 8);  // 32 uplinks / 4
  CHECK(uplinkRatio(over) == Approx(4));
  CHECK(uplinkRatio(loadTopology("64xdgx-h100")) == Approx(1));
  const Topology plain = loadTopology("16xdgx-h100:rails=off");
  CHECK(count(plain, NodeKind::IbLeaf) == 4);  // 4 hosts (32 NICs) per leaf
  {
    Router r(plain);
    CHECK(r.nicFor(0) != r.nicFor(1));  // each GPU its NIC, all of a host's on one leaf
  }
  // Options in any order; the name says them in one.
  CHECK(loadTopology("8xdgx-h100:rails=off:fabric=roce:oversubscription=2").name ==
        "8xdgx-h100:fabric=roce:oversubscription=2:rails=off");
  CHECK_THROWS_WITH(loadTopology("8xdgx-h100:fabric=eth"), Catch::Contains("':fabric=eth' (allowed: ib, roce)"));
  CHECK_THROWS_WITH(loadTopology("8xdgx-h100:oversubscription=3"), Catch::Contains("does not divide"));
  CHECK_THROWS_WITH(loadTopology("8xdgx-h100:rails=maybe"), Catch::Contains("(allowed: on, off)"));
  CHECK_THROWS_WITH(loadTopology("dgx-h100:fabric=roce"), Catch::Contains("apply to the generated clusters"));
}

TEST_CASE("generated DGX A100 and H200 clusters", "[presets]") {
  // Selene's hosts: A100 80GB on NVLink3 (12 links of 25 GB/s), one HDR NIC
  // (200 Gb/s) per GPU; H200 hosts as DGX H100 with H200s.
  const Topology a = loadTopology("3xdgx-a100");
  CHECK(a.name == "3xdgx-a100");
  REQUIRE(a.devices.size() == 24);
  CHECK(a.devices[0].model == "A100-80GB");
  CHECK(a.devices[0].bf16_flops == Approx(312e12));
  Router ra(a);
  CHECK(ra.bottleneckGbps(0, 5) == Approx(300));  // NVSwitch inside the host
  CHECK(ra.bottleneckGbps(3, 11) == Approx(25));  // rail 3 across hosts
  const Topology h = loadTopology("2xdgx-h200");
  REQUIRE(h.devices.size() == 16);
  CHECK(h.devices[0].model == "H200");
  CHECK(Router(h).bottleneckGbps(1, 9) == Approx(50));
  // The same shape as the H100 cluster, GPU aside.
  const Topology h100 = makeDgxH100Cluster(2);
  CHECK(h.links.size() == h100.links.size());
}

TEST_CASE("generated Blackwell clusters: DGX B200 hosts of 8, NVL72 racks of 72 on one NVLink domain",
          "[presets][cluster]") {
  const Topology b = loadTopology("2xdgx-b200");
  REQUIRE(b.devices.size() == 16);
  CHECK(b.devices[0].model == "B200");
  CHECK(b.devices[0].bf16_flops == Approx(2250e12));
  Router rb(b);
  CHECK(rb.bottleneckGbps(0, 5) == Approx(900));  // NVLink5: 18 links of 50 GB/s
  CHECK(rb.bottleneckGbps(3, 11) == Approx(50));  // rail 3 across hosts, 400 Gb/s
  const Topology g = loadTopology("2xgb200-nvl72");
  REQUIRE(g.devices.size() == 144);
  REQUIRE(g.hosts.size() == 2);
  CHECK(g.devices[71].host == 0);
  CHECK(g.devices[72].host == 1);
  CHECK(g.devices[0].model == "GB200");
  Router rg(g);
  CHECK(rg.bottleneckGbps(0, 71) == Approx(900));   // one NVLink domain across the rack
  CHECK(rg.route(0, 71).size() == 2);
  CHECK(rg.bottleneckGbps(40, 112) == Approx(50));  // GPU 40 of each rack: rail 40
  const Topology u = loadTopology("1xgb300-nvl72");
  CHECK(u.devices[0].model == "GB300");
  CHECK(u.devices[0].memory_bytes > g.devices[0].memory_bytes);
  const Topology u2 = loadTopology("2xgb300-nvl72");
  CHECK(Router(u2).bottleneckGbps(3, 75) == Approx(100));  // 800 Gb/s
  CHECK_THROWS_WITH(loadTopology("2xgb200-nvl72:rails=off"), Catch::Contains("72 NICs"));
}

TEST_CASE("generated Grand Teton clusters: the 500 W H100 96 GB on RoCE unless told InfiniBand", "[presets]") {
  const Topology g = loadTopology("2xgrand-teton-500w");
  CHECK(g.name == "2xgrand-teton-500w");
  REQUIRE(g.devices.size() == 16);
  CHECK(g.devices[0].model == "H100-96GB-500W");
  CHECK(g.devices[0].hbm_gbps == Approx(2400));
  // Between the H100 NVL (400 W, 835 TFLOP/s) and SXM (700 W, 989): a third
  // of the way at 500 W.
  CHECK(g.devices[0].bf16_flops == Approx(835e12 + (989e12 - 835e12) / 3).epsilon(0.001));
  CHECK(g.devices[0].bf16_flops < gpuModelSpec("H100")->bf16_flops);
  auto ethernet = [](const Topology& t) {
    int n = 0;
    for (const Link& l : t.links) n += l.kind == LinkKind::Ethernet;
    return n;
  };
  CHECK(ethernet(g) > 0);
  CHECK(g.description.find("RoCE") != std::string::npos);
  const Topology ib = loadTopology("2xgrand-teton-500w:fabric=ib");
  CHECK(ib.name == "2xgrand-teton-500w:fabric=ib");
  CHECK(ethernet(ib) == 0);
  CHECK(ib.links.size() == g.links.size());
  // A DGX stays on InfiniBand; naming its own fabric changes nothing.
  CHECK(ethernet(loadTopology("2xdgx-h100:fabric=ib")) == 0);
  CHECK(loadTopology("2xdgx-h100:fabric=ib").name == "2xdgx-h100");
  CHECK(ethernet(loadTopology("2xdgx-h100:fabric=roce")) > 0);
  // The Llama 3 clusters' hosts: the 80 GB H100 at 700 W on the same RoCE.
  const Topology meta = loadTopology("2xgrand-teton-700w");
  CHECK(meta.devices[0].model == "H100");
  CHECK(ethernet(meta) == ethernet(g));
}

TEST_CASE("unknown names list the presets", "[presets]") {
  CHECK_THROWS_WITH(loadTopology("dgx-h900"), Catch::Contains("dgx-h100") && Catch::Contains("<N>xdgx-h100"));
  auto list = listPresets();
  REQUIRE(list.size() == 14);
  for (const auto& p : list) CHECK_FALSE(p.description.empty());
}

TEST_CASE("MIG slices carry their fraction of the GPU", "[presets][mig]") {
  Topology t = loadTopology("dgx-h100:mig=3g.40gb");
  REQUIRE(t.devices.size() == 16);  // two 3g.40gb per H100
  const DeviceSpec full = *gpuModelSpec("H100");
  const DeviceSpec& s = t.devices[0];
  CHECK(s.name == "gpu0.mig0");
  CHECK(s.mig_profile == "3g.40gb");
  CHECK(s.mig_fraction == Approx(3.0 / 7));
  CHECK(s.sm_count == 132 * 3 / 7);
  CHECK(s.memory_bytes == full.memory_bytes / 2);
  CHECK(s.hbm_gbps == Approx(full.hbm_gbps / 2));
  CHECK(s.bf16_flops == Approx(full.bf16_flops * 3 / 7));
  CHECK(count(t, NodeKind::GpuHub) == 8);
  Router r(t);
  // Two slices of one GPU meet in its hub; slices of two GPUs go on through
  // the NVSwitch.
  CHECK(r.route(0, 1).size() == 2);
  CHECK(r.route(0, 2).size() == 4);

  CHECK(loadTopology("h200x2-nv18:mig=1g.18gb").devices.size() == 14);
  CHECK(loadTopology("hgx-a100:mig=2g.20gb").devices.size() == 24);
  CHECK(loadTopology("dgx-h100:mig=1g.20gb").devices.size() == 32);
  CHECK_THROWS_WITH(loadTopology("dgx-h100:mig=5g.40gb"), Catch::Contains("5 compute slices"));
  CHECK_THROWS_WITH(loadTopology("dgx-h100:mig=3g.30gb"), Catch::Contains("does not fit"));
  CHECK_THROWS_WITH(loadTopology("dgx-h100:mig=big"), Catch::Contains("malformed"));
}

TEST_CASE("MIG from a YAML section, for some GPUs only", "[presets][mig]") {
  std::string text = std::string(*presetYaml("h200x2-nv18")) + "mig: {profile: 3g.71gb, gpus: [gpu1]}\n";
  Topology t = parseTopologyYaml(text, "mig.yaml");
  REQUIRE(t.devices.size() == 3);
  CHECK(t.devices[0].name == "gpu0");
  CHECK(t.devices[0].mig_fraction == 1.0);
  CHECK(t.devices[1].name == "gpu1.mig0");
  CHECK(t.devices[2].memory_bytes == 143771LL * 1024 * 1024 / 2);
  Router r(t);
  CHECK(r.bottleneckGbps(0, 2) == Approx(18 * 26.562));

  std::string bad = std::string(*presetYaml("h200x2-nv18")) + "mig: {profile: 9g.1gb}\n";
  try {
    parseTopologyYaml(bad, "mig.yaml");
    FAIL("no error");
  } catch (const TopologyError& e) {
    std::string msg = e.what();
    CHECK(msg.find("mig.yaml:") == 0);
    CHECK(msg.find("9 compute slices") != std::string::npos);
  }
}

TEST_CASE("MIG and generated topologies survive a YAML round trip", "[presets][mig]") {
  for (const char* name : {"dgx-h100:mig=3g.40gb", "2xdgx-h100"}) {
    INFO(name);
    Topology a = loadTopology(name);
    Topology b = parseTopologyYaml(topologyToYaml(a), "again.yaml");
    REQUIRE(b.devices.size() == a.devices.size());
    REQUIRE(b.switches.size() == a.switches.size());
    REQUIRE(b.links.size() == a.links.size());
    for (size_t i = 0; i < a.devices.size(); ++i) {
      CHECK(b.devices[i].mig_profile == a.devices[i].mig_profile);
      CHECK(b.devices[i].mig_fraction == a.devices[i].mig_fraction);
      CHECK(b.devices[i].memory_bytes == a.devices[i].memory_bytes);
      CHECK(b.devices[i].host == a.devices[i].host);
    }
    for (size_t i = 0; i < a.switches.size(); ++i) {
      CHECK(b.switches[i].kind == a.switches[i].kind);
      CHECK(b.switches[i].host == a.switches[i].host);
    }
    for (size_t i = 0; i < a.links.size(); ++i) {
      CHECK(b.links[i].src == a.links[i].src);
      CHECK(b.links[i].dst == a.links[i].dst);
      CHECK(b.links[i].gbps == a.links[i].gbps);
    }
  }
  // Slicing a sliced topology again is refused.
  Topology sliced = loadTopology("dgx-h100:mig=3g.40gb");
  CHECK_THROWS_WITH(applyMig(sliced, "1g.10gb"), Catch::Contains("already a MIG slice"));
}
