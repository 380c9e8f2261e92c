#include "engine/spec/resources.h"

#include <filesystem>

namespace tandem {

std::string resourceDir() { return TANDEM_RESOURCE_DIR; }

std::string resourcePath(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(name_or_path, ec)) return name_or_path;
  const fs::path installed = fs::path(resourceDir()) / name_or_path;
  if (fs::exists(installed, ec)) return installed.string();
  return name_or_path;
}

}  // namespace tandem
