#include "engine/cuda/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <thread>

#include "engine/cuda/executor_impl.h"
#include "engine/cuda/graph_memsets.h"
#include "engine/memory/gpu_footprint.h"
#include "engine/numerics/bf16.h"
#include "engine/numerics/fp8_history.h"
#include "engine/numerics/init.h"
#include "engine/passes/buckets.h"
#include "engine/plan/gpu_support.h"

namespace tandem::cuda {

namespace {

// TANDEM_GRAPH_MERGED_MEMSET: `roots` (the default) runs the merged memsets
// before the graph's roots, `users` before each GEMM that had a memset
// (orderBeforeRoots in graph_memsets.h says why).
bool mergedMemsetsBeforeRoots() {
  const char* env = std::getenv("TANDEM_GRAPH_MERGED_MEMSET");
  if (env == nullptr || *env == 0 || std::string(env) == "roots") return true;
  if (std::string(env) == "users") return false;
  throw CudaError(std::string("TANDEM_GRAPH_MERGED_MEMSET must be roots or users, not '") + env + "'");
}

int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

int64_t chunksOf(int64_t n) { return (n + kChunkElements - 1) / kChunkElements; }

}  // namespace

CudaExecutor::Impl::Impl(const Plan& p, const ExecutorOptions& o) : plan(p), opt(o) {
  const auto setup_start = std::chrono::steady_clock::now();
  auto mark = setup_start;
  auto secondsSinceMark = [&mark] {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - mark).count();
    mark = now;
    return s;
  };
  // What this executor does not run, in the words `tandem plan` uses too.
  if (const std::optional<std::string> why = gpuRunRefusal(plan)) throw CudaError("cuda executor: " + *why);
  program = &plan.forRank(opt.rank);
  if (opt.world != plan.world_size)
    throw CudaError(fmt::format("cuda executor: the plan is for {} ranks but {} processes run it",
                                plan.world_size, opt.world));
  TANDEM_CUDA_CHECK(cudaSetDevice(opt.device));

  // Refuse before any allocation when the plan cannot fit.
  size_t free_b = 0, total_b = 0;
  TANDEM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const int64_t arena_bytes = program->memory.arena_bytes;
  const int64_t overhead = gpu_footprint::executorFootprint(plan).total();
  const int64_t reserve = gpu_footprint::kRunReserveBytes;
  const int64_t needed = arena_bytes + overhead + reserve;
  if (needed > int64_t(free_b)) {
    const double gib = double(1 << 30);
    throw OutOfDeviceMemory(
        fmt::format("job '{}' needs {:.2f} GiB on GPU {} (arena {:.2f} GiB + executor {:.2f} GiB + "
                    "reserve {:.2f} GiB) but only {:.2f} GiB of {:.2f} GiB are free: short by {:.2f} GiB",
                    plan.job.name, needed / gib, opt.device, arena_bytes / gib, overhead / gib,
                    reserve / gib, double(free_b) / gib, double(total_b) / gib,
                    (needed - int64_t(free_b)) / gib),
        needed, int64_t(free_b));
  }

  makeCommunicators();

  for (size_t i = 0; i < program->streams.size(); ++i) {
    cudaStream_t s;
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    streams.push_back(s);
  }
  for (int i = 0; i < program->num_events; ++i) {
    cudaEvent_t e;
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events.push_back(e);
  }
  TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&fork_event, cudaEventDisableTiming));
  for (size_t i = 0; i < streams.size(); ++i) {
    cudaEvent_t e;
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    join_events.push_back(e);
  }
  for (int i = 0; i < kSlots; ++i) {
    TANDEM_CUDA_CHECK(cudaEventCreate(&start_event[i]));
    TANDEM_CUDA_CHECK(cudaEventCreate(&stop_event[i]));
  }
  TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&loads_done, cudaEventDisableTiming));

  // Set-up work on the GPU, like the GEMM timing below: a profiler files
  // its records (the attention's probe kernel) apart from the steps'.
  if (opt.observer) opt.observer->onSetupWorkBegin();
  secondsSinceMark();  // what comes before (streams, events, NCCL) is not timed here
  prepareKernels();
  // Heads 128 wide run on the tensor-core kernels' Hopper code only, which
  // prepareKernels found loaded or not (gpuRunRefusal judged the plan).
  const DType activations = plan.job.training.precision == Precision::FP32 ? DType::F32 : DType::BF16;
  for (const Task& t : program->tasks)
    if (t.op == OpKind::Attention && !attentionRunsHere(t.attrs.c, t.attrs.h, activations))
      throw CudaError(fmt::format("cuda executor: attention heads {} wide run on the tensor cores' Hopper (sm_90a) "
                                  "kernels only; on this GPU the attention takes the {} path",
                                  t.attrs.c / t.attrs.h, attentionMmaPath()));
  arena = static_cast<std::byte*>(deviceAlloc(arena_bytes));
  TANDEM_CUDA_CHECK(cudaMemset(arena, 0, arena_bytes));
  if (opt.observer) opt.observer->onSetupWorkEnd();
  for (const StreamInfo& si : program->streams)
    gemms.push_back(si.kind == StreamKind::Compute
                        ? std::make_unique<Gemm>(deviceAlloc(Gemm::kWorkspaceBytes), Gemm::kWorkspaceBytes)
                        : nullptr);
  if (gemms.empty() || !gemms[0])
    throw CudaError("cuda executor: the plan's stream 0 is not a compute stream");
  for (int64_t bytes : gpu_footprint::scratchBytesPerStream(*program))
    scratch.push_back(static_cast<float*>(deviceAlloc(bytes)));
  prepareFp8();
  scalars = static_cast<StepScalars*>(deviceAlloc(sizeof(StepScalars)));
  TANDEM_CUDA_CHECK(cudaMallocHost(&host_scalars, kSlots * sizeof(StepScalars)));
  TANDEM_CUDA_CHECK(cudaMallocHost(&host_out, kSlots * 2 * sizeof(float)));
  for (int i = 0; i < kSlots; ++i) host_scalars[i] = StepScalars{};

  data = makeTokenSource(plan.job);
  if (opt.time_tasks) {
    task_ms.assign(program->tasks.size(), 0.0);
    for (size_t i = 0; i < program->tasks.size(); ++i) {
      cudaEvent_t a, b;
      TANDEM_CUDA_CHECK(cudaEventCreate(&a));
      TANDEM_CUDA_CHECK(cudaEventCreate(&b));
      task_start.push_back(a);
      task_end.push_back(b);
    }
  }
  updates_at_start = std::any_of(program->tasks.begin(), program->tasks.end(), [](const Task& t) {
    return t.op == OpKind::AdamW && t.attrs.from_previous_step;
  });
  setup_times.kernels_and_arena_s = secondsSinceMark();
  if (opt.observer) opt.observer->onSetupWorkBegin();
  prepareTasks();
  if (opt.observer) opt.observer->onSetupWorkEnd();
  setup_times.tables_s = secondsSinceMark();
  tuneGemms();  // a set-up window of its own
  setup_times.gemm_timing_s = secondsSinceMark();
  // The initial weights' copies (Llama 2 7B: 40 GB, 5.7 s) are set-up too.
  if (opt.observer) opt.observer->onSetupWorkBegin();
  initialiseParameters();
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
  if (opt.observer) opt.observer->onSetupWorkEnd();
  setup_times.initial_weights_s = secondsSinceMark();
  setup_times.total_s = std::chrono::duration<double>(mark - setup_start).count();

  size_t free_after = 0;
  TANDEM_CUDA_CHECK(cudaMemGetInfo(&free_after, &total_b));
  mem.planned_arena_bytes = arena_bytes;
  mem.workspace_bytes = gpu_footprint::executorFootprint(plan).gemm_workspaces;
  mem.allocated_bytes = allocated;
  mem.scratch_bytes = allocated - arena_bytes - mem.workspace_bytes;
  mem.device_used_bytes = int64_t(total_b) - int64_t(free_after);
}

