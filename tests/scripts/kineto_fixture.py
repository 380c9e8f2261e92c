#!/usr/bin/env python3
"""Writes a synthetic but realistic PyTorch profiler (Kineto) trace pair of
2-GPU DDP training of a GPT-2 124M-shaped model, profiled over three steps
(ProfilerStep#4, #5 and #6), as torch.profiler 2.x with CUDA activities
writes it (export_chrome_trace / tensorboard_trace_handler).

    python3 tests/scripts/kineto_fixture.py --out DIR [--seed 52]

writes

    DIR/ddp_gpt2_rank0.pt.trace.json.gz   rank 0 alone, gzipped
    DIR/ddp_gpt2_2ranks/                   one plain .json per rank

The folder's file names sort rank 1 first (they are named after the process
ids, as tensorboard_trace_handler names them), so a reader must take the
rank from distributedInfo, not from the order of the files.

What each file holds, per rank (all of it deterministic for one seed):

- the header PyTorch writes: schemaVersion, deviceProperties (two H200s),
  distributedInfo {backend nccl, rank, world_size 2, pg_config, ...},
  CUPTI and CUDA versions, baseTimeNanoseconds (a different base per rank)
  and traceName; "ts" of every event in microseconds with three decimals,
  after that base;
- metadata events (process and thread names and labels, some with string
  pids, as Kineto writes them) and the instant events "Iteration Start:
  PyTorch Profiler" and "Record Window End";
- on the CPU: the ProfilerStep#N user annotation on the main thread (from
  one prof.step() to the next), the data loader's annotation, the DDP
  forward, cpu_op events (aten::addmm, aten::layer_norm, ...) with their
  cuda_runtime launches (cudaLaunchKernel, cudaMemcpyAsync, ...) carrying a
  correlation id, the backward on the autograd thread, DDP's
  record_param_comms / nccl:all_reduce with a cuda_driver cuLaunchKernelEx,
  the optimizer, and loss.item() (cudaMemcpyAsync + cudaStreamSynchronize);
- on the GPU: kernels on stream 7 (cuBLAS GEMMs, flash attention, layer
  norm, elementwise, cross entropy, fused AdamW), memcpy (HtoD of the batch,
  DtoD of gradients into and out of DDP's buckets, DtoH of the loss) and
  memset; NCCL AllReduce kernels (ncclDevKernel_AllReduce_Sum_f32_RING_LL,
  with the collective's args: Collective name, In/Out msg nelems, Group
  size, dtype, Process Group ...) on stream 24, one per DDP bucket, started
  when the bucket's gradients are ready and ending at the same moment on
  both ranks (the later rank's arrival plus the transfer), so that they
  overlap the next layers' backward GEMMs, partly run beside memcpy only
  (not compute) and, for the last (embedding) bucket, are exposed;
- ac2g flows from each launch to its GPU activity, and the GPU-side
  gpu_user_annotation of ProfilerStep#N (and of the DDP forward, the
  optimizer and each nccl:all_reduce) per stream, spanning the stream's
  activities launched inside the CPU range, as Kineto builds them.

The ranks' clocks differ slightly: rank 1's clock reads 1.873 us ahead of
rank 0's, and its trace has another baseTimeNanoseconds.
"""
import argparse
import gzip
import json
import os
import random

WORLD = 2
STEPS = (4, 5, 6)
LAYERS = 12
COMPUTE_STREAM = 7
NCCL_STREAM = 24
TRUE_START_NS = 1_761_043_912_274_810_000  # global time of the capture's start
BASES = (1_761_043_714_000_000_000, 1_761_043_717_000_000_000)  # baseTimeNanoseconds per rank
SKEW_NS = (0, 1_873)  # each rank's clock minus the global clock
PIDS = (48213, 48212)  # rank 1's process id is smaller: its file sorts first
DEVICE_PROPS = {
    "name": "NVIDIA H200", "totalGlobalMem": 150109880320, "computeMajor": 9, "computeMinor": 0,
    "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
    "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536,
    "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472,
}

# CUPTI callback ids of the launching calls.
CBID = {"cudaLaunchKernel": 211, "cudaMemcpyAsync": 41, "cudaMemsetAsync": 51, "cuLaunchKernelEx": 652}

# Kernel names as CUPTI reports them for GPT-2 training in bf16 autocast.
LN_FWD = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"
          "(int, float, float const*, float const*, float const*, float*, float*, float*)")
LN_BWD_IN = ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<float, float>"
             "(float const*, float const*, float const*, float const*, float const*, float*, int)")
