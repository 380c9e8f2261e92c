// Planner structure: parameter count, recompute, buckets, events, memory plan.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/cpu/executor.h"
#include "engine/memory/memory_plan.h"
#include "engine/passes/fusion.h"
#include "engine/plan/gpu_support.h"
#include "engine/plan/plan_json.h"
#include "engine/plan/planner.h"
#include "test_jobs.h"

using namespace tandem;

namespace {

// Independent of the planner's own checker: every pair of root buffers whose
// live ranges intersect must occupy disjoint bytes, and all lie in the arena.
int countOverlaps(const RankPlan& rp) {
  std::vector<const Buffer*> roots;
  for (const auto& b : rp.buffers)
    if (b.parent < 0 && b.first_use >= 0) roots.push_back(&b);
  int conflicts = 0;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Buffer& a = *roots[i];
    if (a.offset < 0 || a.offset + a.bytes > rp.memory.arena_bytes) ++conflicts;
    for (size_t j = i + 1; j < roots.size(); ++j) {
      const Buffer& b = *roots[j];
      const bool live_together = a.first_use <= b.last_use && b.first_use <= a.last_use;
      const bool share_bytes = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      if (live_together && share_bytes) ++conflicts;
    }
  }
  return conflicts;
}

Plan planWith(JobSpec job, RecomputePolicy policy) {
  job.recompute.policy = policy;
  return buildPlan(job);
}

}  // namespace

TEST_CASE("GPT-2 124M has the published parameter count", "[planner]") {
  const Plan plan = buildPlan(defaultJob());
  CHECK(plan.summary.parameters == 124475904);
  CHECK(plan.world_size == 8);
  CHECK(plan.summary.tokens_per_step == 16 * 1024 * 8);
}

TEST_CASE("Llama 2 7B and 70B have the published parameter counts; their blocks", "[planner][llama]") {
  // Meta's figures: 6,738,415,616 and 68,976,648,192 (untied embeddings,
  // no biases; 70B with 8 key/value heads).
  JobSpec seven = parseJob(std::string(builtinJobText("llama2-7b")), "llama2-7b");
  seven.parallel = ParallelSpec{};  // one rank: the count does not depend on the layout
  const Plan plan = buildPlan(seven);
  CHECK(plan.summary.parameters == 6738415616LL);
  const Plan seventy = buildPlan(parseJob(std::string(builtinJobText("llama2-70b")), "llama2-70b"));
  CHECK(seventy.summary.parameters == 68976648192LL);
  // llama-124m, GPT-2 small's size: 2 x 32000 x 768 embeddings and LM head,
  // 12 blocks of qkv 768 x (12 + 8) x 64, proj 768 x 768, gate/up 768 x 4096,
  // down 2048 x 768 and two norms of 768, and the final norm.
  const Plan small = buildPlan(parseJob(std::string(builtinJobText("llama-124m")), "llama-124m"));
  CHECK(small.summary.parameters ==
        2LL * 32000 * 768 + 12LL * (768 * 1280 + 768 * 768 + 768 * 4096 + 2048 * 768 + 2 * 768) + 768);
  CHECK(small.summary.parameters == 124668672LL);
  // A block: two RMSNorms, grouped-query attention, SwiGLU; no LayerNorm,
  // GELU, position table or bias.
  seven.model.layers = 2;
  seven.model.kv_heads = 8;
  const Plan two_blocks = buildPlan(seven);
  const RankPlan& rp = two_blocks.programs[0];
  auto count = [&](OpKind op, Phase phase) {
    return std::count_if(rp.tasks.begin(), rp.tasks.end(),
                         [&](const Task& t) { return t.op == op && t.phase == phase; });
  };
  const int accum = seven.training.grad_accum;
  CHECK(count(OpKind::RmsNorm, Phase::Forward) == (2 * 2 + 1) * accum);
  CHECK(count(OpKind::SwiGlu, Phase::Forward) == 2 * accum);
  CHECK(count(OpKind::SwiGlu, Phase::Recompute) == 2 * accum);  // selective: the MLP's activation again
  CHECK(count(OpKind::LayerNorm, Phase::Forward) == 0);
  CHECK(count(OpKind::Gelu, Phase::Forward) == 0);
  for (const Task& t : rp.tasks) {
    INFO(t.name);
    if (t.op == OpKind::Attention) CHECK(t.attrs.kv_heads == 8);
    if (t.op == OpKind::Matmul) CHECK_FALSE(t.attrs.has_bias);
    if (t.op == OpKind::Embedding) CHECK(t.reads.size() == 2);
  }
  for (const ParamInfo& p : rp.params) {
    INFO(p.name);
    CHECK(p.name.find("bias") == std::string::npos);
    CHECK(p.name != "wpe");
    if (p.name == "layer0.attn.qkv.weight")  // 32 query heads and 2 x 8 key/value heads of 128
      CHECK(rp.buffers[size_t(p.param)].elementCount() == (32 + 2 * 8) * 128 * 4096);
  }
}

TEST_CASE("Every buffer a task touches has a live range covering the task", "[planner]") {
  const Plan plan = buildPlan(test::microJob(2, 2, 2));
  const RankPlan& rp = plan.programs[0];
  for (const Task& t : rp.tasks) {
    for (int b : t.reads) {
      const Buffer& buf = rp.buffers[b];
      const Buffer& root = buf.parent >= 0 ? rp.buffers[buf.parent] : buf;
      INFO(t.name << " reads " << buf.name);
      CHECK(root.first_use <= t.id);
      CHECK(root.last_use >= t.id);
    }
  }
}

TEST_CASE("Memory plans never overlap two live buffers", "[planner][memory]") {
  for (RecomputePolicy p :
       {RecomputePolicy::None, RecomputePolicy::Selective, RecomputePolicy::Full, RecomputePolicy::Attention}) {
    for (const JobSpec& job : {test::microJob(2, 2, 2), test::microJob(4, 1, 1), defaultJob()}) {
      const Plan plan = planWith(job, p);
      INFO(job.name << " recompute " << toString(p));
      CHECK(countOverlaps(plan.programs[0]) == 0);
      CHECK(checkMemoryPlan(plan.programs[0]).empty());
    }
  }
}

TEST_CASE("Memory peak is within 10% of the lower bound on GPT-2 shapes", "[planner][memory]") {
  struct Shape {
    const char* name;
    int layers, hidden, heads;
  };
  for (const Shape& s : {Shape{"124M", 12, 768, 12}, Shape{"350M", 24, 1024, 16}, Shape{"1.5B", 48, 1600, 25}}) {
    for (RecomputePolicy p : {RecomputePolicy::None, RecomputePolicy::Selective, RecomputePolicy::Full}) {
      const Plan plan = planWith(test::gpt2Shape(s.layers, s.hidden, s.heads), p);
      const MemoryPlan& m = plan.programs[0].memory;
      INFO(s.name << " " << toString(p) << " arena " << m.arena_bytes << " lower bound " << m.lower_bound_bytes);
      CHECK(m.arena_bytes >= m.lower_bound_bytes);
      CHECK(double(m.arena_bytes) <= 1.10 * double(m.lower_bound_bytes));
    }
  }
}