// NCCL: the world's communicator from the rendezvous id, and each other
// process group's split from it (every rank takes part in every split, in
// the order of Plan::groups; a group over every rank shares the world's).
// In-process ranks: the LocalWorld's.
void CudaExecutor::Impl::makeCommunicators() {
  const bool collectives = std::any_of(program->tasks.begin(), program->tasks.end(),
                                       [](const Task& t) { return t.collective.has_value(); });
  if (opt.local_world) {
    comm = opt.local_world->world(opt.rank);
  } else if (opt.world > 1) {
    auto nccl = std::make_unique<NcclComm>(opt.nccl_id, opt.rank, opt.world, opt.timeout_s);
    nccl_world = nccl.get();
    comm = std::move(nccl);
  } else if (collectives) {
    // One rank with collectives (sharded parameters over one rank): a
    // communicator of one, with an id of its own.
    auto nccl = std::make_unique<NcclComm>(makeNcclId(), 0, 1, opt.timeout_s);
    nccl_world = nccl.get();
    comm = std::move(nccl);
  }
  std::vector<std::string> names;  // in first-appearance order, the same on every rank
  for (const ProcessGroup& g : plan.groups)
    if (std::find(names.begin(), names.end(), g.name) == names.end()) names.push_back(g.name);
  // The groups that carry sends and receives, in any rank's program.
  std::set<std::string> p2p_names;
  for (const RankPlan& rp : plan.programs)
    for (const Task& t : rp.tasks)
      if ((t.op == OpKind::Send || t.op == OpKind::Recv) && t.collective) p2p_names.insert(t.collective->group);
  for (const std::string& name : names) {
    int color = -1, key = 0, index = 0, size = 0;
    for (const ProcessGroup& g : plan.groups) {
      if (g.name != name) continue;
      const auto at = std::find(g.ranks.begin(), g.ranks.end(), opt.rank);
      if (at != g.ranks.end()) color = index, key = int(at - g.ranks.begin()), size = int(g.ranks.size());
      ++index;
    }
    if (opt.local_world) {
      if (auto c = opt.local_world->group(name, opt.rank)) group_comms[name] = std::move(c);
      continue;
    }
    if (!nccl_world) continue;
    if (p2p_names.count(name))
      for (int sender = 0; sender < 2; ++sender)
        if (auto c = nccl_world->split(color, key)) p2p_comms[name][size_t(sender)] = std::move(c);
    if (size == plan.world_size) continue;  // the world's communicator serves it
    if (auto c = nccl_world->split(color, key)) group_comms[name] = std::move(c);
  }
}

Communicator& CudaExecutor::Impl::p2pComm(const Task& t, int sender) const {
  const auto it = p2p_comms.find(t.collective.value().group);
  if (it == p2p_comms.end()) return commFor(t);  // in-process: one group, a channel per direction
  return *it->second.at(size_t(sender));
}

Communicator& CudaExecutor::Impl::commFor(const Task& t) const {
  const std::string& group = t.collective.value().group;
  if (const auto it = group_comms.find(group); it != group_comms.end()) return *it->second;
  if (!comm) throw CudaError(fmt::format("cuda executor: {} needs a communicator", t.name));
  return *comm;
}

CudaExecutor::Impl::~Impl() {
  cudaSetDevice(opt.device);
  // Frees nothing while a kernel may still run (after an abort the process exits instead).
  if (graph_exec) cudaGraphExecDestroy(graph_exec);
  for (void* p : allocations) cudaFree(p);
  for (void* p : host_allocations) cudaFreeHost(p);
  if (host_scalars) cudaFreeHost(host_scalars);
  if (host_out) cudaFreeHost(host_out);
  for (auto e : events) cudaEventDestroy(e);
  for (auto e : join_events) cudaEventDestroy(e);
  for (auto e : collective_done) cudaEventDestroy(e);
  for (auto e : task_start) cudaEventDestroy(e);
  for (auto e : task_end) cudaEventDestroy(e);
  if (fork_event) cudaEventDestroy(fork_event);
  for (int i = 0; i < kSlots; ++i) {
    if (start_event[i]) cudaEventDestroy(start_event[i]);
    if (stop_event[i]) cudaEventDestroy(stop_event[i]);
  }
  if (loads_done) cudaEventDestroy(loads_done);
  gemms.clear();
  p2p_comms.clear();
  group_comms.clear();
  comm.reset();
  for (auto s : streams) cudaStreamDestroy(s);
}

void* CudaExecutor::Impl::deviceAlloc(int64_t bytes) {
  void* p = nullptr;
  TANDEM_CUDA_CHECK(cudaMalloc(&p, size_t(std::max<int64_t>(bytes, 1))));
  allocations.push_back(p);
  allocated += align256(bytes);
  return p;
}

void* CudaExecutor::Impl::ptr(int buffer) const {
  const Buffer& b = program->buffers.at(buffer);
  if (b.offset < 0)
    throw CudaError(fmt::format("cuda executor: buffer {} ({}) has no arena offset", b.id, b.name));
  return arena + b.offset;
}

void CudaExecutor::Impl::prepareFp8() {
  const int64_t bytes = gpu_footprint::fp8ScaleBytes(*program);
  if (bytes == 0) return;
  fp8_format.assign(program->buffers.size(), Fp8Format::E4M3);
  fp8_slot.assign(program->buffers.size(), -1);
  int slots = 0;
  for (const Buffer& b : program->buffers)
    if (b.dtype == DType::F8) fp8_slot[size_t(b.id)] = slots++;
  std::vector<int> writer(program->buffers.size(), -1);
  for (const Task& t : program->tasks)
    for (int b : t.writes) {
      if (program->buffers.at(size_t(b)).dtype != DType::F8) continue;
      const Fp8Format f = t.phase == Phase::Backward ? Fp8Format::E5M2 : Fp8Format::E4M3;
      if (writer[size_t(b)] >= 0 && fp8_format[size_t(b)] != f)
        throw CudaError(fmt::format("cuda executor: FP8 buffer {} is written in two formats (tasks {} and {})",
                                    program->buffers[size_t(b)].name, writer[size_t(b)], t.id));
      fp8_format[size_t(b)] = f;
      writer[size_t(b)] = t.id;
    }
  fp8_scales = static_cast<std::byte*>(deviceAlloc(bytes));
  std::vector<float> ones(size_t(bytes) / sizeof(float), 1.0f);
  TANDEM_CUDA_CHECK(cudaMemcpy(fp8_scales, ones.data(), size_t(bytes), cudaMemcpyHostToDevice));
  // The partial maxima a producer writes and its cast reads, after the slots.
  fp8_amax_partials.assign(program->tasks.size(), nullptr);
  std::byte* at = fp8_scales + int64_t(slots) * gpu_footprint::kFp8ScaleSlotBytes;
  for (const auto& [producer, cast] : gpu_footprint::fp8AmaxProducers(*program)) {
    fp8_amax_partials[size_t(producer)] = fp8_amax_partials[size_t(cast)] = reinterpret_cast<float*>(at);
    at += gpu_footprint::kFp8AmaxPartialsBytes;
  }
  // Delayed scaling's state after those: each key's format from its
  // writers, which must agree with the formats of the buffers they write.
  fp8_keys = gpu_footprint::fp8DelayedKeys(*program);
  const int keys = int(fp8_keys.names.size());
  fp8_delayed = fp8DelayedStateAt(at, keys);
  for (size_t i = 0; i < program->tasks.size(); ++i) {
    const int k = fp8_keys.of_task[i];
    if (k < 0) continue;
    const Fp8Format f = fp8_keys.backward[size_t(k)] ? Fp8Format::E5M2 : Fp8Format::E4M3;
    for (int b : program->tasks[i].writes)
      if (program->buffers.at(size_t(b)).dtype == DType::F8 && fp8_format[size_t(b)] != f)
        throw CudaError(fmt::format("cuda executor: {} writes {} in another FP8 format than its cast key {} has",
                                    program->tasks[i].name, program->buffers[size_t(b)].name,
                                    fp8_keys.names[size_t(k)]));
  }
  if (keys > 0) loadFp8Delayed("");
}