LN_BWD_W = ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32<float, float>"
            "(long, long, float const*, float const*, float const*, float const*, float*, float*)")
CAST = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
        "::{lambda()#3}::operator()() const::{lambda()#10}::operator()() const::{lambda(float)#1}, "
        "std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
        "at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, ...)")
GEMM_TN = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
GEMM_NN = "nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNN"
GEMM_NT = "nvjet_hsh_128x256_64x4_1x2_h_bz_coopB_NTN"
FLASH_FWD = ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
             "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, "
             "false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)")
FLASH_DOT = ("void pytorch_flash::flash_bwd_dot_do_o_kernel<true, pytorch_flash::Flash_bwd_kernel_traits<64, 128, 128, 8, "
             "2, 4, 2, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 8, "
             "cutlass::bfloat16_t> > >(pytorch_flash::Flash_bwd_params)")
FLASH_BWD = ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::Flash_bwd_kernel_traits<64, "
             "128, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, "
             "8, cutlass::bfloat16_t> >, true, false, false, false, false, true, false>(pytorch_flash::Flash_bwd_params)")
FLASH_CVT = ("void pytorch_flash::flash_bwd_convert_dq_kernel<pytorch_flash::Flash_bwd_kernel_traits<64, 128, 128, 8, 2, "
             "4, 2, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 8, "
             "cutlass::bfloat16_t> > >(pytorch_flash::Flash_bwd_params, int)")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >"
       "(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)")
GELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
        "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
        "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, ...)")
GELU_BWD = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl("
            "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::"
            "operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul> >(int, ...)")
REDUCE = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<float, "
          "at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator()(at::TensorIterator&)::"
          "{lambda(float, float)#1}>, unsigned int, c10::BFloat16, 4, 4> >(...)")
EMB_FWD = ("void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>"
           "(at::cuda::detail::TensorInfo<float, unsigned int>, at::cuda::detail::TensorInfo<float const, unsigned int>, "
           "at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)")
EMB_BWD = ("void at::native::(anonymous namespace)::compute_grad_weight<float, long>(long const*, float const*, "
           "long const*, long, long, long const*, long const*, at::native::AccumulateType<float, true>::type*)")
EMB_SUM = ("void at::native::(anonymous namespace)::sum_and_scatter<float, long>(long const*, float*, long, "
           "long const*, long const*, at::native::AccumulateType<float, true>::type const*, long const*, long, long)")
SOFTMAX_FWD = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
               "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)")
SOFTMAX_BWD = ("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, "
               "at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, float const*, int)")
NLL_FWD = ("void nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, "
           "float const*, bool, long, long, long, long)")
NLL_BWD = ("void nll_loss_backward_reduce_cuda_kernel_2d<float, long>(float*, float const*, long const*, float const*, "
           "float const*, bool, int, int, long, long)")
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
        "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")
DIV = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
       "at::native::binary_internal::DivFunctor<float> >, std::array<char*, 3ul> >(int, ...)")
NORM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<1>, at::native::(anonymous namespace)::LpNormFunctor<float, (at::native::NormType)1, "
        "float, float>, float*, int>(...)")
NORM_CLEANUP = ("void at::native::(anonymous namespace)::lpnorm_cleanup<float, (at::native::NormType)1, float, float>"
                "(float const*, at::native::(anonymous namespace)::TensorListAddresses, int)")
CLIP = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarTensorFunctor<float, 1, 1, 0>, "
        "std::multiplies<float>, float*>(...)")
ADAMW = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
         "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
         "(at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, bool, float*, float*>(...)")
NCCL_AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

# Gradient bytes (fp32) of GPT-2 124M: per transformer block, the embeddings.
LAYER_GRAD_BYTES = 4 * (768 * 2304 + 2304 + 768 * 768 + 768 + 768 * 3072 + 3072 + 3072 * 768 + 768 + 4 * 768)
EMB_GRAD_BYTES = 4 * (50257 * 768 + 1024 * 768)
LNF_GRAD_BYTES = 4 * 2 * 768


