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
// Hosts do not forward: a route from s to d uses only nodes of s's host, of
// d's host and network switches outside any host (host -1). Besides being
// how clusters work (a NIC does not relay traffic between two other hosts),
// it keeps a search small.
//
// Cost: nothing is precomputed for all N^2 pairs. A route query runs one
// shortest-path search towards its destination over the nodes it may use
// (two hosts and the network switches), stopping as soon as the source is
// settled, and the route is cached per pair. Search arrays live in a small
// LRU keyed by (destination, source host) and are reused without clearing;
// they cover only the nodes a search may use (two hosts and the network
// switches), so memory is O(routes asked for) + max_cached_trees x (nodes of
// two hosts + network switches), independent of the host count. A search
// still checks every leaf-spine link of a fat tree once: measured on the
// 2-core build machine, about 6 us per route at 256 GPUs, 24 us at 1024 and
// 80 us at 4096 (a ring plus 8 rail rings over 4096 GPUs: 0.65 s).

// Thread safety: const methods may be called from several threads; the
// caches are guarded by a mutex. References returned by route() stay valid
// for the lifetime of the Router.

#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "simulator/topology/topology.h"

namespace tandem::sim {

class Router {
 public:
  // Keeps a reference to topo: it must outlive the Router and not change.
  explicit Router(const Topology& topo, int max_cached_trees = 64);
  // A temporary topology would leave the Router dangling.
  explicit Router(Topology&& topo, int max_cached_trees = 64) = delete;

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
    bool operator<(const Cost& o) const {
      return hops != o.hops ? hops < o.hops : latency_ns < o.latency_ns;
    }
  };
  struct HeapItem {
    Cost cost;
    int node = -1;
    bool operator>(const HeapItem& o) const { return o.cost < cost || (!(cost < o.cost) && node > o.node); }
  };
  struct Entry {
    Cost to_dst;
    bool done = false;
  };
  // Distances to one destination (hops, then latency) of the nodes a route
  // from src_host may use, found by a Dijkstra search on reversed links that
  // stops as soon as the queried source is settled and resumes for later
  // sources of the same host. Entries are arrays over the nodes the search
  // may use (the network switches, then dst's host, then src_host), not over
  // the whole machine: at 4096 GPUs a whole-machine array per cached tree
  // was 0.4 MB, 25 MB for the cache, zeroed (page faults) on every fresh
  // Router and read at random by each search. Entries are reused across
  // searches: one is valid only when its stamp equals the tree's generation,
  // so starting a new search costs O(1), not O(nodes).
  struct Tree {
    int dst = -1;
    int src_host = -1;
    int dst_host = -1;
    int dst_base = 0, src_base = 0;  // first entry of dst's host and of src_host; -1 none
    uint32_t generation = 0;
    const Router* router = nullptr;
    std::vector<Entry> entries;
    std::vector<uint32_t> stamps;
    std::vector<HeapItem> heap;  // std::push_heap/pop_heap with std::greater
    // The node's entry index, or -1 for a node of another host.
    int slotOf(int node) const {
      const int h = router->node_host_[size_t(node)];
      const int base = h == -1 ? 0 : h == dst_host ? dst_base : h == src_host ? src_base : -1;
      return base < 0 ? -1 : base + router->group_index_[size_t(node)];
    }
    const Entry* find(int node) const {
      const int s = slotOf(node);
      return s >= 0 && stamps[size_t(s)] == generation ? &entries[size_t(s)] : nullptr;
    }
    // Only for nodes the search may use (slotOf >= 0).
    Entry& touch(int node, const Entry& initial) {
      const size_t s = size_t(slotOf(node));
      if (stamps[s] != generation) {
        stamps[s] = generation;
        entries[s] = initial;
      }
      return entries[s];
    }
  };

  Tree& treeTo(int dst, int src_host) const;  // caller holds mutex_
  void settle(Tree& tree, int src) const;
  bool settledFrom(int src_node, int dst_node, Tree** tree) const;  // caller holds mutex_
  void checkNode(int node, const char* what) const;

  const Topology& topo_;
  int max_cached_trees_;
  std::vector<std::vector<int>> out_links_;
  std::vector<std::vector<int>> in_links_;
  std::vector<std::vector<int>> devices_of_host_;
  std::vector<int> node_host_;
  std::vector<int> group_index_;  // per node: its position among the nodes of its host (or of the network)
  std::unordered_map<int, int> group_size_;  // node count by host (-1: the network switches)
  std::vector<int> empty_;
  // nicFor's breadth-first search: per node, the call that reached it.
  mutable std::vector<uint32_t> nic_seen_;
  mutable uint32_t nic_search_ = 0;

  mutable std::mutex mutex_;
  mutable std::unordered_map<uint64_t, std::vector<int>> routes_;
  mutable std::list<Tree> trees_;     // most recently used first, at most max_cached_trees_
  mutable std::vector<int> nic_for_;  // -2: not computed yet
};

}  // namespace tandem::sim
