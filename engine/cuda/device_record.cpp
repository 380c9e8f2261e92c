#include "engine/cuda/device_record.h"

#include <nlohmann/json.hpp>

namespace tandem::cuda {

std::string cudaVersionText(int v) {
  return v > 0 ? std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) : "";
}

std::string ncclVersionText(int v) {
  return v > 0 ? std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100)
               : "";
}

std::string cublasLtVersionText(int64_t v) {
  return v > 0 ? std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100)
               : "";
}

std::string devicesJson(const DeviceRecord& d) {
  nlohmann::ordered_json o;
  o["index"] = d.index;
  o["name"] = d.name;
  o["memory_bytes"] = d.memory_bytes;
  if (d.sm_count > 0) o["sm_count"] = d.sm_count;
  if (d.cc_major > 0) o["compute_capability"] = std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor);
  if (!d.driver.empty()) o["driver"] = d.driver;
  auto put = [&](const char* key, const std::string& text) {
    if (!text.empty()) o[key] = text;
  };
  put("cuda_driver", cudaVersionText(d.cuda_driver));
  put("cuda_runtime", cudaVersionText(d.cuda_runtime));
  put("cublaslt", cublasLtVersionText(d.cublaslt));
  put("nccl", ncclVersionText(d.nccl));
  return nlohmann::ordered_json::array({o}).dump();
}

}  // namespace tandem::cuda