class Rank:
    """One rank's events, its RNG, CPU clock, stream clocks and ids."""

    def __init__(self, rank, seed):
        self.rank = rank
        self.rng = random.Random(seed * 1000 + rank)
        self.pid = PIDS[rank]
        self.main_tid = PIDS[rank]
        self.bwd_tid = PIDS[rank] + 117  # the autograd engine's thread for this device
        self.device = rank
        self.slow = 1.0 + 0.005 * rank  # rank 1's GPU runs a little slower
        self.events = []
        self.cpu = TRUE_START_NS + 35_000 * rank + 20_000  # global ns
        self.free = {COMPUTE_STREAM: TRUE_START_NS, NCCL_STREAM: TRUE_START_NS}
        self.ext = 1000 * (rank + 1)
        self.corr = 50_000 * (rank + 1)
        self.ev_idx = 0
        self.seq = 412  # collectives of the earlier (unprofiled) steps
        self.pending = []  # NCCL launches whose GPU times wait for both ranks
        self.gpu_spans = {}  # (annotation name, stream) -> [start, end, external id]
        self.open_gpu_annotations = []  # (name, external id) active on the CPU

    # Clock: a global time in ns as this rank's "ts" (us after its base).
    def ts(self, t_ns):
        return (t_ns + SKEW_NS[self.rank] - BASES[self.rank]) / 1000

    def jitter(self, us):
        return int(us * 1000 * self.slow * (1.0 + self.rng.gauss(0, 0.03)))

    def x(self, cat, name, pid, tid, start, end, args):
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
                            "ts": self.ts(start), "dur": (end - start) / 1000, "args": args})

    def next_ext(self):
        self.ext += 1
        return self.ext

    def annotation(self, name, start, end, tid=None):
        """A CPU user annotation without GPU work inside."""
        ext = self.next_ext()
        self.ev_idx += 1
        self.x("user_annotation", name, self.pid, tid or self.main_tid, start, end,
               {"External id": ext, "Record function id": 0, "Ev Idx": self.ev_idx})
        return ext

    def open_annotation(self, name, gpu=True):
        """Opens a CPU range now; close_annotation writes it."""
        ext = self.next_ext()
        if gpu:
            self.open_gpu_annotations.append((name, ext))
        return (name, ext, self.cpu, gpu)

    def close_annotation(self, handle, tid=None):
        name, ext, start, gpu = handle
        self.ev_idx += 1
        self.x("user_annotation", name, self.pid, tid or self.main_tid, start, self.cpu,
               {"External id": ext, "Record function id": 0, "Ev Idx": self.ev_idx})
        if gpu:
            self.open_gpu_annotations.remove((name, ext))

    def note_gpu(self, stream, start, end):
        for name, ext in self.open_gpu_annotations:
            span = self.gpu_spans.setdefault((name, ext, stream), [start, end])
            span[0] = min(span[0], start)
            span[1] = max(span[1], end)

    def flush_gpu_annotations(self):
        for (name, ext, stream), (start, end) in sorted(self.gpu_spans.items(), key=lambda kv: kv[1][0]):
            self.x("gpu_user_annotation", name, self.device, stream, start, end, {"External id": ext})
        self.gpu_spans = {}

    def gpu_op(self, cpu_name, kind, name, us, stream=COMPUTE_STREAM, tid=None, nbytes=0, after=0,
               grid=(132, 1, 1), block=(256, 1, 1), runtime="cudaLaunchKernel", runtime_cat="cuda_runtime"):
        """One cpu_op launching one GPU activity; returns (gpu start, gpu end).

        after: the GPU activity waits for this global time too (an event wait)."""
        tid = tid or self.main_tid
        ext = self.next_ext()
        self.corr += 1
        corr = self.corr
        op_start = self.cpu
        launch = op_start + int(self.rng.uniform(2.0, 6.0) * 1000)
        launch_dur = int(self.rng.uniform(3.0, 7.5) * 1000)
        op_end = launch + launch_dur + int(self.rng.uniform(1.0, 3.0) * 1000)
        cost = int(self.rng.uniform(6.0, 18.0) * 1000)
        self.cpu = max(op_end, op_start + cost)
        self.ev_idx += 1
        self.x("cpu_op", cpu_name, self.pid, tid, op_start, op_end,
               {"External id": ext, "Record function id": 0, "Ev Idx": self.ev_idx})
        self.x(runtime_cat, runtime, self.pid, tid, launch, launch + launch_dur,
               {"External id": ext, "cbid": CBID[runtime], "correlation": corr})
        start = max(self.free[stream] + int(self.rng.uniform(0.8, 2.6) * 1000),
                    launch + int(self.rng.uniform(3.0, 5.0) * 1000), after)
        end = start + max(1000, self.jitter(us))
        self.free[stream] = end
        args = {"External id": ext, "device": self.device, "context": 1, "stream": stream, "correlation": corr}
        if kind == "kernel":
            args.update({"queued": 0, "registers per thread": 128, "shared memory": 49152,
                         "blocks per SM": round(grid[0] * grid[1] * grid[2] / 132, 6),
                         "warps per SM": round(grid[0] * grid[1] * grid[2] * block[0] / 32 / 132, 6),
                         "grid": list(grid), "block": list(block), "est. achieved occupancy %": 25})
        else:
            args["bytes"] = nbytes
            args["memory bandwidth (GB/s)"] = round(nbytes / max(1, end - start), 6)
        cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[kind]
        self.x(cat, name, self.device, stream, start, end, args)
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": tid, "ts": self.ts(launch),
                            "cat": "ac2g", "name": "ac2g"})
        self.events.append({"ph": "f", "id": corr, "pid": self.device, "tid": stream, "ts": self.ts(start),
                            "cat": "ac2g", "name": "ac2g", "bp": "e"})
        self.note_gpu(stream, start, end)
        return start, end

    def host_only(self, name, us, tid=None, cat="cuda_runtime"):
        """A runtime call without GPU work (event record, stream wait)."""
        self.corr += 1
        start = self.cpu + 1000
        end = start + int(us * 1000)
        self.x(cat, name, self.pid, tid or self.main_tid, start, end, {"cbid": 0, "correlation": self.corr})
        self.cpu = end + 1000

    def kernel(self, cpu_name, name, us, **kw):
        return self.gpu_op(cpu_name, "kernel", name, us, **kw)


