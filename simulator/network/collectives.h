#pragma once
// Collectives -> flows. A collective becomes a short sequence of phases; each
// phase waits a fixed latency (protocol latency plus link latency per
// algorithm step) and then moves its flows, which share links with every
// other flow in the network. Ring phases use one flow per ring edge carrying
// that edge's whole traffic (the chunks of a ring all follow the same edges
// back to back), not one event per chunk, so cost grows with ranks, not with
// ranks times steps.
//
// Byte convention (as nccl-tests' "size"): `bytes` is the full buffer: the
// all-reduce buffer, the all-gather output, the reduce-scatter input, the
// broadcast/reduce buffer, the all-to-all send buffer of one rank, the
// send/recv message.
//
// Multi-host groups (members on more than one host, the same number on each)
// are hierarchical, as NCCL does across nodes: all-reduce = reduce-scatter
// inside each host, all-reduce across hosts between ranks of the same local
// index (the rails), all-gather inside each host.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/plan/plan.h"
#include "simulator/network/nccl_model.h"
#include "simulator/network/network.h"
#include "simulator/topology/routing.h"

namespace tandem::sim {

// A measured (op, ranks) pair that replaces the NCCL model: time =
// latency_ns + bus bytes / gbps (bus bytes as nccl-tests counts them).
struct CollectiveCalibration {
  CollectiveOp op = CollectiveOp::AllReduce;
  int ranks = 0;
  int64_t latency_ns = 0;
  double gbps = 0;
  // Measured bus bandwidth by message size (message bytes, bus GB/s),
  // ascending: NCCL's
  // bandwidth depends on the size. Between sizes it is interpolated on
  // log(bytes); outside them the nearest one holds. Empty: `gbps` for all.
  std::vector<std::pair<double, double>> sizes;
  double gbpsFor(double bytes) const;
};

struct CollectivePhase {
  std::string label;        // "ring", "intra-rs", "inter-ar", ...
  int64_t latency_ns = 0;   // before the flows start
  std::vector<FlowSpec> flows;
};

struct CollectiveSchedule {
  CollectiveChoice choice;
  std::vector<CollectivePhase> phases;
  int64_t floor_ns = 0;  // the whole collective takes at least this long
};

struct CollectiveRequest {
  CollectiveOp op = CollectiveOp::AllReduce;
  int64_t bytes = 0;
  std::vector<int> nodes;  // device node of each member, in group order
  int root = 0;            // index into nodes (broadcast, reduce)
  int peer_src = -1, peer_dst = -1;  // send/recv: indices into nodes
};

class CollectiveBuilder {
 public:
  CollectiveBuilder(const Router& router, NcclParams params,
                    std::vector<CollectiveCalibration> calibration = {});
  CollectiveSchedule build(const CollectiveRequest& req) const;
  const NcclParams& params() const { return params_; }

 private:
  // What build() derives from the member list alone, not from the op or the
  // size: computed once per distinct list and kept, so the collectives of one
  // group (the GPT-2 1.5B bench builds six bucket sizes over the same 4096
  // GPUs) do not look up every ring edge's path again for each size.
  struct GroupFacts {
    std::vector<int> ring;                     // members in machine order (hosts, then device ids)
    std::vector<std::vector<int>> by_host;     // hostGroups(members)
    HierarchyShape shape;                      // shapeOf(by_host) when by_host is not empty
    double ring_gbps = 0;                      // minPathGbps(ring)
    int64_t ring_hop_ns = 0;                   // maxHopLatency(ring)
    bool nvls = false;                         // nvlsPossible(ring)
    int tree_routable = -1;                    // treeRoutable(members); -1 until asked
  };
  GroupFacts& factsFor(const std::vector<int>& nodes) const;
  // Appends one flow per ring edge (node i -> node i+1) carrying `edge_bytes`
  // of payload. (The ring's step latency is maxHopLatency(ring).)
  void addRingFlows(const std::vector<int>& ring, double edge_bytes, const CollectiveChoice& c,
                    std::vector<FlowSpec>& out) const;
  void addFlow(int src, int dst, double payload, const CollectiveChoice& c, std::vector<FlowSpec>& out) const;
  int64_t maxHopLatency(const std::vector<int>& ring) const;
  double minPathGbps(const std::vector<int>& ring) const;
  bool nvlsPossible(const std::vector<int>& nodes) const;
  bool treeRoutable(const std::vector<int>& nodes) const;
  // Members grouped by host (hosts in index order, devices sorted) when they
  // sit on two or more hosts with the same number (>= 2) on each; else empty.
  std::vector<std::vector<int>> hostGroups(const std::vector<int>& nodes) const;
  HierarchyShape shapeOf(const std::vector<std::vector<int>>& by_host) const;
  // Double binary tree flows over `order`, each tree carrying half of `bytes`.
  int64_t addTreeFlows(const std::vector<int>& order, double bytes, const CollectiveChoice& c,
                       std::vector<FlowSpec>& out) const;
  const CollectiveCalibration* calibrationFor(CollectiveOp op, int ranks) const;

  void buildFlat(const CollectiveRequest& req, const GroupFacts& g, const CollectiveChoice& c,
                 CollectiveSchedule& s) const;
  void buildTree(const CollectiveRequest& req, const CollectiveChoice& c, CollectiveSchedule& s) const;
  void buildNvls(const CollectiveRequest& req, const CollectiveChoice& c, CollectiveSchedule& s) const;
  bool buildHierarchical(const CollectiveRequest& req, const GroupFacts& g, const CollectiveChoice& c,
                         CollectiveSchedule& s) const;

  // The links a flow from device a to device b takes. Across hosts it leaves
  // through a's nearest NIC and enters through b's (GPUDirect RDMA on the
  // rails, as NCCL does), and the fabric part is routed to b's leaf switch:
  // shortest-path searches then go to the few leaves, not to every GPU,
  // which keeps route finding linear in the GPU count. Elsewhere (same host,
  // no NICs) it is the Router's route.
  const std::vector<int>& path(int a, int b) const;
  int64_t pathLatencyNs(int a, int b) const;
  double pathGbps(int a, int b) const;

  const Router& router_;
  NcclParams params_;
  std::vector<CollectiveCalibration> calibration_;
  mutable std::unordered_map<uint64_t, std::vector<int>> paths_;  // by (a << 32 | b); lookup only
  mutable std::map<std::vector<int>, GroupFacts> facts_;          // by member list (group order)
};

}  // namespace tandem::sim
