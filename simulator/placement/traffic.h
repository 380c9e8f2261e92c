#pragma once
// What a plan moves between its ranks in one step, process group by process
// group, and what that costs on a given rank -> device map: the input and
// the yardstick of placement (placement.h).
//
// Bytes are bus bytes per member, as nccl-tests counts them (an all-reduce
// of B bytes over n ranks moves 2 (n - 1) / n x B through each member's
// links, an all-gather or reduce-scatter (n - 1) / n x B, a send B), summed
// over the step and weighted by how exposed the transfer is: a collective
// issued on a compute stream (tensor parallelism's all-reduces) or a
// pipeline send/receive blocks the step and counts whole; one on a
// communication stream (data parallelism's bucketed gradients) can hide
// under compute and counts kOverlappedWeight of its bytes. That weight is a
// heuristic for ranking maps, not a prediction: the simulation that follows
// placement decides (placement.h).
//
// The cost of a map: each group's time is its bytes over the narrowest hop
// of its ring, the ring ordered as the simulator's collectives order it
// (hosts in order, device ids inside a host: collectives.h). A group with as
// many members on each of several hosts is hierarchical there (reduce inside
// each host, cross between hosts on every member's rail at once), so its hop
// between hosts counts once per distinct NIC its members use. A family's time
// is its slowest group (every group of a family runs at once and the step
// waits for the last), and maps compare by the sum of the families' times,
// then by the sum of all groups' times (so improving one of several equal
// groups still counts). It ignores contention between groups that share a
// link, latency and compute: the simulation sees those.

#include <string>
#include <string_view>
#include <vector>

#include "engine/plan/plan.h"
#include "simulator/topology/routing.h"

namespace tandem::sim {

// The fraction of its bytes a collective on a communication stream counts.
inline constexpr double kOverlappedWeight = 0.5;

// Placement's order of families, most urgent first: 0 tensor and context
// parallel ("tp", "cp"), 1 pipeline neighbours ("pp<b>", "pipe", "embed"),
// 2 data parallel ("dp", "shard", "replica"), 3 anything else.
int familyTier(std::string_view family);

struct GroupTraffic {
  int group = -1;      // index into Plan::groups
  std::string family;  // the group's name
  int tier = 3;        // familyTier(family)
  double bytes = 0;    // weighted bus bytes per member per step (the busiest member's)
};

// One entry per group of the plan that moves bytes, in Plan::groups order.
std::vector<GroupTraffic> planTraffic(const Plan& plan);

// A map's cost in seconds (see the header comment); lower is better.
struct PlacementCost {
  double families_s = 0;  // sum over families of the slowest group's time
  double groups_s = 0;    // sum over all groups' times
};

// a is cheaper than b by more than rounding (1e-9 relative).
bool cheaper(const PlacementCost& a, const PlacementCost& b);

// Evaluates maps of one plan on one topology.
class TrafficCost {
 public:
  // Keeps references to the plan and the router.
  TrafficCost(const Plan& plan, const Router& router, std::vector<GroupTraffic> traffic);

  const std::vector<GroupTraffic>& traffic() const { return traffic_; }
  // The narrowest hop (GB/s) of the ring through these devices, ordered as
  // the simulator orders it, the hop between hosts times the rails it uses
  // (see above); +inf for fewer than two distinct devices.
  double ringGbps(std::vector<int> devices) const;
  // Seconds group `t` takes on `rank_device`.
  double groupSeconds(const GroupTraffic& t, const std::vector<int>& rank_device) const;
  PlacementCost of(const std::vector<int>& rank_device) const;

 private:
  const Plan& plan_;
  const Router& router_;
  std::vector<GroupTraffic> traffic_;
  std::vector<int> family_of_;  // per traffic entry: index of its family
  int families_ = 0;
};

}  // namespace tandem::sim