def forward(r):
    k = r.kernel
    k("aten::embedding", EMB_FWD, 18)
    k("aten::embedding", EMB_FWD, 6)
    k("aten::add", ADD, 14)
    for _ in range(LAYERS):
        k("aten::layer_norm", LN_FWD, 14, grid=(8192, 1, 1))
        k("aten::_to_copy", CAST, 4)
        k("aten::addmm", GEMM_TN, 78, grid=(132, 1, 1), block=(384, 1, 1), runtime="cuLaunchKernelEx",
          runtime_cat="cuda_driver")
        k("aten::_scaled_dot_product_flash_attention", FLASH_FWD, 62, grid=(8, 8, 12), block=(128, 1, 1))
        k("aten::_to_copy", CAST, 2.5)
        k("aten::addmm", GEMM_NN, 28, block=(384, 1, 1), runtime="cuLaunchKernelEx", runtime_cat="cuda_driver")
        k("aten::add", ADD, 16)
        k("aten::layer_norm", LN_FWD, 14, grid=(8192, 1, 1))
        k("aten::_to_copy", CAST, 5)
        k("aten::addmm", GEMM_TN, 101, block=(384, 1, 1), runtime="cuLaunchKernelEx", runtime_cat="cuda_driver")
        k("aten::gelu", GELU, 24)
        k("aten::_to_copy", CAST, 5)
        k("aten::addmm", GEMM_NN, 99, block=(384, 1, 1), runtime="cuLaunchKernelEx", runtime_cat="cuda_driver")
        k("aten::add", ADD, 16)
    k("aten::layer_norm", LN_FWD, 14, grid=(8192, 1, 1))
    k("aten::_to_copy", CAST, 60)
    k("aten::mm", GEMM_NT, 1520, block=(384, 1, 1), runtime="cuLaunchKernelEx", runtime_cat="cuda_driver")
    k("aten::_log_softmax", SOFTMAX_FWD, 260, grid=(8192, 1, 1), block=(1024, 1, 1))
    k("aten::nll_loss_forward", NLL_FWD, 12, grid=(1, 1, 1), block=(32, 1, 1))


def bucket_ready(r, nbytes, tid):
    """DDP's allreduce hook for a ready bucket, as the autograd thread runs
    it: the gradients divided by the world size on stream 7, then
    record_param_comms / nccl:all_reduce launching the collective on the
    NCCL stream behind an event. The NCCL kernel's GPU times depend on both
    ranks: allreduces() writes it."""
    _, div_end = r.kernel("aten::div_", DIV, 3 + nbytes / 2.6e6, tid=tid)
    args = allreduce_args(r.rank, nbytes, r.seq)
    r.seq += 1
    outer_start = r.cpu
    r.cpu += 3000
    handle = r.open_annotation("nccl:all_reduce")
    r.host_only("cudaEventRecord", 2.5, tid=tid)
    r.host_only("cudaStreamWaitEvent", 2.0, tid=tid)
    r.corr += 1
    launch = r.cpu + 1500
    launch_end = launch + int(r.rng.uniform(5.0, 9.0) * 1000)
    ext = r.next_ext()
    r.x("cuda_driver", "cuLaunchKernelEx", r.pid, tid, launch, launch_end,
        {"External id": ext, "cbid": 652, "correlation": r.corr})
    r.pending.append({"bytes": nbytes, "ready": div_end, "launch": launch, "corr": r.corr, "ext": ext,
                      "tid": tid, "args": args, "annotations": list(r.open_gpu_annotations)})
    r.cpu = launch_end + 2000
    r.close_annotation(handle, tid=tid)
    r.cpu += 2000
    r.ev_idx += 1
    r.x("cpu_op", "record_param_comms", r.pid, tid, outer_start, r.cpu,
        dict({"External id": r.next_ext(), "Record function id": 0, "Ev Idx": r.ev_idx}, **args))
    r.cpu += int(r.rng.uniform(10.0, 25.0) * 1000)


