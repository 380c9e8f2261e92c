// Shortest-path routing with ECMP-like tie breaking; see routing.h.
#include "simulator/routing.h"

#include <fmt/core.h>

#include <algorithm>
#include <limits>
#include <queue>
#include <tuple>

namespace tandem::sim {
namespace {

uint64_t pairKey(int src, int dst) { return (uint64_t(uint32_t(src)) << 32) | uint32_t(dst); }

// splitmix64 finalizer: cheap, well mixed, identical on every platform.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

Router::Router(const Topology& topo, int max_cached_trees)
    : topo_(topo), max_cached_trees_(std::max(1, max_cached_trees)) {
  const size_t n = size_t(topo.nodeCount());
  out_links_.resize(n);
  in_links_.resize(n);
  for (size_t i = 0; i < topo.links.size(); ++i) {
    const Link& l = topo.links[i];
    if (l.src < 0 || size_t(l.src) >= n || l.dst < 0 || size_t(l.dst) >= n)
      throw TopologyError(fmt::format("topology '{}': link {} has an endpoint outside 0..{}", topo.name,
                                      i, n - 1));
    out_links_[size_t(l.src)].push_back(int(i));
    in_links_[size_t(l.dst)].push_back(int(i));
  }
  devices_of_host_.resize(topo.hosts.size());
  for (size_t d = 0; d < topo.devices.size(); ++d) {
    int h = topo.devices[d].host;
    if (h >= 0 && size_t(h) < devices_of_host_.size()) devices_of_host_[size_t(h)].push_back(int(d));
  }
  nic_for_.assign(topo.devices.size(), -2);
}

void Router::checkNode(int node, const char* what) const {
  if (node < 0 || node >= topo_.nodeCount())
    throw TopologyError(fmt::format("topology '{}': {} node {} is outside 0..{}", topo_.name, what, node,
                                    topo_.nodeCount() - 1));
}

std::shared_ptr<const Router::Tree> Router::buildTree(int dst) const {
  // Dijkstra on reversed links from dst with the cost (hops, latency), which
  // orders lexicographically. A device other than dst is a leaf: it may start
  // a route but never forwards one.
  const size_t n = size_t(topo_.nodeCount());
  auto tree = std::make_shared<Tree>();
  tree->dst = dst;
  tree->to_dst.assign(n, Cost{std::numeric_limits<int>::max(), 0});
  tree->reached.assign(n, false);
  using Item = std::tuple<int, int64_t, int>;  // hops, latency, node
  std::priority_queue<Item, std::vector<Item>, std::greater<>> heap;
  tree->to_dst[size_t(dst)] = Cost{0, 0};
  heap.push({0, 0, dst});
  std::vector<bool> done(n, false);
  while (!heap.empty()) {
    auto [hops, lat, v] = heap.top();
    heap.pop();
    if (done[size_t(v)]) continue;
    done[size_t(v)] = true;
    tree->reached[size_t(v)] = true;
    if (v != dst && topo_.isDevice(v)) continue;
    for (int li : in_links_[size_t(v)]) {
      const Link& l = topo_.links[size_t(li)];
      Cost cand{hops + 1, lat + l.latency_ns};
      Cost& cur = tree->to_dst[size_t(l.src)];
      if (std::tie(cand.hops, cand.latency_ns) < std::tie(cur.hops, cur.latency_ns)) {
        cur = cand;
        heap.push({cand.hops, cand.latency_ns, l.src});
      }
    }
  }
  return tree;
}

std::shared_ptr<const Router::Tree> Router::treeTo(int dst) const {
  for (auto it = trees_.begin(); it != trees_.end(); ++it) {
    if ((*it)->dst == dst) {
      trees_.splice(trees_.begin(), trees_, it);
      return trees_.front();
    }
  }
  trees_.push_front(buildTree(dst));
  while (int(trees_.size()) > max_cached_trees_) trees_.pop_back();
  return trees_.front();
}

const std::vector<int>& Router::route(int src_node, int dst_node) const {
  checkNode(src_node, "source");
  checkNode(dst_node, "destination");
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = routes_.find(pairKey(src_node, dst_node));
  if (found != routes_.end()) return found->second;

  std::vector<int> path;
  if (src_node != dst_node) {
    auto tree = treeTo(dst_node);
    if (!tree->reached[size_t(src_node)])
      throw TopologyError(fmt::format("topology '{}': no route from '{}' to '{}'", topo_.name,
                                      topo_.nodeName(src_node), topo_.nodeName(dst_node)));
    int cur = src_node;
    std::vector<int> candidates;
    while (cur != dst_node) {
      const Cost here = tree->to_dst[size_t(cur)];
      candidates.clear();
      for (int li : out_links_[size_t(cur)]) {
        const Link& l = topo_.links[size_t(li)];
        int v = l.dst;
        if (!tree->reached[size_t(v)]) continue;
        if (v != dst_node && topo_.isDevice(v)) continue;
        const Cost there = tree->to_dst[size_t(v)];
        if (there.hops + 1 == here.hops && there.latency_ns + l.latency_ns == here.latency_ns)
          candidates.push_back(li);
      }
      // Cannot be empty: `here` was derived from one of these links.
      uint64_t h = mix(pairKey(src_node, dst_node) ^ mix(uint64_t(cur)));
      int li = candidates[size_t(h % candidates.size())];
      path.push_back(li);
      cur = topo_.links[size_t(li)].dst;
    }
  }
  auto [it, inserted] = routes_.emplace(pairKey(src_node, dst_node), std::move(path));
  (void)inserted;
  return it->second;
}

bool Router::reachable(int src_node, int dst_node) const {
  checkNode(src_node, "source");
  checkNode(dst_node, "destination");
  if (src_node == dst_node) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  if (routes_.count(pairKey(src_node, dst_node))) return true;
  return treeTo(dst_node)->reached[size_t(src_node)];
}

int64_t Router::routeLatencyNs(int src_node, int dst_node) const {
  int64_t total = 0;
  for (int li : route(src_node, dst_node)) total += topo_.links[size_t(li)].latency_ns;
  return total;
}

double Router::bottleneckGbps(int src_node, int dst_node) const {
  const auto& path = route(src_node, dst_node);
  if (path.empty()) return std::numeric_limits<double>::infinity();
  double best = std::numeric_limits<double>::infinity();
  for (int li : path) best = std::min(best, topo_.links[size_t(li)].gbps);
  return best;
}

const std::vector<int>& Router::devicesOfHost(int host) const {
  if (host < 0 || size_t(host) >= devices_of_host_.size()) return empty_;
  return devices_of_host_[size_t(host)];
}

int Router::nicFor(int device) const {
  if (!topo_.isDevice(device))
    throw TopologyError(fmt::format("topology '{}': nicFor({}) needs a device node", topo_.name, device));
  std::lock_guard<std::mutex> lock(mutex_);
  int& cached = nic_for_[size_t(device)];
  if (cached != -2) return cached;
  // Breadth-first inside the device's host; the first NIC met at the smallest
  // depth (lowest id at that depth) is the device's rail.
  const int host = topo_.devices[size_t(device)].host;
  const size_t n = size_t(topo_.nodeCount());
  std::vector<int> depth(n, -1);
  std::vector<int> frontier{device};
  depth[size_t(device)] = 0;
  cached = -1;
  while (!frontier.empty() && cached == -1) {
    std::vector<int> next;
    int best = -1;
    for (int u : frontier) {
      if (u != device && topo_.isDevice(u)) continue;
      for (int li : out_links_[size_t(u)]) {
        int v = topo_.links[size_t(li)].dst;
        if (depth[size_t(v)] >= 0 || topo_.nodeHost(v) != host) continue;
        depth[size_t(v)] = depth[size_t(u)] + 1;
        if (topo_.nodeKind(v) == NodeKind::Nic && (best < 0 || v < best)) best = v;
        next.push_back(v);
      }
    }
    cached = best;
    frontier = std::move(next);
  }
  return cached;
}

int Router::directLink(int src_node, int dst_node) const {
  checkNode(src_node, "source");
  checkNode(dst_node, "destination");
  int best = -1;
  for (int li : out_links_[size_t(src_node)]) {
    const Link& l = topo_.links[size_t(li)];
    if (l.dst == dst_node && (best < 0 || l.gbps > topo_.links[size_t(best)].gbps)) best = li;
  }
  return best;
}

size_t Router::cachedRouteCount() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return routes_.size();
}

size_t Router::cachedTreeCount() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return trees_.size();
}

}  // namespace tandem::sim
