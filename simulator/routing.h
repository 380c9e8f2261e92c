#pragma once
// Routes between devices of a Topology, as lists of directed Link indices.
//
// A route is the shortest path by hop count, ties broken by total latency;
// devices are endpoints only (traffic never transits a GPU). Where several
// paths are equally short (rails and spines of a fat tree, the four NVSwitch
// chips of a DGX), the next hop is chosen by a hash of (src, dst, node), the
// way ECMP spreads flows: deterministic, and different pairs take different
// spines.
//
// Cost: nothing is precomputed for all N^2 pairs. A route query runs one
// shortest-path search towards its destination (O(links log nodes)), whose
// distance table is kept in a small LRU cache (O(nodes) each), and the route
// itself is cached per pair. 4096 GPUs with a ring pattern therefore cost
// O(N) routes and memory.
//
// Thread safety: const methods may be called from several threads; the
// caches are guarded by a mutex. References returned by route() stay valid
// for the lifetime of the Router.

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "simulator/topology.h"

namespace tandem::sim {

class Router {
 public:
  // Keeps a reference to topo: it must outlive the Router and not change.
  explicit Router(const Topology& topo, int max_cached_trees = 64);

  const Topology& topology() const { return topo_; }

  // Directed link indices from src_node to dst_node (node ids, see topology.h).
  // Empty when src == dst. Throws TopologyError when dst cannot be reached.
  const std::vector<int>& route(int src_node, int dst_node) const;
  bool reachable(int src_node, int dst_node) const;

  // Sum of link latencies along the route, and its narrowest link (GB/s).
  int64_t routeLatencyNs(int src_node, int dst_node) const;
  double bottleneckGbps(int src_node, int dst_node) const;

  // Devices (node ids) whose host is `host`, in id order.
  const std::vector<int>& devicesOfHost(int host) const;
  // The NIC nearest a device inside its host (fewest hops, then lowest id),
  // i.e. its rail on a DGX; -1 when its host has no NIC.
  int nicFor(int device) const;

  // Outgoing link indices of a node.
  const std::vector<int>& outLinks(int node) const { return out_links_[size_t(node)]; }
  // Index of the direct link src -> dst with the highest bandwidth, or -1.
  int directLink(int src_node, int dst_node) const;

  // For tests and benchmarks: how much is cached.
  size_t cachedRouteCount() const;
  size_t cachedTreeCount() const;

 private:
  struct Cost {
    int hops = 0;
    int64_t latency_ns = 0;
  };
  // Distances of every node to one destination (hops, then latency).
  struct Tree {
    int dst = -1;
    std::vector<Cost> to_dst;
    std::vector<bool> reached;
  };

  std::shared_ptr<const Tree> treeTo(int dst) const;  // caller holds mutex_
  std::shared_ptr<const Tree> buildTree(int dst) const;
  void checkNode(int node, const char* what) const;

  const Topology& topo_;
  int max_cached_trees_;
  std::vector<std::vector<int>> out_links_;
  std::vector<std::vector<int>> in_links_;
  std::vector<std::vector<int>> devices_of_host_;
  std::vector<int> empty_;

  mutable std::mutex mutex_;
  mutable std::unordered_map<uint64_t, std::vector<int>> routes_;
  mutable std::list<std::shared_ptr<const Tree>> trees_;  // most recently used first
  mutable std::vector<int> nic_for_;                      // -2: not computed yet
};

}  // namespace tandem::sim