TEST_CASE("Recompute lowers the predicted activation peak: full < selective < none", "[planner][recompute]") {
  const JobSpec job = defaultJob();
  const int64_t none = planWith(job, RecomputePolicy::None).programs[0].memory.activation_peak_bytes;
  const int64_t sel = planWith(job, RecomputePolicy::Selective).programs[0].memory.activation_peak_bytes;
  const int64_t full = planWith(job, RecomputePolicy::Full).programs[0].memory.activation_peak_bytes;
  INFO("none " << none << " selective " << sel << " full " << full);
  CHECK(full < sel);
  CHECK(sel < none);
}

TEST_CASE("Recompute decisions report kept, saved and extra work per layer", "[planner][recompute]") {
  JobSpec job = defaultJob();
  job.recompute.policy = RecomputePolicy::None;
  job.recompute.per_layer[3] = RecomputePolicy::Full;
  job.recompute.per_layer[5] = RecomputePolicy::Selective;
  const Plan plan = buildPlan(job);
  REQUIRE(plan.recompute.size() == 12);
  const auto& none = plan.recompute[0];
  const auto& full = plan.recompute[3];
  const auto& sel = plan.recompute[5];
  CHECK(none.bytes_saved == 0);
  CHECK(none.extra_flops == 0);
  CHECK(full.bytes_kept + full.bytes_saved == none.bytes_kept);
  CHECK(sel.bytes_kept + sel.bytes_saved == none.bytes_kept);
  CHECK(full.bytes_saved > sel.bytes_saved);
  CHECK(sel.bytes_saved > 0);
  CHECK(full.extra_flops > sel.extra_flops);
  CHECK(sel.extra_flops > 0);
  // Recompute tasks exist only for the recomputed layers and precede the
  // backward tasks that read their outputs.
  const RankPlan& rp = plan.programs[0];
  std::map<int, int> first_reader;
  for (const Task& t : rp.tasks) {
    if (t.phase == Phase::Recompute) {
      const bool recomputed_layer = t.layer == 3 || t.layer == 5;
      CHECK(recomputed_layer);
      for (int b : t.writes) first_reader.emplace(b, -1);
    } else if (t.phase == Phase::Backward) {
      for (int b : t.reads)
        if (auto it = first_reader.find(b); it != first_reader.end() && it->second < 0) it->second = t.id;
    }
  }
  int used = 0;
  for (const Task& t : rp.tasks)
    if (t.phase == Phase::Recompute)
      for (int b : t.writes)
        if (first_reader[b] >= 0) {
          CHECK(first_reader[b] > t.id);
          ++used;
        }
  CHECK(used > 0);
}

TEST_CASE("Data parallel: one all-reduce per bucket, after the last micro-batch, joined by events",
          "[planner][dp]") {
  const Plan plan = buildPlan(test::microJob(2, 2, 3));
  const RankPlan& rp = plan.programs[0];
  // compute, comm, and the weight gradients' compute stream
  REQUIRE(rp.streams.size() == 3);
  REQUIRE(rp.streams[1].kind == StreamKind::Comm);
  REQUIRE(rp.buckets.size() >= 3);
  int all_reduces = 0;
  int first_last_mb_task = -1;
  for (const Task& t : rp.tasks)
    if (t.micro_batch == 2 && first_last_mb_task < 0) first_last_mb_task = t.id;
  std::vector<int> recorder_of(rp.num_events, -1);
  for (const Task& t : rp.tasks)
    if (t.record_event >= 0) recorder_of[t.record_event] = t.id;
  std::map<int, int> comm_synced_upto;  // producer stream -> latest task the comm stream waited for
  for (const Task& t : rp.tasks) {
    if (t.op != OpKind::AllReduce) continue;
    ++all_reduces;
    CHECK(t.stream == 1);
    CHECK(t.id > first_last_mb_task);
    REQUIRE(t.collective.has_value());
    CHECK(t.collective->group == "dp");
    CHECK(t.collective->reduce == ReduceOp::Avg);
    // Every producer of the bucket's gradients (on either compute stream)
    // has run before the comm stream's latest wait on that stream (the comm
    // stream is FIFO, so an earlier all-reduce's wait also covers this one;
    // a stream's tasks finish in order).
    for (int e : t.wait_events) {
      int& upto = comm_synced_upto[rp.tasks[size_t(recorder_of[e])].stream];
      upto = std::max(upto, recorder_of[e]);
    }
    REQUIRE(!comm_synced_upto.empty());
    for (const Task& w : rp.tasks) {
      if (w.stream == 1 || w.id >= t.id) continue;
      for (int b : w.writes) {
        const int root = rp.buffers[b].parent >= 0 ? rp.buffers[b].parent : b;
        if (root != t.reads[0]) continue;
        INFO(w.name << " on stream " << w.stream << " before " << t.name);
        REQUIRE(comm_synced_upto.count(w.stream) == 1);
        CHECK(w.id <= comm_synced_upto[w.stream]);
      }
    }
  }
  CHECK(all_reduces == int(rp.buckets.size()));
  // The optimizer waits for communication.
  for (const Task& t : rp.tasks)
    if (t.op == OpKind::GradNorm) CHECK(!t.wait_events.empty());
}

TEST_CASE("Sharded optimizer: reduce-scatter, sharded norm and AdamW, all-gathers where the forward needs them",
          "[planner][dp][shard]") {
  for (int dp : {2, 3}) {
    JobSpec job = test::microJob(2, dp, 2);
    job.parallel.shard_optimizer = true;
    const Plan plan = buildPlan(job);
    const RankPlan& rp = plan.programs[0];
    const int n = int(rp.buckets.size());
    REQUIRE(n >= 3);
    std::map<int, int> gather_of_bucket;  // param flat buffer -> all-gather task index
    int reduce_scatters = 0, first_forward = -1, grad_norm = -1, norm_sum = -1;
    for (size_t i = 0; i < rp.tasks.size(); ++i) {
      const Task& t = rp.tasks[i];
      INFO("dp " << dp << " task " << t.name);
      CHECK((t.op != OpKind::AllReduce || t.name == "comm.allreduce.grad_norm"));
      if (t.phase == Phase::Forward && first_forward < 0) first_forward = int(i);
      if (t.op == OpKind::ReduceScatter) {
        ++reduce_scatters;
        CHECK(t.attrs.shards == dp);
        CHECK(rp.buffers[t.reads[0]].elementCount() % dp == 0);
        // Each shard starts on a 256-byte boundary.
        CHECK((rp.buffers[t.reads[0]].bytes / dp) % 256 == 0);
      }
      if (t.op == OpKind::AllGather) {
        CHECK(t.stream == 1);
        REQUIRE(t.collective.has_value());
        CHECK(t.collective->op == CollectiveOp::AllGather);
        if (t.reads[0] == t.writes[0]) gather_of_bucket[t.reads[0]] = int(i);  // not the embedding gradient's
      }
      if (t.op == OpKind::GradNorm) {
        grad_norm = int(i);
        CHECK(t.attrs.shards == dp);
      }
      if (t.name == "comm.allreduce.grad_norm") {
        norm_sum = int(i);
        CHECK(t.collective->reduce == ReduceOp::Sum);
      }
      if (t.op == OpKind::AdamW) CHECK((t.attrs.shards == dp && norm_sum >= 0 && int(i) > norm_sum));
    }
    CHECK(reduce_scatters == n);
    CHECK((grad_norm >= 0 && norm_sum == grad_norm + 1));
    REQUIRE(int(gather_of_bucket.size()) == n);
    // Every parameter is a view into its bucket's flat parameter buffer, laid
    // out like the gradients; all buckets but the last-completed one are
    // gathered before the first forward task, that one after its AdamW.
    for (const ParamInfo& p : rp.params) {
      const Buffer& param = rp.buffers[p.param];
      const Buffer& grad = rp.buffers[p.grad];
      REQUIRE(param.parent >= 0);
      CHECK(param.parent_offset / dtypeSize(param.dtype) == grad.parent_offset / dtypeSize(grad.dtype));
      REQUIRE(gather_of_bucket.count(param.parent) == 1);
      const int at = gather_of_bucket[param.parent];
      if (p.bucket == n - 1)
        CHECK(at > grad_norm);
      else
        CHECK(at < first_forward);
    }
  }
}