// Each key's scale 1 and history empty (text ""), or what saveFp8Delayed
// wrote: the scale of the first step after it as the CPU reference takes
// it (Fp8Scales::scaleForWrite), from the history's largest amax.
void CudaExecutor::Impl::loadFp8Delayed(const std::string& text) {
  const int keys = fp8_delayed.keys;
  Fp8History state;
  if (!text.empty()) state = decodeFp8History(text);
  std::map<std::string, int> index;
  for (int k = 0; k < keys; ++k) index[fp8_keys.names[size_t(k)]] = k;
  for (const auto& [key, last] : state.last_scale)
    if (!index.count(key))
      throw checkpoint::CheckpointError(
          fmt::format("FP8 scale state: the cast {} is not one this plan's rank {} has", key, opt.rank));
  std::vector<float> scale(size_t(keys), 1.f), last(size_t(keys), 1.f), history(size_t(keys) * kFp8History, 0.f);
  std::vector<int> count(size_t(keys), 0), format(size_t(keys), 0);
  std::vector<unsigned> amax(size_t(keys), 0u);
  for (int k = 0; k < keys; ++k) {
    const std::string& key = fp8_keys.names[size_t(k)];
    const Fp8Format f = fp8_keys.backward[size_t(k)] ? Fp8Format::E5M2 : Fp8Format::E4M3;
    format[size_t(k)] = f == Fp8Format::E5M2;
    if (const auto l = state.last_scale.find(key); l != state.last_scale.end()) last[size_t(k)] = l->second;
    const auto h = state.amax.find(key);
    if (h == state.amax.end() || h->second.empty()) continue;
    count[size_t(k)] = int(h->second.size());
    fp8HistoryToRing(h->second, history.data() + int64_t(k) * kFp8History);
    scale[size_t(k)] = fp8DelayedScale(h->second, f, last[size_t(k)]);
  }
  auto put = [&](void* dst, const void* src, size_t bytes) {
    TANDEM_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  };
  put(fp8_delayed.scale, scale.data(), scale.size() * 4);
  put(fp8_delayed.last, last.data(), last.size() * 4);
  put(fp8_delayed.amax, amax.data(), amax.size() * 4);
  put(fp8_delayed.count, count.data(), count.size() * 4);
  put(fp8_delayed.format, format.data(), format.size() * 4);
  put(fp8_delayed.history, history.data(), history.size() * 4);
}

// Keys with a history (every key once a step has run), each with the
// scale its last step's writes used and the history oldest first.
std::string CudaExecutor::Impl::saveFp8Delayed() const {
  const size_t keys = size_t(fp8_delayed.keys);
  std::vector<float> last(keys), history(keys * kFp8History);
  std::vector<int> count(keys);
  auto get = [&](void* dst, const void* src, size_t bytes) {
    TANDEM_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  };
  get(last.data(), fp8_delayed.last, last.size() * 4);
  get(count.data(), fp8_delayed.count, count.size() * 4);
  get(history.data(), fp8_delayed.history, history.size() * 4);
  Fp8History state;
  for (size_t k = 0; k < keys; ++k) {
    const int n = count[k];
    if (n == 0) continue;
    const std::string& key = fp8_keys.names[k];
    state.last_scale[key] = last[k];
    state.amax[key] = fp8HistoryFromRing(history.data() + k * kFp8History, n);
  }
  return encodeFp8History(state);
}

Fp8Write CudaExecutor::Impl::fp8Write(int index, int buffer, int transposed) const {
  const int k = fp8_keys.of_task.empty() ? -1 : fp8_keys.of_task.at(size_t(index));
  if (k < 0)
    throw CudaError(fmt::format("cuda executor: {} writes FP8 with no delayed-scaling key",
                                program->tasks.at(size_t(index)).name));
  Fp8Write w;
  w.format = fp8_format.at(size_t(buffer));
  w.scale = fp8_delayed.scale + k;
  w.amax = fp8_delayed.amax + k;
  w.scale_inv = fp8ScaleInv(buffer);
  w.scale_inv_t = transposed >= 0 ? fp8ScaleInv(transposed) : nullptr;
  return w;
}

float* CudaExecutor::Impl::fp8AmaxPartials(int task) const {
  return fp8_amax_partials.empty() ? nullptr : fp8_amax_partials.at(size_t(task));
}

float* CudaExecutor::Impl::fp8ScaleInv(int buffer) const {
  const int slot = fp8_scales ? fp8_slot.at(size_t(buffer)) : -1;
  if (slot < 0)
    throw CudaError(fmt::format("cuda executor: {} is not an FP8 buffer", program->buffers.at(size_t(buffer)).name));
  return reinterpret_cast<float*>(fp8_scales + int64_t(slot) * gpu_footprint::kFp8ScaleSlotBytes);
}

void CudaExecutor::Impl::prepareTasks() {
  const auto& tasks = program->tasks;
  skip.assign(tasks.size(), false);
  fused_scale.assign(tasks.size(), 0.0);
  fusion = planFusion(*program, fusionKinds(opt.fusion), [&](int i, int partner, FusionKind kind) {
    return fusionSupported(i, partner, kind);
  });
  load_of_task.assign(tasks.size(), -1);
  std::vector<int> last_load_of_buffer(program->buffers.size(), -1);

  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    if (t.op == OpKind::LoadBatch) {
      // Staging the next batch early needs one stream for every load: the
      // event after the last one then follows all of them.
      if (last_load_task >= 0 && tasks[size_t(last_load_task)].stream != t.stream) load_stream_mixed = true;
      last_load_task = int(i);
      LoadSlot slot;
      slot.task = int(i);
      slot.count = program->buffers[t.writes[0]].elementCount();
      last_load_of_buffer[t.writes[0]] = int(loads.size());
      loads.push_back(slot);
    }
    if (t.op == OpKind::EmbeddingBwd) {
      const int load = last_load_of_buffer[t.reads[1]];
      if (load < 0)
        throw CudaError(fmt::format("cuda executor: task {} ({}) reads tokens no LoadBatch wrote", t.id, t.name));
      load_of_task[i] = load;
      if (t.attrs.shards > 1) loads[size_t(load)].ranks = int(t.attrs.shards);
    }
    // Fused softmax + cross-entropy: when the backward of the same logits
    // follows on the same stream with nothing else touching the logits, the
    // forward kernel also writes dlogits in place and the backward is free.
    // (Not with the vocabulary split: the loss needs every rank's statistics.)
    if (t.op == OpKind::CrossEntropy && t.attrs.tensor_parallel <= 1) {
      const int logits = t.reads[0];
      for (size_t j = i + 1; j < tasks.size(); ++j) {
        const Task& u = tasks[j];
        const bool touches = std::count(u.reads.begin(), u.reads.end(), logits) ||
                             std::count(u.writes.begin(), u.writes.end(), logits);
        if (u.op == OpKind::CrossEntropyBwd && !u.writes.empty() && u.writes[0] == logits &&
            u.stream == t.stream) {
          fused_scale[i] = u.attrs.loss_scale;
          skip[j] = true;
          break;
        }
        if (touches) break;
      }
    }
    if (t.op == OpKind::GradNorm || t.op == OpKind::AdamW) buildTable(int(i));
    if (t.collective) {
      cudaEvent_t e;
      TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      collective_done.push_back(e);
      collective_tasks.push_back(int(i));
    }
    if (t.op == OpKind::GradNorm) {
      norm_buffer = t.writes[0];
      norm_is_squared = t.attrs.shards > 0 || t.attrs.norm_squared;
    }
  }
  // Staging buffers, once every load knows how many ranks' tokens it indexes.
  for (LoadSlot& slot : loads) {
    TANDEM_CUDA_CHECK(cudaMallocHost(&slot.host, size_t(2 * slot.count + slot.indexWords()) * sizeof(int32_t)));
    host_allocations.push_back(slot.host);
    slot.device_index = static_cast<int32_t*>(deviceAlloc(size_t(slot.indexWords()) * 4));
  }
}

