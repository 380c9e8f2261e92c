#pragma once
// The GEMM algorithm choices of earlier runs (engine/cuda/gemm.cpp's tuning),
// kept on disk per GPU model, driver and cuBLASLt version: a choice is an
// index into cuBLASLt's candidate list, which is the same for the same
// shape on the same software, and no longer means anything on another.
// One file per (GPU, driver, cuBLASLt, workspace) under
// $TANDEM_GEMM_CACHE (a folder, or "off"), else
// $XDG_CACHE_HOME/tandem/gemm, else $HOME/.cache/tandem/gemm: lines of
// "shape key<TAB>candidate index", appended whole (O_APPEND) by each
// process that timed a new shape; lines that do not parse are ignored.

#include <cstddef>
#include <map>
#include <string>

namespace tandem::cuda {

class GemmChoiceCache {
 public:
  // The current device's file (nothing read yet); off when no folder is set.
  GemmChoiceCache(const std::string& device_name, size_t workspace_bytes);
  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  // The choices recorded so far (shape key -> candidate index).
  std::map<std::string, int> load() const;
  // Appends one choice; a failure to write is ignored (the next run times
  // that shape again).
  void record(const std::string& key, int choice) const;

 private:
  std::string path_;
};

}  // namespace tandem::cuda
