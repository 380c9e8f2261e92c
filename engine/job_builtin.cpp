// The shipped job files, compiled in. Each literal below is byte for byte the
// file resources/jobs/NAME.yaml; tests/engine/test_job_spec.cpp fails when the
// two drift apart, so edit the file and paste it here (inside the delimiters).
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/job.h"

namespace tandem {
namespace {

// resources/jobs/gpt2-124m-dp8.yaml
constexpr std::string_view kJob0 = R"yaml(# GPT-2 small (124M parameters) trained with plain data parallelism over 8
# GPUs: the default job of tandem (`defaultJob()` is this file). Every field
# is documented in docs/job-spec.md; a missing field takes its default.
name: gpt2-124m-dp8            # label used in plans, traces and reports

model:
  family: gpt2                 # gpt2 | llama (llama is parsed, not planned yet)
  vocab: 50304                 # vocabulary size; 50257 padded to a multiple of 128
  seq_len: 1024                # tokens per sequence (context length)
  layers: 12                   # transformer blocks
  hidden: 768                  # model width (channels)
  heads: 12                    # attention heads; must divide hidden
  kv_heads: 0                  # key/value heads; 0 = same as heads
  mlp_ratio: 4                 # MLP width = hidden * mlp_ratio
  tied_embeddings: true        # the output projection reuses the token embedding

training:
  micro_batch: 16              # sequences per rank per micro-batch
  grad_accum: 1                # micro-batches per step (collectives on the last)
  steps: 10                    # optimizer steps to run
  lr: 6e-4                     # peak learning rate (after warm-up)
  min_lr: 6e-5                 # learning rate at the last step (cosine decay)
  warmup_steps: 0              # linear warm-up steps from 0 to lr
  weight_decay: 0.1            # AdamW decoupled weight decay (matrices only)
  beta1: 0.9                   # AdamW first-moment decay
  beta2: 0.95                  # AdamW second-moment decay
  eps: 1e-8                    # AdamW denominator epsilon
  grad_clip: 1.0               # global gradient-norm clip; 0 disables clipping
  precision: bf16              # fp32 | bf16 (bf16 keeps fp32 master weights)
  seed: 1337                   # seed of the initial weights and synthetic data

parallel:
  data_parallel: 8             # ranks, each holding a full model replica

comm:
  bucket_mib: 25               # gradient bucket size in MiB (all-reduced as one)
  first_bucket_mib: 1          # the first bucket (last layers) is small to start early

recompute:
  policy: none                 # none | selective | full, for every layer
  layers: {}                   # per-layer overrides by index, e.g. {3: full}

data:
  source: synthetic            # synthetic | tokens
  path: ""                     # token file (little-endian uint16) for `tokens`
  markov_order: 2              # synthetic: tokens depend on this many predecessors
  branching: 4                 # synthetic: distinct successors per context
)yaml";

// resources/jobs/gpt2-tiny.yaml
constexpr std::string_view kJob1 = R"yaml(# A tiny GPT-2 that the CPU reference executor trains in seconds (the demo
# job, `tinyJob()` is this file). The synthetic Markov data is learnable, so
# the loss falls well below ln(vocab) within a few hundred steps. Every field
# is documented in docs/job-spec.md.
name: gpt2-tiny                # label used in plans, traces and reports

model:
  family: gpt2                 # gpt2 | llama (llama is parsed, not planned yet)
  vocab: 64                    # vocabulary size
  seq_len: 32                  # tokens per sequence (context length)
  layers: 2                    # transformer blocks
  hidden: 64                   # model width (channels)
  heads: 4                     # attention heads; must divide hidden
  kv_heads: 0                  # key/value heads; 0 = same as heads
  mlp_ratio: 4                 # MLP width = hidden * mlp_ratio
  tied_embeddings: true        # the output projection reuses the token embedding

training:
  micro_batch: 16              # sequences per rank per micro-batch
  grad_accum: 1                # micro-batches per step (collectives on the last)
  steps: 600                   # optimizer steps to run
  lr: 1e-2                     # peak learning rate (after warm-up)
  min_lr: 1e-3                 # learning rate at the last step (cosine decay)
  warmup_steps: 20             # linear warm-up steps from 0 to lr
  weight_decay: 0.0            # AdamW decoupled weight decay (matrices only)
  beta1: 0.9                   # AdamW first-moment decay
  beta2: 0.95                  # AdamW second-moment decay
  eps: 1e-8                    # AdamW denominator epsilon
  grad_clip: 1.0               # global gradient-norm clip; 0 disables clipping
  precision: fp32              # fp32 | bf16 (bf16 keeps fp32 master weights)
  seed: 1337                   # seed of the initial weights and synthetic data

parallel:
  data_parallel: 1             # ranks, each holding a full model replica

comm:
  bucket_mib: 0.05             # gradient bucket size in MiB: small, so even this model has several buckets
  first_bucket_mib: 0.01       # the first bucket (last layers) is small to start early

recompute:
  policy: none                 # none | selective | full, for every layer
  layers: {}                   # per-layer overrides by index, e.g. {1: full}

data:
  source: synthetic            # synthetic | tokens
  path: ""                     # token file (little-endian uint16) for `tokens`
  markov_order: 1              # synthetic: tokens depend on this many predecessors
  branching: 4                 # synthetic: distinct successors per context
)yaml";

