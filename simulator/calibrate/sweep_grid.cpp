#include "simulator/calibrate/sweep_grid.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace tandem::sim {
namespace {

// What every point shares: one rank, one micro-batch per step, nothing
// recomputed, and every kernel alone on one compute stream (a kernel is
// timed as itself, not as whatever ran beside it) except in the points
// marked `beside`, which measure how the weight-gradient stream shares the
// GPU (kernel_overlap_efficiency).
std::vector<std::string> commonSets(int layers, bool beside) {
  std::vector<std::string> sets = {"parallel.data_parallel=1", "training.grad_accum=1", "recompute.policy=none",
                                   fmt::format("model.layers={}", layers)};
  if (!beside) sets.push_back("schedule.weight_gradient_stream=false");
  return sets;
}

struct Width {
  int hidden, heads, kv_heads;  // kv_heads 0: as many as heads
  double mlp_ratio;             // 0: the family's default (GPT-2's 4)
  int layers;
};

SweepPoint gptPoint(const Width& w, int micro_batch, int seq, bool beside = false) {
  SweepPoint p;
  p.part = "gpt";
  p.name = fmt::format("gpt-c{}-b{}x{}{}", w.hidden, micro_batch, seq, beside ? "-beside" : "");
  p.sets = commonSets(w.layers, beside);
  for (std::string s : {fmt::format("model.hidden={}", w.hidden), fmt::format("model.heads={}", w.heads),
                        fmt::format("training.micro_batch={}", micro_batch), fmt::format("model.seq_len={}", seq)})
    p.sets.push_back(std::move(s));
  return p;
}

SweepPoint llamaPoint(const Width& w, int micro_batch, int seq, bool beside = false) {
  SweepPoint p;
  p.part = "llama";
  const int ffn = int(w.hidden * w.mlp_ratio + 0.5);
  p.name = fmt::format("llama-c{}-h{}-kv{}-f{}-b{}x{}{}", w.hidden, w.heads, w.kv_heads, ffn, micro_batch, seq,
                       beside ? "-beside" : "");
  p.sets = commonSets(w.layers, beside);
  for (std::string s :
       {std::string("model.family=llama"), std::string("model.vocab=32000"),
        std::string("model.tied_embeddings=false"), fmt::format("model.hidden={}", w.hidden),
        fmt::format("model.heads={}", w.heads), fmt::format("model.kv_heads={}", w.kv_heads),
        fmt::format("model.mlp_ratio={}", w.mlp_ratio), fmt::format("training.micro_batch={}", micro_batch),
        fmt::format("model.seq_len={}", seq)})
    p.sets.push_back(std::move(s));
  return p;
}

// GPT-2 family: heads 64 wide, MLP 4x, two layers. Each width at two to
// five (micro-batch x sequence) pairs, so that tokens per micro-batch (the
// GEMMs' m) run 2k-32k and sequences (attention) 512-32768 across the grid:
// the attention's efficiency still rises from 8192 to 16384 (a held-out
// GPT-2 124M at 16384 ran 5% faster per FLOP than any shape of 8192), which
// shorter neighbours can only extrapolate.
// At sequence 512 the heads in flight (b x h) run 32 to 800: the attention
// gets slower per FLOP with more of them (a held-out job's 32 x 512 with 16
// heads ran 1.3x slower per FLOP than the sweep's 8 x 512), which
// neighbours at other sequences do not tell. At 16384 the forward falls
// off a knee between 32 and 48 heads in flight (measured on one H100: 352
// TFLOP/s with 32, 247 with 48, 206 with 64): 32 and 48 at 16384 beside
// the 64 already there.
std::vector<SweepPoint> gptPoints() {
  struct Row {
    Width w;
    std::vector<std::pair<int, int>> batches;  // (micro-batch, sequence)
  };
  const std::vector<Row> rows = {
      {{512, 8, 0, 0, 2}, {{4, 512}, {8, 1024}, {16, 2048}, {4, 8192}}},
      {{768, 12, 0, 0, 2}, {{4, 512}, {16, 1024}, {8, 4096}}},
      {{1024, 16, 0, 0, 2}, {{8, 512}, {16, 512}, {8, 1024}, {4, 8192}, {1, 32768}}},
      {{1600, 25, 0, 0, 2}, {{4, 1024}, {8, 2048}, {32, 1024}, {32, 512}}},
      {{2048, 32, 0, 0, 2}, {{2, 1024}, {4, 2048}, {16, 2048}, {2, 16384}, {1, 16384}}},
      {{3072, 48, 0, 0, 2}, {{4, 1024}, {4, 4096}, {1, 16384}}},
      {{4096, 64, 0, 0, 2}, {{2, 1024}, {8, 1024}, {8, 4096}}},
      {{6144, 96, 0, 0, 2}, {{4, 1024}, {4, 4096}}},
  };
  std::vector<SweepPoint> out;
  for (const Row& r : rows)
    for (const auto& [mb, seq] : r.batches) out.push_back(gptPoint(r.w, mb, seq));
  out.push_back(gptPoint(rows[2].w, 8, 1024, /*beside=*/true));
  return out;
}

// Llama family: heads 128 wide (one 64-wide width, Llama 3.2 1B's), the
// SwiGLU widths and grouped-query ratios of Llama 2 7B/13B, Llama 3 8B and
// 70B, Llama 3.2 1B/3B and Llama 3.1 405B; tokens per micro-batch 4k-64k,
// sequences 512-32k. The attention's efficiency follows the sequence, the
// heads in flight (b x h) and the grouping (shape_interpolation.h): heads 128
// wide meet every sequence octave from 512 to 8192 with and without
// grouping (groups 1, 4 and 8 at 2048, the commonest training length), and
// heads 64 wide short sequences with many heads and, grouped, one of 32768.
// The 70B and 405B widths run one layer (memory).
std::vector<SweepPoint> llamaPoints() {
  struct Row {
    Width w;
    std::vector<std::pair<int, int>> batches;
  };
  const std::vector<Row> rows = {
      {{2048, 32, 8, 4.0, 2}, {{4, 2048}, {2, 8192}, {16, 512}, {1, 32768}}},  // Llama 3.2 1B (heads 64 wide)
      {{2048, 16, 16, 2.6875, 2}, {{8, 1024}, {16, 4096}}},         // heads 128 wide, no grouping
      {{3072, 24, 8, 8192.0 / 3072, 2}, {{1, 4096}, {4, 4096}}},    // Llama 3.2 3B
      {{4096, 32, 32, 2.6875, 2}, {{1, 4096}, {4, 4096}, {2, 32768}, {16, 512}, {4, 2048}}},  // Llama 2 7B
      {{4096, 32, 8, 3.5, 2}, {{2, 4096}, {4, 8192}, {8, 2048}, {8, 1024}}},              // Llama 3 8B
      {{5120, 40, 40, 2.7, 2}, {{2, 4096}}},                        // Llama 2 13B
      {{8192, 64, 8, 3.5, 1}, {{1, 4096}, {4, 4096}, {2, 2048}}},   // Llama 3 70B
      {{16384, 128, 8, 3.25, 1}, {{1, 8192}}},                      // Llama 3.1 405B
  };
  std::vector<SweepPoint> out;
  for (const Row& r : rows)
    for (const auto& [mb, seq] : r.batches) out.push_back(llamaPoint(r.w, mb, seq));
  out.push_back(llamaPoint(rows[3].w, 1, 4096, /*beside=*/true));
  return out;
}

// FP8 steps (training.precision fp8) at shapes the bf16 grid also runs,
// so that `tandem calibrate` measures the FP8 GEMMs and the norms' and
// activations' FP8 writers beside their bf16 twins, in a step at the power
// limit: the in-step FP8 speed-up of each GEMM role by GFLOP
// (fp8_gemm_speedup; 1.7-2.1x in a 1.1B Llama's steps on one H100, against
// 1.65x back to back) and each writer's slowdown (fp8_writer_slowdown).
// The Llama family under delayed scaling (its norms and activations write
// FP8), GPT-2 under current scaling (casts; delayed is not run on GPUs for
// GPT-2).
SweepPoint fp8Point(SweepPoint p, const char* scaling) {
  p.part = "fp8";
  p.name += fmt::format("-fp8{}", scaling[0] == 'd' ? "" : "cs");
  p.sets.push_back("training.precision=fp8");
  p.sets.push_back(fmt::format("training.fp8_scaling={}", scaling));
  return p;
}

std::vector<SweepPoint> fp8Points() {
  return {
      fp8Point(llamaPoint({2048, 32, 8, 4.0, 2}, 4, 2048), "delayed"),
      fp8Point(llamaPoint({4096, 32, 32, 2.6875, 2}, 1, 4096), "delayed"),
      fp8Point(llamaPoint({4096, 32, 32, 2.6875, 2}, 4, 4096), "delayed"),
      fp8Point(llamaPoint({4096, 32, 8, 3.5, 2}, 8, 1024), "delayed"),
      fp8Point(llamaPoint({8192, 64, 8, 3.5, 1}, 1, 4096), "delayed"),
      fp8Point(gptPoint({768, 12, 0, 0, 2}, 16, 1024), "current"),
      fp8Point(gptPoint({1600, 25, 0, 0, 2}, 8, 2048), "current"),
      fp8Point(gptPoint({4096, 64, 0, 0, 2}, 8, 1024), "current"),
  };
}

std::vector<SweepPoint> smokePoints() {
  return {gptPoint({512, 8, 0, 0, 2}, 4, 512), gptPoint({512, 8, 0, 0, 2}, 4, 512, /*beside=*/true),
          llamaPoint({2048, 16, 4, 2.6875, 1}, 2, 1024)};
}

}  // namespace

