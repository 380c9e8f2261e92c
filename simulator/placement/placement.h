#pragma once
// Topology-aware placement: which GPU each rank of a plan runs on, so that
// the groups that move the most sit on the fastest links (`tandem place`,
// `tandem run --placement`; docs/simulator.md, "Placement").
//
// Why: ranks are numbered with the tensor-parallel place fastest
// (process_groups.h), and launchers give rank r the r-th GPU. On a machine
// whose fast links do not join consecutive GPUs (PCIe cards with NVLink
// bridges between GPU 0-2 and 1-3, say) tensor parallelism's all-reduces,
// which block every layer, then cross PCIe while the bridges carry data
// parallelism's gradients, which hide under the backward pass anyway.
//
// How, in three steps:
// 1. Weigh. planTraffic (traffic.h) gives each process group the bytes its
//    members move per step, blocking transfers whole and overlappable ones
//    at half; each pair of GPUs is weighed by its bottleneck bandwidth from
//    routing (Router::bottleneckGbps).
// 2. Place, hosts first, then GPUs inside each host. Ranks are gathered into
//    host-sized blocks by merging groups, tensor parallel first, then
//    pipeline neighbours, then data parallel (heaviest first within a tier),
//    as long as the merged set fits one host; the blocks fill hosts in rank
//    order. Where hosts are joined unevenly (not a non-blocking fat tree) and
//    there are at most PlacementOptions::max_block_hosts of them, blocks are
//    then swapped between hosts while that lowers the cost. Inside a host,
//    groups are placed greedily in the same order, each onto the free GPUs
//    best connected to each other (and to the members placed already), then
//    improved by pairwise swaps scored by the cost of traffic.h (bytes over
//    the ring's narrowest hop, the slowest group of each family). The tier
//    order, not bytes alone, drives the greedy step because bytes do not say
//    what blocks the step: tensor-parallel traffic sits on the critical path
//    every layer, a pipeline stage waits for its neighbour, data-parallel
//    buckets overlap the backward pass. A host whose block and whose
//    internal links look like one solved already reuses that solution, so
//    alike hosts of a cluster get the same layout (and the simulator's
//    symmetry still applies), and 1024 ranks on 128 hosts solve one host.
//    The identity is kept unless the proposal's cost is strictly lower.
// 3. Verify (choosePlacement): simulate the step with the identity and with
//    the proposal and keep the proposal only when it is at least as fast.
//
// What it does not do: it does not reorder ranks inside NCCL's own rings
// (the simulator orders a ring by device id, as collectives.h says), does
// not weigh contention between groups sharing a link except through the
// final simulation, and on several hosts assumes they hold the same number
// of GPUs (otherwise blocks follow rank order).

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/plan/plan.h"
#include "simulator/cost/cost_model.h"
#include "simulator/placement/traffic.h"
#include "simulator/replay/replay.h"
#include "simulator/topology/topology.h"

namespace tandem::sim {

// A plan that does not fit the topology, a map file that does not fit the
// plan. The message names the file and line where there is one.
class PlacementError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PlacementOptions {
  int max_swap_passes = 16;  // sweeps of pairwise swaps inside a host
  // Hosts up to which blocks are swapped between hosts (when their links
  // differ); beyond, blocks stay in rank order.
  int max_block_hosts = 32;
  // Worlds up to this many ranks are verified simulating every rank; larger
  // ones with the SimOptions' symmetry mode (one representative per program
  // where the check passes).
  int exact_simulation_ranks = 256;
};

struct Placement {
  std::vector<int> rank_device;  // device node id of each rank
  bool identity = true;          // rank r on device r
  PlacementCost cost;            // of rank_device (traffic.h)
  PlacementCost identity_cost;
  std::vector<std::string> notes;  // how it was found, one line each
};

// The identity map of a world on a topology (rank r on device r). Throws
// PlacementError when the topology has fewer GPUs than the world.
std::vector<int> identityPlacement(const Plan& plan, const Topology& topo);

// Steps 1 and 2 above. Throws PlacementError when the world does not fit.
Placement proposePlacement(const Plan& plan, const Topology& topo, const PlacementOptions& options = {});

struct PlacementVerdict {
  Placement proposed;
  std::vector<int> rank_device;  // the choice: the proposal when it simulated at least as fast, else the identity
  bool proposal_chosen = false;
  int64_t identity_step_ns = 0;
  int64_t proposed_step_ns = 0;  // equal to identity_step_ns when the proposal is the identity
  int64_t chosen_step_ns = 0;
  std::string simulation_note;   // every rank simulated, or the symmetry note
};

// Steps 1 to 3. `options.rank_device` is ignored. Throws what simulatePlan throws.
PlacementVerdict choosePlacement(const Plan& plan, const Topology& topo, const CostModel& cost,
                                 const SimOptions& options, const PlacementOptions& placement = {});

}  // namespace tandem::sim