void CudaExecutor::Impl::buildTable(int task) {
  const Task& t = program->tasks[task];
  const TrainingSpec& tr = plan.job.training;
  std::vector<TensorSlot> slots;
  int64_t chunks = 0;
  auto add = [&](TensorSlot s) {
    s.chunk_begin = chunks;
    chunks += chunksOf(s.n);
    if (s.n > 0) slots.push_back(s);
  };
  // With the optimizer sharded, each table covers this rank's shard of
  // every bucket it names (shardOf).
  // Sharded tasks (attrs.shards >= 1; one shard for sharded parameters
  // over one rank) use the sharded layout even when the shard is whole.
  const bool sharded = t.attrs.shards > 0;
  const int64_t shards = std::max<int64_t>(1, t.attrs.shards);
  // The rank's place in its data-parallel group places its shards.
  const int64_t rank = sharded ? plan.job.dataParallelRank(opt.rank) : 0;
  if (t.op == OpKind::GradNorm && !sharded && t.attrs.norm_squared) {
    // This rank's share of the sum of squares (all-reduces over its groups
    // follow): each gradient that other ranks hold as well counted 1/copies.
    for (int pi : t.attrs.params) {
      const ParamInfo& p = program->params.at(size_t(pi));
      TensorSlot s;
      s.grad_bf16 = program->buffers[p.grad].dtype == DType::BF16;
      s.grad = ptr(p.grad);
      s.n = program->buffers[p.grad].elementCount();
      s.norm_weight = float(1.0 / double(p.copies));
      add(s);
    }
  } else if (t.op == OpKind::GradNorm) {
    for (int b : t.reads) {
      TensorSlot s;
      s.grad_bf16 = program->buffers[b].dtype == DType::BF16;
      // The bucket's parameters' segments in this rank's shard, each weighted
      // 1/copies, read from buffer b where the shard starts `first` elements in.
      auto addSegments = [&](const GradBucket& bucket, const ShardRange& shard, int64_t first) {
        for (int pi : bucket.params) {
          const ShardSegment seg = segmentInShard(*program, program->params.at(size_t(pi)), shard);
          if (seg.to <= seg.from) continue;
          TensorSlot part = s;
          part.grad = static_cast<const char*>(ptr(b)) + (first + seg.shard_offset) * (s.grad_bf16 ? 2 : 4);
          part.n = seg.to - seg.from;
          part.norm_weight = float(1.0 / double(program->params.at(size_t(pi)).copies));
          add(part);
        }
      };
      // A gradient shard (sharded parameters): its parameters' segments
      // (its padding is not zero).
      if (const GradBucket* bucket = bucketOfGradientShard(*program, b)) {
        addSegments(*bucket, shardOf(int(rank), shards, program->buffers.at(size_t(bucket->buffer)).elementCount()),
                    0);
        continue;
      }
      const ShardRange shard = shardOf(int(rank), shards, program->buffers[b].elementCount());
      // The rank's shard of a bucket whose parameters other ranks hold too
      // (tensor parallelism's replicated norms): by its parameters'
      // segments, each counted 1/copies, as the CPU reference counts them.
      const auto bucket = std::find_if(program->buckets.begin(), program->buckets.end(),
                                       [&](const GradBucket& g) { return g.buffer == b; });
      const bool replicated =
          sharded && bucket != program->buckets.end() &&
          std::any_of(bucket->params.begin(), bucket->params.end(),
                      [&](int pi) { return program->params.at(size_t(pi)).copies > 1; });
      if (replicated) {
        addSegments(*bucket, shard, shard.begin);
        continue;
      }
      s.grad = static_cast<const char*>(ptr(b)) + shard.begin * (s.grad_bf16 ? 2 : 4);
      s.n = shard.end - shard.begin;
      add(s);
    }
  } else {
    for (int pi : t.attrs.params) {
      const ParamInfo& p = program->params.at(pi);
      const GradBucket& bucket = program->buckets.at(size_t(p.bucket));
      const ShardRange shard = shardOf(int(rank), shards, program->buffers.at(size_t(bucket.buffer)).elementCount());
      // Unsharded: the whole parameter and its own state. Sharded: the part
      // of the parameter inside the rank's shard; the reads are {grads,
      // norm, master shard (fp32: the parameter bucket), m shard, v shard}.
      const ShardSegment seg = sharded ? segmentInShard(*program, p, shard)
                                          : ShardSegment{0, program->buffers[p.param].elementCount(), 0};
      if (seg.to <= seg.from) continue;
      auto at = [&](int buffer, int64_t element) {
        return static_cast<char*>(ptr(buffer)) + element * dtypeSize(program->buffers[buffer].dtype);
      };
      const bool separate_master = sharded ? t.reads.at(2) != t.writes.at(0) : p.master != p.param;
      // Sharded parameters: the update goes to the rank's shard (writes[0]),
      // at the same place in it as the state.
      const bool shard_out = sharded && bucket.param_shard >= 0;
      const int updated = shard_out ? t.writes.at(0) : p.param;
      const int master = sharded ? (separate_master ? t.reads.at(2) : updated) : p.master;
      const int64_t state_at = sharded ? seg.shard_offset : 0;
      const int64_t param_at = shard_out ? seg.shard_offset : seg.from;
      TensorSlot s;
      s.param = at(updated, param_at);
      s.master = reinterpret_cast<float*>(separate_master ? at(master, state_at) : at(updated, param_at));
      s.m = reinterpret_cast<float*>(sharded ? at(t.reads.at(3), state_at) : at(p.adam_m, 0));
      s.v = reinterpret_cast<float*>(sharded ? at(t.reads.at(4), state_at) : at(p.adam_v, 0));
      // Sharded parameters: the gradients from the bucket's shard (reads[0]).
      s.grad = sharded && bucket.grad_shard >= 0 ? at(t.reads.at(0), seg.shard_offset) : at(p.grad, seg.from);
      s.n = seg.to - seg.from;
      s.weight_decay = p.weight_decay ? float(tr.weight_decay) : 0.f;
      s.param_bf16 = program->buffers[p.param].dtype == DType::BF16;
      s.grad_bf16 = program->buffers[p.grad].dtype == DType::BF16;
      if (program->buffers[master].dtype != DType::F32)
        throw CudaError(fmt::format("cuda executor: master weight of {} must be f32", p.name));
      add(s);
    }
  }
  Table table;
  table.num_slots = int(slots.size());
  table.chunks = chunks;
  table.slots = static_cast<TensorSlot*>(deviceAlloc(std::max<size_t>(1, slots.size()) * sizeof(TensorSlot)));
  if (!slots.empty())
    TANDEM_CUDA_CHECK(cudaMemcpy(table.slots, slots.data(), slots.size() * sizeof(TensorSlot),
                                 cudaMemcpyHostToDevice));
  if (t.op == OpKind::GradNorm)
    table.partials = static_cast<float*>(deviceAlloc(std::max<int64_t>(chunks, 1) * 4));
  tables[task] = table;
}

void CudaExecutor::Impl::initialiseParameters() {
  // Drawn on the device, the host's bits (engine/numerics/portable_normal.h),
  // unless a parameter is a tensor-parallel slice (the host cuts those from
  // the whole) or TANDEM_HOST_INIT=1 asks for the host's path (the GPU tests
  // compare the two).
  const char* host_env = std::getenv("TANDEM_HOST_INIT");
  const bool on_host = (host_env && std::string(host_env) == "1") ||
                       std::any_of(program->params.begin(), program->params.end(),
                                   [](const ParamInfo& p) { return p.split_dim >= 0; });
  if (!on_host) return initialiseParametersOnDevice();
  // Sharded parameters live in their bucket's shard (below); their own
  // buffers are gathered copies.
  std::vector<const ParamInfo*> whole;
  for (const ParamInfo& p : program->params)
    if (program->buckets.at(size_t(p.bucket)).param_shard < 0) whole.push_back(&p);
  // Drawn on several cores (the values do not depend on how many), written
  // in order from this thread.
  const int threads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  forEachInitialParameter(plan.job, *program, whole, opt.rank, threads,
                          [&](const ParamInfo& p, const std::vector<float>& v) {
                            writeBuffer(p.param, v);
                            if (p.master >= 0 && p.master != p.param) writeBuffer(p.master, v);
                          });
  // Sharded optimizer, bf16: this rank's fp32 master shard of each bucket;
  // sharded parameters: this rank's shard of them.
  for (const GradBucket& b : program->buckets)
    for (int shard : {b.master_shard, b.param_shard})
      if (shard >= 0)
        writeBuffer(shard, initialMasterShard(plan.job, *program, b, opt.rank, shardCount(plan.job), threads));
}

