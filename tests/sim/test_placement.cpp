// Topology-aware placement (simulator/placement/): on PCIe cards with NVLink
// bridges between GPU 0-2 and 1-3 the tensor-parallel pairs move onto the
// bridges and the simulated step gets faster, from the preset and from the
// same machine's `nvidia-smi topo -m`; on a DGX the identity stays; 1024
// ranks on 128 hosts come out as a permutation; map files that do not fit
// are refused with file:line.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/plan/planner.h"
#include "simulator/cost/cost_model.h"
#include "simulator/placement/placement.h"
#include "simulator/placement/placement_file.h"
#include "simulator/placement/traffic.h"
#include "simulator/topology/nvidia_smi_import.h"
#include "simulator/topology/topology_presets.h"
#include "simulator/topology/topology_yaml.h"

using namespace tandem;
using namespace tandem::sim;

namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::filesystem::path(TANDEM_SOURCE_DIR) / "tests" / "sim" / "fixtures" / name, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// GPT-2 124M with tensor parallel 2 x data parallel 2.
Plan tp2dp2() {
  JobSpec job = defaultJob();
  job.parallel.tensor_parallel = 2;
  job.parallel.data_parallel = 2;
  return buildPlan(job);
}

bool isPermutationOfDevices(const std::vector<int>& map, const Topology& topo) {
  std::set<int> seen(map.begin(), map.end());
  return seen.size() == map.size() &&
         std::all_of(map.begin(), map.end(), [&](int d) { return d >= 0 && d < int(topo.devices.size()); });
}

// The devices of each "tp" group under `map`, as sorted pairs.
std::set<std::pair<int, int>> tpPairs(const Plan& plan, const std::vector<int>& map) {
  std::set<std::pair<int, int>> out;
  for (const ProcessGroup& g : plan.groups)
    if (g.name == "tp") {
      const int a = map[size_t(g.ranks.at(0))], b = map[size_t(g.ranks.at(1))];
      out.insert({std::min(a, b), std::max(a, b)});
    }
  return out;
}

void checkBridgedPairs(const Plan& plan, const Topology& topo) {
  const RooflineCostModel cost;
  const PlacementVerdict v = choosePlacement(plan, topo, cost, SimOptions{});
  // The identity pairs GPU 0-1 and 2-3, over PCIe; the choice the bridges.
  CHECK(tpPairs(plan, identityPlacement(plan, topo)) == std::set<std::pair<int, int>>{{0, 1}, {2, 3}});
  CHECK_FALSE(v.proposed.identity);
  CHECK(v.proposal_chosen);
  CHECK(tpPairs(plan, v.rank_device) == std::set<std::pair<int, int>>{{0, 2}, {1, 3}});
  CHECK(isPermutationOfDevices(v.rank_device, topo));
  CHECK(cheaper(v.proposed.cost, v.proposed.identity_cost));
  CHECK(v.proposed_step_ns < v.identity_step_ns);
  CHECK(v.chosen_step_ns == v.proposed_step_ns);
}

}  // namespace

TEST_CASE("traffic: tensor parallel all-reduces count whole, data parallel buckets at half", "[placement]") {
  const Plan plan = tp2dp2();
  const std::vector<GroupTraffic> traffic = planTraffic(plan);
  double tp = 0, dp = 0;
  for (const GroupTraffic& t : traffic) {
    if (t.family == "tp") {
      tp = t.bytes;
      CHECK(t.tier == 0);
    }
    if (t.family == "dp") {
      dp = t.bytes;
      CHECK(t.tier == 2);
    }
  }
  CHECK(tp > 0);
  CHECK(dp > 0);
  CHECK(tp > dp);
  CHECK(familyTier("pp3") == 1);
  CHECK(familyTier("ppx") == 3);
  CHECK(familyTier("replica") == 2);
}

TEST_CASE("placement puts tensor-parallel pairs on the NVLink bridges", "[placement]") {
  checkBridgedPairs(tp2dp2(), loadTopology("pcie4-nvbridge"));
}

TEST_CASE("placement reads the same machine from nvidia-smi topo -m", "[placement][import]") {
  NvidiaSmiMatrix m = parseNvidiaSmiTopo(fixture("pcie4-nvbridge-topo-m.txt"), "pcie4-nvbridge-topo-m.txt");
  CHECK(m.codes[0][2] == "NV4");
  CHECK(m.codes[1][3] == "NV4");
  CHECK(m.codes[0][1] == "PIX");
  CHECK(m.codes[0][3] == "PHB");
  NvidiaSmiImportOptions options;
  options.model = "A100-PCIE-80GB";
  const Topology imported = importNvidiaSmi(m, nullptr, options);
  checkBridgedPairs(tp2dp2(), imported);
}

