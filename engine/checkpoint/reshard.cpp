#include "engine/checkpoint/reshard.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <set>

#include "engine/numerics/bf16.h"
#include "engine/numerics/init.h"
#include "engine/passes/buckets.h"

namespace tandem::checkpoint {
namespace {

// A parameter's state, whole: values, fp32 master, Adam moments; and how
// many of each one's elements the saved ranks supplied.
struct WholeParam {
  std::vector<float> param, master, m, v;
  int64_t param_seen = 0, master_seen = 0, m_seen = 0, v_seen = 0;
};

// One rank's saved buffers by id, and element access through views.
class RankBytes {
 public:
  RankBytes(const RankPlan& program, std::vector<BufferBytes>* buffers) : program_(program) {
    for (BufferBytes& b : *buffers) by_id_[b.buffer] = &b.bytes;
  }
  // Whether `buffer` (or the buffer it is a view of) is saved.
  bool holds(int buffer) const { return buffer >= 0 && by_id_.count(root(buffer)) > 0; }
  void read(int buffer, int64_t first, int64_t count, float* out) const {
    const Buffer& b = program_.buffers.at(size_t(buffer));
    const std::byte* at = bytesAt(buffer, first, count);
    if (b.dtype == DType::BF16) {
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, at + 2 * i, 2);
        out[i] = bf16BitsToFloat(h);
      }
    } else if (b.dtype == DType::F32) {
      std::memcpy(out, at, size_t(count) * 4);
    } else {
      throw CheckpointError(fmt::format("resharding: buffer {} holds {}, not a floating-point type", b.name,
                                        toString(b.dtype)));
    }
  }
  void write(int buffer, int64_t first, int64_t count, const float* in) {
    const Buffer& b = program_.buffers.at(size_t(buffer));
    std::byte* at = const_cast<std::byte*>(bytesAt(buffer, first, count));
    if (b.dtype == DType::BF16) {
      for (int64_t i = 0; i < count; ++i) {
        const uint16_t h = floatToBf16Bits(in[i]);
        std::memcpy(at + 2 * i, &h, 2);
      }
    } else if (b.dtype == DType::F32) {
      std::memcpy(at, in, size_t(count) * 4);
    } else {
      throw CheckpointError(fmt::format("resharding: buffer {} holds {}, not a floating-point type", b.name,
                                        toString(b.dtype)));
    }
  }

 private:
  int root(int buffer) const {
    const Buffer& b = program_.buffers.at(size_t(buffer));
    return b.parent >= 0 ? b.parent : buffer;
  }
  const std::byte* bytesAt(int buffer, int64_t first, int64_t count) const {
    const Buffer& b = program_.buffers.at(size_t(buffer));
    const std::vector<std::byte>& bytes = *by_id_.at(root(buffer));
    const int64_t offset = (b.parent >= 0 ? b.parent_offset : 0) + first * dtypeSize(b.dtype);
    if (first < 0 || count < 0 || offset + count * dtypeSize(b.dtype) > int64_t(bytes.size()))
      throw CheckpointError(fmt::format("resharding: elements {}..{} of {} lie outside its saved bytes", first,
                                        first + count, b.name));
    return bytes.data() + offset;
  }
  const RankPlan& program_;
  std::map<int, std::vector<std::byte>*> by_id_;
};

// Where a parameter's parts live on a rank: its bucket's shard of it when
// the bucket is sharded (the range the rank owns, placed by its
// data-parallel place), else the whole parameter.
struct Placement {
  const GradBucket* bucket = nullptr;
  bool sharded = false;
  ShardSegment segment;  // sharded: the parameter's elements in this rank's shard
};

Placement placementOf(const Plan& plan, const RankPlan& program, const ParamInfo& p, int rank) {
  Placement out;
  out.bucket = &program.buckets.at(size_t(p.bucket));
  out.sharded = out.bucket->master_shard >= 0 || out.bucket->adam_m_shard >= 0 || out.bucket->param_shard >= 0;
  if (out.sharded) {
    const ShardRange range = shardOf(plan.job.dataParallelRank(rank), shardCount(plan.job),
                                     program.buffers.at(size_t(out.bucket->buffer)).elementCount());
    out.segment = segmentInShard(program, p, range);
  }
  return out;
}

