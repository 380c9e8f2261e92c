#include "simulator/network/collectives.h"

#include <cmath>

#include <algorithm>
#include <map>
#include <stdexcept>

namespace tandem::sim {

CollectiveBuilder::CollectiveBuilder(const Router& router, NcclParams params,
                                     std::vector<CollectiveCalibration> calibration)
    : router_(router), params_(std::move(params)), calibration_(std::move(calibration)) {}

const std::vector<int>& CollectiveBuilder::path(int a, int b) const {
  const uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  auto it = paths_.find(key);
  if (it != paths_.end()) return it->second;
  const Topology& topo = router_.topology();
  std::vector<int> links;
  bool composed = false;
  if (a != b && topo.isDevice(a) && topo.isDevice(b) && topo.nodeHost(a) != topo.nodeHost(b)) {
    const int nic_a = router_.nicFor(a), nic_b = router_.nicFor(b);
    // Leaf switches (outside any host) of both NICs, and the links to them.
    auto uplink = [&](int nic) {
      for (int l : router_.outLinks(nic))
        if (topo.nodeHost(topo.links[size_t(l)].dst) < 0) return l;
      return -1;
    };
    const int up = nic_a >= 0 ? uplink(nic_a) : -1;
    const int up_b = nic_b >= 0 ? uplink(nic_b) : -1;
    const int leaf_a = up >= 0 ? topo.links[size_t(up)].dst : -1;
    const int leaf_b = up_b >= 0 ? topo.links[size_t(up_b)].dst : -1;
    const int down = leaf_b >= 0 ? router_.directLink(leaf_b, nic_b) : -1;
    std::vector<int> fabric;
    if (up >= 0 && down >= 0) {
      if (leaf_a == leaf_b) {
        fabric = {up, down};
      } else {
        // Two-level fat tree: up to a spine that reaches b's leaf. On
        // InfiniBand the subnet manager's fat-tree routing sends all traffic
        // to a destination through one spine, consecutive destinations
        // through consecutive spines (D-mod-K): a shift between the hosts
        // of two leaves (pipeline stages, ring neighbours) then meets no
        // other flow on the spine links. An Ethernet fabric hashes each pair
        // onto a spine (ECMP), where flows can collide.
        std::vector<int> spine_links;
        for (int l : router_.outLinks(leaf_a))
          if (topo.nodeHost(topo.links[size_t(l)].dst) < 0) spine_links.push_back(l);
        const size_t count = spine_links.size();
        const bool infiniband = topo.links[size_t(up)].kind == LinkKind::InfiniBand;
        const uint64_t h = infiniband ? uint64_t(topo.nodeHost(b))
                                      : (uint64_t(a) * 0x9E3779B97F4A7C15ull ^ uint64_t(b) * 0xC2B2AE3D27D4EB4Full) >> 17;
        for (size_t i = 0; i < count && fabric.empty(); ++i) {
          const int l = spine_links[(size_t(h) + i) % count];
          const int across = router_.directLink(topo.links[size_t(l)].dst, leaf_b);
          if (across >= 0) fabric = {up, l, across, down};
        }
      }
    }
    if (!fabric.empty()) {
      const auto& first = router_.route(a, nic_a);
      links.insert(links.end(), first.begin(), first.end());
      links.insert(links.end(), fabric.begin(), fabric.end());
      const auto& last = router_.route(nic_b, b);
      links.insert(links.end(), last.begin(), last.end());
      composed = true;
    }
  }
  // Unreachable pairs get an empty path (tree checks ask); addFlow turns it into the Router's error.
  if (!composed && router_.reachable(a, b)) links = router_.route(a, b);
  return paths_.emplace(key, std::move(links)).first->second;
}

int64_t CollectiveBuilder::pathLatencyNs(int a, int b) const {
  int64_t ns = 0;
  for (int l : path(a, b)) ns += router_.topology().links[size_t(l)].latency_ns;
  return ns;
}

double CollectiveBuilder::pathGbps(int a, int b) const {
  double g = 0;
  bool first = true;
  for (int l : path(a, b)) {
    const double lg = router_.topology().links[size_t(l)].gbps;
    g = first ? lg : std::min(g, lg);
    first = false;
  }
  return g;
}

double CollectiveCalibration::gbpsFor(double bytes) const {
  if (sizes.empty()) return gbps;
  if (bytes <= sizes.front().first) return sizes.front().second;
  if (bytes >= sizes.back().first) return sizes.back().second;
  size_t i = 1;
  while (sizes[i].first < bytes) ++i;
  const auto& [b0, g0] = sizes[i - 1];
  const auto& [b1, g1] = sizes[i];
  const double w = (std::log(bytes) - std::log(b0)) / (std::log(b1) - std::log(b0));
  return g0 + w * (g1 - g0);
}

const CollectiveCalibration* CollectiveBuilder::calibrationFor(CollectiveOp op, int ranks) const {
  for (const auto& c : calibration_)
    if (c.op == op && c.ranks == ranks) return &c;
  return nullptr;
}

void CollectiveBuilder::addFlow(int src, int dst, double payload, const CollectiveChoice& c,
                                std::vector<FlowSpec>& out) const {
  if (src == dst || payload <= 0) return;
  FlowSpec f;
  f.links = path(src, dst);
  if (f.links.empty()) (void)router_.route(src, dst);  // throws TopologyError naming both ends
  f.bytes = payload / c.efficiency;
  if (c.rate_cap_gbps > 0) f.rate_cap = c.rate_cap_gbps;
  out.push_back(std::move(f));
}

int64_t CollectiveBuilder::maxHopLatency(const std::vector<int>& ring) const {
  int64_t worst = 0;
  for (size_t i = 0; ring.size() > 1 && i < ring.size(); ++i)
    worst = std::max(worst, pathLatencyNs(ring[i], ring[(i + 1) % ring.size()]));
  return worst;
}

double CollectiveBuilder::minPathGbps(const std::vector<int>& ring) const {
  double best = 0;
  for (size_t i = 0; ring.size() > 1 && i < ring.size(); ++i) {
    double g = pathGbps(ring[i], ring[(i + 1) % ring.size()]);
    best = (i == 0) ? g : std::min(best, g);
  }
  return best;
}

void CollectiveBuilder::addRingFlows(const std::vector<int>& ring, double edge_bytes, const CollectiveChoice& c,
                                     std::vector<FlowSpec>& out) const {
  if (ring.size() < 2) return;
  for (size_t i = 0; i < ring.size(); ++i) addFlow(ring[i], ring[(i + 1) % ring.size()], edge_bytes, c, out);
}

CollectiveBuilder::GroupFacts& CollectiveBuilder::factsFor(const std::vector<int>& nodes) const {
  auto [it, inserted] = facts_.try_emplace(nodes);
  GroupFacts& g = it->second;
  if (!inserted) return g;
  // Ring order follows the machine: hosts in order, devices in id order inside
  // each host, so a flat ring crosses the network only once per host.
  const Topology& topo = router_.topology();
  g.ring = nodes;
  std::stable_sort(g.ring.begin(), g.ring.end(), [&](int a, int b) {
    int ha = topo.nodeHost(a), hb = topo.nodeHost(b);
    return ha != hb ? ha < hb : a < b;
  });
  g.by_host = hostGroups(nodes);
  if (!g.by_host.empty()) g.shape = shapeOf(g.by_host);
  g.ring_gbps = minPathGbps(g.ring);
  g.ring_hop_ns = maxHopLatency(g.ring);
  g.nvls = nvlsPossible(g.ring);
  return g;
}

bool CollectiveBuilder::nvlsPossible(const std::vector<int>& nodes) const {
  const Topology& topo = router_.topology();
  for (int n : nodes) {
    bool any = false;
    for (int l : router_.outLinks(n))
      any = any || topo.nodeKind(topo.links[size_t(l)].dst) == NodeKind::NvSwitch;
    if (!any) return false;
  }
  return true;
}

bool CollectiveBuilder::treeRoutable(const std::vector<int>& nodes) const {
  const int n = int(nodes.size());
  for (int t = 0; t < 2; ++t)
    for (int i = 1; i < n; ++i) {
      const int child = t == 0 ? nodes[size_t(i)] : nodes[size_t(n - 1 - i)];
      const int parent = t == 0 ? nodes[size_t((i - 1) / 2)] : nodes[size_t(n - 1 - (i - 1) / 2)];
      if (path(child, parent).empty() || path(parent, child).empty()) return false;
    }
  return true;
}

CollectiveSchedule CollectiveBuilder::build(const CollectiveRequest& req) const {
  CollectiveSchedule s;
  const int n = int(req.nodes.size());
  const bool p2p = req.op == CollectiveOp::Send || req.op == CollectiveOp::Recv;
  if (n <= 1 && !p2p) return s;  // a group of one moves nothing

  if (p2p) {
    if (req.peer_src < 0 || req.peer_dst < 0 || req.peer_src >= n || req.peer_dst >= n)
      throw std::invalid_argument("send/recv needs a source and a destination member");
    int src = req.nodes[size_t(req.peer_src)], dst = req.nodes[size_t(req.peer_dst)];
    s.choice = chooseCollective(params_, req.op, req.bytes, 2, pathGbps(src, dst), pathLatencyNs(src, dst), false);
    CollectivePhase ph{"p2p", s.choice.base_latency_ns + s.choice.step_latency_ns + pathLatencyNs(src, dst), {}};
    addFlow(src, dst, double(req.bytes), s.choice, ph.flows);
    s.phases.push_back(std::move(ph));
    s.floor_ns = s.choice.floor_ns;
    return s;
  }

  GroupFacts& g = factsFor(req.nodes);
  const std::vector<int>& ring = g.ring;
  if (const CollectiveCalibration* cal = calibrationFor(req.op, n)) {
    CollectiveChoice c;
    c.efficiency = 1.0;
    c.rate_cap_gbps = cal->gbpsFor(double(req.bytes));
    c.base_latency_ns = cal->latency_ns;
    s.choice = c;
    CollectivePhase ph{"calibrated", cal->latency_ns, {}};
    if (req.op == CollectiveOp::AllToAll) {
      for (int a : ring)
        for (int b : ring) addFlow(a, b, double(req.bytes) / n, c, ph.flows);
    } else {
      addRingFlows(ring, ringBusBytes(req.op, double(req.bytes), n), c, ph.flows);
    }
    s.phases.push_back(std::move(ph));
    return s;
  }

  // Trees need routes between members that are not ring neighbours; a
  // machine without them (GPUs chained by direct links) only gets rings.
  // The check is skipped where the chooser would not consider a tree anyway
  // (hierarchical groups without inter-host trees): it routes 4n pairs that
  // are not ring edges, the most expensive part of building a large group's
  // schedule.
  const std::vector<std::vector<int>>& by_host = g.by_host;
  const bool tree_candidate = params_.force_algorithm == Algorithm::Tree ||
                              (n > 2 && (by_host.size() <= 1 || (params_.inter_host_tree && params_.tree_flows)));
  const NcclParams* params = &params_;
  NcclParams ring_only;
  if (params_.allow_tree && req.op == CollectiveOp::AllReduce && tree_candidate && g.tree_routable < 0)
    g.tree_routable = treeRoutable(req.nodes) ? 1 : 0;
  if (params_.allow_tree && req.op == CollectiveOp::AllReduce && tree_candidate && g.tree_routable == 0) {
    ring_only = params_;
    ring_only.allow_tree = false;
    if (ring_only.force_algorithm == Algorithm::Tree) ring_only.force_algorithm.reset();
    params = &ring_only;
  }
  s.choice = chooseCollective(*params, req.op, req.bytes, n, g.ring_gbps, g.ring_hop_ns, g.nvls,
                              by_host.empty() ? nullptr : &g.shape);
  s.floor_ns = s.choice.floor_ns;
  if ((s.choice.algorithm == Algorithm::Ring || s.choice.algorithm == Algorithm::Tree) && !by_host.empty() &&
      buildHierarchical(req, g, s.choice, s))
    return s;
  switch (s.choice.algorithm) {
    case Algorithm::Tree: buildTree(req, s.choice, s); break;
    case Algorithm::Nvls: buildNvls(req, s.choice, s); break;
    default: buildFlat(req, g, s.choice, s);
  }
  return s;
}

void CollectiveBuilder::buildFlat(const CollectiveRequest& req, const GroupFacts& g, const CollectiveChoice& c,
                                  CollectiveSchedule& s) const {
  const std::vector<int>& ring = g.ring;
  const int n = int(ring.size());
  const double S = double(req.bytes);
  CollectivePhase ph{"ring", 0, {}};
  int64_t hop = 0;
  switch (req.op) {
    case CollectiveOp::AllReduce:
    case CollectiveOp::AllGather:
    case CollectiveOp::ReduceScatter:
      addRingFlows(ring, ringBusBytes(req.op, S, n), c, ph.flows);
      hop = n > 1 ? g.ring_hop_ns : 0;
      break;
    case CollectiveOp::Broadcast:
    case CollectiveOp::Reduce: {
      // A pipelined chain through the ring: starting at the root for a
      // broadcast, ending at it for a reduce.
      ph.label = "chain";
      int root = req.nodes[size_t(std::clamp(req.root, 0, n - 1))];
      auto it = std::find(ring.begin(), ring.end(), root);
      std::vector<int> chain(it, ring.end());
      chain.insert(chain.end(), ring.begin(), it);
      if (req.op == CollectiveOp::Reduce) std::rotate(chain.begin(), chain.begin() + 1, chain.end());
      for (size_t i = 0; i + 1 < chain.size(); ++i) {
        addFlow(chain[i], chain[i + 1], S, c, ph.flows);
        hop = std::max(hop, pathLatencyNs(chain[i], chain[i + 1]));
      }
      break;
    }
    case CollectiveOp::AllToAll:
      ph.label = "direct";
      for (int a : ring)
        for (int b : ring) {
          if (a == b) continue;
          addFlow(a, b, S / n, c, ph.flows);
          hop = std::max(hop, pathLatencyNs(a, b));
        }
      break;
    default: break;
  }
  ph.latency_ns = c.base_latency_ns + ringSteps(req.op, n) * (c.step_latency_ns + hop);
  s.phases.push_back(std::move(ph));
}

int64_t CollectiveBuilder::addTreeFlows(const std::vector<int>& nodes, double bytes, const CollectiveChoice& c,
                                        std::vector<FlowSpec>& out) const {
  // Double binary tree: two trees over the members (the second over the
  // reversed order, so leaves of one are inner nodes of the other), each
  // carrying half the buffer up (reduce) and down (broadcast), pipelined.
  std::vector<int> order = nodes;
  const int n = int(order.size());
  int64_t hop = 0;
  for (int t = 0; t < 2; ++t) {
    if (t == 1) std::reverse(order.begin(), order.end());
    for (int i = 1; i < n; ++i) {
      int child = order[size_t(i)], parent = order[size_t((i - 1) / 2)];
      addFlow(child, parent, bytes / 2, c, out);
      addFlow(parent, child, bytes / 2, c, out);
      hop = std::max(hop, pathLatencyNs(child, parent));
    }
  }
  return hop;
}

void CollectiveBuilder::buildTree(const CollectiveRequest& req, const CollectiveChoice& c,
                                  CollectiveSchedule& s) const {
  const int n = int(req.nodes.size());
  CollectivePhase ph{"tree", 0, {}};
  int depth = 0;
  while ((1 << depth) < n) ++depth;
  const int64_t hop = addTreeFlows(req.nodes, double(req.bytes), c, ph.flows);
  ph.latency_ns = c.base_latency_ns + 2 * depth * (c.step_latency_ns + hop);
  s.phases.push_back(std::move(ph));
}

std::vector<std::vector<int>> CollectiveBuilder::hostGroups(const std::vector<int>& nodes) const {
  const Topology& topo = router_.topology();
  std::map<int, std::vector<int>> by_host;  // ordered by host index: deterministic
  for (int node : nodes) by_host[topo.nodeHost(node)].push_back(node);
  if (by_host.size() < 2) return {};
  const size_t k = by_host.begin()->second.size();
  if (k < 2) return {};  // one rank per host: the flat ring is the inter-host ring
  std::vector<std::vector<int>> out;
  for (auto& [h, v] : by_host) {
    if (v.size() != k) return {};  // uneven groups: a flat ring handles them
    std::sort(v.begin(), v.end());
    out.push_back(std::move(v));
  }
  return out;
}

HierarchyShape CollectiveBuilder::shapeOf(const std::vector<std::vector<int>>& by_host) const {
  HierarchyShape h;
  h.hosts = int(by_host.size());
  h.per_host = int(by_host.front().size());
  bool first = true;
  for (const auto& v : by_host) {
    const double g = minPathGbps(v);
    h.intra_gbps = first ? g : std::min(h.intra_gbps, g);
    h.intra_hop_ns = std::max(h.intra_hop_ns, maxHopLatency(v));
    first = false;
  }
  first = true;
  for (size_t l = 0; l < size_t(h.per_host); ++l) {
    std::vector<int> rail;
    for (const auto& v : by_host) rail.push_back(v[l]);
    const double g = minPathGbps(rail);
    h.inter_gbps = first ? g : std::min(h.inter_gbps, g);
    h.inter_hop_ns = std::max(h.inter_hop_ns, maxHopLatency(rail));
    first = false;
  }
  return h;
}

void CollectiveBuilder::buildNvls(const CollectiveRequest& req, const CollectiveChoice& c,
                                  CollectiveSchedule& s) const {
  // NVLink SHARP: every GPU writes its buffer into the switches, which reduce
  // it, and reads the result back: S up and S down per GPU, spread over its
  // links to the NVSwitch chips in proportion to their bandwidth.
  const Topology& topo = router_.topology();
  CollectivePhase ph{"nvls", 0, {}};
  int64_t hop = 0;
  for (int node : req.nodes) {
    double total = 0;
    std::vector<int> up;
    for (int l : router_.outLinks(node))
      if (topo.nodeKind(topo.links[size_t(l)].dst) == NodeKind::NvSwitch) {
        up.push_back(l);
        total += topo.links[size_t(l)].gbps;
      }
    for (int l : up) {
      const Link& link = topo.links[size_t(l)];
      double share = double(req.bytes) * link.gbps / total;
      FlowSpec f;
      f.links = {l};
      f.bytes = share / c.efficiency;
      if (c.rate_cap_gbps > 0) f.rate_cap = c.rate_cap_gbps;
      ph.flows.push_back(f);
      int back = router_.directLink(link.dst, node);
      if (back >= 0) {
        f.links = {back};
        ph.flows.push_back(f);
      }
      hop = std::max(hop, link.latency_ns);
    }
  }
  ph.latency_ns = c.base_latency_ns + 2 * (c.step_latency_ns + 2 * hop);
  s.phases.push_back(std::move(ph));
}

bool CollectiveBuilder::buildHierarchical(const CollectiveRequest& req, const GroupFacts& g, const CollectiveChoice& c,
                                          CollectiveSchedule& s) const {
  const std::vector<std::vector<int>>& by_host = g.by_host;
  if (req.op != CollectiveOp::AllReduce && req.op != CollectiveOp::AllGather &&
      req.op != CollectiveOp::ReduceScatter)
    return false;
  const int hosts = int(by_host.size());
  const size_t k = by_host.front().size();
  const double S = double(req.bytes);
  const double K = double(k);
  auto intra = [&](const char* label, CollectiveOp op, double bytes, int64_t extra_latency) {
    CollectivePhase ph{label, 0, {}};
    for (const auto& v : by_host) addRingFlows(v, ringBusBytes(op, bytes, int(k)), c, ph.flows);
    const int64_t hop = g.shape.intra_hop_ns;  // the largest maxHopLatency of the host rings
    ph.latency_ns = extra_latency + ringSteps(op, int(k)) * (c.step_latency_ns + hop);
    s.phases.push_back(std::move(ph));
  };
  auto inter = [&](const char* label, CollectiveOp op, double bytes, int64_t extra_latency) {
    const bool tree = c.algorithm == Algorithm::Tree && op == CollectiveOp::AllReduce && hosts > 2;
    CollectivePhase ph{tree ? "inter-tree-all-reduce" : label, 0, {}};
    // The rails are identical: in closed form unless their flows are asked
    // for (NcclParams::tree_flows, flow_hosts_limit).
    if (tree ? !params_.tree_flows : hosts > params_.flow_hosts_limit) {
      ph.latency_ns = extra_latency + int64_t(std::llround(interHostNs(params_, c, op, bytes, g.shape)));
      s.phases.push_back(std::move(ph));
      return;
    }
    int64_t hop = tree ? 0 : g.shape.inter_hop_ns;  // rings: the largest maxHopLatency of the rails
    std::vector<int> rail;
    for (size_t l = 0; l < k; ++l) {
      rail.clear();
      for (const auto& v : by_host) rail.push_back(v[l]);
      if (tree) hop = std::max(hop, addTreeFlows(rail, bytes, c, ph.flows));
      else addRingFlows(rail, ringBusBytes(op, bytes, hosts), c, ph.flows);
    }
    int depth = 0;
    while ((1 << depth) < hosts) ++depth;
    ph.latency_ns = extra_latency + (tree ? 2 * depth : ringSteps(op, hosts)) * (c.step_latency_ns + hop);
    s.phases.push_back(std::move(ph));
  };
  switch (req.op) {
    case CollectiveOp::AllReduce:
      intra("intra-reduce-scatter", CollectiveOp::ReduceScatter, S, c.base_latency_ns);
      inter("inter-all-reduce", CollectiveOp::AllReduce, S / K, 0);
      intra("intra-all-gather", CollectiveOp::AllGather, S, 0);
      break;
    case CollectiveOp::AllGather:
      inter("inter-all-gather", CollectiveOp::AllGather, S / K, c.base_latency_ns);
      intra("intra-all-gather", CollectiveOp::AllGather, S, 0);
      break;
    default:
      intra("intra-reduce-scatter", CollectiveOp::ReduceScatter, S, c.base_latency_ns);
      inter("inter-reduce-scatter", CollectiveOp::ReduceScatter, S / K, 0);
      break;
  }
  return true;
}

}  // namespace tandem::sim
