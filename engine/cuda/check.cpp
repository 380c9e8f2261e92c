#include "engine/cuda/check.h"

#include <cstdlib>
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

int envChoice(const char* var, std::initializer_list<const char*> values) {
  const char* env = std::getenv(var);
  const std::string v = env ? env : "";
  if (v.empty()) return -1;
  int index = 0;
  std::string names;
  for (const char* value : values) {
    if (v == value) return index;
    names += (index == 0 ? "" : index + 1 == int(values.size()) ? " or " : ", ") + std::string(value);
    ++index;
  }
  throw CudaError(std::string(var) + " must be " + names + ", not '" + v + "'");
}

}  // namespace tandem::cuda
