#pragma once
// Placement map files: what `tandem place --out` writes and `tandem run
// --placement FILE` reads. YAML, one entry per rank:
//
//   # tandem placement map ...
//   job: gpt2-124m-dp8
//   topology: pcie4-nvbridge
//   world_size: 4
//   ranks:
//     - {rank: 0, gpu: gpu0, host: host0, local: 0}
//     - {rank: 1, gpu: gpu2, host: host0, local: 2}
//     ...
//
// `gpu` and `host` are the topology's names; `local` is the GPU's index
// among its host's GPUs, which is the CUDA device index `tandem run` opens
// on that host (nvidia-smi's order: tandem run sets CUDA_DEVICE_ORDER=
// PCI_BUS_ID so CUDA counts the same way). Every error is a PlacementError
// "FILE:LINE: message" naming the field.

#include <string>
#include <vector>

#include "engine/plan/plan.h"
#include "simulator/placement/placement.h"
#include "simulator/topology/topology.h"

namespace tandem::sim {

struct PlacementEntry {
  int rank = 0;
  std::string gpu;   // the topology's device name
  std::string host;  // the topology's host name
  int local = 0;     // index among the host's GPUs (CUDA device on that host)
  int line = 0;      // in the file it was read from; 0 when built
};

struct PlacementMap {
  std::string source;  // file it was read from, for messages
  std::string job;
  std::string topology;
  int world_size = 0;
  std::vector<PlacementEntry> ranks;  // in rank order
};

// The map of `rank_device` (node ids) of `plan` on `topo`.
PlacementMap placementMapOf(const Plan& plan, const Topology& topo, const std::vector<int>& rank_device);

// The YAML text; `comment` lines (without '#') go in the header.
std::string placementMapToYaml(const PlacementMap& map, const std::vector<std::string>& comment = {});

// Parses and checks the text: every rank of the world once, no two ranks on
// one GPU of a host. Throws PlacementError "SOURCE:LINE: ...".
PlacementMap parsePlacementMap(const std::string& text, const std::string& source);
PlacementMap loadPlacementMap(const std::string& path);

// The CUDA device (`local`) of each rank; PlacementError when the map is for
// another world size.
std::vector<int> localDevices(const PlacementMap& map, int world_size);

// The device node id of each rank on `topo`, by GPU name; PlacementError
// naming the line of a GPU the topology lacks or a host that disagrees.
std::vector<int> rankDevices(const PlacementMap& map, const Topology& topo);

}  // namespace tandem::sim
