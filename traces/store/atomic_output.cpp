#include "traces/store/atomic_output.h"

#include <fmt/core.h>
#include <unistd.h>

#include <filesystem>

#include "traces/store/schema.h"
#include "traces/store/sqlite_util.h"
#include "traces/store/trace_model.h"

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
    copyTrace(final_, temp_);
    replaces_trace_ = true;
  }
}

// A trace still in WAL mode (written while another program had it open)
// keeps committed transactions in its -wal file, which a copy of the main
// file alone would drop without a word: then the copy goes through SQLite.
// Without a WAL (every finished trace) the bytes are the trace.
void AtomicOutput::copyTrace(const std::string& from, const std::string& to) {
  checkSqliteHeader(from);  // a file that is no trace gets the readers' message
  std::error_code ec;
  const std::string wal = from + "-wal";
  if (!fs::exists(wal, ec) || fs::file_size(wal, ec) == 0) {
    fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    if (ec) throw TraceError(fmt::format("{}: cannot copy to '{}': {}", from, to, ec.message()));
    return;
  }
  sql::Db src(from, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX);
  sql::Db dst(to, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX);
  sqlite3_backup* b = sqlite3_backup_init(dst.handle(), "main", src.handle(), "main");
  if (b == nullptr) dst.fail(fmt::format("cannot copy '{}' to append to it", from));
  const int rc = sqlite3_backup_step(b, -1);
  sqlite3_backup_finish(b);
  if (rc != SQLITE_DONE)
    throw TraceError(fmt::format("{}: cannot copy the trace to append to it: {}", from, sqlite3_errstr(rc)));
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
  // The replaced trace's WAL (its transactions are in the copy) must not be
  // replayed into the new file at the next open.
  if (replaces_trace_)
    for (const char* suffix : {"-wal", "-shm"}) fs::remove(final_ + suffix, ec);
  committed_ = true;
}

}  // namespace tandem::traces
