#include "simulator/cost/framework_kernels.h"

#include <cctype>
#include <string>

namespace tandem::sim {
namespace {

constexpr double kF32 = 4.0;

// A chain under construction: each add() is one kernel.
class Chain {
 public:
  void add(double bytes, double flops = 0) { kernels_.push_back({flops, bytes}); }
  std::vector<PassKernel> take() { return std::move(kernels_); }

 private:
  std::vector<PassKernel> kernels_;
};

// torchtitan's RMSNorm: x.float(); x * rsqrt(x.pow(2).mean(-1) + eps);
// .type_as(x); * weight. N elements in R rows of `width`.
void rmsNormForward(Chain& k, double n, double rows, double width, double el) {
  const bool upcast = el != kF32;
  if (upcast) k.add(n * (el + kF32));        // x.float()
  k.add(n * 2 * kF32, n);                    // pow(2)
  k.add(n * kF32 + rows * kF32, n);          // mean(-1)
  k.add(rows * 2 * kF32, rows);              // + eps
  k.add(rows * 2 * kF32, rows);              // rsqrt
  k.add(n * 2 * kF32 + rows * kF32, n);      // x * rsqrt
  if (upcast) k.add(n * (kF32 + el));        // type_as(x)
  k.add(n * 2 * el + width * el, n);         // * weight
}

// Autograd's chain back through those steps.
void rmsNormBackward(Chain& k, double n, double rows, double width, double el) {
  const bool upcast = el != kF32;
  k.add(n * 2 * el + width * el, n);         // d(normed) = g * weight
  k.add(n * 3 * el, n);                      // g * normed, for the weight ...
  k.add(n * el + width * kF32, n);           // ... summed over the rows
  if (upcast) k.add(n * (el + kF32));        // type_as backward: to fp32
  k.add(n * 2 * kF32 + rows * kF32, n);      // d(x) part: g * rsqrt
  k.add(n * 3 * kF32, n);                    // d(rsqrt) part: g * x ...
  k.add(n * kF32 + rows * kF32, n);          // ... summed over the row
  k.add(rows * 3 * kF32, 3 * rows);          // rsqrt backward
  k.add(rows * kF32 + n * kF32, n);          // mean backward: expanded / width
  k.add(n * 2 * kF32, n);                    // pow backward: 2 * x ...
  k.add(n * 3 * kF32, n);                    // ... times the gradient
  k.add(n * 3 * kF32, n);                    // the two contributions to dx summed
  if (upcast) k.add(n * (kF32 + el));        // x.float() backward: back to x's type
}

// silu(gate) * up over N output elements.
void swiGluForward(Chain& k, double n, double el) {
  k.add(n * 2 * el, 4 * n);  // silu
  k.add(n * 3 * el, n);      // * up
}

void swiGluBackward(Chain& k, double n, double el) {
  k.add(n * 3 * el, n);      // d(silu out) = g * up
  k.add(n * 3 * el, n);      // d(up) = g * silu out
  k.add(n * 3 * el, 5 * n);  // silu backward
}

// relu(x) then .pow(2) (Nemotron's squared ReLU, unfused).
void squaredReluForward(Chain& k, double n, double el) {
  k.add(n * 2 * el, n);
  k.add(n * 2 * el, n);
}

void squaredReluBackward(Chain& k, double n, double el) {
  k.add(n * 2 * el, n);      // 2 * relu(x)
  k.add(n * 3 * el, n);      // times the gradient
  k.add(n * 3 * el, n);      // relu backward
}

// cross_entropy(logits.float(), targets) over L logits of M tokens:
// log_softmax reads each row three times (max, sum, output) and writes it.
void crossEntropyForward(Chain& k, double logits, double tokens, double el) {
  if (el != kF32) k.add(logits * (el + kF32));
  k.add(logits * 4 * kF32, 4 * logits);
  k.add(tokens * (2 * kF32 + 8), tokens);  // nll_loss: the target's log-probability
}

void crossEntropyBackward(Chain& k, double logits, double tokens, double el) {
  k.add(logits * kF32);                    // nll_loss backward: zeros ...
  k.add(tokens * (kF32 + 8));              // ... and the targets' entries
  k.add(logits * 4 * kF32, 3 * logits);    // log_softmax backward (the row sum, then the rows)
  if (el != kF32) k.add(logits * (kF32 + el));
}

// Around the attention kernel (torchtitan's Attention.forward): rotary on
// q and k in fp32 complex arithmetic, the key/value groups repeated to
// every query head (repeat_kv), and the output transposed back to [tokens,
// heads x width]. q holds nq elements, k and v nk each.
void attentionForwardExtras(Chain& k, double nq, double nk, bool rotary, double el) {
  if (rotary)
    for (double n : {nq, nk}) {
      if (el != kF32) k.add(n * (el + kF32));
      k.add(n * 2 * kF32, 3 * n);  // times the complex frequencies
      if (el != kF32) k.add(n * (kF32 + el));
    }
  if (nk < nq)
    for (int kv = 0; kv < 2; ++kv) k.add(nk * el + nq * el);
  k.add(nq * 2 * el);  // transpose(1, 2).contiguous()
}

void attentionBackwardExtras(Chain& k, double nq, double nk, bool rotary, double el) {
  k.add(nq * 2 * el);  // the transpose's backward
  if (nk < nq)
    for (int kv = 0; kv < 2; ++kv) k.add(nq * el + nk * el, nq);  // repeat_kv backward: summed over the repeats
  if (rotary)
    for (double n : {nq, nk}) {
      if (el != kF32) k.add(n * (el + kF32));
      k.add(n * 2 * kF32, 3 * n);  // times the conjugate frequencies
      if (el != kF32) k.add(n * (kF32 + el));
    }
}

}  // namespace

std::vector<PassKernel> eagerKernels(const Task& task, Precision precision) {
  const OpAttrs& a = task.attrs;
  if (!a.eager) return {};
  // Activations are 16-bit unless the job trains in fp32 (FP8 jobs keep
  // bf16 activations).
  const double el = precision == Precision::FP32 ? 4.0 : 2.0;
  Chain k;
  const double n = double(a.elements);
  switch (task.op) {
    case OpKind::RmsNorm: rmsNormForward(k, double(a.m) * double(a.c), double(a.m), double(a.c), el); break;
    case OpKind::RmsNormBwd: rmsNormBackward(k, double(a.m) * double(a.c), double(a.m), double(a.c), el); break;
    case OpKind::SwiGlu: swiGluForward(k, n, el); break;
    case OpKind::SwiGluBwd: swiGluBackward(k, n, el); break;
    case OpKind::SquaredRelu: squaredReluForward(k, n, el); break;
    case OpKind::SquaredReluBwd: squaredReluBackward(k, n, el); break;
    // The vocabulary-parallel loss is a framework's own (tensor_parallel):
    // left as planned.
    case OpKind::CrossEntropy:
      if (a.tensor_parallel <= 1) crossEntropyForward(k, double(a.m) * double(a.v), double(a.m), el);
      break;
    case OpKind::CrossEntropyBwd:
      if (a.tensor_parallel <= 1) crossEntropyBackward(k, double(a.m) * double(a.v), double(a.m), el);
      break;
    case OpKind::Attention:
    case OpKind::AttentionBwd: {
      if (a.h <= 0 || a.c <= 0) break;
      const double tokens = double(a.b) * double(a.t);
      const double width = double(a.c) / double(a.h);
      const double nq = tokens * double(a.c);
      const bool grouped = a.kv_heads > 0;  // Llama's layout: rotary, grouped keys and values
      const double nk = grouped ? tokens * double(a.kv_heads) * width : nq;
      if (task.op == OpKind::Attention) attentionForwardExtras(k, nq, nk, grouped, el);
      else attentionBackwardExtras(k, nq, nk, grouped, el);
      break;
    }
    default: break;
  }
  return k.take();
}

bool hasWarpgroupMma(const DeviceSpec& device) {
  std::string model;
  for (char c : device.model) model += char(std::toupper(static_cast<unsigned char>(c)));
  if (model.rfind("NVIDIA ", 0) == 0) model = model.substr(7);
  return model.rfind("H100", 0) == 0 || model.rfind("H200", 0) == 0 || model.rfind("H800", 0) == 0 ||
         model.rfind("GH200", 0) == 0;
}

double flash2Stretch(const Task& task, const DeviceSpec& device) {
  if (!task.attrs.flash2 || !hasWarpgroupMma(device)) return 1.0;
  // FlashAttention-2 against the Hopper kernels at head width 128
  // (framework_kernels.h): forward 631 / 329, backward 518 / 318 TFLOP/s.
  if (task.op == OpKind::Attention) return 631.0 / 329.0;
  if (task.op == OpKind::AttentionBwd) return 518.0 / 318.0;
  return 1.0;
}

}  // namespace tandem::sim