TEST_CASE("Sharded optimizer: the tied embedding's bucket is reduce-scattered after the LM head, its rows from "
          "a gathered input gradient",
          "[planner][dp][shard]") {
  auto micro = [](int accum) {
    JobSpec j = test::microJob(2, 2, accum);
    j.model.vocab = 64;  // wte + wpe (1152 elements) larger than the gathered gradient (512)
    j.parallel.shard_optimizer = true;
    j.comm.gather_embedding_gradient = true;
    return j;
  };
  for (int accum : {1, 2}) {
    const JobSpec job = micro(accum);
    const Plan plan = buildPlan(job);
    const RankPlan& rp = plan.programs[0];
    INFO("accumulation " << accum);
    // The last bucket holds exactly wte and wpe.
    const GradBucket& last = rp.buckets.back();
    std::set<std::string> names;
    for (int p : last.params) names.insert(rp.params[size_t(p)].name);
    CHECK(names == std::set<std::string>{"wte", "wpe"});
    int scatter = -1, lm_head_weight = -1, gather = -1, dy_done = -1, embedding = -1, norm = -1;
    for (size_t i = 0; i < rp.tasks.size(); ++i) {
      const Task& t = rp.tasks[i];
      const bool last_mb = t.micro_batch == accum - 1;
      if (t.op == OpKind::ReduceScatter && t.reads[0] == last.buffer) scatter = int(i);
      if (t.name == fmt::format("lm_head.bwd_weight.mb{}", accum - 1)) lm_head_weight = int(i);
      if (t.op == OpKind::AllGather && t.reads[0] != t.writes[0]) gather = int(i);
      if (t.op == OpKind::EmbeddingBwd && last_mb) embedding = int(i);
      if (t.op == OpKind::GradNorm) norm = int(i);
    }
    REQUIRE((scatter >= 0 && lm_head_weight >= 0 && gather >= 0 && embedding >= 0 && norm >= 0));
    const Task& e = rp.tasks[size_t(embedding)];
    const Task& ag = rp.tasks[size_t(gather)];
    for (size_t i = 0; i < size_t(embedding); ++i)
      for (int w : rp.tasks[i].writes)
        if (w == ag.reads[0]) dy_done = int(i);
    // The reduce-scatter follows the LM head's weight gradient (the last
    // earlier contribution), long before the embedding backward; the
    // all-gather follows the task that finishes the embedding's input
    // gradient, and the embedding backward reads what it gathered.
    CHECK(scatter == lm_head_weight + 1);
    CHECK(gather == dy_done + 1);
    CHECK(gather < embedding);
    CHECK(e.attrs.shards == 2);
    CHECK(e.reads[0] == ag.writes[0]);
    CHECK(rp.buffers[ag.writes[0]].elementCount() == 2 * rp.buffers[ag.reads[0]].elementCount());
    CHECK(ag.collective->bytes == rp.buffers[ag.writes[0]].bytes);
    // Earlier micro-batches' embedding backwards are the plain kind.
    for (const Task& t : rp.tasks)
      if (t.op == OpKind::EmbeddingBwd && t.micro_batch != accum - 1) CHECK(t.attrs.shards == 0);
    // The embedding backward waits for the reduce-scatter (it writes into
    // the shard the collective produces) and the norm for the embedding.
    CHECK(!e.wait_events.empty());
    CHECK(embedding < norm);
  }
  // Unchanged when switched off, without sharding, or with untied embeddings.
  auto gathered = [](const JobSpec& j) {
    const Plan p = buildPlan(j);
    return std::any_of(p.programs[0].tasks.begin(), p.programs[0].tasks.end(),
                       [](const Task& t) { return t.op == OpKind::EmbeddingBwd && t.attrs.shards > 1; });
  };
  JobSpec off = micro(1);
  CHECK(gathered(off));
  off.comm.gather_embedding_gradient = false;
  CHECK_FALSE(gathered(off));
  JobSpec whole = micro(1);
  whole.parallel.shard_optimizer = false;
  CHECK_FALSE(gathered(whole));
  JobSpec untied = micro(1);
  untied.model.tied_embeddings = false;
  CHECK_FALSE(gathered(untied));
  JobSpec small_vocab = micro(1);
  small_vocab.model.vocab = 16;  // the gathered gradient (512) would exceed wte + wpe (384)
  CHECK_FALSE(gathered(small_vocab));
  // GPT-2 124M, micro-batch 16: gathered on 2 ranks (50 MB < 79 MB), not on 8 (201 MB).
  JobSpec gpt2 = defaultJob();
  gpt2.training.micro_batch = 16;
  gpt2.training.precision = Precision::BF16;
  gpt2.parallel.shard_optimizer = true;
  gpt2.comm.gather_embedding_gradient = true;
  gpt2.parallel.data_parallel = 2;
  CHECK(gathered(gpt2));
  gpt2.parallel.data_parallel = 8;
  CHECK_FALSE(gathered(gpt2));
}

