// Shortest-path routing with ECMP-like tie breaking; see routing.h.
#include "simulator/topology/routing.h"

#include <fmt/core.h>

#include <algorithm>
#include <limits>
#include <functional>
#include <iterator>

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
  node_host_.resize(n);
  group_index_.resize(n);
  group_size_[-1] = 0;
  for (size_t v = 0; v < n; ++v) {
    node_host_[v] = topo.nodeHost(int(v));
    group_index_[v] = group_size_[node_host_[v]]++;
  }
  nic_seen_.assign(n, 0);
}

void Router::checkNode(int node, const char* what) const {
  if (node < 0 || node >= topo_.nodeCount())
    throw TopologyError(fmt::format("topology '{}': {} node {} is outside 0..{}", topo_.name, what, node,
                                    topo_.nodeCount() - 1));
}

Router::Tree& Router::treeTo(int dst, int src_host) const {
  for (auto it = trees_.begin(); it != trees_.end(); ++it) {
    if (it->dst == dst && it->src_host == src_host) {
      trees_.splice(trees_.begin(), trees_, it);
      return trees_.front();
    }
  }
  // Reuse the least recently used tree's arrays once the cache is full.
  if (int(trees_.size()) >= max_cached_trees_) {
    trees_.splice(trees_.begin(), trees_, std::prev(trees_.end()));
  } else {
    trees_.emplace_front();
  }
  Tree& tree = trees_.front();
  tree.router = this;
  tree.dst = dst;
  tree.src_host = src_host;
  tree.dst_host = node_host_[size_t(dst)];
  // Entries: the network switches, then dst's host, then src_host (each
  // host once; a node's entry is its group's base plus its group index).
  size_t size = size_t(group_size_.at(-1));
  tree.dst_base = tree.src_base = -1;
  if (tree.dst_host != -1) {
    tree.dst_base = int(size);
    size += size_t(group_size_.at(tree.dst_host));
  }
  if (src_host != -1 && src_host != tree.dst_host) {
    auto it = group_size_.find(src_host);
    if (it != group_size_.end()) {
      tree.src_base = int(size);
      size += size_t(it->second);
    }
  }
  if (tree.entries.size() < size) {
    tree.entries.resize(size);
    tree.stamps.resize(size, 0);  // below the generation: not valid
  }
  if (++tree.generation == 0) {  // wrapped: old stamps could look valid
    std::fill(tree.stamps.begin(), tree.stamps.end(), 0);
    tree.generation = 1;
  }
  tree.heap.clear();
  tree.touch(dst, Entry{Cost{0, 0}, false});
  tree.heap.push_back({Cost{0, 0}, dst});
  return tree;
}

void Router::settle(Tree& tree, int src) const {
  // Dijkstra on reversed links from tree.dst with the cost (hops, latency),
  // ordered lexicographically. A device other than dst is a leaf: it may start
  // a route but never forwards one. Nodes of hosts other than the two ends
  // are not used. The search stops once src is settled: every node cheaper
  // than src, the only ones a shortest route from src can use, is settled too.
  auto& heap = tree.heap;
  const std::greater<HeapItem> later;
  const int dst_host = node_host_[size_t(tree.dst)];
  while (!heap.empty()) {
    if (const Entry* s = tree.find(src); s && s->done) break;
    std::pop_heap(heap.begin(), heap.end(), later);
    HeapItem item = heap.back();
    heap.pop_back();
    const int v = item.node;
    Entry& ev = tree.touch(v, Entry{item.cost, false});
    if (ev.done) continue;
    ev.done = true;
    if (v != tree.dst && topo_.isDevice(v)) continue;
    for (int li : in_links_[size_t(v)]) {
      const Link& l = topo_.links[size_t(li)];
      const int h = node_host_[size_t(l.src)];
      if (h != -1 && h != dst_host && h != tree.src_host) continue;
      Cost cand{item.cost.hops + 1, item.cost.latency_ns + l.latency_ns};
      if (const Entry* known = tree.find(l.src)) {
        if (known->done || !(cand < known->to_dst)) continue;
      }
      tree.touch(l.src, Entry{cand, false}).to_dst = cand;
      heap.push_back({cand, l.src});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  }
}

bool Router::settledFrom(int src_node, int dst_node, Tree** out) const {
  Tree& tree = treeTo(dst_node, node_host_[size_t(src_node)]);
  settle(tree, src_node);
  *out = &tree;
  const Entry* e = tree.find(src_node);
  return e && e->done;
}

const std::vector<int>& Router::route(int src_node, int dst_node) const {
  checkNode(src_node, "source");
  checkNode(dst_node, "destination");
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = routes_.find(pairKey(src_node, dst_node));
  if (found != routes_.end()) return found->second;

  std::vector<int> path;
  if (src_node != dst_node) {
    Tree* tree = nullptr;
    if (!settledFrom(src_node, dst_node, &tree))
      throw TopologyError(fmt::format("topology '{}': no route from '{}' to '{}'", topo_.name,
                                      topo_.nodeName(src_node), topo_.nodeName(dst_node)));
    int cur = src_node;
    std::vector<int> candidates;
    while (cur != dst_node) {
      const Cost here = tree->find(cur)->to_dst;
      candidates.clear();
      for (int li : out_links_[size_t(cur)]) {
        const Link& l = topo_.links[size_t(li)];
        const Entry* there = tree->find(l.dst);
        if (!there || !there->done) continue;
        if (l.dst != dst_node && topo_.isDevice(l.dst)) continue;
        if (there->to_dst.hops + 1 == here.hops && there->to_dst.latency_ns + l.latency_ns == here.latency_ns)
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
  Tree* tree = nullptr;
  return settledFrom(src_node, dst_node, &tree);
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
  // Visited nodes are marked with this call's number (no per-call map: one
  // call per device, thousands of them in a cluster).
  if (++nic_search_ == 0) {
    std::fill(nic_seen_.begin(), nic_seen_.end(), 0);
    nic_search_ = 1;
  }
  nic_seen_[size_t(device)] = nic_search_;
  std::vector<int> frontier{device};
  cached = -1;
  while (!frontier.empty() && cached == -1) {
    std::vector<int> next;
    int best = -1;
    for (int u : frontier) {
      if (u != device && topo_.isDevice(u)) continue;
      for (int li : out_links_[size_t(u)]) {
        int v = topo_.links[size_t(li)].dst;
        if (nic_seen_[size_t(v)] == nic_search_ || node_host_[size_t(v)] != host) continue;
        nic_seen_[size_t(v)] = nic_search_;
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
