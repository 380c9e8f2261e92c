#pragma once
// Topology files: YAML in, YAML out. The format is documented in
// docs/topology-format.md and, by example, in resources/topologies/*.yaml.
//
// Every error is a TopologyError whose message starts with "FILE:LINE: " and
// names the field and, where there is a fixed set, the allowed values.

#include <string>

#include "simulator/topology/topology.h"

namespace tandem::sim {

// Parses YAML text. `source` names the file in messages and in Topology::source.
// Runs validateTopology (so a GPU that cannot reach another is an error) and
// applies a `mig:` section if there is one.
Topology parseTopologyYaml(const std::string& text, const std::string& source);

// Reads and parses a file; an unreadable file is a TopologyError too.
Topology loadTopologyFile(const std::string& path);

// The YAML text of a topology, with a short header comment. Pairs of links
// that mirror each other are written once (bidirectional, the default).
// parseTopologyYaml(topologyToYaml(t)) gives back an equal topology.
std::string topologyToYaml(const Topology& topo);

// Writes topologyToYaml(topo) to a temporary file next to `path` and renames
// it into place, so a failure never leaves a partial file.
void saveTopologyFile(const Topology& topo, const std::string& path);

// Writes `text` to `path` atomically (temporary file in the same folder, then
// rename). Shared with the nvidia-smi importer.
void writeFileAtomically(const std::string& path, const std::string& text);

}  // namespace tandem::sim
