#include "runner/gemm_census_run.h"

#include <fmt/format.h>
#include <unistd.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>

#include "engine/cuda/check.h"
#include "engine/cuda/device.h"
#include "engine/cuda/device_record.h"
#include "engine/cuda/gemm.h"
#include "vocabulary/version.h"
#ifdef TANDEM_HAVE_PROFILER
#include "profiler/profiler.h"
#endif

namespace tandem::runner {

namespace {

// Device memory freed on every way out, filled with the bytes the executor
// tunes its GEMMs on (0x3c: bf16 1.01; tensor cores run faster on zeros).
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    TANDEM_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
    TANDEM_CUDA_CHECK(cudaMemset(p, 0x3c, std::max<size_t>(bytes, 256)));
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// The operands of every problem fit these: three matrices, GELU's input and a bias.
struct Operands {
  size_t matrix_bytes = 0, bias_bytes = 0;
};
Operands operandsFor(const std::vector<GemmProblem>& problems) {
  Operands o;
  for (const GemmProblem& p : problems) {
    const int64_t most = std::max({p.m * p.k, p.m * p.n, p.n * p.k});
    o.matrix_bytes = std::max(o.matrix_bytes, size_t(most) * 2);  // bf16
    o.bias_bytes = std::max(o.bias_bytes, size_t(std::max(p.n, p.k)) * 2);
  }
  return o;
}

// Whether the executor's GEMM path takes this problem (its fused epilogues
// are offered for some shapes only).
bool supported(cuda::Gemm& g, const GemmProblem& p) {
  switch (p.epilogue) {
    case Epilogue::Residual: return g.forwardResidualSupported(p.m, p.n, p.k, false, DType::BF16);
    case Epilogue::Gelu: return g.forwardGeluSupported(p.m, p.n, p.k, true, DType::BF16);
    case Epilogue::DGelu: return g.backwardDataGeluSupported(p.m, p.n, p.k, DType::BF16);
    default: return true;
  }
}

// One call as the executor makes it for a task of this kind: no bias but
// on GELU's (GPT-2's MLP; the census cannot tell a GPT-2 layer's plain and
// residual GEMMs, which have one, from a Llama's, which have none), never
// accumulating.
void issue(cuda::Gemm& g, const GemmProblem& p, void* a, void* b, void* c, void* d, void* bias, cudaStream_t s) {
  const DType dt = DType::BF16;
  switch (p.op) {
    case OpKind::Matmul:
      if (p.epilogue == Epilogue::Residual) g.forwardResidual(c, a, b, nullptr, c, p.m, p.n, p.k, dt, s);
      else if (p.epilogue == Epilogue::Gelu) g.forwardGelu(c, d, a, b, bias, p.m, p.n, p.k, dt, s);
      else g.forward(c, a, b, nullptr, p.m, p.n, p.k, dt, s);
      return;
    case OpKind::MatmulBwdData:
      if (p.epilogue == Epilogue::DGelu) g.backwardDataGelu(c, a, b, d, p.m, p.n, p.k, dt, s);
      else g.backwardData(c, a, b, p.m, p.n, p.k, false, dt, s);
      return;
    case OpKind::MatmulBwdWeight: g.backwardWeight(c, a, b, p.m, p.n, p.k, false, dt, s); return;
    default:
      throw std::runtime_error(fmt::format("GEMM census: problem '{}' is not a GEMM ({})", p.name, toString(p.op)));
  }
}

}  // namespace

GemmCensusRunSummary runGemmCensus(const std::vector<GemmProblem>& problems, const GemmCensusRunOptions& options) {
#ifndef TANDEM_HAVE_PROFILER
  (void)problems, (void)options;
  throw std::runtime_error("GEMM census: this tandem was built without the CUPTI profiler");
#else
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };
  std::string why;
  if (cuda::usableGpuCount(&why) <= options.device)
    throw std::runtime_error(fmt::format("GEMM census: no GPU {} to run it on ({})", options.device,
                                         why.empty() ? "too few" : why));
  TANDEM_CUDA_CHECK(cudaSetDevice(options.device));
  GemmCensusRunSummary out;
  const cuda::DeviceRecord device = cuda::deviceRecord(options.device);
  out.gpu = device.name;

  const Operands sizes = operandsFor(problems);
  DeviceBuffer a(sizes.matrix_bytes), b(sizes.matrix_bytes), c(sizes.matrix_bytes), d(sizes.matrix_bytes),
      bias(sizes.bias_bytes), workspace(cuda::Gemm::kWorkspaceBytes);
  cudaStream_t stream = nullptr;
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } stream_guard{stream};
  cuda::Gemm gemm(workspace.p, cuda::Gemm::kWorkspaceBytes);

  // 1. Each problem's algorithm, chosen as a run's first step chooses it.
  std::vector<size_t> tuned;
  gemm.setTuning(true);
  double last_report = 0;
  for (size_t i = 0; i < problems.size(); ++i) {
    if (options.time_limit_s > 0 && seconds() > options.time_limit_s) {
      out.left_out = int(problems.size() - i);
      break;
    }
    if (!supported(gemm, problems[i])) {
      ++out.unsupported;
      continue;
    }
    issue(gemm, problems[i], a.p, b.p, c.p, d.p, bias.p, stream);
    tuned.push_back(i);
    if (options.progress && seconds() - last_report > 10) {
      TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
      last_report = seconds();
      options.progress(int(i + 1), int(problems.size()), last_report);
    }
  }
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
  gemm.setTuning(false);

  // 2. Each once more as a task of one profiled step: the kernel it runs.
  // (The profiler starts only now: the tuning's hundreds of launches per
  // shape would fill the trace and say nothing the census needs.)
  profiler::ProfilerOptions po;
  po.path = options.trace_path;
  std::error_code ec;
  std::filesystem::remove(po.path, ec);
  po.run.kind = traces::RunKind::Real;
  po.run.name = options.run_name;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  po.run.host = host;
  po.run.devices_json = cuda::devicesJson(device);
  po.run.tool_version = std::string(toolVersion());
  po.device = options.device;
  profiler::Profiler prof(po);
  std::vector<profiler::TaskInfo> tasks;  // the problems tuned
  for (size_t i : tuned) {
    profiler::TaskInfo t;
    t.task_id = int64_t(i);
    t.name = problems[i].name;
    t.op = std::string(toString(problems[i].op));
    t.phase = problems[i].op == OpKind::Matmul ? Phase::Forward : Phase::Backward;
    t.flops = 2.0 * double(problems[i].m) * double(problems[i].n) * double(problems[i].k);
    tasks.push_back(std::move(t));
  }
  prof.addTasks(tasks);
  prof.nameStream(0, stream, StreamKind::Compute, "GEMM census");

  prof.stepBegin(0);
  for (size_t i : tuned) {
    prof.taskBegin(int64_t(i), stream);
    issue(gemm, problems[i], a.p, b.p, c.p, d.p, bias.p, stream);
    prof.taskEnd(int64_t(i));
  }
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
  prof.stepEnd(0);
  out.recorded = int(tuned.size());
  out.profile = profiler::formatSummary(prof.finish());
  out.seconds = seconds();
  return out;
#endif
}

}  // namespace tandem::runner