TEST_CASE("Sharded optimizer keeps 1/ranks of the master weights and moments per rank", "[planner][dp][shard]") {
  for (Precision prec : {Precision::FP32, Precision::BF16}) {
    JobSpec whole = defaultJob();  // GPT-2 124M, data parallel 8
    whole.training.precision = prec;
    JobSpec sharded = whole;
    sharded.parallel.shard_optimizer = true;
    auto bytesOf = [](const Plan& p, TensorCategory cat) {
      int64_t total = 0;
      for (const Buffer& b : p.programs[0].buffers)
        if (b.category == cat && b.parent < 0 && b.offset >= 0) total += b.bytes;
      return total;
    };
    const Plan a = buildPlan(whole), b = buildPlan(sharded);
    const int dp = whole.parallel.data_parallel;
    INFO(toString(prec));
    for (TensorCategory cat : {TensorCategory::OptimizerState, TensorCategory::MasterWeight}) {
      const int64_t full = bytesOf(a, cat), part = bytesOf(b, cat);
      if (cat == TensorCategory::MasterWeight && prec == Precision::FP32) {
        CHECK(full == 0);  // fp32 parameters are their own master weights
        CHECK(part == 0);
        continue;
      }
      // Padding adds at most 128 elements per rank and bucket.
      CHECK(part * dp >= full);
      CHECK(part * dp <= full + int64_t(b.programs[0].buckets.size()) * dp * 128 * 4 * 2);
    }
    CHECK(b.programs[0].memory.arena_bytes < a.programs[0].memory.arena_bytes);
    for (const ParamInfo& p : b.programs[0].params) {
      CHECK(p.adam_m == -1);
      CHECK(p.adam_v == -1);
      CHECK(p.master == (prec == Precision::BF16 ? -1 : p.param));
    }
  }
}

TEST_CASE("Sharded gradients (ZeRO-2) keep only a shard of each gradient beyond its reduction", "[planner][dp][shard]") {
  JobSpec one = defaultJob();  // GPT-2 124M, data parallel 8, bf16
  one.parallel.shard_optimizer = true;
  JobSpec two = one;
  two.parallel.shard_gradients = true;
  auto arena = [](const JobSpec& j) { return buildPlan(j).programs[0].memory.arena_bytes; };
  auto gib = [](int64_t b) { return double(b) / double(int64_t(1) << 30); };
  // One micro-batch: whole gradients live only through the backward.
  const int64_t zero1 = arena(one), zero2 = arena(two);
  INFO("accumulation 1: ZeRO-1 " << gib(zero1) << " GiB, ZeRO-2 " << gib(zero2) << " GiB");
  CHECK(zero2 < zero1);
  // Two micro-batches: only with each micro-batch's gradients reduced (the
  // compute stream joining the reductions in the next micro-batch's
  // forward, so the memory is reused for its activations).
  one.training.grad_accum = two.training.grad_accum = 2;
  two.comm.reduce_every_micro_batch = true;
  const int64_t zero1_accum = arena(one), zero2_accum = arena(two);
  INFO("accumulation 2: ZeRO-1 " << gib(zero1_accum) << " GiB, ZeRO-2 reduced every micro-batch "
                                 << gib(zero2_accum) << " GiB");
  CHECK(zero2_accum < zero1_accum);
  CHECK(buildPlan(two).programs[0].buckets.front().param_shard == -1);  // the parameters stay whole
}

TEST_CASE("Gradient buckets follow completion order and the size limits", "[planner][dp]") {
  JobSpec job = defaultJob();
  const Plan plan = buildPlan(job);
  const RankPlan& rp = plan.programs[0];
  REQUIRE(rp.buckets.size() > 2);
  const bool first_small = double(rp.buckets[0].bytes) <= job.comm.first_bucket_mib * 1048576.0 ||
                           rp.buckets[0].params.size() == 1;
  CHECK(first_small);
  // Buckets list gradients in the order the backward completes them: the
  // final LayerNorm first, the embeddings last.
  CHECK(rp.params[rp.buckets.front().params.front()].name.rfind("final.ln", 0) == 0);
  std::map<int, int> completes;  // gradient buffer -> last task writing it
  for (const Task& t : rp.tasks)
    for (int b : t.writes) completes[b] = t.id;
  int previous = -1;
  for (const auto& bucket : rp.buckets)
    for (int p : bucket.params) {
      const int done = completes.at(rp.params[p].grad);
      CHECK(done >= previous);
      previous = done;
    }
  int64_t total = 0;
  for (const auto& b : rp.buckets) total += b.bytes;
  CHECK(total == plan.summary.parameters * 2);  // bf16 gradients
  // Gradients finished by the same task share a bucket: the embedding
  // backward finishes wte and wpe, so the last bucket holds both (and is
  // larger than the bucket cap because of wte alone).
  for (size_t b = 1; b < rp.buckets.size(); ++b) {
    const int last_of_previous = completes.at(rp.params[rp.buckets[b - 1].params.back()].grad);
    const int first_of_this = completes.at(rp.params[rp.buckets[b].params.front()].grad);
    CHECK(last_of_previous != first_of_this);
  }
  std::vector<std::string> last_bucket;
  for (int p : rp.buckets.back().params) last_bucket.push_back(rp.params[p].name);
  std::sort(last_bucket.begin(), last_bucket.end());
  CHECK(last_bucket == std::vector<std::string>{"wpe", "wte"});
  CHECK(double(rp.buckets.back().bytes) > job.comm.bucket_mib * 1048576.0);
}

TEST_CASE("Fusion: every GELU in its GEMM, every layernorm after a residual add in the add's kernel, on GPT-2 124M",
          "[planner][fusion]") {
  JobSpec job = defaultJob();
  job.parallel.data_parallel = 1;
  job.schedule.residual_in_gemm = false;  // the residual adds stay adds, so their layernorms join them
  const Plan plan = buildPlan(job);
  const RankPlan& rp = plan.programs[0];
  int gelu = 0, gelu_bwd = 0, fused = 0, early_dgelu = 0, add_ln = 0;
  for (const Task& t : rp.tasks) {
    gelu += t.op == OpKind::Gelu;
    gelu_bwd += t.op == OpKind::GeluBwd;
    if (t.fused_into < 0) continue;
    ++fused;
    INFO(t.name);
    const Task& runs = rp.tasks.at(size_t(t.fused_into));
    CHECK(runs.epilogue_partner == t.id);  // both ends name each other
    CHECK(t.flops == 0);                   // the work moved to the launching task
    CHECK(t.bytes_read + t.bytes_written == 0);
    if (t.op == OpKind::Gelu) {
      CHECK(runs.op == OpKind::Matmul);
      CHECK(runs.epilogue == Epilogue::Gelu);
    } else if (t.op == OpKind::LayerNorm) {
      ++add_ln;
      CHECK(runs.op == OpKind::Add);
      CHECK(runs.epilogue == Epilogue::AddLayerNorm);
      CHECK(runs.id + 1 == t.id);  // the very next task: nothing runs between them
    } else {
      CHECK(runs.epilogue == Epilogue::DGelu);
      early_dgelu += t.op == OpKind::GeluBwd && runs.op == OpKind::MatmulBwdData;
    }
  }
  CHECK(gelu == 12);
  CHECK(fused == gelu + gelu_bwd + add_ln);
  CHECK(add_ln == 24);  // both residual adds of each of the 12 layers; the first layernorm follows the embedding
  CHECK(early_dgelu == 12);  // GPT-2 124M's memory plan allows the early DGELU everywhere
  // FLOPs per step do not change: the fused GEMMs carry the GELUs' FLOPs.
  double total = 0;
  for (const Task& t : rp.tasks) total += t.flops;
  CHECK(total == Approx(plan.summary.flops_per_step));
}

