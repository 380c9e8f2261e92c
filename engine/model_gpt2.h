#pragma once
// GPT-2 as graph IR: parameter tensors and the forward of one micro-batch.

#include <vector>

#include "engine/graph.h"
#include "engine/job.h"
#include "engine/pass_pipeline.h"

namespace tandem {

struct Gpt2Layer {
  int ln1_w, ln1_b, qkv_w, qkv_b, attproj_w, attproj_b;
  int ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
};

// A pipeline stage's (or chunk's) parameters (-1 where another holds them).
struct Gpt2Params {
  int wte = -1;  // [V, C] (first stage), also the LM head when embeddings are tied
  int wpe = -1;  // [T, C] (first stage)
  int lm_head = -1;  // last stage; its own copy of wte when tied and the pipeline has several stages
  std::vector<Gpt2Layer> layers;  // the stage's blocks, from its first layer
  int lnf_w = -1, lnf_b = -1;     // last stage
};

// Adds every parameter of the stage with its gradient, master copy (bf16
// jobs) and AdamW moments to the graph, in the order GPT-2 checkpoints list
// them.
Gpt2Params addGpt2Parameters(Graph& g, const JobSpec& job, const ModelChunk& stage);

struct ForwardOutputs {
  int tokens = -1;
  int targets = -1;
  int losses = -1;        // last stage
  int stage_input = -1;   // after the first stage: the activations received
  int stage_output = -1;  // before the last stage: the activations sent on
};

// Emits the data load and forward nodes of one micro-batch on the stage.
ForwardOutputs emitGpt2Forward(Graph& g, const JobSpec& job, const Gpt2Params& p, int micro_batch,
                               const ModelChunk& stage);

// Activation dtype of the job (bf16 jobs keep activations in bf16).
DType activationDType(const JobSpec& job);

}  // namespace tandem