std::vector<std::string> sweepGridNames() { return {"full", "smoke"}; }

std::vector<SweepPoint> sweepGrid(const std::string& name) {
  if (name == "full") {
    // The families in turn, so that a sweep stopped by its time limit has
    // measured some of each.
    const std::vector<SweepPoint> gpt = gptPoints(), llama = llamaPoints();
    std::vector<SweepPoint> all;
    for (size_t i = 0; i < std::max(gpt.size(), llama.size()); ++i) {
      if (i < gpt.size()) all.push_back(gpt[i]);
      if (i < llama.size()) all.push_back(llama[i]);
    }
    // Last: their bf16 twins are measured first, whatever the time limit;
    // the twins belong to part "fp8" too.
    for (SweepPoint& f : fp8Points()) {
      std::vector<std::string> bf16_sets = f.sets;
      bf16_sets.resize(bf16_sets.size() - 2);  // fp8Point's two
      for (SweepPoint& twin : all)
        if (twin.sets == bf16_sets) twin.also_in.push_back("fp8");
      all.push_back(std::move(f));
    }
    return all;
  }
  if (name == "smoke") return smokePoints();
  throw std::invalid_argument(fmt::format("unknown sweep grid '{}' (grids: full, smoke)", name));
}

bool inPart(const SweepPoint& point, const std::string& part) {
  return point.part == part || std::find(point.also_in.begin(), point.also_in.end(), part) != point.also_in.end();
}

JobSpec sweepJob(const SweepPoint& point) {
  const JobSpec base = defaultJob();
  return parseJob(base.yaml, "sweep point " + point.name, point.sets);
}

}  // namespace tandem::sim