def grad_to_bucket(r, nbytes, tid):
    r.gpu_op("aten::copy_", "memcpy", "Memcpy DtoD (Device -> Device)", 1.5 + nbytes / 2.5e6, tid=tid,
             nbytes=nbytes, runtime="cudaMemcpyAsync")


def backward(r):
    """The backward on the autograd thread, DDP's buckets launched as they fill."""
    t = r.bwd_tid
    k = r.kernel
    r.cpu += 8_000  # the main thread hands over to the autograd engine
    k("autograd::engine::evaluate_function: NllLossBackward0", FILL, 40, tid=t)
    k("autograd::engine::evaluate_function: NllLossBackward0", NLL_BWD, 20, tid=t)
    k("autograd::engine::evaluate_function: LogSoftmaxBackward0", SOFTMAX_BWD, 300, tid=t, block=(1024, 1, 1))
    k("autograd::engine::evaluate_function: MmBackward0", GEMM_NN, 1500, tid=t, block=(384, 1, 1))
    k("autograd::engine::evaluate_function: MmBackward0", GEMM_TN, 1550, tid=t, block=(384, 1, 1))
    k("autograd::engine::evaluate_function: ToCopyBackward0", CAST, 60, tid=t)
    k("autograd::engine::evaluate_function: NativeLayerNormBackward0", LN_BWD_IN, 22, tid=t)
    k("autograd::engine::evaluate_function: NativeLayerNormBackward0", LN_BWD_W, 18, tid=t)
    grad_to_bucket(r, LNF_GRAD_BYTES, t)
    bucket_ready(r, LNF_GRAD_BYTES, t)
    for _ in range(LAYERS):
        for dgrad, wgrad, bias, gemm_bytes in ((100, 102, 12, 3072 * 768 * 4), (100, 104, 14, 768 * 3072 * 4)):
            k("autograd::engine::evaluate_function: AddmmBackward0", GEMM_NN, dgrad, tid=t, block=(384, 1, 1))
            k("autograd::engine::evaluate_function: AddmmBackward0", GEMM_TN, wgrad, tid=t, block=(384, 1, 1))
            k("autograd::engine::evaluate_function: AddmmBackward0", REDUCE, bias, tid=t, block=(512, 1, 1))
            k("autograd::engine::evaluate_function: ToCopyBackward0", CAST, 5, tid=t)
            grad_to_bucket(r, gemm_bytes, t)
            if dgrad == 100 and wgrad == 102:
                k("autograd::engine::evaluate_function: GeluBackward0", GELU_BWD, 30, tid=t)
        k("autograd::engine::evaluate_function: NativeLayerNormBackward0", LN_BWD_IN, 22, tid=t)
        k("autograd::engine::evaluate_function: NativeLayerNormBackward0", LN_BWD_W, 18, tid=t)
        k("autograd::engine::evaluate_function: AddBackward0", ADD, 16, tid=t)
        k("autograd::engine::evaluate_function: AddmmBackward0", GEMM_NN, 30, tid=t, block=(384, 1, 1))
        k("autograd::engine::evaluate_function: AddmmBackward0", GEMM_TN, 31, tid=t, block=(384, 1, 1))
        k("autograd::engine::evaluate_function: AddmmBackward0", REDUCE, 8, tid=t, block=(512, 1, 1))
        k("autograd::engine::evaluate_function: ToCopyBackward0", CAST, 2.5, tid=t)
        grad_to_bucket(r, 768 * 768 * 4, t)
        r.gpu_op("autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", "memset",
                 "Memset (Device)", 3, tid=t, nbytes=8 * 12 * 1024 * 64 * 4, runtime="cudaMemsetAsync")
        k("autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", FLASH_DOT, 12, tid=t)
        k("autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", FLASH_BWD, 150, tid=t,
          grid=(8, 8, 12), block=(256, 1, 1))
        k("autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0", FLASH_CVT, 8, tid=t)
        k("autograd::engine::evaluate_function: AddmmBackward0", GEMM_NN, 78, tid=t, block=(384, 1, 1))
        k("autograd::engine::evaluate_function: AddmmBackward0", GEMM_TN, 80, tid=t, block=(384, 1, 1))
        k("autograd::engine::evaluate_function: AddmmBackward0", REDUCE, 12, tid=t, block=(512, 1, 1))
        k("autograd::engine::evaluate_function: ToCopyBackward0", CAST, 4, tid=t)
        grad_to_bucket(r, 768 * 2304 * 4, t)
        k("autograd::engine::evaluate_function: NativeLayerNormBackward0", LN_BWD_IN, 22, tid=t)
        k("autograd::engine::evaluate_function: NativeLayerNormBackward0", LN_BWD_W, 18, tid=t)
        k("autograd::engine::evaluate_function: AddBackward0", ADD, 16, tid=t)
        bucket_ready(r, LAYER_GRAD_BYTES, t)
    # The embeddings: wpe, then wte (tied to the LM head, so complete last).
    r.gpu_op("autograd::engine::evaluate_function: EmbeddingBackward0", "memset", "Memset (Device)", 2, tid=t,
             nbytes=1024 * 768 * 4, runtime="cudaMemsetAsync")
    k("autograd::engine::evaluate_function: EmbeddingBackward0", EMB_BWD, 20, tid=t)
    k("autograd::engine::evaluate_function: EmbeddingBackward0", EMB_SUM, 15, tid=t)
    r.gpu_op("autograd::engine::evaluate_function: EmbeddingBackward0", "memset", "Memset (Device)", 52, tid=t,
             nbytes=50257 * 768 * 4, runtime="cudaMemsetAsync")
    k("autograd::engine::evaluate_function: EmbeddingBackward0", EMB_BWD, 38, tid=t)
    k("autograd::engine::evaluate_function: EmbeddingBackward0", EMB_SUM, 24, tid=t)
    k("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", ADD, 75, tid=t)
    grad_to_bucket(r, 50257 * 768 * 4, t)
    grad_to_bucket(r, 1024 * 768 * 4, t)
    bucket_ready(r, EMB_GRAD_BYTES, t)


