// Topology helpers: names of kinds, node lookups and the structural checks
// every loader (YAML, presets, nvidia-smi import) runs before handing a
// topology to the simulator.
#include "simulator/topology/topology.h"

#include <fmt/core.h>

#include <array>
#include <queue>
#include <set>
#include <utility>

namespace tandem::sim {
namespace {

constexpr std::array<std::pair<NodeKind, std::string_view>, 9> kNodeKinds{{
    {NodeKind::Gpu, "gpu"},
    {NodeKind::NvSwitch, "nvswitch"},
    {NodeKind::PcieSwitch, "pcie_switch"},
    {NodeKind::HostBridge, "host_bridge"},
    {NodeKind::Cpu, "cpu"},
    {NodeKind::Nic, "nic"},
    {NodeKind::IbLeaf, "ib_leaf"},
    {NodeKind::IbSpine, "ib_spine"},
    {NodeKind::GpuHub, "gpu_hub"},
}};

constexpr std::array<std::pair<LinkKind, std::string_view>, 5> kLinkKinds{{
    {LinkKind::NvLink, "nvlink"},
    {LinkKind::Pcie, "pcie"},
    {LinkKind::InfiniBand, "infiniband"},
    {LinkKind::Ethernet, "ethernet"},
    {LinkKind::Internal, "internal"},
}};

}  // namespace

std::pair<int, int> findUnreachableDevices(const Topology& topo) {
  const int n = topo.nodeCount();
  const int d = int(topo.devices.size());
  std::vector<std::vector<int>> fwd(static_cast<size_t>(n));
  std::set<std::pair<int, int>> directed;
  for (const Link& l : topo.links) {
    fwd[size_t(l.src)].push_back(l.dst);
    directed.insert({l.src, l.dst});
  }
  bool symmetric = true;
  for (const auto& [a, b] : directed)
    if (!directed.count({b, a})) symmetric = false;

  if (!symmetric) {
    // Exact but O(D * links): one search per device (devices do not forward).
    for (int src = 0; src < d; ++src) {
      std::vector<bool> seen(static_cast<size_t>(n), false);
      std::queue<int> todo;
      todo.push(src);
      seen[size_t(src)] = true;
      while (!todo.empty()) {
        int u = todo.front();
        todo.pop();
        if (u != src && topo.isDevice(u)) continue;
        for (int v : fwd[size_t(u)])
          if (!seen[size_t(v)]) {
            seen[size_t(v)] = true;
            todo.push(v);
          }
      }
      for (int dst = 0; dst < d; ++dst)
        if (!seen[size_t(dst)]) return {src, dst};
    }
    return {-1, -1};
  }

  // Symmetric links: two devices reach each other when they are linked
  // directly or touch the same connected component of the switch-only graph.
  std::vector<int> comp(static_cast<size_t>(n), -1);
  int comps = 0;
  for (int start = d; start < n; ++start) {
    if (comp[size_t(start)] >= 0) continue;
    std::queue<int> todo;
    todo.push(start);
    comp[size_t(start)] = comps;
    while (!todo.empty()) {
      int u = todo.front();
      todo.pop();
      for (int v : fwd[size_t(u)])
        if (!topo.isDevice(v) && comp[size_t(v)] < 0) {
          comp[size_t(v)] = comps;
          todo.push(v);
        }
    }
    ++comps;
  }
  std::vector<std::set<int>> touches(static_cast<size_t>(d));
  std::vector<int> touch_count(static_cast<size_t>(comps), 0);
  for (int dev = 0; dev < d; ++dev) {
    for (int v : fwd[size_t(dev)])
      if (!topo.isDevice(v)) touches[size_t(dev)].insert(comp[size_t(v)]);
    for (int c : touches[size_t(dev)]) ++touch_count[size_t(c)];
  }
  for (int c = 0; c < comps; ++c)
    if (touch_count[size_t(c)] == d) return {-1, -1};  // one fabric joins all
  for (int a = 0; a < d; ++a)
    for (int b = a + 1; b < d; ++b) {
      if (directed.count({a, b})) continue;
      bool shared = false;
      for (int c : touches[size_t(a)])
        if (touches[size_t(b)].count(c)) {
          shared = true;
          break;
        }
      if (!shared) return {a, b};
    }
  return {-1, -1};
}

namespace {

void checkDevicesConnected(const Topology& topo) {
  auto [a, b] = findUnreachableDevices(topo);
  if (a < 0) return;
  throw TopologyError(fmt::format(
      "topology '{}': device '{}' cannot reach device '{}' (every GPU must reach every other GPU "
      "through links and switches; traffic never passes through a GPU)",
      topo.name, topo.devices[size_t(a)].name, topo.devices[size_t(b)].name));
}

}  // namespace

std::string_view toString(NodeKind v) {
  for (const auto& [kind, name] : kNodeKinds)
    if (kind == v) return name;
  return "?";
}

std::string_view toString(LinkKind v) {
  for (const auto& [kind, name] : kLinkKinds)
    if (kind == v) return name;
  return "?";
}

std::optional<NodeKind> parseNodeKind(std::string_view s) {
  for (const auto& [kind, name] : kNodeKinds)
    if (name == s) return kind;
  return std::nullopt;
}

std::optional<LinkKind> parseLinkKind(std::string_view s) {
  for (const auto& [kind, name] : kLinkKinds)
    if (name == s) return kind;
  return std::nullopt;
}

std::string Topology::nodeName(int node) const {
  if (node >= 0 && node < int(devices.size())) return devices[size_t(node)].name;
  int s = node - int(devices.size());
  if (s >= 0 && s < int(switches.size())) return switches[size_t(s)].name;
  return fmt::format("<node {}>", node);
}

NodeKind Topology::nodeKind(int node) const {
  if (isDevice(node)) return NodeKind::Gpu;
  return switches.at(size_t(node) - devices.size()).kind;
}

int Topology::nodeHost(int node) const {
  if (isDevice(node)) return devices[size_t(node)].host;
  return switches.at(size_t(node) - devices.size()).host;
}

int Topology::findNode(std::string_view wanted) const {
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i].name == wanted) return int(i);
  for (size_t i = 0; i < switches.size(); ++i)
    if (switches[i].name == wanted) return int(devices.size() + i);
  return -1;
}

