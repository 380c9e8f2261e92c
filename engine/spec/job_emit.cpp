// Canonical YAML of a job: every field, fixed order, block style, numbers in
// their shortest exact form. Plans and traces store this text and hash it,
// so two jobs that mean the same thing have the same content hash.
#include <cctype>
#include <charconv>
#include <cstdio>
#include <string>

#include "engine/numerics/init.h"
#include "engine/spec/job.h"

namespace tandem {
namespace {

// Shortest text that reads back to the same double, always recognisable as
// a float ("25.0", "0.0006", "1e-8").
std::string yamlNumber(double x) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, x);
  std::string s(buffer, result.ptr);
  size_t e = s.find('e');
  if (e != std::string::npos) {
    // to_chars writes "6e-04" and "1e+20"; YAML readers take "6e-4" and "1e20".
    std::string mantissa = s.substr(0, e);
    std::string exponent = s.substr(e + 1);
    bool negative = exponent[0] == '-';
    size_t digits = exponent.find_first_not_of("+-0");
    s = mantissa + "e" + (negative ? "-" : "") + exponent.substr(digits);
  } else if (s.find('.') == std::string::npos) {
    s += ".0";
  }
  return s;
}

// Strings stay plain when they cannot be mistaken for another YAML type,
// otherwise they are double-quoted with escapes.
std::string yamlString(const std::string& s) {
  static const char* const kReserved[] = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"};
  bool plain = !s.empty() && (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_' || s[0] == '/');
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.' && c != '/') plain = false;
  if (plain) {
    std::string lower;
    for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const char* word : kReserved)
      if (lower == word) plain = false;
  }
  if (plain) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", static_cast<unsigned char>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string hex64(uint64_t v) {
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(v));
  return buffer;
}

}  // namespace