TEST_CASE("Fusion with schedule.residual_in_gemm (the default): each residual add in its projection's GEMM, the "
          "layernorms alone",
          "[planner][fusion]") {
  JobSpec job = defaultJob();
  job.parallel.data_parallel = 1;
  job.schedule.residual_in_gemm = false;
  const Plan plain = buildPlan(job);
  job.schedule.residual_in_gemm = true;
  const Plan plan = buildPlan(job);
  const RankPlan& rp = plan.programs[0];
  int residual = 0, add_ln = 0, adds = 0;
  for (const Task& t : rp.tasks) {
    adds += t.op == OpKind::Add;
    add_ln += t.epilogue == Epilogue::AddLayerNorm;
    if (t.epilogue != Epilogue::Residual) continue;
    ++residual;
    INFO(t.name);
    CHECK(t.op == OpKind::Matmul);
    const Task& add = rp.tasks.at(size_t(t.epilogue_partner));
    CHECK(add.op == OpKind::Add);
    CHECK(add.fused_into == t.id);
    CHECK(add.id == t.id + 1);  // the very next task: nothing runs between them
    CHECK(add.flops + add.bytes_read + add.bytes_written == 0);
    // The GEMM writes the add's output while it reads x, W, the bias and the
    // residual: that output overlaps none of them (or is the residual exactly).
    const Buffer& sum = rp.buffers.at(size_t(add.writes[0]));
    for (int r : add.reads) {
      if (r == t.writes[0]) continue;
      const Buffer& res = rp.buffers.at(size_t(r));
      const bool disjoint = sum.offset + sum.bytes <= res.offset || res.offset + res.bytes <= sum.offset;
      CHECK((disjoint || (sum.offset == res.offset && sum.bytes == res.bytes)));
      // The GEMM's traffic: its plain reads plus the residual.
      const auto same = std::find_if(plain.programs[0].tasks.begin(), plain.programs[0].tasks.end(),
                                     [&](const Task& u) { return u.id == t.id; });
      REQUIRE(same != plain.programs[0].tasks.end());
      CHECK(t.bytes_read == same->bytes_read + res.bytes);
    }
    for (int r : t.reads) {
      const Buffer& in = rp.buffers.at(size_t(r));
      CHECK((sum.offset + sum.bytes <= in.offset || in.offset + in.bytes <= sum.offset));
    }
  }
  CHECK(residual == 24);  // the attention and MLP output projections of each of the 12 layers
  CHECK(add_ln == 0);     // their adds no longer run, so no layernorm fuses with one
  CHECK(adds == 24);
  // The same program otherwise: tasks, buffers and the memory plan.
  CHECK(rp.tasks.size() == plain.programs[0].tasks.size());
  CHECK(rp.buffers == plain.programs[0].buffers);
  double total = 0;
  for (const Task& t : rp.tasks) total += t.flops;
  CHECK(total == Approx(plan.summary.flops_per_step));
  // On by default; off, no task names the epilogue.
  CHECK(defaultJob().schedule.residual_in_gemm);
  for (const Task& t : plain.programs[0].tasks) CHECK(t.epilogue != Epilogue::Residual);
}

// A hand-built program: matmul (x, W -> P) then add (P, R -> S), each
// buffer 1 KiB at its own arena offset; `edit` changes it before the pass.
static RankPlan residualProgram(const std::function<void(RankPlan&)>& edit) {
  RankPlan p;
  const char* names[] = {"x", "W", "P", "R", "S", "other"};
  for (int b = 0; b < 6; ++b) {
    Buffer buf;
    buf.id = b;
    buf.name = names[b];
    buf.dtype = DType::BF16;
    buf.shape = {16, 32};
    buf.bytes = 1024;
    buf.offset = 2048 * b;
    p.buffers.push_back(buf);
  }
  Task mm;
  mm.id = 0;
  mm.op = OpKind::Matmul;
  mm.reads = {0, 1};
  mm.writes = {2};
  mm.attrs.m = 16, mm.attrs.n = 32, mm.attrs.k = 32;
  mm.flops = 2.0 * 16 * 32 * 32;
  mm.bytes_read = 2048;
  mm.bytes_written = 1024;
  Task add;
  add.id = 1;
  add.op = OpKind::Add;
  add.reads = {3, 2};  // the residual first: either order is an add
  add.writes = {4};
  add.attrs.elements = 16 * 32;
  add.flops = 16 * 32;
  add.bytes_read = 2048;
  add.bytes_written = 1024;
  p.tasks = {mm, add};
  edit(p);
  return p;
}

TEST_CASE("Residual add in the GEMM: what the pass accepts and refuses", "[planner][fusion]") {
  auto fuses = [](const std::function<void(RankPlan&)>& edit, bool option = true) {
    RankPlan p = residualProgram(edit);
    const int n = applyEpilogueFusion(p, option);
    if (n == 0) return false;
    CHECK(p.tasks[0].epilogue == Epilogue::Residual);
    CHECK(p.tasks[0].epilogue_partner == 1);
    CHECK(p.tasks[1].fused_into == 0);
    CHECK(p.tasks[0].bytes_read == 2048 + 1024);  // x, W and the residual
    CHECK(p.tasks[0].flops == 2.0 * 16 * 32 * 32 + 16 * 32);
    CHECK(p.tasks[1].flops + p.tasks[1].bytes_read + p.tasks[1].bytes_written == 0);
    return true;
  };
  CHECK(fuses([](RankPlan&) {}));
  CHECK_FALSE(fuses([](RankPlan&) {}, /*option=*/false));
  // In place: the sum takes the residual's memory exactly (C == D).
  CHECK(fuses([](RankPlan& p) { p.buffers[4].offset = p.buffers[3].offset; }));
  // Partly over the residual, or over an input the GEMM still reads.
  CHECK_FALSE(fuses([](RankPlan& p) { p.buffers[4].offset = p.buffers[3].offset + 512; }));
  CHECK_FALSE(fuses([](RankPlan& p) { p.buffers[4].offset = p.buffers[0].offset; }));
  // Another task (a GELU of `in` into buffer 5).
  auto gelu = [](int id, int in) {
    Task t;
    t.id = id;
    t.op = OpKind::Gelu;
    t.reads = {in};
    t.writes = {5};
    return t;
  };
  // The matmul's output read by someone else, later.
  CHECK_FALSE(fuses([&](RankPlan& p) { p.tasks.push_back(gelu(2, 2)); }));
  // A view of the matmul's output.
  CHECK_FALSE(fuses([](RankPlan& p) { p.buffers[5].parent = 2; }));
  // An event between them, a task between them, another stream, another dtype.
  CHECK_FALSE(fuses([](RankPlan& p) { p.tasks[1].wait_events = {0}; }));
  CHECK_FALSE(fuses([](RankPlan& p) { p.tasks[0].record_event = 0; }));
  CHECK_FALSE(fuses([&](RankPlan& p) { p.tasks.insert(p.tasks.begin() + 1, gelu(2, 0)); }));
  CHECK_FALSE(fuses([](RankPlan& p) { p.tasks[1].stream = 1; }));
  CHECK_FALSE(fuses([](RankPlan& p) { p.buffers[3].dtype = DType::F32; }));
  // An add of the matmul's output with itself, or of two other tensors.
  CHECK_FALSE(fuses([](RankPlan& p) { p.tasks[1].reads = {2, 2}; }));
  CHECK_FALSE(fuses([](RankPlan& p) { p.tasks[1].reads = {3, 5}; }));
  // An accumulating matmul (its output is also its C).
  CHECK_FALSE(fuses([](RankPlan& p) { p.tasks[0].attrs.accumulate = true; }));
}

