#include "engine/lower.h"

#include <algorithm>
#include <map>

#include "engine/cost.h"
#include "engine/memory_plan.h"

namespace tandem {
namespace {

Buffer toBuffer(const Tensor& t) {
  Buffer b;
  b.id = t.id;
  b.name = t.name;
  b.dtype = t.dtype;
  b.shape = t.shape;
  b.bytes = t.bytes();
  b.category = t.category;
  b.layer = t.layer;
  b.parent = t.parent;
  b.parent_offset = t.parent_offset_bytes;
  b.persistent = t.persistent;
  return b;
}

// Inserts events for every cross-stream hazard. Hazards are tracked on root
// buffers (a gradient view and its bucket are the same memory).
class EventBuilder {
 public:
  EventBuilder(RankPlan& rp) : rp_(rp) {
    const size_t streams = rp.streams.size();
    waited_.assign(streams, std::vector<int>(streams, -1));
    position_.assign(rp.tasks.size(), 0);
    std::vector<int> count(streams, 0);
    for (size_t i = 0; i < rp.tasks.size(); ++i) position_[i] = count[rp.tasks[i].stream]++;
  }

  int root(int buffer) const {
    const Buffer& b = rp_.buffers[buffer];
    return b.parent >= 0 ? b.parent : buffer;
  }

  void dependOn(Task& t, int other) {
    if (other < 0) return;
    const int s = t.stream, so = rp_.tasks[other].stream;
    if (s == so) return;  // same stream: FIFO order suffices
    if (position_[other] <= waited_[s][so]) return;
    Task& src = rp_.tasks[other];
    if (src.record_event < 0) src.record_event = rp_.num_events++;
    t.wait_events.push_back(src.record_event);
    waited_[s][so] = position_[other];
  }

  void run() {
    struct Access {
      int last_writer = -1;
      std::map<int, int> readers;  // stream -> last reader since the last write
    };
    std::vector<Access> state(rp_.buffers.size());
    for (size_t i = 0; i < rp_.tasks.size(); ++i) {
      Task& t = rp_.tasks[i];
      for (int b : t.reads) dependOn(t, state[root(b)].last_writer);
      for (int b : t.writes) {
        Access& a = state[root(b)];
        dependOn(t, a.last_writer);
        for (const auto& [stream, reader] : a.readers) dependOn(t, reader);
      }
      std::sort(t.wait_events.begin(), t.wait_events.end());
      t.wait_events.erase(std::unique(t.wait_events.begin(), t.wait_events.end()), t.wait_events.end());
      for (int b : t.reads) state[root(b)].readers[t.stream] = int(i);
      for (int b : t.writes) {
        Access& a = state[root(b)];
        a.last_writer = int(i);
        a.readers.clear();
      }
    }
  }

 private:
  RankPlan& rp_;
  std::vector<std::vector<int>> waited_;  // [stream][other stream] -> position synced
  std::vector<int> position_;             // task -> position within its stream
};

}  // namespace

RankPlan lowerGraph(const Graph& g, std::vector<int> ranks) {
  RankPlan rp;
  rp.ranks = std::move(ranks);
  rp.streams.push_back({0, StreamKind::Compute, "compute"});
  const bool has_comm = std::any_of(g.nodes.begin(), g.nodes.end(),
                                    [](const Node& n) { return n.stream == StreamKind::Comm; });
  if (has_comm) rp.streams.push_back({1, StreamKind::Comm, "comm"});

  rp.buffers.reserve(g.tensors.size());
  for (const Tensor& t : g.tensors) rp.buffers.push_back(toBuffer(t));

  rp.tasks.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    Task t;
    t.id = int(i);
    t.stream = n.stream == StreamKind::Comm ? 1 : 0;
    t.op = n.op;
    t.kind = n.collective ? TaskKind::Collective
             : n.op == OpKind::LoadBatch ? TaskKind::Memcpy
                                         : TaskKind::Kernel;
    t.name = n.name;
    t.phase = n.phase;
    t.layer = n.layer;
    t.micro_batch = n.micro_batch;
    const OpCost c = costOf(g, n);
    t.flops = c.flops;
    t.bytes_read = c.bytes_read;
    t.bytes_written = c.bytes_written;
    t.reads = n.inputs;
    t.writes = n.outputs;
    t.attrs = n.attrs;
    t.collective = n.collective;
    rp.tasks.push_back(std::move(t));
  }
  EventBuilder(rp).run();

  for (const auto& p : g.params)
    rp.params.push_back({p.name, p.param, p.grad, p.master, p.adam_m, p.adam_v, p.weight_decay, p.bucket});
  for (size_t b = 0; b < g.buckets.size(); ++b) {
    GradBucket gb;
    gb.id = int(b);
    gb.buffer = g.buckets[b].flat;
    gb.bytes = g.tensor(gb.buffer).bytes();
    gb.params = g.buckets[b].params;
    gb.param_buffer = g.buckets[b].param_flat;
    gb.master_shard = g.buckets[b].master_shard;
    gb.adam_m_shard = g.buckets[b].adam_m_shard;
    gb.adam_v_shard = g.buckets[b].adam_v_shard;
    rp.buckets.push_back(std::move(gb));
  }
  rp.memory = planMemory(rp);
  return rp;
}

}  // namespace tandem