TEST_CASE("on a DGX the identity is already best and stays", "[placement]") {
  const Topology topo = loadTopology("dgx-h100");
  JobSpec job = defaultJob();
  job.parallel.tensor_parallel = 4;
  job.parallel.data_parallel = 2;
  const Plan plan = buildPlan(job);
  const Placement p = proposePlacement(plan, topo);
  CHECK(p.identity);
  CHECK(p.rank_device == identityPlacement(plan, topo));
  const RooflineCostModel cost;
  const PlacementVerdict v = choosePlacement(plan, topo, cost, SimOptions{});
  CHECK_FALSE(v.proposal_chosen);
  CHECK(v.rank_device == identityPlacement(plan, topo));
  CHECK(v.proposed_step_ns == v.identity_step_ns);
}

TEST_CASE("1024 ranks on 128 DGX hosts come out as a permutation, one host layout solved", "[placement][scale]") {
  const Topology topo = loadTopology("128xdgx-h100");
  JobSpec job = defaultJob();
  job.parallel.tensor_parallel = 4;
  job.parallel.pipeline_parallel = 2;
  job.parallel.data_parallel = 128;
  const Plan plan = buildPlan(job);
  REQUIRE(plan.world_size == 1024);
  const Placement p = proposePlacement(plan, topo);
  REQUIRE(p.rank_device.size() == 1024);
  CHECK(isPermutationOfDevices(p.rank_device, topo));
  CHECK(std::any_of(p.notes.begin(), p.notes.end(),
                    [](const std::string& n) { return n.find("reused on 127 alike hosts") != std::string::npos; }));
  CHECK(symmetryProblem(plan, topo, p.rank_device).empty());
}