std::string jobToYaml(const JobSpec& job) {
  const ModelSpec& m = job.model;
  const TrainingSpec& t = job.training;
  std::string y;
  auto line = [&](const std::string& text) { y += text + "\n"; };
  auto field = [&](const char* key, const std::string& value) { line(std::string("  ") + key + ": " + value); };
  auto integer = [](auto v) { return std::to_string(v); };

  line("name: " + yamlString(job.name));
  line("model:");
  field("family", std::string(toString(m.family)));
  field("vocab", integer(m.vocab));
  field("seq_len", integer(m.seq_len));
  field("layers", integer(m.layers));
  field("hidden", integer(m.hidden));
  field("heads", integer(m.heads));
  field("kv_heads", integer(m.kv_heads));
  field("mlp_ratio", yamlNumber(m.mlp_ratio));
  field("tied_embeddings", m.tied_embeddings ? "true" : "false");
  if (m.mlp_activation != MlpActivation::SwiGlu) field("mlp_activation", std::string(toString(m.mlp_activation)));
  if (m.attention_dropout != 0) field("attention_dropout", yamlNumber(m.attention_dropout));
  line("training:");
  field("micro_batch", integer(t.micro_batch));
  field("grad_accum", integer(t.grad_accum));
  field("steps", integer(t.steps));
  field("lr", yamlNumber(t.lr));
  field("min_lr", yamlNumber(t.min_lr));
  field("warmup_steps", integer(t.warmup_steps));
  field("weight_decay", yamlNumber(t.weight_decay));
  field("beta1", yamlNumber(t.beta1));
  field("beta2", yamlNumber(t.beta2));
  field("eps", yamlNumber(t.eps));
  field("grad_clip", yamlNumber(t.grad_clip));
  field("precision", std::string(toString(t.precision)));
  if (t.fp8_scaling != Fp8Scaling::Delayed) field("fp8_scaling", std::string(toString(t.fp8_scaling)));
  if (t.fp8_bf16_first_layers != 0) field("fp8_bf16_first_layers", integer(t.fp8_bf16_first_layers));
  if (t.fp8_bf16_last_layers != 0) field("fp8_bf16_last_layers", integer(t.fp8_bf16_last_layers));
  if (t.fp8_attention_grad) field("fp8_attention_grad", "true");
  if (t.fp8_param_gather) field("fp8_param_gather", "true");
  field("seed", integer(t.seed));
  line("parallel:");
  field("data_parallel", integer(job.parallel.data_parallel));
  field("tensor_parallel", integer(job.parallel.tensor_parallel));
  field("sequence_parallel", job.parallel.sequence_parallel ? "true" : "false");
  // Fields added after the first format are written only where they differ
  // from their default, so a job planned before they existed keeps its
  // text and hash (plans and traces name the job by it).
  if (job.parallel.context_parallel != 1) field("context_parallel", integer(job.parallel.context_parallel));
  field("pipeline_parallel", integer(job.parallel.pipeline_parallel));
  field("pipeline_chunks", integer(job.parallel.pipeline_chunks));
  std::string stage_layers;
  for (int n : job.parallel.pipeline_layers) stage_layers += (stage_layers.empty() ? "" : ", ") + integer(n);
  field("pipeline_layers", "[" + stage_layers + "]");
  field("shard_optimizer", job.parallel.shard_optimizer ? "true" : "false");
  if (job.parallel.shard_gradients) field("shard_gradients", "true");
  field("shard_parameters", job.parallel.shard_parameters ? "true" : "false");
  field("shard_group_size", integer(job.parallel.shard_group_size));
  line("comm:");
  field("bucket_mib", yamlNumber(job.comm.bucket_mib));
  field("first_bucket_mib", yamlNumber(job.comm.first_bucket_mib));
  field("gather_embedding_gradient", job.comm.gather_embedding_gradient ? "true" : "false");
  field("reduce_every_micro_batch", job.comm.reduce_every_micro_batch ? "true" : "false");
  if (job.comm.pipeline_scatter_gather) field("pipeline_scatter_gather", "true");
  if (job.comm.grad_reduce_fp32) field("grad_reduce_fp32", "true");
  line("schedule:");
  field("weight_gradient_stream", job.schedule.weight_gradient_stream ? "true" : "false");
  field("fuse_bias_gradients", job.schedule.fuse_bias_gradients ? "true" : "false");
  field("optimizer_beside_forward", job.schedule.optimizer_beside_forward ? "true" : "false");
  field("residual_in_gemm", job.schedule.residual_in_gemm ? "true" : "false");
  field("lm_head_chunks", integer(job.schedule.lm_head_chunks));
  field("gather_ahead", integer(job.schedule.gather_ahead));
  if (job.schedule.materialized_attention) field("materialized_attention", "true");
  if (job.schedule.tp_comm_overlap) field("tp_comm_overlap", "true");
  if (job.schedule.attention_kernel != AttentionKernel::Fused)
    field("attention_kernel", std::string(toString(job.schedule.attention_kernel)));
  if (job.schedule.elementwise != ElementwiseKernels::Fused)
    field("elementwise", std::string(toString(job.schedule.elementwise)));
  if (job.schedule.projections != Projections::Fused)
    field("projections", std::string(toString(job.schedule.projections)));
  line("recompute:");
  field("policy", std::string(toString(job.recompute.policy)));
  if (job.recompute.rerun != FullRerun::Block) field("rerun", std::string(toString(job.recompute.rerun)));
  if (job.recompute.per_layer.empty()) {
    field("layers", "{}");
  } else {
    line("  layers:");
    for (const auto& [layer, policy] : job.recompute.per_layer)
      line("    " + integer(layer) + ": " + std::string(toString(policy)));
  }
  line("data:");
  field("source", yamlString(job.data.source));
  field("path", yamlString(job.data.path));
  field("markov_order", integer(job.data.markov_order));
  field("branching", integer(job.data.branching));
  return y;
}

void refreshJobText(JobSpec& job) {
  job.yaml = jobToYaml(job);
  job.content_hash = hex64(fnv1a64(job.yaml.data(), job.yaml.size()));
}

}  // namespace tandem