void CudaExecutor::Impl::initialiseParametersOnDevice() {
  // Element `from` on of a parameter's whole values into `at` (n of them, as
  // `dt`).
  auto fill = [&](void* at, DType dt, const ParamInfo& p, int64_t from, int64_t n) {
    const InitRule rule = initRule(plan.job, p);
    fillInitialValues(at, dt, from, n, rule.normal, rule.constant, rule.seed, rule.stddev, nullptr);
  };
  // A buffer written whole: the values, zeros past them (as writeBuffer).
  auto fillBuffer = [&](int buffer, const ParamInfo& p) {
    const Buffer& b = program->buffers.at(size_t(buffer));
    const int64_t n = b.elementCount();
    if (n * dtypeSize(b.dtype) < b.bytes) TANDEM_CUDA_CHECK(cudaMemset(ptr(buffer), 0, size_t(b.bytes)));
    fill(ptr(buffer), b.dtype, p, 0, n);
  };
  for (const ParamInfo& p : program->params) {
    if (program->buckets.at(size_t(p.bucket)).param_shard >= 0) continue;  // in its bucket's shard, below
    fillBuffer(p.param, p);
    if (p.master >= 0 && p.master != p.param) fillBuffer(p.master, p);
  }
  // Sharded optimizer, bf16: this rank's fp32 master shard of each bucket;
  // sharded parameters: this rank's shard of them (initialMasterShard's
  // layout: the rank's segment of each parameter, padding 0).
  for (const GradBucket& bucket : program->buckets)
    for (int shard : {bucket.master_shard, bucket.param_shard}) {
      if (shard < 0) continue;
      const Buffer& sb = program->buffers.at(size_t(shard));
      TANDEM_CUDA_CHECK(cudaMemset(ptr(shard), 0, size_t(sb.bytes)));
      const ShardRange range = shardOf(plan.job.dataParallelRank(opt.rank), shardCount(plan.job),
                                       program->buffers.at(size_t(bucket.buffer)).elementCount());
      for (int pi : bucket.params) {
        const ParamInfo& p = program->params.at(size_t(pi));
        const ShardSegment seg = segmentInShard(*program, p, range);
        if (seg.to <= seg.from) continue;
        fill(static_cast<char*>(ptr(shard)) + seg.shard_offset * dtypeSize(sb.dtype), sb.dtype, p, seg.from,
             seg.to - seg.from);
      }
    }
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
}

// Issues every task that launches a GEMM once, with the Gemm in tuning mode:
// each new shape times its candidate algorithms on the arena's buffers and
// keeps the fastest. Nothing is initialised yet: the arena is filled with
// non-zero bytes for the timing (tensor cores draw less power on zeros, and
// run faster), and cleared afterwards, so the first step starts as it would
// without tuning.
void CudaExecutor::Impl::tuneGemms() {
  const char* env = std::getenv("TANDEM_GEMM_TUNING");
  if (!opt.tune_gemms || (env && std::string(env) == "0")) return;
  if (opt.observer) opt.observer->onSetupWorkBegin();
  TANDEM_CUDA_CHECK(cudaMemset(arena, 0x3c, size_t(program->memory.arena_bytes)));
  auto setTuning = [&](bool on) {
    for (auto& g : gemms)
      if (g) g->setTuning(on);
  };
  setTuning(true);
  issue_alone = true;
  try {
    for (size_t i = 0; i < program->tasks.size(); ++i) {
      const OpKind op = program->tasks[i].op;
      if (op == OpKind::Matmul || op == OpKind::MatmulBwdData || op == OpKind::MatmulBwdWeight ||
          op == OpKind::GeluBwd)
        enqueueTask(int(i));
    }
  } catch (...) {
    setTuning(false);
    issue_alone = false;
    throw;
  }
  setTuning(false);
  issue_alone = false;
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
  TANDEM_CUDA_CHECK(cudaMemset(arena, 0, size_t(program->memory.arena_bytes)));
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
  if (opt.observer) opt.observer->onSetupWorkEnd();
}

void CudaExecutor::Impl::fillHostData(int step) {
  for (LoadSlot& slot : loads) {
    const Task& t = program->tasks[slot.task];
    const int64_t n = slot.count, N = slot.ranks * n;
    int32_t* tokens = slot.host;
    int32_t* targets = slot.host + n;
    int32_t* order = slot.host + 2 * n;
    int32_t* seg_start = order + N;  // N + 1 entries
    int32_t* seg_count = seg_start + N + 1;
    int32_t* every_rank = seg_count + 1;  // ranks > 1: [ranks][n]
    fillMicroBatch(*data, plan.job, step, int(t.attrs.micro_batch), opt.rank, tokens, targets);
    const int32_t* indexed = tokens;
    if (slot.ranks > 1) {
      std::vector<int32_t> unused(static_cast<size_t>(n));
      for (int r = 0; r < slot.ranks; ++r)
        fillMicroBatch(*data, plan.job, step, int(t.attrs.micro_batch), r, every_rank + r * n, unused.data());
      indexed = every_rank;
    }
    std::iota(order, order + N, 0);
    std::stable_sort(order, order + N, [&](int32_t a, int32_t b) { return indexed[a] < indexed[b]; });
    int32_t segments = 0;
    for (int64_t i = 0; i < N; ++i)
      if (i == 0 || indexed[order[i]] != indexed[order[i - 1]]) seg_start[segments++] = int32_t(i);
    seg_start[segments] = int32_t(N);
    *seg_count = segments;
  }
}

// The step's GPU work between its scalars (copied in before) and its loss
// (copied out after): the same for every step, so it can be one graph.
void CudaExecutor::Impl::enqueueStep(bool with_optimizer) {
  cudaStream_t s0 = streams[0];
  TANDEM_CUDA_CHECK(cudaEventRecord(fork_event, s0));
  for (size_t i = 1; i < streams.size(); ++i) TANDEM_CUDA_CHECK(cudaStreamWaitEvent(streams[i], fork_event, 0));
  for (size_t i = 0; i < program->tasks.size(); ++i) {
    const Task& t = program->tasks[i];
    // The previous step's update always runs: its scalars say whether there
    // is one (launchStep).
    if (!with_optimizer && t.op == OpKind::AdamW && !t.attrs.from_previous_step) continue;
    try {
      enqueueTask(int(i));
    } catch (const std::exception& e) {
      throw CudaError(fmt::format("rank {} task {} ({}): {}", opt.rank, t.id, t.name, e.what()));
    }
  }
  for (size_t i = 1; i < streams.size(); ++i) {
    TANDEM_CUDA_CHECK(cudaEventRecord(join_events[i], streams[i]));
    TANDEM_CUDA_CHECK(cudaStreamWaitEvent(s0, join_events[i], 0));
  }
  // FP8 delayed scaling: this step's amaxes into the histories, as the CPU
  // reference's Fp8Scales::endStep after every step (computeGradients too).
  fp8DelayedEndStep(fp8_delayed, s0);
  // Every rank of a tensor-parallel group holds the same loss sum: the
  // world's sum counts each tensor_parallel times (finishStep divides).
  if (comm) comm->allReduce(&scalars->loss_sum, &scalars->loss_sum, 1, DType::F32, false, s0, "loss");
}