TEST_CASE("Epilogue fusion under recompute: a recomputed GELU fuses only into a recomputed GEMM", "[planner][fusion]") {
  for (const RecomputePolicy policy : {RecomputePolicy::Selective, RecomputePolicy::Full}) {
    JobSpec job = test::microJob(2, 1, 1);
    job.recompute.policy = policy;
    // One compute stream: the memory plan that allows only the late DGELU
    // below (the weight-gradient stream keeps inputs live longer, which
    // changes the placement).
    job.schedule.weight_gradient_stream = false;
    const Plan plan = buildPlan(job);
    const auto& tasks = plan.programs[0].tasks;
    int recomputed = 0;
    for (const Task& t : tasks) {
      if (t.op != OpKind::Gelu || t.phase != Phase::Recompute) continue;
      ++recomputed;
      INFO(toString(policy) << ": " << t.name);
      // Selective recompute keeps the pre-activation and recomputes only the
      // GELU (nothing to fuse into); full recompute recomputes its matmul too.
      if (policy == RecomputePolicy::Full) {
        REQUIRE(t.fused_into >= 0);
        CHECK(tasks.at(size_t(t.fused_into)).op == OpKind::Matmul);
        CHECK(tasks.at(size_t(t.fused_into)).phase == Phase::Recompute);
      } else {
        CHECK(t.fused_into < 0);
      }
    }
    CHECK(recomputed == job.model.layers);
    // Late DGELU: the GELU backward launches the GEMM and carries its shape.
    int late = 0;
    for (const Task& t : tasks)
      if (t.op == OpKind::GeluBwd && t.epilogue == Epilogue::DGelu) {
        ++late;
        const Task& gemm = tasks.at(size_t(t.epilogue_partner));
        CHECK(gemm.op == OpKind::MatmulBwdData);
        CHECK(gemm.fused_into == t.id);
        CHECK((t.attrs.m == gemm.attrs.m && t.attrs.n == gemm.attrs.n && t.attrs.k == gemm.attrs.k));
      }
    CHECK(late == job.model.layers);  // the tiny job's memory plan allows only the late DGELU
  }
}

namespace {
// Tasks of the blocks in `phase` by (layer, micro-batch, op kind).
std::map<std::tuple<int, int, OpKind>, int> opsOf(const Plan& plan, Phase phase) {
  std::map<std::tuple<int, int, OpKind>, int> ops;
  for (const Task& t : plan.programs[0].tasks)
    if (t.layer >= 0 && t.kind != TaskKind::SendRecv && t.phase == phase) ++ops[{t.layer, t.micro_batch, t.op}];
  return ops;
}
int gemmsOf(const std::map<std::tuple<int, int, OpKind>, int>& ops) {
  int n = 0;
  for (const auto& [key, count] : ops)
    if (std::get<2>(key) == OpKind::Matmul) n += count;
  return n;
}
}  // namespace

TEST_CASE("Full recompute runs each block's forward again whole, as Megatron-LM's checkpoint does",
          "[planner][recompute]") {
  for (const bool llama : {false, true}) {
    JobSpec job = llama ? test::llamaJob(1, 2, 3) : test::splittableJob(1, 2, 3);
    job.recompute.policy = RecomputePolicy::Full;
    INFO((llama ? "llama" : "gpt2"));
    // Per (layer, micro-batch, op kind): forward tasks against recomputed
    // ones. Every forward op of a block runs again, also those no backward
    // reads (the MLP's output GEMM and the residual add after it).
    const Plan plan = buildPlan(job);
    const auto forward = opsOf(plan, Phase::Forward);
    const auto recomputed = opsOf(plan, Phase::Recompute);
    CHECK(forward.size() >= size_t(job.model.layers * 2 * 5));
    CHECK(recomputed == forward);
    CHECK(gemmsOf(recomputed) == 4 * job.model.layers * 2);
    // rerun: needed leaves out the MLP's output GEMM (and the residual add
    // after it): nothing the backward reads comes from them.
    job.recompute.rerun = FullRerun::Needed;
    CHECK(gemmsOf(opsOf(buildPlan(job), Phase::Recompute)) == 3 * job.model.layers * 2);
  }
}

