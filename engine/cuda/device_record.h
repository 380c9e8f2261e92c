#pragma once
// What a real run records about its GPU and software in the trace store
// (RunInfo::devices_json), so that a calibration fitted from it names the
// device, the driver and the CUDA, cuBLASLt and NCCL versions it was
// measured with (issue: calibration provenance). The JSON text is built
// here without CUDA, so the CPU tests check it; device.h fills the record.

#include <cstdint>
#include <string>

namespace tandem::cuda {

struct DeviceRecord {
  int index = 0;
  std::string name;
  int64_t memory_bytes = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;  // compute capability
  std::string driver;              // the driver's release ("580.82.07"; empty when NVML is missing)
  int cuda_driver = 0;             // cudaDriverGetVersion: the CUDA version the driver supports (13000)
  int cuda_runtime = 0;            // cudaRuntimeGetVersion (13000)
  int64_t cublaslt = 0;            // cublasLtGetVersion (130100)
  int nccl = 0;                    // ncclGetVersion (22803)
};

// "13.0" from 13000 (CUDA's major * 1000 + minor * 10); "" for 0.
std::string cudaVersionText(int version);
// "2.28.3" from 22803 (NCCL 2.9 and newer: major * 10000 + minor * 100 + patch); "" for 0.
std::string ncclVersionText(int version);
// "13.1.0" from 130100 (major * 10000 + minor * 100 + patch); "" for 0.
std::string cublasLtVersionText(int64_t version);

// One device as a JSON array of one object (the store's devices_json):
// index, name, memory_bytes, and where known sm_count, compute_capability,
// driver, cuda_driver, cuda_runtime, cublaslt and nccl.
std::string devicesJson(const DeviceRecord& d);

}  // namespace tandem::cuda