// resources/jobs/gpt2-350m.yaml
constexpr std::string_view kJob2 = R"yaml(# GPT-2 medium (350M parameters) with data parallelism over 8 GPUs.
# Every field is documented in docs/job-spec.md.
name: gpt2-350m                # label used in plans, traces and reports

model:
  family: gpt2                 # gpt2 | llama (llama is parsed, not planned yet)
  vocab: 50304                 # vocabulary size; 50257 padded to a multiple of 128
  seq_len: 1024                # tokens per sequence (context length)
  layers: 24                   # transformer blocks
  hidden: 1024                 # model width (channels)
  heads: 16                    # attention heads; must divide hidden
  kv_heads: 0                  # key/value heads; 0 = same as heads
  mlp_ratio: 4                 # MLP width = hidden * mlp_ratio
  tied_embeddings: true        # the output projection reuses the token embedding

training:
  micro_batch: 16              # sequences per rank per micro-batch
  grad_accum: 1                # micro-batches per step (collectives on the last)
  steps: 10                    # optimizer steps to run
  lr: 6e-4                     # peak learning rate (after warm-up)
  min_lr: 6e-5                 # learning rate at the last step (cosine decay)
  warmup_steps: 0              # linear warm-up steps from 0 to lr
  weight_decay: 0.1            # AdamW decoupled weight decay (matrices only)
  beta1: 0.9                   # AdamW first-moment decay
  beta2: 0.95                  # AdamW second-moment decay
  eps: 1e-8                    # AdamW denominator epsilon
  grad_clip: 1.0               # global gradient-norm clip; 0 disables clipping
  precision: bf16              # fp32 | bf16 (bf16 keeps fp32 master weights)
  seed: 1337                   # seed of the initial weights and synthetic data

parallel:
  data_parallel: 8             # ranks, each holding a full model replica

comm:
  bucket_mib: 25               # gradient bucket size in MiB (all-reduced as one)
  first_bucket_mib: 1          # the first bucket (last layers) is small to start early

recompute:
  policy: none                 # none | selective | full, for every layer
  layers: {}                   # per-layer overrides by index, e.g. {3: full}

data:
  source: synthetic            # synthetic | tokens
  path: ""                     # token file (little-endian uint16) for `tokens`
  markov_order: 2              # synthetic: tokens depend on this many predecessors
  branching: 4                 # synthetic: distinct successors per context
)yaml";

// resources/jobs/gpt2-1.5b.yaml
constexpr std::string_view kJob3 = R"yaml(# GPT-2 XL (1.5B parameters) with data parallelism over 8 GPUs. Two
# accumulated micro-batches of 8 sequences keep the global batch of the
# smaller jobs (8 x 2 x 8 = 128 sequences) at half the activation memory,
# and selective recompute trims it further. Every field is documented in
# docs/job-spec.md.
name: gpt2-1.5b                # label used in plans, traces and reports

model:
  family: gpt2                 # gpt2 | llama (llama is parsed, not planned yet)
  vocab: 50304                 # vocabulary size; 50257 padded to a multiple of 128
  seq_len: 1024                # tokens per sequence (context length)
  layers: 48                   # transformer blocks
  hidden: 1600                 # model width (channels)
  heads: 25                    # attention heads; must divide hidden
  kv_heads: 0                  # key/value heads; 0 = same as heads
  mlp_ratio: 4                 # MLP width = hidden * mlp_ratio
  tied_embeddings: true        # the output projection reuses the token embedding