// A parameter as the ranks of one tensor-parallel place hold it (its slice
// under tensor parallelism, which resharding keeps).
std::string keyOf(const JobSpec& job, const ParamInfo& p, int rank) {
  return p.split_dim >= 0 ? fmt::format("{}@tp{}", p.name, rank % job.parallel.tensor_parallel) : p.name;
}

std::map<std::string, WholeParam> gatherWhole(const Plan& plan, Snapshot snap) {
  std::map<std::string, WholeParam> whole;
  for (int r = 0; r < plan.world_size; ++r) {
    const RankPlan& program = plan.forRank(r);
    const RankBytes bytes(program, &snap.ranks.at(size_t(r)));
    // Replicas of a shard group (hybrid sharding) hold the same shards: the
    // first group's supply them.
    const bool first_group = plan.job.dataParallelRank(r) < shardCount(plan.job);
    for (const ParamInfo& p : program.params) {
      const int64_t n = program.buffers.at(size_t(p.param)).elementCount();
      WholeParam& w = whole[keyOf(plan.job, p, r)];
      for (auto* v : {&w.param, &w.master, &w.m, &w.v})
        if (v->empty()) v->assign(size_t(n), 0.0f);
      const Placement at = placementOf(plan, program, p, r);
      const ShardSegment& seg = at.segment;
      const int64_t count = seg.to - seg.from;
      // Part of a shard into the whole, or the whole from a replica (once).
      // A sharded optimizer's whole parameters are current only in the
      // rank's own shard of them (the others are gathered at the start of
      // the next step): from each rank its part.
      auto take = [&](int shard, int whole_buffer, std::vector<float>& into, int64_t& seen) {
        if (at.sharded && shard >= 0) {
          if (count <= 0 || !first_group) return;
          bytes.read(shard, seg.shard_offset, count, into.data() + seg.from);
          seen += count;
        } else if (at.sharded && whole_buffer >= 0) {
          if (count <= 0 || !first_group || !bytes.holds(whole_buffer)) return;
          bytes.read(whole_buffer, seg.from, count, into.data() + seg.from);
          seen += count;
        } else if (whole_buffer >= 0 && seen == 0 && bytes.holds(whole_buffer)) {
          bytes.read(whole_buffer, 0, n, into.data());
          seen = n;
        }
      };
      take(at.bucket->param_shard, at.bucket->param_shard >= 0 ? -1 : p.param, w.param, w.param_seen);
      take(at.bucket->master_shard, p.master != p.param ? p.master : -1, w.master, w.master_seen);
      take(at.bucket->adam_m_shard, p.adam_m, w.m, w.m_seen);
      take(at.bucket->adam_v_shard, p.adam_v, w.v, w.v_seen);
    }
  }
  // fp32 parameters are their own masters.
  for (auto& [name, w] : whole)
    if (w.master_seen == 0) {
      w.master = w.param;
      w.master_seen = w.param_seen;
    }
  for (const auto& [name, w] : whole) {
    const int64_t n = int64_t(w.param.size());
    for (const auto& [what, seen] : {std::pair{"values", w.param_seen}, std::pair{"master weights", w.master_seen},
                                     std::pair{"first moments", w.m_seen}, std::pair{"second moments", w.v_seen}})
      if (seen != n)
        throw CheckpointError(fmt::format("resharding: the checkpoint holds {} of {}'s {} {}, not all of them", seen,
                                          name, n, what));
  }
  return whole;
}