def allreduce_args(rank, nbytes, seq):
    nelems = nbytes // 4
    return {"Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems,
            "Group size": WORLD, "dtype": "Float", "In split size": "[]", "Out split size": "[]",
            "Process Group Name": "0", "Process Group Description": "default_pg",
            "Process Group Ranks": "[0, 1]", "Rank": rank, "Seq": seq}


def allreduces(ranks):
    """Both ranks' NCCL kernels, bucket by bucket: a kernel starts on each
    rank once its bucket is ready on stream 7, its launch has reached the
    GPU and the NCCL stream is free, and ends, on both ranks, at the later
    rank's start plus the transfer (a rank that arrives first waits inside
    the kernel). Returns each rank's kernels' ends."""
    ends = [[] for _ in ranks]
    for b in range(len(ranks[0].pending)):
        nbytes = ranks[0].pending[b]["bytes"]
        starts = []
        for r in ranks:
            p = r.pending[b]
            starts.append(max(r.free[NCCL_STREAM] + int(r.rng.uniform(1.0, 3.0) * 1000),
                              p["ready"] + int(r.rng.uniform(2.0, 5.0) * 1000),
                              p["launch"] + int(r.rng.uniform(4.0, 6.0) * 1000)))
        transfer = int((10.0 + nbytes / 330e3) * 1000 * (1.0 + ranks[0].rng.gauss(0, 0.02)))
        common_end = max(starts) + transfer
        for i, r in enumerate(ranks):
            p = r.pending[b]
            start, end = starts[i], common_end + int(r.rng.uniform(0.2, 1.8) * 1000)
            args = {"External id": p["ext"], "queued": 0, "device": r.device, "context": 1,
                    "stream": NCCL_STREAM, "correlation": p["corr"], "registers per thread": 96,
                    "shared memory": 0, "blocks per SM": 0.015152, "warps per SM": 0.30303,
                    "grid": [2, 1, 1], "block": [640, 1, 1], "est. achieved occupancy %": 0}
            args.update(p["args"])
            r.x("kernel", NCCL_AR, r.device, NCCL_STREAM, start, end, args)
            r.events.append({"ph": "s", "id": p["corr"], "pid": r.pid, "tid": p["tid"], "ts": r.ts(p["launch"]),
                             "cat": "ac2g", "name": "ac2g"})
            r.events.append({"ph": "f", "id": p["corr"], "pid": r.device, "tid": NCCL_STREAM, "ts": r.ts(start),
                             "cat": "ac2g", "name": "ac2g", "bp": "e"})
            saved = r.open_gpu_annotations
            r.open_gpu_annotations = p["annotations"]
            r.note_gpu(NCCL_STREAM, start, end)
            r.open_gpu_annotations = saved
            r.free[NCCL_STREAM] = end
            ends[i].append((nbytes, end))
    for r in ranks:
        r.pending = []
    return ends


