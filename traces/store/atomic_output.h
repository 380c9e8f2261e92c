#pragma once
// An output file that appears whole or not at all: data goes to a temporary
// file in the same folder, renamed over the final path by commit(). If the
// object dies uncommitted (an exception), the temporary file is removed, so
// a failed command never leaves a partial output behind.

#include <string>

namespace tandem::traces {

class AtomicOutput {
 public:
  // When copy_existing is set and the final file exists, the temporary file
  // starts as a copy of it (to append a run to an existing trace; the file
  // must be a SQLite trace).
  explicit AtomicOutput(std::string final_path, bool copy_existing = false);
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  const std::string& tempPath() const { return temp_; }
  const std::string& finalPath() const { return final_; }
  void commit();

 private:
  static void copyTrace(const std::string& from, const std::string& to);

  std::string final_;
  std::string temp_;
  bool committed_ = false;
  bool replaces_trace_ = false;  // started as a copy of the final trace
};

}  // namespace tandem::traces
