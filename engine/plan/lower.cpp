#include "engine/plan/lower.h"

#include <algorithm>
#include <map>

#include "engine/ir/cost.h"
#include "engine/memory/memory_plan.h"

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

// Inserts events for every cross-stream hazard. Hazards are tracked per
// buffer, and two buffers conflict when they share memory: a view and its
// parent (a gradient and its bucket, which the bucket's collective reads and
// writes whole), or two views of one parent whose byte ranges overlap. Two
// gradients of one bucket do not conflict.
class EventBuilder {
 public:
  // side_stream >= 0: the compute stream joins that stream's task k once it
  // has issued the side stream's task k + side_lag (see lowerGraph).
  EventBuilder(RankPlan& rp, int side_stream = -1, int side_lag = 1, bool join_per_micro_batch = false)
      : rp_(rp), side_stream_(side_stream), side_lag_(side_lag), join_per_micro_batch_(join_per_micro_batch) {
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

  bool overlap(int a, int b) const {
    const Buffer& x = rp_.buffers[a];
    const Buffer& y = rp_.buffers[b];
    const int64_t xo = x.parent >= 0 ? x.parent_offset : 0, yo = y.parent >= 0 ? y.parent_offset : 0;
    return xo < yo + y.bytes && yo < xo + x.bytes;
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
    std::vector<std::vector<int>> touched(rp_.buffers.size());  // root -> its buffers accessed so far
    auto conflicting = [&](int b, auto&& visit) {
      for (int x : touched[size_t(root(b))])
        if (overlap(x, b)) visit(state[size_t(x)]);
    };
    auto touch = [&](int b) {
      std::vector<int>& list = touched[size_t(root(b))];
      if (std::find(list.begin(), list.end(), b) == list.end()) list.push_back(b);
    };
    std::vector<int> side_issued;  // the side stream's tasks so far
    size_t side_joined = 0;        // how many of them the compute stream has joined
    int last_compute = -1;         // the compute stream's latest task so far
    int forward_micro_batch = -1;  // the latest micro-batch whose forward the compute stream began
    // Overlapped tensor-parallel collectives (engine/passes/tp_comm_overlap.h):
    // an all-gather's output whose first reader runs beside it, the
    // all-gather the next task on that reader's stream joins, and each
    // task's predecessor on its stream.
    std::map<int, int> gathered_by;  // buffer -> overlapped all-gather writing it, until its first reader
    std::map<int, int> join;         // stream -> overlapped all-gather its next task waits for
    std::vector<int> last_on_stream(rp_.streams.size(), -1), previous_on_stream(rp_.tasks.size(), -1);
    // Pipeline sends: nothing on the compute stream reads what they
    // produce, so nothing would ever wait for them, and the memory plan
    // would keep every sent buffer to the end of the step. The compute
    // stream joins each send once the next one is issued: one send in
    // flight beside the current one, as a blocking send would allow no
    // more, without making the compute stream wait for the latest.
    std::vector<int> sends_issued;
    size_t sends_joined = 0;
    // Gradients reduce-scattered every micro-batch: likewise nothing on the
    // compute stream reads a micro-batch's whole buckets after their
    // reduce-scatters (their shards are summed at the end of the step), so
    // the compute stream joins them in the next micro-batch's forward, and
    // the memory plan can give its activations their memory. It joins at
    // the second block's forward, not the first task: the last bucket's
    // reduce-scatter, issued as the backward ends, has the embedding and a
    // block to finish beside (else at the backward, for one-block models).
    int last_scatter = -1;
    int scatters_joined_at = -1;  // the latest micro-batch whose compute joined the scatters before it
    for (size_t i = 0; i < rp_.tasks.size(); ++i) {
      Task& t = rp_.tasks[i];
      previous_on_stream[i] = last_on_stream[size_t(t.stream)];
      last_on_stream[size_t(t.stream)] = int(i);
      int pipelined_read = -1;  // a buffer this task reads chunk by chunk beside its writer
      if (auto it = join.find(t.stream); it != join.end()) {
        dependOn(t, it->second);
        join.erase(it);
      }
      for (int b : t.reads)
        if (auto g = gathered_by.find(b); g != gathered_by.end()) {
          pipelined_read = b;
          join[t.stream] = g->second;
          gathered_by.erase(g);
          break;
        }
      const bool scatters_beside = t.attrs.overlapped && t.op == OpKind::ReduceScatter;
      if (scatters_beside) {
        // Starts with the GEMM that writes its input: after what ran before
        // that GEMM on its stream (its reads of the GEMM's inputs add the rest).
        pipelined_read = t.reads[0];
        const int writer = state[size_t(t.reads[0])].last_writer;
        dependOn(t, writer >= 0 ? previous_on_stream[size_t(writer)] : last_compute);
      }
      // The memory plan gives a transient buffer the memory of buffers whose
      // last use comes before its first in issue order. On another stream
      // it could be written before the compute stream is done with them
      // (an all-gather of persistent shards waits for nothing), so such a
      // task waits until the compute stream has issued everything before it.
      if (t.stream != 0 && writesTransient(t) && !scatters_beside) dependOn(t, last_compute);
      // The previous step's updates read only persistent buffers: nothing
      // to bound, and joining them early would hold the forward back.
      if (t.stream == side_stream_ && !t.attrs.from_previous_step) side_issued.push_back(int(i));
      if (t.stream == 0)
        while (side_joined + size_t(side_lag_) < side_issued.size()) dependOn(t, side_issued[side_joined++]);
      if (join_per_micro_batch_ && t.stream == 0 && t.micro_batch > scatters_joined_at &&
          ((t.phase == Phase::Forward && t.layer >= 1) || t.phase == Phase::Backward)) {
        scatters_joined_at = t.micro_batch;
        dependOn(t, last_scatter);
      }
      if (join_per_micro_batch_ && t.stream == 0 && t.phase == Phase::Forward && t.micro_batch > forward_micro_batch) {
        forward_micro_batch = t.micro_batch;
        if (side_joined < side_issued.size()) dependOn(t, side_issued.back());
        side_joined = side_issued.size();
      }
      for (int b : t.reads)
        if (b != pipelined_read) conflicting(b, [&](const Access& a) { dependOn(t, a.last_writer); });
      for (int b : t.writes)
        conflicting(b, [&](const Access& a) {
          dependOn(t, a.last_writer);
          for (const auto& [stream, reader] : a.readers) dependOn(t, reader);
        });
      std::sort(t.wait_events.begin(), t.wait_events.end());
      t.wait_events.erase(std::unique(t.wait_events.begin(), t.wait_events.end()), t.wait_events.end());
      for (int b : t.reads) {
        touch(b);
        state[size_t(b)].readers[t.stream] = int(i);
      }
      for (int b : t.writes) {
        touch(b);
        Access& a = state[size_t(b)];
        a.last_writer = int(i);
        a.readers.clear();
      }
      if (t.op == OpKind::Send) sends_issued.push_back(int(i));
      if (t.op == OpKind::ReduceScatter && t.stream != 0) last_scatter = int(i);
      if (t.stream == 0)
        while (sends_joined + 1 < sends_issued.size()) dependOn(t, sends_issued[sends_joined++]);
      if (t.stream == 0) last_compute = int(i);
      if (t.attrs.overlapped && t.op == OpKind::AllGather) gathered_by[t.writes[0]] = int(i);
    }
  }

  bool writesTransient(const Task& t) const {
    return std::any_of(t.writes.begin(), t.writes.end(),
                       [&](int b) { return !rp_.buffers[size_t(root(b))].persistent; });
  }

 private:
  RankPlan& rp_;
  int side_stream_;
  int side_lag_;
  bool join_per_micro_batch_;
  std::vector<std::vector<int>> waited_;  // [stream][other stream] -> position synced
  std::vector<int> position_;             // task -> position within its stream
};

}  // namespace

