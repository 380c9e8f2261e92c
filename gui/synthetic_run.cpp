#include "gui/synthetic_run.h"

#include <algorithm>
#include <string>

namespace tandem::gui {

namespace {

struct OpDef {
  const char* name;
  OpKind op;
  int64_t fwd_ns;  // typical forward duration of one GPT-2 124M micro-batch
  double flops;
  int64_t bytes;
};

// One transformer block's forward ops in execution order.
constexpr OpDef kBlock[] = {
    {"ln1", OpKind::LayerNorm, 25'000, 0.1e9, 75'000'000},
    {"attn.qkv", OpKind::Matmul, 150'000, 58e9, 100'000'000},
    {"attn.core", OpKind::Attention, 200'000, 52e9, 150'000'000},
    {"attn.proj", OpKind::Matmul, 60'000, 19e9, 50'000'000},
    {"attn.residual", OpKind::Add, 15'000, 0.01e9, 75'000'000},
    {"ln2", OpKind::LayerNorm, 25'000, 0.1e9, 75'000'000},
    {"mlp.fc", OpKind::Matmul, 200'000, 77e9, 150'000'000},
    {"mlp.gelu", OpKind::Gelu, 40'000, 0.4e9, 200'000'000},
    {"mlp.proj", OpKind::Matmul, 200'000, 77e9, 150'000'000},
    {"mlp.residual", OpKind::Add, 15'000, 0.01e9, 75'000'000},
};
constexpr int kBlockOps = int(sizeof(kBlock) / sizeof(kBlock[0]));

OpKind backwardOf(OpKind op) {
  switch (op) {
    case OpKind::LayerNorm: return OpKind::LayerNormBwd;
    case OpKind::Attention: return OpKind::AttentionBwd;
    case OpKind::Gelu: return OpKind::GeluBwd;
    case OpKind::Embedding: return OpKind::EmbeddingBwd;
    case OpKind::CrossEntropy: return OpKind::CrossEntropyBwd;
    default: return op;
  }
}

bool recomputedUnder(RecomputePolicy p, OpKind op) {
  if (p == RecomputePolicy::Full) return true;
  // Selective recompute drops the cheap, memory-hungry activations.
  if (p == RecomputePolicy::Selective) return op == OpKind::Attention || op == OpKind::Gelu;
  if (p == RecomputePolicy::Attention) return op == OpKind::Attention;
  if (p == RecomputePolicy::AlternateGemms) return op == OpKind::Gelu || op == OpKind::Matmul;
  return false;
}

// Deterministic jitter in [0.9, 1.1).
struct Jitter {
  uint64_t state;
  double next() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return 0.9 + 0.2 * double(state >> 11) / double(1ull << 53);
  }
};

struct TaskTemplate {
  std::string name;
  OpKind op;
  TaskKind kind;
  Phase phase;
  int layer;
  int64_t dur_ns;
  double flops;
  int64_t bytes;
  int bucket_done = -1;  // this task completes the gradients of bucket k
};

std::vector<RecomputePolicy> policies(const SyntheticSpec& spec) {
  if (!spec.recompute.empty()) return spec.recompute;
  std::vector<RecomputePolicy> p(size_t(spec.layers), RecomputePolicy::None);
  for (int l = 0; l < spec.layers / 2; ++l) p[size_t(l)] = RecomputePolicy::Full;
  return p;
}

std::vector<TaskTemplate> computeProgram(const SyntheticSpec& spec) {
  const auto policy = policies(spec);
  std::vector<TaskTemplate> prog;
  prog.push_back({"embedding.fwd.mb0", OpKind::Embedding, TaskKind::Kernel, Phase::Forward, -1, 30'000,
                  0.02e9, 60'000'000});
  for (int l = 0; l < spec.layers; ++l)
    for (const auto& d : kBlock)
      prog.push_back({"layer" + std::to_string(l) + "." + d.name + ".fwd.mb0", d.op, TaskKind::Kernel,
                      Phase::Forward, l, d.fwd_ns, d.flops, d.bytes});
  prog.push_back({"lm_head.fwd.mb0", OpKind::Matmul, TaskKind::Kernel, Phase::Forward, -1, 900'000,
                  1265e9, 900'000'000});
  prog.push_back({"loss.fwd.mb0", OpKind::CrossEntropy, TaskKind::Kernel, Phase::Forward, -1, 120'000,
                  2.4e9, 1'600'000'000});
  prog.push_back({"loss.bwd.mb0", OpKind::CrossEntropyBwd, TaskKind::Kernel, Phase::Backward, -1,
                  120'000, 2.4e9, 1'600'000'000});
  prog.push_back({"lm_head.bwd_data.mb0", OpKind::MatmulBwdData, TaskKind::Kernel, Phase::Backward, -1,
                  900'000, 1265e9, 900'000'000});
  const int per_bucket = std::max(1, spec.layers / std::max(1, spec.buckets));
  int next_bucket = 0;
  for (int l = spec.layers - 1; l >= 0; --l) {
    const std::string prefix = "layer" + std::to_string(l) + ".";
    for (const auto& d : kBlock)
      if (recomputedUnder(policy[size_t(l)], d.op))
        prog.push_back({prefix + d.name + ".recompute.mb0", d.op, TaskKind::Kernel, Phase::Recompute, l,
                        d.fwd_ns, d.flops, d.bytes});
    for (int k = kBlockOps - 1; k >= 0; --k) {
      const auto& d = kBlock[k];
      if (d.op == OpKind::Matmul) {
        prog.push_back({prefix + d.name + ".bwd_data.mb0", OpKind::MatmulBwdData, TaskKind::Kernel,
                        Phase::Backward, l, d.fwd_ns, d.flops, d.bytes});
        prog.push_back({prefix + d.name + ".bwd_weight.mb0", OpKind::MatmulBwdWeight, TaskKind::Kernel,
                        Phase::Backward, l, d.fwd_ns, d.flops, d.bytes});
      } else if (d.op != OpKind::Add) {
        prog.push_back({prefix + d.name + ".bwd.mb0", backwardOf(d.op), TaskKind::Kernel, Phase::Backward,
                        l, d.fwd_ns * 2, d.flops * 2, d.bytes * 2});
      }
    }
    // Buckets fill in reverse layer order; the last bucket also holds the
    // embeddings and completes after embedding backward.
    const int from_top = spec.layers - 1 - l;
    if ((from_top + 1) % per_bucket == 0 && l > 0) prog.back().bucket_done = next_bucket++;
  }
  prog.push_back({"embedding.bwd.mb0", OpKind::EmbeddingBwd, TaskKind::Kernel, Phase::Backward, -1,
                  60'000, 0.04e9, 120'000'000});
  prog.back().bucket_done = next_bucket;
  prog.push_back({"optimizer.grad_norm", OpKind::GradNorm, TaskKind::Kernel, Phase::Optimizer, -1,
                  80'000, 0.25e9, 500'000'000});
  prog.push_back({"optimizer.adamw", OpKind::AdamW, TaskKind::Kernel, Phase::Optimizer, -1, 450'000,
                  2.5e9, 4'000'000'000});
  return prog;
}

int bucketCount(const std::vector<TaskTemplate>& prog) {
  int n = 0;
  for (const auto& t : prog) n = std::max(n, t.bucket_done + 1);
  return n;
}

}  // namespace

int64_t syntheticSlicesPerStep(const SyntheticSpec& spec) {
  const auto prog = computeProgram(spec);
  return int64_t(spec.ranks) * (int64_t(prog.size()) + bucketCount(prog) + 1);
}

TimelineData makeSyntheticRun(const SyntheticSpec& spec) {
  TimelineData data;
  data.run_label = "generated · " + std::to_string(spec.ranks) + " ranks · " + std::to_string(spec.steps) +
                   " steps";
  NameTable names(data.names);
  const auto prog = computeProgram(spec);
  const int buckets = bucketCount(prog);
  const int n_prog = int(prog.size());
  // Task ids: compute program first, then the all-reduces, then the load.
  const int load_task = n_prog + buckets;
  std::vector<int32_t> prog_names;
  for (const auto& t : prog) prog_names.push_back(names.intern(t.name));
  std::vector<int32_t> bucket_names;
  for (int b = 0; b < buckets; ++b)
    bucket_names.push_back(names.intern("grad_bucket" + std::to_string(b) + ".all_reduce"));
  const int32_t load_name = names.intern("data.load_batch.mb0");

  data.task_facts.assign(size_t(spec.ranks), std::vector<TaskFacts>(size_t(load_task + 1)));
  const int64_t bucket_bytes = 124'000'000LL * 4 / std::max(1, buckets);
  for (auto& facts : data.task_facts) {
    for (int i = 0; i < n_prog; ++i)
      facts[size_t(i)] = {prog[size_t(i)].op, prog[size_t(i)].flops, prog[size_t(i)].bytes, true};
    for (int b = 0; b < buckets; ++b) facts[size_t(n_prog + b)] = {OpKind::AllReduce, 0, bucket_bytes, true};
    facts[size_t(load_task)] = {OpKind::LoadBatch, 0, 16 * 1024 * 8, true};
  }

  data.tracks.resize(size_t(spec.ranks) * 3);
  const int64_t per_rank_steps = int64_t(spec.steps);
  for (int r = 0; r < spec.ranks; ++r) {
    const char* labels[] = {"compute", "comm 0", "copy"};
    const StreamKind kinds[] = {StreamKind::Compute, StreamKind::Comm, StreamKind::Copy};
    for (int s = 0; s < 3; ++s) {
      Track& t = data.tracks[size_t(r * 3 + s)];
      t.rank = r;
      t.stream = s;
      t.kind = kinds[s];
      t.label = labels[s];
    }
    data.tracks[size_t(r * 3)].reserve(size_t(per_rank_steps * n_prog));
    data.tracks[size_t(r * 3 + 1)].reserve(size_t(per_rank_steps * buckets));
    data.tracks[size_t(r * 3 + 2)].reserve(size_t(per_rank_steps));
  }

  // One all-reduce takes the ring time of its bucket at ~180 GB/s bus bandwidth.
  const int64_t ring_ns = int64_t(2.0 * (spec.ranks - 1) / std::max(1, spec.ranks) * double(bucket_bytes) / 180.0);
  const int64_t launch_gap_ns = 3'000;
  std::vector<std::vector<int64_t>> ready(size_t(spec.ranks), std::vector<int64_t>(size_t(buckets), 0));
  std::vector<int64_t> bwd_end(size_t(spec.ranks), 0);
  int64_t step_start = 0;
  for (int step = 0; step < spec.steps; ++step) {
    // Compute streams up to the end of backward, rank by rank.
    for (int r = 0; r < spec.ranks; ++r) {
      Jitter jit{spec.seed * 0x9E3779B97F4A7C15ull + uint64_t(r) * 7919u + uint64_t(step) * 104729u};
      Track& copy = data.tracks[size_t(r * 3 + 2)];
      const int64_t load_end = step_start + int64_t(40'000 * jit.next());
      copy.append(step_start, load_end, load_name, load_task, TaskKind::Memcpy, Phase::Data, -1, 0);
      Track& comp = data.tracks[size_t(r * 3)];
      int64_t t = load_end + launch_gap_ns;
      for (int i = 0; i < n_prog; ++i) {
        const auto& tt = prog[size_t(i)];
        if (tt.phase == Phase::Optimizer) break;
        const int64_t d = int64_t(double(tt.dur_ns) * jit.next());
        comp.append(t, t + d, prog_names[size_t(i)], i, tt.kind, tt.phase, tt.layer, 0);
        t += d;
        if (tt.bucket_done >= 0) ready[size_t(r)][size_t(tt.bucket_done)] = t;
        t += launch_gap_ns;
      }
      bwd_end[size_t(r)] = t;
    }
    // All-reduces start when every rank has its bucket ready and the comm
    // stream is free; they are the same interval on every rank.
    int64_t comm_free = step_start;
    for (int b = 0; b < buckets; ++b) {
      int64_t start = comm_free;
      for (int r = 0; r < spec.ranks; ++r) start = std::max(start, ready[size_t(r)][size_t(b)]);
      start += launch_gap_ns;
      const int64_t end = start + ring_ns;
      for (int r = 0; r < spec.ranks; ++r)
        data.tracks[size_t(r * 3 + 1)].append(start, end, bucket_names[size_t(b)], n_prog + b,
                                              TaskKind::Collective, Phase::Comm, -1, 0);
      comm_free = end;
    }
    // The optimizer waits for the last all-reduce.
    int64_t step_end = step_start;
    for (int r = 0; r < spec.ranks; ++r) {
      Jitter jit{spec.seed + uint64_t(r) * 31u + uint64_t(step) * 131u};
      Track& comp = data.tracks[size_t(r * 3)];
      int64_t t = std::max(bwd_end[size_t(r)], comm_free + launch_gap_ns);
      for (int i = 0; i < n_prog; ++i) {
        const auto& tt = prog[size_t(i)];
        if (tt.phase != Phase::Optimizer) continue;
        const int64_t d = int64_t(double(tt.dur_ns) * jit.next());
        comp.append(t, t + d, prog_names[size_t(i)], i, tt.kind, tt.phase, tt.layer, 0);
        step_end = std::max(step_end, t + d);
        t += d + launch_gap_ns;
      }
    }
    data.steps.push_back({step, step_start, step_end});
    step_start = step_end + 20'000;
  }
  data.finalize();
  return data;
}

}  // namespace tandem::gui
