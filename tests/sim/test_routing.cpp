// Router: shortest paths, tie breaking, ECMP spreading, laziness.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <random>
#include <set>

#include "simulator/topology/routing.h"
#include "simulator/topology/topology_presets.h"
#include "simulator/topology/topology_yaml.h"

using namespace tandem::sim;

namespace {

// Link endpoints along a route, as node names, starting with the source.
std::vector<std::string> hops(const Topology& t, int src, const std::vector<int>& path) {
  std::vector<std::string> out{t.nodeName(src)};
  for (int li : path) out.push_back(t.nodeName(t.links[size_t(li)].dst));
  return out;
}

}  // namespace

TEST_CASE("routes are contiguous shortest paths by hops, then latency", "[routing]") {
  // g0 reaches g1 through s1 (2 hops, 30 ns), s2 (2 hops, 10 ns) or the chain
  // s3-s4 (3 hops, 2 ns): fewest hops first, then least latency.
  std::string text = R"(devices:
  - {name: g0, model: H100}
  - {name: g1, model: H100}
switches:
  - {name: s1, kind: pcie_switch}
  - {name: s2, kind: pcie_switch}
  - {name: s3, kind: pcie_switch}
  - {name: s4, kind: pcie_switch}
links:
  - {a: g0, b: s1, kind: pcie, gbps: 10, latency_ns: 15}
  - {a: s1, b: g1, kind: pcie, gbps: 10, latency_ns: 15}
  - {a: g0, b: s2, kind: pcie, gbps: 5, latency_ns: 5}
  - {a: s2, b: g1, kind: pcie, gbps: 5, latency_ns: 5}
  - {a: g0, b: s3, kind: pcie, gbps: 50, latency_ns: 1}
  - {a: s3, b: s4, kind: pcie, gbps: 50, latency_ns: 0}
  - {a: s4, b: g1, kind: pcie, gbps: 50, latency_ns: 1}
)";
  Topology t = parseTopologyYaml(text, "r.yaml");
  Router r(t);
  CHECK(hops(t, 0, r.route(0, 1)) == std::vector<std::string>{"g0", "s2", "g1"});
  CHECK(hops(t, 1, r.route(1, 0)) == std::vector<std::string>{"g1", "s2", "g0"});
  CHECK(r.routeLatencyNs(0, 1) == 10);
  CHECK(r.bottleneckGbps(0, 1) == Approx(5));
  CHECK(r.route(0, 0).empty());
  // Switch to switch works too, but never through a GPU.
  CHECK(hops(t, 4, r.route(4, 5)) == std::vector<std::string>{"s3", "s4"});
  CHECK_FALSE(r.reachable(2, 5));
  int direct = r.directLink(4, 5);
  REQUIRE(direct >= 0);
  CHECK(t.links[size_t(direct)].gbps == 50);
  CHECK(r.directLink(0, 1) == -1);
}

TEST_CASE("routes never transit a GPU", "[routing]") {
  Topology t;
  t.name = "chain";
  t.hosts.push_back({"h"});
  for (const char* name : {"g0", "g1", "g2"}) {
    DeviceSpec d;
    d.name = name;
    t.devices.push_back(d);
  }
  t.addLink(0, 1, 10, 1, LinkKind::NvLink, 1);
  t.addLink(1, 2, 10, 1, LinkKind::NvLink, 1);
  Router r(t);
  CHECK(r.route(0, 1).size() == 1);
  CHECK_FALSE(r.reachable(0, 2));
  CHECK_THROWS_WITH(r.route(0, 2), Catch::Contains("no route from 'g0' to 'g2'"));
  CHECK_THROWS_AS(r.route(0, 7), TopologyError);
  CHECK_THROWS_AS(validateTopology(t), TopologyError);
}

