#pragma once
// GPT-2 as graph IR: parameter tensors and the forward of one micro-batch.

#include <vector>

#include "engine/graph.h"
#include "engine/job.h"

namespace tandem {

struct Gpt2Layer {
  int ln1_w, ln1_b, qkv_w, qkv_b, attproj_w, attproj_b;
  int ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
};

struct Gpt2Params {
  int wte = -1;  // [V, C], also the LM head when embeddings are tied
  int wpe = -1;  // [T, C]
  int lm_head = -1;  // == wte when tied
  std::vector<Gpt2Layer> layers;
  int lnf_w = -1, lnf_b = -1;
};

// Adds every parameter with its gradient, master copy (bf16 jobs) and AdamW
// moments to the graph, in the order GPT-2 checkpoints list them.
Gpt2Params addGpt2Parameters(Graph& g, const JobSpec& job);

struct ForwardOutputs {
  int tokens = -1;
  int targets = -1;
  int losses = -1;
};

// Emits the data load and forward nodes of one micro-batch.
ForwardOutputs emitGpt2Forward(Graph& g, const JobSpec& job, const Gpt2Params& p, int micro_batch);

// Activation dtype of the job (bf16 jobs keep activations in bf16).
DType activationDType(const JobSpec& job);

}  // namespace tandem