TEST_CASE("two bridged hosts get one layout, symmetric, and a faster step", "[placement]") {
  // Two hosts like pcie4-nvbridge, each with one NIC on an InfiniBand leaf.
  std::string yaml = "name: two-bridged\nhosts: [{name: h0}, {name: h1}]\n"
                     "device_defaults: {model: A100-PCIE-80GB}\ndevices:\n";
  std::string switches = "switches:\n  - {name: leaf, kind: ib_leaf}\n";
  std::string links = "links:\n";
  for (int h = 0; h < 2; ++h) {
    const std::string p = "h" + std::to_string(h);
    for (int g = 0; g < 4; ++g) yaml += "  - {name: " + p + "g" + std::to_string(g) + ", host: " + p + "}\n";
    for (const char* sw : {"sw0", "sw1", "hb", "nic"})
      switches += "  - {name: " + p + sw + ", kind: " +
                  (std::string(sw) == "hb" ? "host_bridge" : std::string(sw) == "nic" ? "nic" : "pcie_switch") +
                  ", host: " + p + "}\n";
    auto link = [&](const std::string& a, const std::string& b, const char* kind, int gbps) {
      links += "  - {a: " + a + ", b: " + b + ", kind: " + kind + ", gbps: " + std::to_string(gbps) + "}\n";
    };
    link(p + "g0", p + "g2", "nvlink", 100);
    link(p + "g1", p + "g3", "nvlink", 100);
    for (int g = 0; g < 4; ++g) link(p + "g" + std::to_string(g), p + (g < 2 ? "sw0" : "sw1"), "pcie", 25);
    link(p + "sw0", p + "hb", "pcie", 25);
    link(p + "sw1", p + "hb", "pcie", 25);
    link(p + "nic", p + "hb", "pcie", 25);
    link(p + "nic", "leaf", "infiniband", 25);
  }
  const Topology topo = parseTopologyYaml(yaml + switches + links, "two-bridged.yaml");
  JobSpec job = defaultJob();
  job.parallel.tensor_parallel = 2;
  job.parallel.data_parallel = 4;
  const Plan plan = buildPlan(job);
  const RooflineCostModel cost;
  const PlacementVerdict v = choosePlacement(plan, topo, cost, SimOptions{});
  INFO(v.proposed.notes.back());
  REQUIRE(v.proposal_chosen);
  CHECK(v.proposed_step_ns < v.identity_step_ns);
  CHECK(isPermutationOfDevices(v.rank_device, topo));
  CHECK(tpPairs(plan, v.rank_device) == std::set<std::pair<int, int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(std::any_of(v.proposed.notes.begin(), v.proposed.notes.end(),
                    [](const std::string& n) { return n.find("reused on 1 alike hosts") != std::string::npos; }));
  CHECK(symmetryProblem(plan, topo, v.rank_device).empty());
}

TEST_CASE("a world larger than the topology is refused", "[placement]") {
  JobSpec job = defaultJob();
  job.parallel.data_parallel = 16;
  CHECK_THROWS_AS(proposePlacement(buildPlan(job), loadTopology("dgx-h100")), PlacementError);
}

TEST_CASE("a placement map round-trips through its YAML", "[placement][file]") {
  const Plan plan = tp2dp2();
  const Topology topo = loadTopology("pcie4-nvbridge");
  const std::vector<int> map = {0, 2, 1, 3};
  const PlacementMap m = placementMapOf(plan, topo, map);
  const std::string yaml = placementMapToYaml(m, {"a comment"});
  CHECK(yaml.find("# a comment") != std::string::npos);
  const PlacementMap back = parsePlacementMap(yaml, "map.yaml");
  CHECK(back.world_size == 4);
  CHECK(back.topology == "pcie4-nvbridge");
  CHECK(localDevices(back, 4) == map);
  CHECK(rankDevices(back, topo) == map);
  CHECK_THROWS_WITH(localDevices(back, 8), Catch::Contains("places 4 ranks but the job has 8"));
}

TEST_CASE("bad placement maps are refused with file and line", "[placement][file]") {
  const std::string head = "world_size: 2\nranks:\n";
  struct Case {
    std::string text;
    std::string message;
  };
  for (const Case& c : {
           Case{head + "  - {rank: 0, gpu: gpu0, host: host0, local: 0}\n"
                       "  - {rank: 0, gpu: gpu1, host: host0, local: 1}\n",
                "bad.yaml:4: rank 0 is placed twice (first on line 3)"},
           Case{head + "  - {rank: 0, gpu: gpu0, host: host0, local: 0}\n"
                       "  - {rank: 1, gpu: gpu1, host: host0, local: 0}\n",
                "bad.yaml:4: rank 1 and rank 0 (line 3) both on GPU 0 of host host0"},
           Case{head + "  - {rank: 0, gpu: gpu0, host: host0, local: 0}\n"
                       "  - {rank: 2, gpu: gpu1, host: host0, local: 1}\n",
                "bad.yaml:4: rank 2 is outside the world (world_size 2)"},
           Case{head + "  - {rank: 0, gpu: gpu0, host: host0, local: 0}\n",
                "bad.yaml:3: rank 1 has no GPU"},
           Case{head + "  - {rank: 0, gpu: gpu0, host: host0, local: -1}\n",
                "bad.yaml:3: ranks[0].local must be a whole number of at least 0, got '-1'"},
           Case{head + "  - {rank: 0, gpu: gpu0, host: host0}\n", "bad.yaml:3: ranks[0]: missing 'local'"},
           Case{head + "  - {rank: 0, gpu: gpu0, host: host0, local: 0, speed: 2}\n",
                "bad.yaml:3: ranks[0]: unknown key 'speed'"},
           Case{"world_size: two\nranks: []\n", "bad.yaml:1: world_size must be a whole number"},
           Case{"world_size: 2\nranks: [\n", "bad.yaml:"},
           Case{"world_size: 2\nrank: []\n", "bad.yaml:2: placement map: unknown key 'rank'"},
           Case{"", "bad.yaml: empty file"},
       }) {
    INFO(c.text);
    CHECK_THROWS_WITH(parsePlacementMap(c.text, "bad.yaml"), Catch::StartsWith(c.message));
  }
  // A GPU the topology lacks, named with the line of its entry.
  const PlacementMap m = parsePlacementMap(head + "  - {rank: 0, gpu: gpu0, host: host0, local: 0}\n"
                                                  "  - {rank: 1, gpu: gpu9, host: host0, local: 1}\n",
                                           "map.yaml");
  CHECK_THROWS_WITH(rankDevices(m, loadTopology("pcie4-nvbridge")),
                    Catch::StartsWith("map.yaml:4: GPU 'gpu9' is not in topology 'pcie4-nvbridge'"));
  CHECK_THROWS_WITH(loadPlacementMap("/nonexistent/map.yaml"), Catch::Contains("cannot open"));
}