// Polls `event` (a few microseconds apart, so the next step is launched soon
// after this one ends), watching NCCL for asynchronous errors and giving up
// after the timeout with the collective that did not finish.
void CudaExecutor::Impl::waitForEvent(cudaEvent_t event, const char* what) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    cudaError_t q = cudaEventQuery(event);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) checkCuda(q, "step", __FILE__, __LINE__);
    if (comm) comm->checkAsync("step " + std::to_string(steps_done + 1));
    for (auto& [name, c] : group_comms) c->checkAsync("step " + std::to_string(steps_done + 1));
    for (auto& [name, pair] : p2p_comms)
      for (auto& c : pair) c->checkAsync("step " + std::to_string(steps_done + 1));
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > opt.timeout_s) {
      std::string stuck = what;
      for (size_t i = 0; i < collective_done.size(); ++i)
        if (cudaEventQuery(collective_done[i]) == cudaErrorNotReady) {
          const Task& c = program->tasks[collective_tasks[i]];
          stuck = fmt::format("{} '{}'", toString(c.collective->op), c.name);
          break;
        }
      if (comm) comm->abort();
      for (auto& [name, c] : group_comms) c->abort();
      for (auto& [name, pair] : p2p_comms)
        for (auto& c : pair) c->abort();
      throw CudaError(fmt::format("rank {}: {} did not finish within {:.0f} s (a peer rank may have "
                                  "stopped); NCCL communicator aborted",
                                  opt.rank, stuck, opt.timeout_s));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void CudaExecutor::Impl::launchStep(int step, int slot, bool with_optimizer) {
  const TrainingSpec& tr = plan.job.training;
  if (staged_step != step) fillHostData(step);
  staged_step = step;
  StepScalars& in = host_scalars[slot];
  in.lr = float(learningRate(tr, step));
  in.bias_correction1 = 1.0 - std::pow(double(float(tr.beta1)), step + 1);
  in.bias_correction2 = 1.0 - std::pow(double(float(tr.beta2)), step + 1);
  in.loss_sum = 0.f;
  setPreviousUpdate(in);
  // This step's gradients are applied by the next step's first tasks, or
  // by finishOptimizer (schedule.optimizer_beside_forward).
  pending_update = with_optimizer && updates_at_start ? step : -1;
  float* out = host_out + 2 * slot;
  out[0] = out[1] = 0.f;
  cudaStream_t s0 = streams[0];
  const bool graph = opt.use_graph && with_optimizer;
  if (opt.observer) opt.observer->onStepBegin(step);
  if (graph && opt.local_world) {
    launchSharedStep(slot);
    return;
  }
  if (graph && !graph_exec) {
    cudaGraph_t g;
    const char* hoist_env = std::getenv("TANDEM_GRAPH_HOIST_MEMSETS");
    const bool hoist = !(hoist_env && std::string(hoist_env) == "0");
    auto endGemmCapture = [&] {
      for (auto& gm : gemms)
        if (gm) gm->endGraphCapture();
    };
    for (auto& gm : gemms)
      if (gm) gm->beginGraphCapture(hoist);
    TANDEM_CUDA_CHECK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeThreadLocal));
    if (opt.observer) opt.observer->onCaptureBegin(s0);
    capturing = true;
    try {
      enqueueStep(true);
    } catch (...) {
      capturing = false;
      endGemmCapture();
      cudaStreamEndCapture(s0, &g);
      throw;
    }
    capturing = false;
    endGemmCapture();
    TANDEM_CUDA_CHECK(cudaStreamEndCapture(s0, &g));
    if (opt.observer) opt.observer->onCaptureEnd(s0);
    try {
      graph_memsets.memsets = memsetNodesOf(g);
      std::vector<cudaGraphNode_t> merged, whole;
      if (hoist)
        for (auto& gm : gemms)
          if (gm) {
            const auto [lo, hi] = gm->capturedSlices();
            const MergedMemsets into_one = mergeZeroMemsetsInside(g, lo, hi);
            merged.insert(merged.end(), into_one.merged.begin(), into_one.merged.end());
            if (into_one.whole) whole.push_back(into_one.whole);
            graph_memsets.merged_into += into_one.whole != nullptr;
            graph_memsets.hoisted += int(into_one.merged.size()) + hoistMemsetsInside(g, lo, hi);
          }
      if (mergedMemsetsBeforeRoots()) graph_memsets.before_roots = orderBeforeRoots(g, whole, merged);
      const GraphEdges edges = edgesOf(g);
      graph_memsets.full_edges = edges.full;
      graph_memsets.other_edges = edges.other;
      graph_memsets.other_edge_examples = edges.examples;
      TANDEM_CUDA_CHECK(cudaGraphInstantiate(&graph_exec, g, 0));
      disableNodes(graph_exec, merged);
    } catch (...) {
      cudaGraphDestroy(g);
      throw;
    }
    TANDEM_CUDA_CHECK(cudaGraphDestroy(g));
  }
  // The slot's copies are stream operations around the graph, not graph
  // nodes, so that consecutive replays can use different host slots.
  TANDEM_CUDA_CHECK(cudaEventRecord(start_event[slot], s0));
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(scalars, &in, sizeof(StepScalars), cudaMemcpyHostToDevice, s0));
  if (graph) {
    TANDEM_CUDA_CHECK(cudaGraphLaunch(graph_exec, s0));
  } else {
    timing_now = opt.time_tasks;
    enqueueStep(with_optimizer);
    timing_now = false;
  }
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(out, &scalars->loss_sum, sizeof(float), cudaMemcpyDeviceToHost, s0));
  if (norm_buffer >= 0)
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(out + 1, ptr(norm_buffer), sizeof(float), cudaMemcpyDeviceToHost, s0));
  TANDEM_CUDA_CHECK(cudaEventRecord(stop_event[slot], s0));
}

// Ranks sharing this GPU in this process (local_comm.h): one graph for all
// of them, captured together at their first graph step and launched by rank
// 0 once every rank's scalars are on their way. cuBLASLt's memsets stay
// where the GEMMs issued them (each rank's GEMMs would have to hoist its
// own out of the one graph).
void CudaExecutor::Impl::launchSharedStep(int slot) {
  cudaStream_t s0 = streams[0];
  LocalWorld& world = *opt.local_world;
  if (!shared_graph_captured) {
    world.beginSharedCapture(opt.rank, s0);
    capturing = true;
    try {
      enqueueStep(true);
    } catch (const std::exception& e) {
      capturing = false;
      world.abortSharedCapture(opt.rank, s0, e.what());
      throw;
    }
    capturing = false;
    world.endSharedCapture(opt.rank, s0);
    shared_graph_captured = true;
  }
  TANDEM_CUDA_CHECK(cudaEventRecord(start_event[slot], s0));
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(scalars, &host_scalars[slot], sizeof(StepScalars), cudaMemcpyHostToDevice, s0));
  world.launchShared(opt.rank, s0);
  float* out = host_out + 2 * slot;
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(out, &scalars->loss_sum, sizeof(float), cudaMemcpyDeviceToHost, s0));
  if (norm_buffer >= 0)
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(out + 1, ptr(norm_buffer), sizeof(float), cudaMemcpyDeviceToHost, s0));
  TANDEM_CUDA_CHECK(cudaEventRecord(stop_event[slot], s0));
}

// The staging buffers may take the next batch once the GPU copied this one:
// only when all loads are on one stream (one event says they are done) and
// the step runs whole (computeGradients is followed by host reads, not a step).
bool CudaExecutor::Impl::canStageAhead(bool with_optimizer) const {
  return with_optimizer && last_load_task >= 0 && !load_stream_mixed;
}

void CudaExecutor::Impl::stageNextBatch(int step) {
  waitForEvent(loads_done, "the batch copy");
  fillHostData(step + 1);
  staged_step = step + 1;
}