Snapshot scatterWhole(const Plan& plan, const std::map<std::string, WholeParam>& whole, const Snapshot& from) {
  Snapshot out;
  out.step = from.step;
  out.update_pending = false;
  out.ranks.resize(size_t(plan.world_size));
  for (int r = 0; r < plan.world_size; ++r) {
    const RankPlan& program = plan.forRank(r);
    for (int id : savedBuffers(program, /*update_pending=*/false)) {
      BufferBytes b;
      b.buffer = id;
      b.bytes.assign(size_t(program.buffers.at(size_t(id)).bytes), std::byte{0});
      out.ranks[size_t(r)].push_back(std::move(b));
    }
    RankBytes bytes(program, &out.ranks[size_t(r)]);
    for (const ParamInfo& p : program.params) {
      const auto it = whole.find(keyOf(plan.job, p, r));
      if (it == whole.end())
        throw CheckpointError(fmt::format("resharding: the checkpoint has no parameter {}", p.name));
      const WholeParam& w = it->second;
      const int64_t n = program.buffers.at(size_t(p.param)).elementCount();
      if (int64_t(w.param.size()) != n)
        throw CheckpointError(fmt::format("resharding: {} has {} elements in the checkpoint, {} in the job", p.name,
                                          w.param.size(), n));
      const Placement at = placementOf(plan, program, p, r);
      const ShardSegment& seg = at.segment;
      auto put = [&](int shard, int whole_buffer, const std::vector<float>& values) {
        if (at.sharded && shard >= 0) {
          if (seg.to > seg.from) bytes.write(shard, seg.shard_offset, seg.to - seg.from, values.data() + seg.from);
        } else if (whole_buffer >= 0 && bytes.holds(whole_buffer)) {
          bytes.write(whole_buffer, 0, n, values.data());
        }
      };
      put(at.bucket->param_shard, at.bucket->param_shard >= 0 ? -1 : p.param, w.param);
      put(at.bucket->master_shard, p.master != p.param ? p.master : -1, w.master);
      put(at.bucket->adam_m_shard, p.adam_m, w.m);
      put(at.bucket->adam_v_shard, p.adam_v, w.v);
    }
  }
  return out;
}

}  // namespace

std::string reshardRefusal(const JobSpec& saved, const Plan& plan) {
  const ParallelSpec &a = saved.parallel, &b = plan.job.parallel;
  if (a.tensor_parallel != b.tensor_parallel || a.pipeline_parallel != b.pipeline_parallel ||
      a.pipeline_chunks != b.pipeline_chunks || a.pipeline_layers != b.pipeline_layers ||
      a.context_parallel != b.context_parallel)
    return fmt::format("tensor, pipeline or context parallelism changed (TP {} PP {}x{} CP {} -> TP {} PP {}x{} CP {}): "
                       "their slices and stages would have to be split and joined across ranks, which is not done",
                       a.tensor_parallel, a.pipeline_parallel, a.pipeline_chunks, a.context_parallel,
                       b.tensor_parallel, b.pipeline_parallel, b.pipeline_chunks, b.context_parallel);
  if (saved.tokensPerStep() != plan.job.tokensPerStep())
    return fmt::format("the global batch changed ({} -> {} tokens per step: data_parallel x micro_batch x "
                       "grad_accum): the next steps would read other samples; keep the product and change the "
                       "micro-batch or the accumulation with the replicas",
                       saved.tokensPerStep(), plan.job.tokensPerStep());
  return "";
}

Snapshot reshard(const Plan& saved_plan, const Snapshot& snap, const Plan& plan) {
  if (const std::string why = reshardRefusal(saved_plan.job, plan); !why.empty())
    throw CheckpointError("resharding refused: " + why);
  if (snap.update_pending)
    throw CheckpointError("resharding refused: the checkpoint holds an optimizer update not yet applied "
                          "(schedule.optimizer_beside_forward); resume it with the layout it was written with");
  for (const std::string& state : snap.rank_state)
    if (!state.empty())
      throw CheckpointError("resharding refused: the checkpoint holds per-rank state outside the buffers (FP8 "
                            "delayed scaling's amax histories), which is kept per rank; resume it with the layout "
                            "it was written with");
  return scatterWhole(plan, gatherWhole(saved_plan, snap), snap);
}

}  // namespace tandem::checkpoint
