#pragma once
// The ranks of one host-sized block onto the GPUs of one host: step 2 of
// placement inside a host (placement.h).
//
// A group's members in the block form a local group (a data-parallel group
// over 128 hosts has one or a few members in each); its cost is its bytes
// over the narrowest hop of its ring through the host's GPUs, and the
// host's cost is that of traffic.h restricted to the host. Groups are placed
// greedily (tier, then heaviest first) onto the free GPUs best connected to
// each other and to the members already placed, then pairwise swaps of two
// GPUs' ranks (or of a rank and a free GPU) run while the cost falls (on
// hosts of up to 128 GPUs: each sweep evaluates every pair in full). The
// identity (the block's i-th rank on the host's i-th GPU) is kept unless
// strictly worse.
//
// Alike hosts solve once: a block whose local groups, and a host whose
// GPUs and links between them, look like those of a problem solved already
// reuse its answer, so a cluster of identical hosts gets one layout.

#include <map>
#include <string>
#include <vector>

#include "engine/plan/plan.h"
#include "simulator/placement/traffic.h"
#include "simulator/topology/routing.h"

namespace tandem::sim {

class HostLayoutSolver {
 public:
  // Keeps references to the plan, the router and the traffic.
  HostLayoutSolver(const Plan& plan, const Router& router, const std::vector<GroupTraffic>& traffic,
                   int max_swap_passes);

  // For each rank of `block` (ascending), the index in `devices` (node ids
  // of one host's GPUs, ascending) of the GPU it goes to.
  std::vector<int> solve(const std::vector<int>& block, const std::vector<int>& devices);

  int solved() const { return solved_; }  // problems solved
  int reused() const { return reused_; }  // answers reused for alike hosts

 private:
  const Plan& plan_;
  const Router& router_;
  const std::vector<GroupTraffic>& traffic_;
  int max_swap_passes_ = 16;
  std::vector<int> family_of_;                    // per traffic entry
  int families_ = 0;
  std::vector<std::vector<int>> traffic_of_rank_;  // per rank: traffic entries it belongs to
  std::vector<int> local_index_;                   // per rank: index in the block being solved, else -1
  std::map<std::string, std::vector<int>> memo_;
  int solved_ = 0;
  int reused_ = 0;
};

}  // namespace tandem::sim