def finish_step(r, bucket_ends):
    """DDP's finalize (stream 7 waits for each bucket's allreduce, then
    copies the bucket back into the gradients: memcpy beside the last
    allreduce), clipping, fused AdamW, then loss.item() synchronizes the
    host."""
    t = r.bwd_tid
    for nbytes, allreduce_end in bucket_ends:
        r.host_only("cudaStreamWaitEvent", 2.0, tid=t)
        r.gpu_op("aten::copy_", "memcpy", "Memcpy DtoD (Device -> Device)", 2 + nbytes / 2.5e6, tid=t,
                 nbytes=nbytes, runtime="cudaMemcpyAsync", after=allreduce_end)
    r.cpu += 15_000
    r.kernel("aten::_foreach_norm", NORM, 85)
    r.kernel("aten::_foreach_norm", NORM_CLEANUP, 4, grid=(1, 1, 1))
    r.kernel("aten::_foreach_mul_", CLIP, 95)
    handle = r.open_annotation("Optimizer.step#AdamW.step")
    for _ in range(6):
        r.kernel("aten::_fused_adamw_", ADAMW, 160, grid=(320, 1, 1), block=(512, 1, 1))
    r.close_annotation(handle)
    r.annotation("Optimizer.zero_grad#AdamW.zero_grad", r.cpu, r.cpu + 38_000)
    r.cpu += 40_000
    _, end = r.gpu_op("aten::_local_scalar_dense", "memcpy", "Memcpy DtoH (Device -> Pageable)", 1.6,
                      nbytes=4, runtime="cudaMemcpyAsync")
    r.host_only("cudaStreamSynchronize", 2.0)
    r.cpu = max(r.cpu, end + 9_000)  # the host waited for the GPU


def step(ranks, n):
    handles = []
    for r in ranks:
        handles.append(r.open_annotation("ProfilerStep#%d" % n))
        loader_start = r.cpu + 3000
        r.cpu = loader_start + int(r.rng.uniform(180, 320) * 1000)
        r.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", loader_start, r.cpu)
        for _ in range(2):  # x and y to the GPU
            r.gpu_op("aten::copy_", "memcpy", "Memcpy HtoD (Pinned -> Device)", 4.2, nbytes=8 * 1024 * 8,
                     runtime="cudaMemcpyAsync")
        fwd = r.open_annotation("DistributedDataParallel.forward")
        forward(r)
        r.close_annotation(fwd)
    for r in ranks:
        backward(r)
    for r, bucket_ends, h in zip(ranks, allreduces(ranks), handles):
        finish_step(r, bucket_ends)
        r.cpu += 6000  # prof.step()
        r.close_annotation(h)
        r.flush_gpu_annotations()


