#include "engine/ir/types.h"

#include <array>
#include <utility>

namespace tandem {
namespace {

// One table per enum: the enum value and its stable spelling. Lookup both ways
// is a linear scan: the tables are tiny and this is never on a hot path.
template <class E, size_t N>
using Names = std::array<std::pair<E, std::string_view>, N>;

constexpr Names<DType, 5> kDType{
    {{DType::F32, "f32"}, {DType::BF16, "bf16"}, {DType::I32, "i32"}, {DType::F8, "f8"}, {DType::U8, "u8"}}};
constexpr Names<TensorCategory, 7> kCategory{{{TensorCategory::Parameter, "parameters"},
                                              {TensorCategory::MasterWeight, "master_weights"},
                                              {TensorCategory::Gradient, "gradients"},
                                              {TensorCategory::OptimizerState, "optimizer_state"},
                                              {TensorCategory::Activation, "activations"},
                                              {TensorCategory::Input, "inputs"},
                                              {TensorCategory::Workspace, "workspace"}}};
constexpr Names<RecomputePolicy, 5> kRecompute{{{RecomputePolicy::None, "none"},
                                                {RecomputePolicy::Selective, "selective"},
                                                {RecomputePolicy::Full, "full"},
                                                {RecomputePolicy::Attention, "attention"},
                                                {RecomputePolicy::AlternateGemms, "alternate_gemms"}}};
constexpr Names<Precision, 3> kPrecision{
    {{Precision::FP32, "fp32"}, {Precision::BF16, "bf16"}, {Precision::FP8, "fp8"}}};
constexpr Names<TaskKind, 5> kTask{{{TaskKind::Kernel, "kernel"},
                                    {TaskKind::Collective, "collective"},
                                    {TaskKind::SendRecv, "sendrecv"},
                                    {TaskKind::Memcpy, "memcpy"},
                                    {TaskKind::Host, "host"}}};
constexpr Names<Epilogue, 5> kEpilogue{{{Epilogue::None, "none"},
                                        {Epilogue::Gelu, "gelu"},
                                        {Epilogue::DGelu, "dgelu"},
                                        {Epilogue::AddLayerNorm, "add_layernorm"},
                                        {Epilogue::Residual, "residual"}}};
constexpr Names<OpKind, 32> kOp{{{OpKind::Embedding, "embedding"},
                                 {OpKind::EmbeddingBwd, "embedding_bwd"},
                                 {OpKind::LayerNorm, "layernorm"},
                                 {OpKind::LayerNormBwd, "layernorm_bwd"},
                                 {OpKind::Matmul, "matmul"},
                                 {OpKind::MatmulBwdData, "matmul_bwd_data"},
                                 {OpKind::MatmulBwdWeight, "matmul_bwd_weight"},
                                 {OpKind::Attention, "attention"},
                                 {OpKind::AttentionBwd, "attention_bwd"},
                                 {OpKind::Gelu, "gelu"},
                                 {OpKind::GeluBwd, "gelu_bwd"},
                                 {OpKind::Add, "add"},
                                 {OpKind::CrossEntropy, "cross_entropy"},
                                 {OpKind::CrossEntropyBwd, "cross_entropy_bwd"},
                                 {OpKind::LoadBatch, "load_batch"},
                                 {OpKind::AllReduce, "all_reduce"},
                                 {OpKind::ReduceScatter, "reduce_scatter"},
                                 {OpKind::AllGather, "all_gather"},
                                 {OpKind::GradNorm, "grad_norm"},
                                 {OpKind::AdamW, "adamw"},
                                 {OpKind::CrossEntropyStats, "cross_entropy_stats"},
                                 {OpKind::RmsNorm, "rmsnorm"},
                                 {OpKind::RmsNormBwd, "rmsnorm_bwd"},
                                 {OpKind::SwiGlu, "swiglu"},
                                 {OpKind::SwiGluBwd, "swiglu_bwd"},
                                 {OpKind::SquaredRelu, "squared_relu"},
                                 {OpKind::SquaredReluBwd, "squared_relu_bwd"},
                                 {OpKind::PackKv, "pack_kv"},
                                 {OpKind::PackKvBwd, "pack_kv_bwd"},
                                 {OpKind::CastFp8, "cast_fp8"},
                                 {OpKind::Send, "send"},
                                 {OpKind::Recv, "recv"}}};

template <class E, size_t N>
std::string_view nameOf(const Names<E, N>& table, E v) {
  for (const auto& [e, s] : table)
    if (e == v) return s;
  return "?";
}

template <class E, size_t N>
std::optional<E> valueOf(const Names<E, N>& table, std::string_view s) {
  for (const auto& [e, name] : table)
    if (name == s) return e;
  return std::nullopt;
}

}  // namespace

int64_t dtypeSize(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::F8: return 1;
    case DType::U8: return 1;
  }
  return 4;
}

std::string_view toString(DType v) { return nameOf(kDType, v); }
std::string_view toString(TensorCategory v) { return nameOf(kCategory, v); }
std::string_view toString(RecomputePolicy v) { return nameOf(kRecompute, v); }
std::string_view toString(Precision v) { return nameOf(kPrecision, v); }
std::string_view toString(TaskKind v) { return nameOf(kTask, v); }
std::string_view toString(OpKind v) { return nameOf(kOp, v); }
std::string_view toString(Epilogue v) { return nameOf(kEpilogue, v); }

std::optional<DType> parseDType(std::string_view s) { return valueOf(kDType, s); }
std::optional<TensorCategory> parseTensorCategory(std::string_view s) { return valueOf(kCategory, s); }
std::optional<RecomputePolicy> parseRecomputePolicy(std::string_view s) { return valueOf(kRecompute, s); }
std::vector<std::string_view> recomputePolicyNames() {
  std::vector<std::string_view> out;
  for (const auto& [policy, name] : kRecompute) out.push_back(name);
  return out;
}
std::optional<Precision> parsePrecision(std::string_view s) { return valueOf(kPrecision, s); }
std::optional<TaskKind> parseTaskKind(std::string_view s) { return valueOf(kTask, s); }
std::optional<OpKind> parseOpKind(std::string_view s) { return valueOf(kOp, s); }
std::optional<Epilogue> parseEpilogue(std::string_view s) { return valueOf(kEpilogue, s); }

}  // namespace tandem
