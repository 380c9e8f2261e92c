#include "engine/cuda/gemm_choice_cache.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace tandem::cuda {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string cacheDir() {
  if (std::string d = env("TANDEM_GEMM_CACHE"); !d.empty()) return d == "off" ? std::string() : d;
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) return x + "/tandem/gemm";
  if (std::string h = env("HOME"); !h.empty()) return h + "/.cache/tandem/gemm";
  return "";
}

}  // namespace

GemmChoiceCache::GemmChoiceCache(const std::string& device_name, size_t workspace_bytes) {
  const std::string dir = cacheDir();
  if (dir.empty()) return;
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) return;
  std::string device;
  for (char c : device_name) device += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  path_ = fmt::format("{}/{}-driver{}-cublasLt{}-ws{}.tsv", dir, device, driver, cublasLtGetVersion(),
                      workspace_bytes);
}

std::map<std::string, int> GemmChoiceCache::load() const {
  std::map<std::string, int> out;
  if (path_.empty()) return out;
  std::ifstream f(path_);
  std::string line;
  while (std::getline(f, line)) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || tab == 0) continue;
    char* end = nullptr;
    const long choice = std::strtol(line.c_str() + tab + 1, &end, 10);
    if (end == line.c_str() + tab + 1 || *end != '\0' || choice < 0 || choice > 1000) continue;
    out.emplace(line.substr(0, tab), int(choice));  // the first choice of a shape stands
  }
  return out;
}

void GemmChoiceCache::record(const std::string& key, int choice) const {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const std::string line = fmt::format("{}\t{}\n", key, choice);
  [[maybe_unused]] const ssize_t written = ::write(fd, line.data(), line.size());  // one write: a whole line
  ::close(fd);
}

}  // namespace tandem::cuda