def header(r, events):
    host = "gpu-node-17"
    meta = [
        {"name": "process_name", "ph": "M", "ts": r.ts(TRUE_START_NS), "pid": r.pid, "tid": 0,
         "args": {"name": "python3"}},
        {"name": "process_labels", "ph": "M", "ts": r.ts(TRUE_START_NS), "pid": r.pid, "tid": 0,
         "args": {"labels": "CPU"}},
        {"name": "process_sort_index", "ph": "M", "ts": r.ts(TRUE_START_NS), "pid": r.pid, "tid": 0,
         "args": {"sort_index": r.pid}},
        {"name": "process_name", "ph": "M", "ts": r.ts(TRUE_START_NS), "pid": r.device, "tid": 0,
         "args": {"name": "python3"}},
        {"name": "process_labels", "ph": "M", "ts": r.ts(TRUE_START_NS), "pid": r.device, "tid": 0,
         "args": {"labels": "GPU %d" % r.device}},
        {"name": "thread_name", "ph": "M", "ts": r.ts(TRUE_START_NS), "pid": r.pid, "tid": r.main_tid,
         "args": {"name": "thread %d (python3)" % r.main_tid}},
        {"name": "thread_name", "ph": "M", "ts": r.ts(TRUE_START_NS), "pid": r.pid, "tid": r.bwd_tid,
         "args": {"name": "thread %d (pt_autograd_%d)" % (r.bwd_tid, r.device)}},
        {"name": "thread_name", "ph": "M", "ts": r.ts(TRUE_START_NS), "pid": r.device, "tid": COMPUTE_STREAM,
         "args": {"name": "stream %d " % COMPUTE_STREAM}},
        {"name": "thread_name", "ph": "M", "ts": r.ts(TRUE_START_NS), "pid": r.device, "tid": NCCL_STREAM,
         "args": {"name": "stream %d " % NCCL_STREAM}},
        {"name": "process_name", "ph": "M", "ts": r.ts(TRUE_START_NS), "pid": "Spans", "tid": 0,
         "args": {"name": "Spans"}},
        {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
         "tid": "Trace PyTorch Profiler", "ts": r.ts(TRUE_START_NS)},
    ]
    end = max(e["ts"] + e.get("dur", 0) for e in events)
    tail = [{"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": round(end + 120.5, 3)}]
    return {
        "schemaVersion": 1,
        "deviceProperties": [dict({"id": d}, **DEVICE_PROPS) for d in range(WORLD)],
        "distributedInfo": {"backend": "nccl", "rank": r.rank, "world_size": WORLD, "pg_count": 1,
                            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                                           "pg_size": WORLD, "ranks": list(range(WORLD))}],
                            "nccl_version": "2.27.5"},
        "cupti_version": 26,
        "cuda_runtime_version": 12080,
        "cuda_driver_version": 12080,
        "with_flops": 0,
        "record_shapes": 0,
        "profile_memory": 0,
        "with_stack": 0,
        "trace_id": "%032X" % (0x5EED0000 + 7919 * r.rank),
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASES[r.rank],
        "traceEvents": meta + events + tail,
        "traceName": "%s_%d.%d.pt.trace.json" % (host, r.pid, BASES[r.rank] // 1_000_000),
    }


def leftover_allreduce(r):
    """The last all-reduce of the step before the profiled ones, still
    running when the first profiled step's GPU work begins: 40 us before
    its GPU span, 60 us inside (its launch lies outside the trace). Counted
    in the first step for the time it runs inside it."""
    first = "ProfilerStep#%d" % STEPS[0]
    span_start = min(e["ts"] for e in r.events if e.get("cat") == "gpu_user_annotation" and e["name"] == first)
    r.events.append({"ph": "X", "cat": "kernel", "name": NCCL_AR, "pid": r.device, "tid": NCCL_STREAM,
                     "ts": round(span_start - 40.0, 3), "dur": 100.0,
                     "args": {"queued": 0, "device": r.device, "context": 1, "stream": NCCL_STREAM,
                              "correlation": 1, "registers per thread": 96, "shared memory": 0,
                              "grid": [2, 1, 1], "block": [640, 1, 1]}})


def build(seed):
    ranks = [Rank(i, seed) for i in range(WORLD)]
    for n in STEPS:
        step(ranks, n)
    for r in ranks:
        leftover_allreduce(r)
    return [header(r, r.events) for r in ranks]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder to write the traces into (created)")
    ap.add_argument("--seed", type=int, default=52)
    args = ap.parse_args()
    traces = build(args.seed)
    folder = os.path.join(args.out, "ddp_gpt2_2ranks")
    os.makedirs(folder, exist_ok=True)
    for old in os.listdir(folder):  # a rerun leaves no file of another seed behind
        if old.endswith(".json") or old.endswith(".json.gz"):
            os.remove(os.path.join(folder, old))
    for t in traces:
        with open(os.path.join(folder, t["traceName"]), "w", encoding="utf-8") as f:
            json.dump(t, f, indent=1)
    gz_path = os.path.join(args.out, "ddp_gpt2_rank0.pt.trace.json.gz")
    with open(gz_path, "wb") as raw:  # mtime 0 and no name: the same bytes for the same seed
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            gz.write(json.dumps(traces[0]).encode("utf-8"))
    print("wrote %s and %s/ (%s)" % (gz_path, folder, ", ".join(sorted(os.listdir(folder)))))


if __name__ == "__main__":
    main()