TEST_CASE("equal-cost paths spread over spines deterministically", "[routing][ecmp]") {
  Topology t = makeDgxH100Cluster(64);  // 2 leaves per rail, 32 spines
  Router r(t);
  std::map<std::string, int> spine_use;
  // Rail 0 of hosts 0..31 (leaf 0) to rail 0 of hosts 32..63 (leaf 1).
  for (int a = 0; a < 32; ++a)
    for (int b = 32; b < 64; ++b) {
      const auto& path = r.route(a * 8, b * 8);
      REQUIRE(path.size() == 8);
      auto names = hops(t, a * 8, path);
      CHECK(names[3] == "leaf.rail0.0");
      CHECK(names[5] == "leaf.rail0.1");
      ++spine_use[names[4]];
    }
  // 1024 pairs over 32 spines: every spine used, none badly overloaded.
  CHECK(spine_use.size() == 32);
  for (const auto& [spine, n] : spine_use) {
    INFO(spine);
    CHECK(n > 32 / 4);
    CHECK(n < 32 * 3);
  }
  // Same pair, same route, also from a fresh router.
  Router again(t);
  CHECK(again.route(5 * 8, 40 * 8) == r.route(5 * 8, 40 * 8));
}

TEST_CASE("routes are computed lazily and cached per pair", "[routing][scale]") {
  Topology t = makeDgxH100Cluster(512);  // 4096 GPUs
  REQUIRE(t.devices.size() == 4096);
  auto start = std::chrono::steady_clock::now();
  Router r(t, 16);
  CHECK(r.cachedRouteCount() == 0);
  // A ring over all GPUs: 4096 routes, not 4096^2.
  size_t total_hops = 0;
  for (int g = 0; g < 4096; ++g) total_hops += r.route(g, (g + 1) % 4096).size();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(r.cachedRouteCount() == 4096);
  CHECK(r.cachedTreeCount() <= 16);
  CHECK(total_hops > 4096 * 2);
  // Generous bound for a slow shared machine; the point is "not quadratic".
  CHECK(seconds < 20.0);
  const auto& first = r.route(7, 8);
  CHECK(&first == &r.route(7, 8));  // cached: the same vector
  CHECK(r.nicFor(4095) >= 0);
  CHECK(r.devicesOfHost(511).size() == 8);
  CHECK(r.devicesOfHost(600).empty());
}

TEST_CASE("search arrays cover two hosts and the network: routes match a plain shortest-path search",
          "[routing]") {
  // 96 hosts: three leaves per rail, so routes cross spines. Sources and
  // destinations mix GPUs, NICs, leaves and spines, in and across hosts. A
  // Router with one cached tree reuses its arrays for every new (destination,
  // source host), one with 64 keeps them; both must give the same routes, and
  // each route must be a chain of links from src to dst whose length is the
  // fewest hops a breadth-first search finds under the same rules (devices
  // do not forward, no host other than the two ends' is crossed).
  Topology t = makeDgxH100Cluster(96);
  Router one(t, 1), many(t, 64);
  const int n = t.nodeCount();
  std::vector<int> nodes;
  for (int v = 0; v < n; v += 7) nodes.push_back(v);
  for (int v = int(t.devices.size()); v < n; ++v)
    if (t.nodeHost(v) < 0) nodes.push_back(v);  // every leaf and spine
  auto bfsHops = [&](int src, int dst) {
    const int hs = t.nodeHost(src), hd = t.nodeHost(dst);
    std::vector<int> depth(size_t(n), -1);
    std::vector<int> todo{src};
    depth[size_t(src)] = 0;
    for (size_t i = 0; i < todo.size(); ++i) {
      const int u = todo[i];
      if (u == dst) return depth[size_t(u)];
      if (u != src && t.isDevice(u)) continue;
      for (int li : one.outLinks(u)) {
        const int v = t.links[size_t(li)].dst;
        const int h = t.nodeHost(v);
        if (depth[size_t(v)] >= 0 || (h != -1 && h != hs && h != hd)) continue;
        depth[size_t(v)] = depth[size_t(u)] + 1;
        todo.push_back(v);
      }
    }
    return -1;
  };
  std::mt19937 rng(99);
  for (int trial = 0; trial < 3000; ++trial) {
    const int src = nodes[rng() % nodes.size()], dst = nodes[rng() % nodes.size()];
    if (src == dst || !many.reachable(src, dst)) continue;
    INFO(t.nodeName(src) << " -> " << t.nodeName(dst));
    const std::vector<int>& path = one.route(src, dst);
    REQUIRE(path == many.route(src, dst));
    int at = src;
    for (int li : path) {
      REQUIRE(t.links[size_t(li)].src == at);
      at = t.links[size_t(li)].dst;
    }
    CHECK(at == dst);
    CHECK(int(path.size()) == bfsHops(src, dst));
  }
  CHECK(one.cachedTreeCount() == 1);
}
