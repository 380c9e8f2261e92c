#pragma once
// The decoder-only transformers tandem plans, as graph IR: parameter tensors
// and the forward of one micro-batch. GPT-2 (LayerNorm with biases, learned
// positions, GELU MLP, biased linear layers) and Llama (RMSNorm, rotary
// positions and grouped-query attention, SwiGLU MLP, no biases).

#include <vector>

#include "engine/ir/graph.h"
#include "engine/passes/pipeline.h"
#include "engine/spec/job.h"

namespace tandem {

// A block's parameters; Llama's norms and linear layers have no biases (-1).
struct BlockParams {
  int ln1_w = -1, ln1_b = -1, qkv_w = -1, qkv_b = -1, attproj_w = -1, attproj_b = -1;
  int ln2_w = -1, ln2_b = -1, fc_w = -1, fc_b = -1, fcproj_w = -1, fcproj_b = -1;
};

// A pipeline stage's (or chunk's) parameters (-1 where another holds them).
struct ModelParams {
  int wte = -1;  // [V, C] (first stage), also the LM head when embeddings are tied
  int wpe = -1;  // [T, C] (first stage; GPT-2)
  int lm_head = -1;  // last stage; its own copy of wte when tied and the pipeline has several stages
  std::vector<BlockParams> layers;  // the stage's blocks, from its first layer
  int lnf_w = -1, lnf_b = -1;     // last stage
};

// Adds every parameter of the stage with its gradient, master copy (bf16
// jobs) and AdamW moments to the graph, in the order the family's
// checkpoints list them. Llama's QKV weight is laid out by key/value group
// ([q of the group's heads, k, v] rows per group, as Megatron-LM lays out
// grouped-query attention), its MLP input layer as [gate; up].
ModelParams addModelParameters(Graph& g, const JobSpec& job, const ModelChunk& stage);

struct ForwardOutputs {
  int tokens = -1;
  int targets = -1;
  int losses = -1;        // last stage
  int stage_input = -1;   // after the first stage: the activations received
  int stage_output = -1;  // before the last stage: the activations sent on
};

// Emits the data load and forward nodes of one micro-batch on the stage.
ForwardOutputs emitForward(Graph& g, const JobSpec& job, const ModelParams& p, int micro_batch,
                               const ModelChunk& stage);

// Activation dtype of the job (bf16 jobs keep activations in bf16).
DType activationDType(const JobSpec& job);

}  // namespace tandem