GpuStepResult CudaExecutor::Impl::finishStep(int step, int slot, bool with_optimizer) {
  waitForEvent(stop_event[slot], "the step");
  if (opt.observer) opt.observer->onStepEnd(step);
  const bool graph = opt.use_graph && with_optimizer;
  if (opt.time_tasks && !graph)
    for (size_t i = 0; i < program->tasks.size(); ++i) {
      float t = 0;
      if (cudaEventElapsedTime(&t, task_start[i], task_end[i]) == cudaSuccess) task_ms[i] += t;
    }
  cudaGetLastError();  // tasks skipped this step leave unrecorded events behind
  float ms = 0;
  TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start_event[slot], stop_event[slot]));
  const float* out = host_out + 2 * slot;
  GpuStepResult r;
  r.step = step;
  r.loss = double(out[0]) / double(plan.job.tokensPerStep()) / double(comm ? plan.job.parallel.tensor_parallel : 1);
  r.grad_norm = norm_is_squared ? std::sqrt(out[1]) : out[1];
  r.lr = learningRate(plan.job.training, step);
  r.ms = ms;
  if (with_optimizer) ++steps_done;
  return r;
}

GpuStepResult CudaExecutor::Impl::runStep(bool with_optimizer) {
  const int step = steps_done;
  launchStep(step, 0, with_optimizer);
  if (canStageAhead(with_optimizer)) stageNextBatch(step);  // while this step runs
  return finishStep(step, 0, with_optimizer);
}

// Steps run ahead only as graph replays: eager steps issue every task from
// the host (an observer sees their tasks step by step) and eager task timing
// reuses one set of events per task. An observer of replays sees
// onStepBegin(k + 1) before onStepEnd(k) (task_observer.h).
bool CudaExecutor::Impl::canRunAhead() const {
  return opt.use_graph && !opt.time_tasks && !opt.local_world && canStageAhead(true);
}

// Keeps one step queued behind the running one: while step k runs, the host
// stages step k + 1's batch (once step k's copy is done), queues step k + 1,
// and only then waits for step k. The GPU never idles between steps waiting
// for the host, and a late host thread (rank skew) is hidden behind a step.
void CudaExecutor::Impl::runAhead(int steps, const std::function<void(const GpuStepResult&)>& on_step) {
  if (steps <= 0) return;
  const int first = steps_done;
  launchStep(first, first % kSlots, true);
  for (int i = 0; i < steps; ++i) {
    const int step = first + i;
    // loads_done refers to the latest launched step, `step`.
    stageNextBatch(step);
    if (i + 1 < steps) launchStep(step + 1, (step + 1) % kSlots, true);
    const GpuStepResult r = finishStep(step, step % kSlots, true);
    if (on_step) on_step(r);
  }
}

std::vector<float> CudaExecutor::Impl::readBuffer(int buffer) const {
  const Buffer& b = program->buffers.at(buffer);
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<std::byte> raw(b.bytes);
  TANDEM_CUDA_CHECK(cudaMemcpy(raw.data(), ptr(buffer), b.bytes, cudaMemcpyDeviceToHost));
  const int64_t n = b.elementCount();
  std::vector<float> out(n);
  if (b.dtype == DType::BF16) {
    const auto* h = reinterpret_cast<const uint16_t*>(raw.data());
    for (int64_t i = 0; i < n; ++i) out[i] = bf16BitsToFloat(h[i]);
  } else if (b.dtype == DType::F32) {
    std::memcpy(out.data(), raw.data(), n * 4);
  } else {
    const auto* v = reinterpret_cast<const int32_t*>(raw.data());
    for (int64_t i = 0; i < n; ++i) out[i] = float(v[i]);
  }
  return out;
}

void CudaExecutor::Impl::writeBuffer(int buffer, const std::vector<float>& values) {
  const Buffer& b = program->buffers.at(buffer);
  const int64_t n = b.elementCount();
  if (int64_t(values.size()) != n)
    throw CudaError(fmt::format("writeBuffer: {} expects {} values, got {}", b.name, n, values.size()));
  const int64_t payload = n * dtypeSize(b.dtype);
  if (payload > b.bytes)
    throw CudaError(fmt::format("writeBuffer: {} holds {} bytes, its {} values take {}", b.name, b.bytes, n, payload));
  if (b.dtype == DType::F32 && payload == b.bytes) {  // the values as they are
    TANDEM_CUDA_CHECK(cudaMemcpy(ptr(buffer), values.data(), b.bytes, cudaMemcpyHostToDevice));
    return;
  }
  // Converted in a staging buffer kept between calls: a fresh one per
  // parameter faulted in a page per 4 KiB (13 GB of them for 7B's bf16
  // weights). Bytes past the values are written as zeros.
  if (staging.size() < size_t(b.bytes)) staging.resize(size_t(b.bytes));
  if (b.dtype == DType::BF16) {
    auto* h = reinterpret_cast<uint16_t*>(staging.data());
    for (int64_t i = 0; i < n; ++i) h[i] = floatToBf16Bits(values[i]);
  } else if (b.dtype == DType::F32) {
    std::memcpy(staging.data(), values.data(), size_t(payload));
  } else {
    auto* v = reinterpret_cast<int32_t*>(staging.data());
    for (int64_t i = 0; i < n; ++i) v[i] = int32_t(values[i]);
  }
  if (b.bytes > payload) std::memset(staging.data() + payload, 0, size_t(b.bytes - payload));
  TANDEM_CUDA_CHECK(cudaMemcpy(ptr(buffer), staging.data(), b.bytes, cudaMemcpyHostToDevice));
}

CudaExecutor::CudaExecutor(const Plan& plan, const ExecutorOptions& options)
    : impl_(std::make_unique<Impl>(plan, options)) {}
CudaExecutor::~CudaExecutor() = default;
// Each entry point selects the executor's device: callers may drive several
// executors (one per GPU) from one thread.
GpuStepResult CudaExecutor::step() {
  TANDEM_CUDA_CHECK(cudaSetDevice(impl_->opt.device));
  return impl_->runStep(true);
}
std::vector<GpuStepResult> CudaExecutor::run(int steps, const std::function<void(const GpuStepResult&)>& on_step) {
  TANDEM_CUDA_CHECK(cudaSetDevice(impl_->opt.device));
  std::vector<GpuStepResult> out;
  out.reserve(size_t(std::max(steps, 0)));
  auto keep = [&](const GpuStepResult& r) {
    out.push_back(r);
    if (on_step) on_step(r);
  };
  if (impl_->canRunAhead()) {
    impl_->runAhead(steps, keep);
  } else {
    for (int s = 0; s < steps; ++s) keep(impl_->runStep(true));
  }
  impl_->finishOptimizer();
  return out;
}
void CudaExecutor::Impl::gatherParameters() {
  if (!comm) return;
  cudaStream_t s = streams[0];
  for (const Task& t : program->tasks)
    if (t.op == OpKind::AllGather && t.reads.at(0) == t.writes.at(0)) {  // the parameter buckets
      const Buffer& b = program->buffers.at(t.reads.at(0));
      Communicator& c = commFor(t);
      c.allGatherInPlace(ptr(b.id), b.elementCount() / c.world(), b.dtype, s, "'" + t.name + "'");
    }
  cudaEvent_t done;
  TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  TANDEM_CUDA_CHECK(cudaEventRecord(done, s));
  try {
    waitForEvent(done, "gathering the parameters");
  } catch (...) {
    cudaEventDestroy(done);
    throw;
  }
  cudaEventDestroy(done);
}

void CudaExecutor::gatherParameters() { impl_->gatherParameters(); }

void CudaExecutor::Impl::setPreviousUpdate(StepScalars& in) const {
  const TrainingSpec& tr = plan.job.training;
  in.prev_valid = pending_update >= 0;
  const int p = std::max(pending_update, 0);
  in.prev_lr = float(learningRate(tr, p));
  in.prev_bias_correction1 = 1.0 - std::pow(double(float(tr.beta1)), p + 1);
  in.prev_bias_correction2 = 1.0 - std::pow(double(float(tr.beta2)), p + 1);
}

void CudaExecutor::Impl::finishOptimizer() {
  if (pending_update < 0) return;
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
  StepScalars& in = host_scalars[0];
  setPreviousUpdate(in);
  TANDEM_CUDA_CHECK(cudaMemcpy(scalars, &in, sizeof(StepScalars), cudaMemcpyHostToDevice));
  for (size_t i = 0; i < program->tasks.size(); ++i)
    if (program->tasks[i].op == OpKind::AdamW && program->tasks[i].attrs.from_previous_step) enqueueTask(int(i));
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
  pending_update = -1;
}

