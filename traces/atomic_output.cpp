#include "traces/atomic_output.h"

#include <fmt/core.h>
#include <unistd.h>

#include <filesystem>

#include "traces/trace_model.h"

namespace tandem::traces {

namespace fs = std::filesystem;

AtomicOutput::AtomicOutput(std::string final_path, bool copy_existing) : final_(std::move(final_path)) {
  fs::path p(final_);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw TraceError(fmt::format("{}: cannot write output: folder '{}' does not exist", final_, dir.string()));
  temp_ = (dir / fmt::format(".{}.tmp-{}", p.filename().string(), ::getpid())).string();
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(temp_ + suffix, ec);
  if (copy_existing && fs::exists(final_, ec)) {
    fs::copy_file(final_, temp_, fs::copy_options::overwrite_existing, ec);
    if (ec) throw TraceError(fmt::format("{}: cannot copy to '{}': {}", final_, temp_, ec.message()));
  }
}

AtomicOutput::~AtomicOutput() {
  std::error_code ec;
  if (!committed_)
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(temp_ + suffix, ec);
}

void AtomicOutput::commit() {
  std::error_code ec;
  fs::rename(temp_, final_, ec);
  if (ec) throw TraceError(fmt::format("{}: cannot move finished output into place: {}", final_, ec.message()));
  for (const char* suffix : {"-wal", "-shm"}) fs::remove(temp_ + suffix, ec);
  committed_ = true;
}

}  // namespace tandem::traces
