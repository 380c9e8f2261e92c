#include "engine/cuda/check.h"

#include <string>

namespace tandem::cuda {

void throwCudaError(const char* what, const char* detail, const char* file, int line) {
  // Keep only the path inside the repository: messages stay short and stable.
  std::string where = file;
  auto pos = where.find("engine/cuda/");
  if (pos != std::string::npos) where = where.substr(pos);
  throw CudaError(std::string(what) + " failed: " + detail + " (" + where + ":" +
                  std::to_string(line) + ")");
}

}  // namespace tandem::cuda