void CudaExecutor::finishOptimizer() {
  TANDEM_CUDA_CHECK(cudaSetDevice(impl_->opt.device));
  impl_->finishOptimizer();
}

void CudaExecutor::Impl::replayTasks(const std::function<bool(const Task&)>& select, int reps) {
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
  issue_alone = true;
  try {
    for (int r = 0; r < reps; ++r)
      for (size_t i = 0; i < program->tasks.size(); ++i) {
        const Task& t = program->tasks[i];
        if (t.collective || !select(t)) continue;
        enqueueTask(int(i));
      }
  } catch (...) {
    issue_alone = false;
    throw;
  }
  issue_alone = false;
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
}

void CudaExecutor::replayTasks(const std::function<bool(const Task&)>& select, int reps) {
  TANDEM_CUDA_CHECK(cudaSetDevice(impl_->opt.device));
  impl_->replayTasks(select, reps);
}

GpuStepResult CudaExecutor::computeGradients() {
  TANDEM_CUDA_CHECK(cudaSetDevice(impl_->opt.device));
  return impl_->runStep(false);
}
std::vector<float> CudaExecutor::readBuffer(int buffer) const {
  TANDEM_CUDA_CHECK(cudaSetDevice(impl_->opt.device));
  return impl_->readBuffer(buffer);
}
void CudaExecutor::writeBuffer(int buffer, const std::vector<float>& values) {
  TANDEM_CUDA_CHECK(cudaSetDevice(impl_->opt.device));
  impl_->writeBuffer(buffer, values);
}
GpuMemoryReport CudaExecutor::memory() const { return impl_->mem; }
SetupTimes CudaExecutor::setupTimes() const { return impl_->setup_times; }
std::vector<double> CudaExecutor::taskMilliseconds() const { return impl_->task_ms; }
int CudaExecutor::stepsDone() const { return impl_->steps_done; }

namespace {

// This rank's saved buffers of `reuse` when they are the ones `ids` name, in
// that order and at those sizes (an earlier snapshot of the same program).
bool sameBuffers(const checkpoint::Snapshot& reuse, size_t rank, const std::vector<int>& ids, const RankPlan& program) {
  if (rank >= reuse.ranks.size() || reuse.ranks[rank].size() != ids.size()) return false;
  for (size_t i = 0; i < ids.size(); ++i) {
    const checkpoint::BufferBytes& bb = reuse.ranks[rank][i];
    if (bb.buffer != ids[i] || int64_t(bb.bytes.size()) != program.buffers.at(size_t(ids[i])).bytes) return false;
  }
  return true;
}

// Page-locks the host memory of `buffers` for as long as the returned hold
// lives (cudaHostRegister; released with cudaHostUnregister). A buffer the
// driver refuses to lock stays pageable: copies into it are slower, not
// wrong.
std::shared_ptr<void> pageLock(std::vector<checkpoint::BufferBytes>& buffers) {
  auto locked = std::make_shared<std::vector<void*>>();
  for (checkpoint::BufferBytes& bb : buffers) {
    if (bb.bytes.empty()) continue;
    if (cudaHostRegister(bb.bytes.data(), bb.bytes.size(), cudaHostRegisterDefault) == cudaSuccess)
      locked->push_back(bb.bytes.data());
    else
      (void)cudaGetLastError();  // clear it: the copy still works, through staging
  }
  return std::shared_ptr<void>(locked.get(), [locked](void*) {
    for (void* p : *locked) (void)cudaHostUnregister(p);
  });
}

}  // namespace

checkpoint::Snapshot CudaExecutor::snapshot(std::optional<checkpoint::Snapshot> reuse) const {
  TANDEM_CUDA_CHECK(cudaSetDevice(impl_->opt.device));
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int> ids = checkpoint::savedBuffers(*impl_->program, impl_->pending_update >= 0);
  const size_t rank = size_t(impl_->opt.rank);
  checkpoint::Snapshot s;
  if (reuse && reuse->host_memory_hold && sameBuffers(*reuse, rank, ids, *impl_->program)) s = std::move(*reuse);
  s.step = impl_->steps_done;
  s.update_pending = impl_->pending_update >= 0;
  s.rank_state.clear();
  if (!s.host_memory_hold) {
    s.ranks.assign(size_t(impl_->plan.world_size), {});
    for (int id : ids) {
      checkpoint::BufferBytes bb;
      bb.buffer = id;
      bb.bytes.resize(size_t(impl_->program->buffers.at(size_t(id)).bytes));
      s.ranks[rank].push_back(std::move(bb));
    }
    s.host_memory_hold = pageLock(s.ranks[rank]);
  }
  for (checkpoint::BufferBytes& bb : s.ranks[rank])
    TANDEM_CUDA_CHECK(cudaMemcpy(bb.bytes.data(), impl_->ptr(bb.buffer), bb.bytes.size(), cudaMemcpyDeviceToHost));
  if (impl_->fp8_delayed.keys > 0) {
    s.rank_state.resize(size_t(impl_->plan.world_size));
    s.rank_state[rank] = impl_->saveFp8Delayed();
  }
  return s;
}

void CudaExecutor::restore(const checkpoint::Snapshot& snap) {
  TANDEM_CUDA_CHECK(cudaSetDevice(impl_->opt.device));
  if (snap.ranks.size() != size_t(impl_->plan.world_size))
    throw checkpoint::CheckpointError(fmt::format("the checkpoint has {} ranks, the plan {}", snap.ranks.size(),
                                                  impl_->plan.world_size));
  const auto& mine = snap.ranks.at(size_t(impl_->opt.rank));
  checkpoint::checkSavedBuffers(*impl_->program, snap.update_pending, mine, fmt::format("rank {}", impl_->opt.rank));
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
  for (const checkpoint::BufferBytes& bb : mine) {
    const Buffer& b = impl_->program->buffers.at(size_t(bb.buffer));
    if (size_t(b.bytes) != bb.bytes.size())
      throw checkpoint::CheckpointError(fmt::format("rank {} buffer {}: {} bytes, the plan has {}", impl_->opt.rank,
                                                    b.name, bb.bytes.size(), b.bytes));
    TANDEM_CUDA_CHECK(cudaMemcpy(impl_->ptr(bb.buffer), bb.bytes.data(), bb.bytes.size(), cudaMemcpyHostToDevice));
  }
  // FP8 delayed scaling's histories (the CPU reference refuses a checkpoint
  // without them alike).
  if (impl_->fp8_delayed.keys > 0) {
    const size_t r = size_t(impl_->opt.rank);
    const std::string state = r < snap.rank_state.size() ? snap.rank_state[r] : std::string();
    if (state.empty())
      throw checkpoint::CheckpointError(fmt::format(
          "rank {}: the checkpoint has no FP8 scale state, which this FP8 job with delayed scaling needs", r));
    try {
      impl_->loadFp8Delayed(state);
    } catch (const std::runtime_error& e) {
      throw checkpoint::CheckpointError(fmt::format("rank {}: {}", r, e.what()));
    }
  }
  impl_->steps_done = int(snap.step);
  // The step whose AdamW the next step's first tasks apply.
  impl_->pending_update = snap.update_pending ? int(snap.step) - 1 : -1;
}
const FusionPlan& CudaExecutor::fusion() const { return impl_->fusion; }
bool CudaExecutor::issuesWork(int index) const {
  return !impl_->skip.at(size_t(index)) && !impl_->fusion.tasks.at(size_t(index)).issues_nothing;
}
const std::vector<GemmTuning>& CudaExecutor::gemmTuning() const { return impl_->mainGemm().tuning(); }
CudaExecutor::GraphMemsets CudaExecutor::graphMemsets() const { return impl_->graph_memsets; }
const Plan& CudaExecutor::plan() const { return impl_->plan; }
NcclComm* CudaExecutor::communicator() const { return impl_->nccl_world; }

}  // namespace tandem::cuda
