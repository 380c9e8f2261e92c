// Hopper's shared-memory barriers with transaction counts (mbarrier) and
// bulk copies into shared memory (cp.async.bulk, the TMA without a tensor
// map): a producer thread announces the bytes a copy will land and the
// consumers wait for the barrier's phase. Used by the GELU GEMMs
// (gemm_gelu.cu), the tensor-core attention (its TMA tiles, attention_tc.cu)
// and the streamed cross-entropy (cross_entropy.cu). These instructions exist from
// sm_90 on; on older targets the wrappers trap, and their kernels are never
// launched there (the host checks which code the device runs, or its
// compute capability).
#pragma once

#include <cstdint>

namespace tandem::cuda {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define TANDEM_MBARRIER_TRAP __trap();
#else
#define TANDEM_MBARRIER_TRAP
#endif

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ __forceinline__ void mbarInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (the copies).
__device__ __forceinline__ void fenceMbarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarArrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}
// The arrival of a TMA issuer that announces the bytes still to land.
__device__ __forceinline__ void mbarExpectBytes(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
// Waits until the phase with the given parity has completed.
__device__ __forceinline__ void mbarWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
}
// Orders this thread's earlier generic-proxy accesses of shared memory
// before later async-proxy ones (a copy into memory that threads read, or a
// wgmma or TMA store reading what threads wrote).
__device__ __forceinline__ void fenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global
// memory to shared memory at `dst`, completing on barrier `bar`.
__device__ __forceinline__ void bulkLoad(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
#else
__device__ __forceinline__ void mbarInit(uint32_t, int) { TANDEM_MBARRIER_TRAP }
__device__ __forceinline__ void fenceMbarrierInit() { TANDEM_MBARRIER_TRAP }
__device__ __forceinline__ void mbarArrive(uint32_t) { TANDEM_MBARRIER_TRAP }
__device__ __forceinline__ void mbarExpectBytes(uint32_t, uint32_t) { TANDEM_MBARRIER_TRAP }
__device__ __forceinline__ void mbarWait(uint32_t, uint32_t) { TANDEM_MBARRIER_TRAP }
__device__ __forceinline__ void fenceProxyAsync() { TANDEM_MBARRIER_TRAP }
__device__ __forceinline__ void bulkLoad(uint32_t, const void*, uint32_t, uint32_t) { TANDEM_MBARRIER_TRAP }
#endif
#undef TANDEM_MBARRIER_TRAP

}  // namespace tandem::cuda