TEST_CASE("Sharded parameters (ZeRO-3): a shard per rank, copies gathered one ahead, freed after use",
          "[planner][dp][shard]") {
  for (RecomputePolicy policy : {RecomputePolicy::None, RecomputePolicy::Full}) {
    JobSpec zero1 = defaultJob();  // GPT-2 124M, data parallel 8, bf16
    zero1.recompute.policy = policy;
    zero1.training.grad_accum = 2;
    zero1.parallel.shard_optimizer = true;
    JobSpec zero3 = zero1;
    zero3.parallel.shard_parameters = true;
    const Plan a = buildPlan(zero1), b = buildPlan(zero3);
    const RankPlan& rp = b.programs[0];
    INFO("recompute " << toString(policy));
    CHECK(countOverlaps(rp) == 0);
    CHECK(checkMemoryPlan(rp).empty());

    // Persistent parameters: 1/ranks of ZeRO-1's flat parameter buckets.
    auto persistentParameterBytes = [](const RankPlan& p) {
      int64_t total = 0;
      for (const Buffer& x : p.buffers)
        if (x.category == TensorCategory::Parameter && x.parent < 0 && x.persistent) total += x.bytes;
      return total;
    };
    const int dp = zero3.parallel.data_parallel;
    CHECK(persistentParameterBytes(rp) * dp == persistentParameterBytes(a.programs[0]));
    CHECK(rp.memory.arena_bytes < a.programs[0].memory.arena_bytes);

    // Gradients: each whole bucket is transient, reduce-scattered out of
    // place into its shard, which the norm and AdamW read.
    for (const GradBucket& bk : rp.buckets) {
      INFO("bucket " << bk.id);
      CHECK_FALSE(rp.buffers[size_t(bk.buffer)].persistent);
      REQUIRE(bk.grad_shard >= 0);
      CHECK(rp.buffers[size_t(bk.grad_shard)].elementCount() * dp == rp.buffers[size_t(bk.buffer)].elementCount());
      int scatters = 0;
      for (const Task& t : rp.tasks)
        if (t.op == OpKind::ReduceScatter && t.reads[0] == bk.buffer) {
          ++scatters;
          CHECK(t.writes == std::vector<int>{bk.grad_shard});
        }
      CHECK(scatters == 1);
    }
    for (const Task& t : rp.tasks)
      if (t.op == OpKind::AdamW) {
        const GradBucket& bk = rp.buckets[size_t(rp.params[size_t(t.attrs.params.at(0))].bucket)];
        CHECK(t.reads[0] == bk.grad_shard);
        CHECK(t.writes[0] == bk.param_shard);
      }
    // The weight gradients still run on their own stream.
    CHECK(std::count_if(rp.tasks.begin(), rp.tasks.end(), [](const Task& t) {
            return t.op == OpKind::MatmulBwdWeight && t.stream == 2;
          }) == std::count_if(a.programs[0].tasks.begin(), a.programs[0].tasks.end(), [](const Task& t) {
            return t.op == OpKind::MatmulBwdWeight && t.stream == 2;
          }));

    // Every task that reads a parameter reads a gathered copy for its own
    // micro-batch, the forward's for forward tasks and the backward's for
    // the others; each copy is gathered before its first reader.
    std::map<int, int> gathered_at;  // flat buffer -> gathering task
    for (const Task& t : rp.tasks)
      if (t.op == OpKind::AllGather) {
        CHECK(t.stream == 1);
        CHECK(gathered_at.emplace(t.writes[0], t.id).second);
      }
    int readers = 0;
    for (const Task& t : rp.tasks)
      for (int r : t.reads) {
        const Buffer& x = rp.buffers[size_t(r)];
        if (x.category != TensorCategory::Parameter || x.parent < 0) continue;
        const Buffer& flat = rp.buffers[size_t(x.parent)];
        INFO(t.name << " reads " << x.name);
        const std::string want = fmt::format(".{}.mb{}", t.phase == Phase::Forward ? "fwd" : "bwd", t.micro_batch);
        CHECK(flat.name.substr(flat.name.size() - want.size()) == want);
        REQUIRE(gathered_at.count(x.parent) == 1);
        CHECK(gathered_at[x.parent] < t.id);
        ++readers;
      }
    CHECK(readers > 0);

    // A gather may run ahead of the compute stream only up to where it was
    // issued: it, or a task before it on its stream, waits for the compute
    // stream's task before it or a later one.
    std::map<int, int> recorded_by;  // event -> compute-stream task
    for (const Task& t : rp.tasks)
      if (t.stream == 0 && t.record_event >= 0) recorded_by[t.record_event] = t.id;
    for (const Task& t : rp.tasks) {
      if (t.op != OpKind::AllGather) continue;
      int before = -1;
      for (int i = t.id - 1; i >= 0 && before < 0; --i)
        if (rp.tasks[size_t(i)].stream == 0) before = i;
      if (before < 0) continue;
      bool held = false;
      for (int i = t.id; i >= 0 && !held; --i) {
        const Task& u = rp.tasks[size_t(i)];
        if (u.stream != t.stream) continue;
        for (int e : u.wait_events)
          if (auto it = recorded_by.find(e); it != recorded_by.end() && it->second >= before) held = true;
      }
      INFO(t.name);
      CHECK(held);
    }

    // One copy gathered ahead: at most a few copies live at any task (the
    // tied embedding's for the whole forward or backward, the one in use,
    // the next, and a second where a task reads two buckets).
    int most = 0;
    for (const Task& t : rp.tasks) {
      int live = 0;
      for (const auto& [flat, task] : gathered_at) {
        const Buffer& x = rp.buffers[size_t(flat)];
        if (x.first_use <= t.id && t.id <= x.last_use) ++live;
      }
      most = std::max(most, live);
    }
    CHECK(most >= 2);
    CHECK(most <= 4);
  }
}

TEST_CASE("Sharded gradients reduced every micro-batch: a whole bucket lives for one micro-batch",
          "[planner][dp][shard]") {
  JobSpec once = defaultJob();  // GPT-2 124M, data parallel 8, bf16
  once.training.grad_accum = 3;
  once.parallel.shard_parameters = true;
  JobSpec every = once;
  every.comm.reduce_every_micro_batch = true;
  const Plan a = buildPlan(once), b = buildPlan(every);
  const RankPlan& rp = b.programs[0];
  CHECK(countOverlaps(rp) == 0);
  CHECK(checkMemoryPlan(rp).empty());
  CHECK(rp.memory.arena_bytes < a.programs[0].memory.arena_bytes);

  // Per bucket: one reduce-scatter per micro-batch, each reading that
  // micro-batch's whole bucket, which no other micro-batch's task touches,
  // and one sum per micro-batch after the first into the bucket's shard:
  // micro-batch 1's where micro-batch 2 completes the bucket, the last's
  // after the backward.
  std::map<int, int> micro_batch_of_flat;  // whole bucket (or copy) -> micro-batch
  int scatters = 0, sums = 0, sums_in_backward = 0;
  for (const Task& t : rp.tasks) {
    if (t.op == OpKind::ReduceScatter) {
      ++scatters;
      CHECK(micro_batch_of_flat.emplace(t.reads[0], t.micro_batch).second);
    }
    if (t.op == OpKind::Add && t.name.find("sum_gradient_shards") != std::string::npos) {
      ++sums;
      CHECK(t.micro_batch > 0);
      if (t.phase == Phase::Backward) {
        ++sums_in_backward;
        CHECK(t.micro_batch == 2);
      } else {
        CHECK(t.phase == Phase::Optimizer);
      }
    }
  }
  const int buckets = int(rp.buckets.size());
  CHECK(scatters == buckets * 3);
  CHECK(sums == buckets * 2);
  CHECK(sums_in_backward == buckets);
  // So no more than two shards of a bucket live at once: more micro-batches
  // need no more memory.
  JobSpec more = every;
  more.training.grad_accum = 12;
  CHECK(buildPlan(more).programs[0].memory.arena_bytes == rp.memory.arena_bytes);
  for (const Task& t : rp.tasks)
    for (int w : t.writes) {
      const Buffer& x = rp.buffers[size_t(w)];
      const int root = x.parent >= 0 ? x.parent : w;
      if (auto it = micro_batch_of_flat.find(root); it != micro_batch_of_flat.end() && t.op != OpKind::ReduceScatter) {
        INFO(t.name << " writes " << x.name);
        CHECK(t.micro_batch == it->second);
      }
    }
  // A bucket's whole gradient of one micro-batch is free again before the
  // next micro-batch's backward begins (the compute stream joins the
  // weight-gradient stream at each micro-batch's forward, so the memory
  // plan can reuse what that stream wrote), and so never two at once.
  std::map<std::pair<std::string, int>, int> flat_by_name;  // (bucket's name, micro-batch) -> buffer
  for (const auto& [flat, mb] : micro_batch_of_flat) {
    std::string name = rp.buffers[size_t(flat)].name;
    if (mb > 0) name = name.substr(0, name.rfind(".mb"));
    flat_by_name[{name, mb}] = flat;
  }
  REQUIRE(int(flat_by_name.size()) == buckets * 3);
  for (const auto& [key, flat] : flat_by_name) {
    if (key.second == 2) continue;
    const Buffer& now = rp.buffers[size_t(flat)];
    const Buffer& next = rp.buffers[size_t(flat_by_name.at({key.first, key.second + 1}))];
    int next_backward = -1;
    for (const Task& t : rp.tasks)
      if (t.phase == Phase::Backward && t.micro_batch == key.second + 1) {
        next_backward = t.id;
        break;
      }
    INFO(now.name << " then " << next.name);
    CHECK(now.last_use < next_backward);
    CHECK(now.last_use < next.first_use);
  }
}