training:
  micro_batch: 8               # sequences per rank per micro-batch
  grad_accum: 2                # micro-batches per step (collectives on the last)
  steps: 10                    # optimizer steps to run
  lr: 6e-4                     # peak learning rate (after warm-up)
  min_lr: 6e-5                 # learning rate at the last step (cosine decay)
  warmup_steps: 0              # linear warm-up steps from 0 to lr
  weight_decay: 0.1            # AdamW decoupled weight decay (matrices only)
  beta1: 0.9                   # AdamW first-moment decay
  beta2: 0.95                  # AdamW second-moment decay
  eps: 1e-8                    # AdamW denominator epsilon
  grad_clip: 1.0               # global gradient-norm clip; 0 disables clipping
  precision: bf16              # fp32 | bf16 (bf16 keeps fp32 master weights)
  seed: 1337                   # seed of the initial weights and synthetic data

parallel:
  data_parallel: 8             # ranks, each holding a full model replica

comm:
  bucket_mib: 25               # gradient bucket size in MiB (all-reduced as one)
  first_bucket_mib: 1          # the first bucket (last layers) is small to start early

recompute:
  policy: selective            # none | selective | full, for every layer
  layers: {}                   # per-layer overrides by index, e.g. {3: full}

data:
  source: synthetic            # synthetic | tokens
  path: ""                     # token file (little-endian uint16) for `tokens`
  markov_order: 2              # synthetic: tokens depend on this many predecessors
  branching: 4                 # synthetic: distinct successors per context
)yaml";

// resources/jobs/gpt-96l-12288h.yaml
constexpr std::string_view kJob4 = R"yaml(# A GPT-3-sized model (96 layers, 12288 wide, about 175B parameters) at
# sequence length 2048. Pure data parallelism cannot hold it on one GPU;
# it exists to stress the planner, the memory plan and the simulator at
# scale. Every field is documented in docs/job-spec.md.
name: gpt-96l-12288h           # label used in plans, traces and reports

model:
  family: gpt2                 # gpt2 | llama (llama is parsed, not planned yet)
  vocab: 50304                 # vocabulary size; 50257 padded to a multiple of 128
  seq_len: 2048                # tokens per sequence (context length)
  layers: 96                   # transformer blocks
  hidden: 12288                # model width (channels)
  heads: 96                    # attention heads; must divide hidden
  kv_heads: 0                  # key/value heads; 0 = same as heads
  mlp_ratio: 4                 # MLP width = hidden * mlp_ratio
  tied_embeddings: true        # the output projection reuses the token embedding

training:
  micro_batch: 1               # sequences per rank per micro-batch
  grad_accum: 1                # micro-batches per step (collectives on the last)
  steps: 10                    # optimizer steps to run
  lr: 6e-4                     # peak learning rate (after warm-up)
  min_lr: 6e-5                 # learning rate at the last step (cosine decay)
  warmup_steps: 0              # linear warm-up steps from 0 to lr
  weight_decay: 0.1            # AdamW decoupled weight decay (matrices only)
  beta1: 0.9                   # AdamW first-moment decay
  beta2: 0.95                  # AdamW second-moment decay
  eps: 1e-8                    # AdamW denominator epsilon
  grad_clip: 1.0               # global gradient-norm clip; 0 disables clipping
  precision: bf16              # fp32 | bf16 (bf16 keeps fp32 master weights)
  seed: 1337                   # seed of the initial weights and synthetic data

parallel:
  data_parallel: 8             # ranks, each holding a full model replica

comm:
  bucket_mib: 25               # gradient bucket size in MiB (all-reduced as one)
  first_bucket_mib: 1          # the first bucket (last layers) is small to start early

recompute:
  policy: full                 # none | selective | full, for every layer
  layers: {}                   # per-layer overrides by index, e.g. {3: full}

data:
  source: synthetic            # synthetic | tokens
  path: ""                     # token file (little-endian uint16) for `tokens`
  markov_order: 2              # synthetic: tokens depend on this many predecessors
  branching: 4                 # synthetic: distinct successors per context
)yaml";


constexpr std::pair<std::string_view, std::string_view> kBuiltins[] = {
    {"gpt2-124m-dp8", kJob0},
    {"gpt2-tiny", kJob1},
    {"gpt2-350m", kJob2},
    {"gpt2-1.5b", kJob3},
    {"gpt-96l-12288h", kJob4},
};

}  // namespace

std::vector<std::string> builtinJobNames() {
  std::vector<std::string> names;
  for (const auto& [name, text] : kBuiltins) names.emplace_back(name);
  return names;
}

std::string_view builtinJobText(std::string_view name) {
  for (const auto& [builtin, text] : kBuiltins)
    if (builtin == name) return text;
  return {};
}

// Parsed on every call: the texts are small, and no mutable state is kept.
JobSpec defaultJob() { return parseJob(std::string(kJob0), "<embedded>"); }
JobSpec tinyJob() { return parseJob(std::string(kJob1), "<embedded>"); }

}  // namespace tandem
