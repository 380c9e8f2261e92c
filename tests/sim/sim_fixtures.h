#pragma once
// Hand-built topologies and plans for the simulator tests.
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/plan/plan.h"
#include "simulator/topology/topology.h"

namespace tandem::sim::testing {

// n GPUs in a bidirectional ring of direct links (gbps, latency) and nothing else.
inline Topology ringTopology(int n, double gbps, int64_t latency_ns) {
  Topology t;
  t.name = "test-ring";
  t.hosts.push_back({"host0"});
  for (int i = 0; i < n; ++i) {
    DeviceSpec d;
    d.name = "gpu" + std::to_string(i);
    d.model = "TEST";
    d.bf16_flops = 1e15;
    d.fp32_flops = 1e14;
    d.hbm_gbps = 1000;
    d.memory_bytes = int64_t(80) << 30;
    d.sm_count = 100;
    t.devices.push_back(d);
  }
  for (int i = 0; i < n; ++i) {
    t.links.push_back(Link{i, (i + 1) % n, gbps, latency_ns, LinkKind::NvLink, 1});
    t.links.push_back(Link{(i + 1) % n, i, gbps, latency_ns, LinkKind::NvLink, 1});
  }
  return t;
}

// The first task of kind `op` in the plan's first program (a test that
// asks for one the plan lacks fails with the kind's name).
inline const Task& firstTaskOf(const Plan& plan, OpKind op) {
  for (const Task& t : plan.programs.at(0).tasks)
    if (t.op == op) return t;
  throw std::runtime_error("the plan has no task of kind " + std::string(toString(op)));
}

inline Task kernel(int id, int stream, double flops, int64_t bytes, Phase phase = Phase::Forward) {
  Task t;
  t.id = id;
  t.stream = stream;
  t.kind = TaskKind::Kernel;
  t.op = OpKind::Matmul;
  t.name = "k" + std::to_string(id);
  t.phase = phase;
  t.flops = flops;
  t.bytes_read = bytes;
  return t;
}

inline Task collective(int id, int stream, CollectiveOp op, int64_t bytes, const std::string& group) {
  Task t;
  t.id = id;
  t.stream = stream;
  t.kind = (op == CollectiveOp::Send || op == CollectiveOp::Recv) ? TaskKind::SendRecv : TaskKind::Collective;
  t.op = OpKind::AllReduce;
  t.name = std::string(toString(op)) + std::to_string(id);
  t.phase = Phase::Comm;
  CollectiveInfo ci;
  ci.op = op;
  ci.group = group;
  ci.bytes = bytes;
  t.collective = ci;
  return t;
}

// A plan where every rank runs `program` (one RankPlan for all ranks) and one
// group "world" holds every rank.
inline Plan uniformPlan(int world, RankPlan program) {
  Plan p;
  p.world_size = world;
  p.job.training.precision = Precision::BF16;
  ProcessGroup g{"world", {}};
  for (int r = 0; r < world; ++r) {
    g.ranks.push_back(r);
    program.ranks.push_back(r);
  }
  p.groups.push_back(g);
  p.programs.push_back(std::move(program));
  return p;
}

inline RankPlan twoStreamProgram() {
  RankPlan rp;
  rp.streams = {StreamInfo{0, StreamKind::Compute, "compute"}, StreamInfo{1, StreamKind::Comm, "comm"}};
  return rp;
}

}  // namespace tandem::sim::testing