TEST_CASE("Hybrid sharding: shard groups of consecutive ranks, replica groups across them", "[planner][dp][shard]") {
  JobSpec job = defaultJob();  // GPT-2 124M, bf16
  job.parallel.data_parallel = 8;
  job.parallel.shard_parameters = true;
  job.parallel.shard_group_size = 4;
  const Plan plan = buildPlan(job);
  std::map<std::string, std::vector<std::vector<int>>> groups;
  for (const ProcessGroup& g : plan.groups) groups[g.name].push_back(g.ranks);
  CHECK(groups["dp"] == std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5, 6, 7}});
  CHECK(groups["shard"] == std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(groups["replica"] == std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  // The JSON keeps the groups of one name apart.
  CHECK(planFromJson(planToJson(plan)) == plan);

  const RankPlan& rp = plan.programs[0];
  CHECK(countOverlaps(rp) == 0);
  int replica_reduces = 0;
  for (const Task& t : rp.tasks) {
    if (!t.collective) continue;
    INFO(t.name);
    if (t.op == OpKind::ReduceScatter || t.op == OpKind::AllGather) {
      CHECK(t.collective->group == "shard");
      CHECK(t.attrs.shards == 4);
    }
    if (t.collective->group == "replica") {
      ++replica_reduces;
      CHECK(t.op == OpKind::AllReduce);
      CHECK(t.collective->reduce == ReduceOp::Avg);
    }
  }
  CHECK(replica_reduces == int(rp.buckets.size()));
  // Sharded 4 ways, not 8: twice the optimizer state of plain sharding.
  JobSpec plain = job;
  plain.parallel.shard_group_size = 0;
  auto bytesOf = [](const Plan& p, TensorCategory cat) {
    int64_t total = 0;
    for (const Buffer& b : p.programs[0].buffers)
      if (b.category == cat && b.parent < 0 && b.persistent) total += b.bytes;
    return total;
  };
  const Plan flat = buildPlan(plain);
  // (Buckets are padded to a multiple of 128 x ranks sharded over.)
  const int64_t padding = int64_t(rp.buckets.size()) * 8 * 128 * 4 * 2;
  CHECK(std::abs(bytesOf(plan, TensorCategory::OptimizerState) - 2 * bytesOf(flat, TensorCategory::OptimizerState)) <=
        padding);
}

TEST_CASE("Sharded parameters gathered further ahead: schedule.gather_ahead", "[planner][dp][shard]") {
  JobSpec job = defaultJob();  // GPT-2 124M, data parallel 8
  job.parallel.shard_parameters = true;
  auto gathers = [](const Plan& p) {
    std::map<std::string, int> at;  // gather name -> task index
    for (const Task& t : p.programs[0].tasks)
      if (t.op == OpKind::AllGather) at[t.name] = t.id;
    return at;
  };
  const Plan one = buildPlan(job);
  job.schedule.gather_ahead = 3;
  const Plan three = buildPlan(job);
  CHECK(countOverlaps(three.programs[0]) == 0);
  const auto a = gathers(one), b = gathers(three);
  REQUIRE(a.size() == b.size());
  // The same gathers, none issued later among the other tasks (the same
  // sequence in both plans) and some earlier.
  int earlier = 0;
  auto othersBefore = [](const std::map<std::string, int>& g, int at) {
    int n = at;
    for (const auto& [other, i] : g) n -= i < at;
    return n;
  };
  for (const auto& [name, index] : a) {
    INFO(name);
    REQUIRE(b.count(name) == 1);
    const int ca = othersBefore(a, index), cb = othersBefore(b, b.at(name));
    CHECK(cb <= ca);
    earlier += cb < ca;
  }
  CHECK(earlier > 0);
  // More copies live at once: more memory.
  CHECK(three.programs[0].memory.arena_bytes >= one.programs[0].memory.arena_bytes);
}

TEST_CASE("comm.grad_reduce_fp32: the gradients' reductions across ranks move fp32, the other collectives as "
          "they were",
          "[planner][dp]") {
  struct Layout {
    const char* name;
    bool shard_parameters;
    int shard_group_size;
  };
  for (const Layout& l : {Layout{"replicated", false, 0}, Layout{"ZeRO-3", true, 0}, Layout{"hybrid ZeRO-3", true, 2}}) {
    INFO(l.name);
    JobSpec job = test::splittableJob(4, 2);
    job.training.precision = Precision::BF16;
    job.parallel.shard_parameters = l.shard_parameters;
    if (l.shard_group_size > 0) job.parallel.shard_group_size = l.shard_group_size;
    JobSpec fp32 = job;
    fp32.comm.grad_reduce_fp32 = true;
    CHECK(parseJob(jobToYaml(fp32), "fp32.yaml").comm.grad_reduce_fp32);
    const Plan a = buildPlan(job), b = buildPlan(fp32);
    const RankPlan &pa = a.programs.at(0), &pb = b.programs.at(0);
    REQUIRE(pa.tasks.size() == pb.tasks.size());
    int reductions = 0;
    for (size_t i = 0; i < pa.tasks.size(); ++i) {
      const Task &x = pa.tasks[i], &y = pb.tasks[i];
      if (!x.collective) continue;
      INFO(x.name);
      REQUIRE(y.collective.has_value());
      CHECK(y.collective->count == x.collective->count);
      const bool gradient_reduction =
          (x.op == OpKind::AllReduce || x.op == OpKind::ReduceScatter) && x.collective->dtype == DType::BF16;
      if (gradient_reduction) {
        ++reductions;
        CHECK(y.collective->dtype == DType::F32);
        CHECK(y.collective->bytes == 2 * x.collective->bytes);
      } else {
        CHECK(y.collective->bytes == x.collective->bytes);  // the norm's fp32 sum, the parameter gathers
      }
    }
    CHECK(reductions > 0);
    const auto refused = gpuRunRefusal(b);
    REQUIRE(refused.has_value());
    CHECK_THAT(*refused, Catch::Contains("comm.grad_reduce_fp32"));
    CHECK_THROWS_WITH(cpu::CpuExecutor(b), Catch::Contains("comm.grad_reduce_fp32") && Catch::Contains("tandem train"));
  }
  // One rank reduces nothing across ranks: nothing to refuse.
  JobSpec single = test::splittableJob(1, 1);
  single.training.precision = Precision::BF16;
  single.comm.grad_reduce_fp32 = true;
  CHECK_NOTHROW(cpu::CpuExecutor(buildPlan(single)));
}
