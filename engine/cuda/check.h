#pragma once
// Error handling for the CUDA executor: every CUDA runtime, cuBLASLt and NCCL
// call goes through one macro that names the call, the file and the line, and
// throws CudaError (caught at the CLI boundary, never exit()).

#include <cuda_runtime.h>

#include <initializer_list>
#include <stdexcept>
#include <string>

namespace tandem::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throwCudaError(const char* what, const char* detail, const char* file, int line);

// A kernel choice an environment variable makes (read at each launch, so
// that one process can time every choice): -1 where `var` is unset or
// empty, else the index of its value in `values`; CudaError naming the
// values for anything else.
int envChoice(const char* var, std::initializer_list<const char*> values);

inline void checkCuda(cudaError_t err, const char* what, const char* file, int line) {
  if (err != cudaSuccess) throwCudaError(what, cudaGetErrorString(err), file, line);
}

}  // namespace tandem::cuda

#define TANDEM_CUDA_CHECK(call) ::tandem::cuda::checkCuda((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch-configuration errors surface here, not later.
#define TANDEM_CUDA_LAUNCH_CHECK() \
  ::tandem::cuda::checkCuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
