#include "simulator/calibrate/gemm_census.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <set>
#include <stdexcept>

#include "simulator/calibrate/calibrate.h"
#include "simulator/calibrate/main_kernel.h"
#include "traces/store/trace_reader.h"

namespace tandem::sim {

namespace {

// Widths of the layers of GPT-2 (768-1600), GPT-3's sizes, Llama 2 and 3
// (2048-16384) and their MLPs (4x, and SwiGLU's 2.6875x-3.5x rounded as
// the job specs round them), with the fused projections they feed (the
// attention's 3x, Llama's gate and up together).
constexpr std::array<int64_t, 31> kWidths = {512,   768,   1024,  1280,  1536,  1600,  2048,  2304,
                                             2560,  3072,  3584,  3840,  4096,  4608,  4800,  5120,
                                             5504,  6144,  6400,  6912,  7168,  7680,  8192,  9216,
                                             10240, 11008, 12288, 13824, 14336, 15360, 16384};
// Vocabularies: Llama 2's, GPT-2's padded, Llama 3's.
constexpr std::array<int64_t, 3> kVocabularies = {32000, 50304, 128256};
// Tokens per micro-batch: the rows of a forward or data gradient's output,
// the depth of a weight gradient.
constexpr std::array<int64_t, 7> kTokens = {1024, 2048, 4096, 8192, 16384, 32768, 65536};
// The depth of a forward or data gradient (its kernel follows the output's
// shape far more: the cost model weighs a depth 0.1 against the output).
constexpr std::array<int64_t, 3> kDepths = {1024, 4096, 16384};
// Weight gradients at these tokens (their depth).
constexpr std::array<int64_t, 2> kWeightGradientTokens = {4096, 16384};
// A problem of more than this many FLOPs is left out: at 4 TFLOP the call
// takes about 6 ms on an H100 and tuning it 60 times that; such GEMMs have
// outputs of many waves of tiles, and their kernel's blocks are known from
// the sweep's shapes of that size.
constexpr double kMaxFlops = 4e12;

Task taskOf(const GemmProblem& p) {
  Task t;
  t.op = p.op;
  t.epilogue = p.epilogue;
  t.attrs.m = p.m;
  t.attrs.n = p.n;
  t.attrs.k = p.k;
  return t;
}

void add(std::vector<GemmProblem>& out, OpKind op, Epilogue epi, int64_t m, int64_t n, int64_t k) {
  if (2.0 * double(m) * double(n) * double(k) > kMaxFlops) return;
  GemmProblem p;
  p.op = op;
  p.epilogue = epi;
  p.m = m, p.n = n, p.k = k;
  p.name = shapeKey(taskOf(p));
  out.push_back(std::move(p));
}

std::vector<GemmProblem> fullGrid() {
  std::vector<GemmProblem> out;
  std::vector<int64_t> outputs(kWidths.begin(), kWidths.end());
  outputs.insert(outputs.end(), kVocabularies.begin(), kVocabularies.end());
  // In the order the replay leans on them, so that a census cut short by
  // its time limit lacks the least: the weight gradients (the second
  // stream's GEMMs, beside which the first stream's kernels run), the data
  // gradients, then the forward (every forward GEMM of the held-out traces
  // fills the SMs).
  // Weight gradient dW[N,K] = dy[M,N]^T x[M,K]: every output of a width or
  // vocabulary by a width.
  for (int64_t m : kWeightGradientTokens)
    for (int64_t n : outputs)
      for (int64_t k : kWidths) add(out, OpKind::MatmulBwdWeight, Epilogue::None, m, n, k);
  std::vector<int64_t> data_gradient_depths(kDepths.begin(), kDepths.end());
  data_gradient_depths.insert(data_gradient_depths.end(), kVocabularies.begin(), kVocabularies.end());
  // Forward y[M,N] = x[M,K] W[N,K]^T: M tokens, N a width or a
  // vocabulary, the depth K from kDepths. Data gradient dx[M,K] = dy[M,N]
  // W[N,K]: M tokens, K a width, the depth N from kDepths or a vocabulary
  // (the LM head's). The fused epilogues the executor uses are kernels of
  // their own: the residual add and GELU (GPT-2's MLP) on the forward,
  // GELU's derivative on the data gradient.
  for (int64_t m : kTokens)
    for (int64_t k : kWidths)
      for (int64_t n : data_gradient_depths) {
        add(out, OpKind::MatmulBwdData, Epilogue::None, m, n, k);
        if (n <= kWidths.back()) add(out, OpKind::MatmulBwdData, Epilogue::DGelu, m, n, k);
      }
  for (int64_t m : kTokens)
    for (int64_t n : outputs)
      for (int64_t k : kDepths) {
        add(out, OpKind::Matmul, Epilogue::None, m, n, k);
        add(out, OpKind::Matmul, Epilogue::Residual, m, n, k);
        if (n <= kWidths.back()) add(out, OpKind::Matmul, Epilogue::Gelu, m, n, k);
      }
  return out;
}

std::vector<GemmProblem> smokeGrid() {
  std::vector<GemmProblem> out;
  add(out, OpKind::Matmul, Epilogue::None, 2048, 1024, 1024);
  add(out, OpKind::MatmulBwdData, Epilogue::None, 2048, 3072, 1024);
  add(out, OpKind::MatmulBwdWeight, Epilogue::None, 2048, 4096, 1024);
  return out;
}

}  // namespace

std::vector<std::string> gemmCensusGridNames() { return {"full", "smoke"}; }

std::vector<GemmProblem> gemmCensusGrid(const std::string& name) {
  if (name == "full") return fullGrid();
  if (name == "smoke") return smokeGrid();
  throw std::invalid_argument("unknown GEMM census grid '" + name + "' (known: full, smoke)");
}

GemmCensus readGemmCensus(const std::string& trace_path) {
  traces::TraceReader reader(trace_path);
  int64_t run = -1;
  std::string gpus;
  for (const traces::RunInfo& r : reader.runs())
    if (r.name == kGemmCensusRunName) run = r.id, gpus = runDevices(r.devices_json).gpus;
  if (run < 0)
    throw std::runtime_error(fmt::format("{}: no GEMM census in it (a run named '{}', as `tandem calibrate "
                                         "--gemm-census` writes)",
                                         trace_path, kGemmCensusRunName));
  GemmCensus out;
  out.gpu = gpus;
  const auto kernels = mainKernelsByTask(reader, run);
  for (const traces::PlanTaskRow& t : reader.planTasks(run)) {
    const auto op = parseOpKind(t.op);
    if (!op || (*op != OpKind::Matmul && *op != OpKind::MatmulBwdData && *op != OpKind::MatmulBwdWeight))
      throw std::runtime_error(
          fmt::format("{}: census task {} ('{}') is not a GEMM (op '{}')", trace_path, t.task_id, t.name, t.op));
    ++out.problems;
    const auto k = kernels.find({t.rank, t.task_id});
    if (k == kernels.end()) {
      ++out.without_kernel;
      continue;
    }
    CostEntry e;
    e.blocks = k->second.blocks;
    e.threads = k->second.threads;
    e.registers = k->second.registers;
    e.shared_bytes = k->second.shared_bytes;
    e.cluster = k->second.cluster;
    e.tile = k->second.tile;
    out.kernels[*op][t.name] = e;
  }
  return out;
}

std::string gemmKernelsYaml(const GemmKernels& kernels, const std::string& comment) {
  std::string y = "gemm_kernels:  # " + comment + "\n";
  for (const auto& [op, shapes] : kernels) {
    if (shapes.empty()) continue;
    y += fmt::format("  {}:\n", toString(op));
    for (const auto& [key, e] : shapes)
      y += fmt::format("    \"{}\": \"blocks {}{}{}\"\n", key, e.blocks,
                       e.tile ? fmt::format(" tile {}x{}", e.tile->m, e.tile->n) : "",
                       e.threads > 0 ? fmt::format(" cluster {} threads {} regs {} smem {}", e.cluster, e.threads,
                                                   e.registers, e.shared_bytes)
                                     : "");
  }
  return y;
}

std::string withGemmKernels(const std::string& calibration_yaml, const std::string& section) {
  // Drop the old section: its first line and the indented (or blank) lines after it.
  std::string kept;
  bool in_old = false;
  size_t pos = 0;
  while (pos < calibration_yaml.size()) {
    size_t end = calibration_yaml.find('\n', pos);
    if (end == std::string::npos) end = calibration_yaml.size();
    const std::string line = calibration_yaml.substr(pos, end - pos);
    pos = end + 1;
    if (line.rfind("gemm_kernels:", 0) == 0) {
      in_old = true;
      continue;
    }
    if (in_old && (line.empty() || line[0] == ' ' || line[0] == '\t')) continue;
    in_old = false;
    kept += line + "\n";
  }
  while (kept.size() >= 2 && kept[kept.size() - 1] == '\n' && kept[kept.size() - 2] == '\n') kept.pop_back();
  return kept + section;
}

}  // namespace tandem::sim
