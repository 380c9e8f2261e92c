#pragma once
// What the executor needs to know about the GPUs of this machine, asked
// through the CUDA runtime only (never the driver library), so a binary built
// with CUDA still starts, and says why, on a machine without a GPU.

#include <cstdint>
#include <string>

#include "engine/cuda/device_record.h"

namespace tandem::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_count = 0;
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
  double peak_bf16_flops = 0;  // dense, from the device table; 0 when unknown
};

// Number of usable GPUs; 0 with `reason` filled when there are none (no
// driver, no device, or a runtime/driver mismatch).
int usableGpuCount(std::string* reason);

DeviceInfo deviceInfo(int device);

// The current device's multiprocessors, asked once per process (grids of
// resident blocks).
int smCount();

// The device and the software a run measures it with (device_record.h):
// properties from the CUDA runtime, the versions of the driver's CUDA, the
// runtime, cuBLASLt and NCCL, and the driver's release from NVML when
// libnvidia-ml is there (opened at run time, like the profiler's power
// sampler: nothing links it).
DeviceRecord deviceRecord(int device);

// Dense bf16 tensor-core peak by device name (PaLM-style MFU denominators):
// H100/H200 989 TFLOP/s, A100 312, L40S 362, 0 for unknown devices.
double peakBf16Flops(const std::string& device_name);

}  // namespace tandem::cuda