void Topology::addLink(int a, int b, double gbps, int64_t latency_ns, LinkKind kind, int lanes,
                       bool bidirectional) {
  links.push_back({a, b, gbps, latency_ns, kind, lanes});
  if (bidirectional) links.push_back({b, a, gbps, latency_ns, kind, lanes});
}

int Topology::addSwitch(std::string switch_name, NodeKind kind, int host) {
  switches.push_back({std::move(switch_name), kind, host});
  return nodeCount() - 1;
}

void validateTopology(const Topology& topo) {
  const int n = topo.nodeCount();
  if (topo.devices.empty())
    throw TopologyError(fmt::format("topology '{}' has no devices", topo.name));
  for (size_t i = 0; i < topo.devices.size(); ++i) {
    const DeviceSpec& d = topo.devices[i];
    if (d.host < 0 || d.host >= int(topo.hosts.size()))
      throw TopologyError(fmt::format("topology '{}': device '{}' has host index {} but there are {} hosts",
                                      topo.name, d.name, d.host, topo.hosts.size()));
  }
  for (size_t i = 0; i < topo.links.size(); ++i) {
    const Link& l = topo.links[i];
    if (l.src < 0 || l.src >= n || l.dst < 0 || l.dst >= n)
      throw TopologyError(fmt::format("topology '{}': link {} has an endpoint outside 0..{}",
                                      topo.name, i, n - 1));
    if (l.src == l.dst)
      throw TopologyError(fmt::format("topology '{}': link {} connects '{}' to itself", topo.name, i,
                                      topo.nodeName(l.src)));
    if (!(l.gbps > 0))
      throw TopologyError(fmt::format("topology '{}': link {} ({} -> {}) has bandwidth {} GB/s; it must be > 0",
                                      topo.name, i, topo.nodeName(l.src), topo.nodeName(l.dst), l.gbps));
    if (l.latency_ns < 0)
      throw TopologyError(fmt::format("topology '{}': link {} ({} -> {}) has negative latency",
                                      topo.name, i, topo.nodeName(l.src), topo.nodeName(l.dst)));
  }

  if (topo.devices.size() >= 2) checkDevicesConnected(topo);
}

}  // namespace tandem::sim