RankPlan lowerGraph(const Graph& g, std::vector<int> ranks, const LowerOptions& opt) {
  RankPlan rp;
  rp.ranks = std::move(ranks);
  rp.streams.push_back({0, StreamKind::Compute, "compute"});
  const bool has_comm = std::any_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) {
    return n.stream == StreamKind::Comm && n.stream_name.empty();
  });
  if (has_comm) rp.streams.push_back({1, StreamKind::Comm, "comm"});
  // Named streams, in order of first use.
  auto streamOf = [&](const Node& n) {
    if (n.stream_name.empty()) return n.stream == StreamKind::Comm ? 1 : 0;
    for (const StreamInfo& s : rp.streams)
      if (s.kind == n.stream && s.name == n.stream_name) return s.id;
    const int id = int(rp.streams.size());
    rp.streams.push_back({id, n.stream, n.stream_name});
    return id;
  };

  rp.buffers.reserve(g.tensors.size());
  for (const Tensor& t : g.tensors) rp.buffers.push_back(toBuffer(t));

  rp.tasks.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    Task t;
    t.id = int(i);
    t.stream = streamOf(n);
    t.op = n.op;
    t.kind = n.op == OpKind::Send || n.op == OpKind::Recv ? TaskKind::SendRecv
             : n.collective                               ? TaskKind::Collective
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
  int side_stream = -1;
  if (opt.weight_gradient_stream) {
    // Weight gradients are off the backward's critical path (only the
    // bucket's collective and the optimizer wait for them): on a compute
    // stream of their own they fill the SMs the data-gradient chain leaves
    // idle. Only tasks whose outputs are all persistent, or gradient
    // buckets, move there; what they read stays live until the compute
    // stream joins them. A transient gradient bucket (sharded parameters)
    // is written there only once the compute stream has issued everything
    // before the task (the rule in EventBuilder::run).
    auto stableOutput = [&](int b) {
      const Buffer& x = rp.buffers[size_t(b)];
      const Buffer& root = x.parent >= 0 ? rp.buffers[size_t(x.parent)] : x;
      return root.persistent || root.category == TensorCategory::Gradient;
    };
    for (Task& t : rp.tasks)
      if (t.op == OpKind::MatmulBwdWeight && t.stream == 0 &&
          std::all_of(t.writes.begin(), t.writes.end(), stableOutput)) {
        if (side_stream < 0) {
          side_stream = int(rp.streams.size());
          rp.streams.push_back({side_stream, StreamKind::Compute, "compute.wgrad"});
        }
        t.stream = side_stream;
      }
  }
  // The previous step's updates (schedule.optimizer_beside_forward) run
  // beside the forward on the weight gradients' stream, which is idle then,
  // or on a stream of their own.
  for (Task& t : rp.tasks)
    if (t.op == OpKind::AdamW && t.attrs.from_previous_step) {
      if (side_stream < 0) {
        side_stream = int(rp.streams.size());
        rp.streams.push_back({side_stream, StreamKind::Compute, "compute.optimizer"});
      }
      t.stream = side_stream;
    }
  EventBuilder(rp, side_stream, std::max(1, opt.weight_gradient_lag), opt.join_side_stream_per_micro_batch).run();

  for (const auto& p : g.params)
    rp.params.push_back(
        {p.name, p.param, p.grad, p.master, p.adam_m, p.adam_v, p.weight_decay, p.bucket, p.split_dim, p.split_blocks,
         p.copies});
  for (size_t b = 0; b < g.buckets.size(); ++b) {
    GradBucket gb;
    gb.id = int(b);
    gb.buffer = g.buckets[b].flat;
    gb.bytes = g.tensor(gb.buffer).bytes();
    gb.params = g.buckets[b].params;
    gb.param_buffer = g.buckets[b].param_flat;
    gb.param_shard = g.buckets[b].param_shard;
    gb.grad_shard = g.buckets[b].grad_shard;
    gb.master_shard = g.buckets[b].master_shard;
    gb.adam_m_shard = g.buckets[b].adam_m_shard;
    gb.adam_v_shard = g.buckets[b].adam_v_shard;
    rp.buckets.push_back(std::move(gb));
  }
  rp.memory = planMemory(rp);
  return rp;
}

}  // namespace tandem
