#pragma once
// A thin RAII layer over the SQLite C API for the trace store. Every failure
// becomes a TraceError whose message names the file and SQLite's reason.

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "traces/store/trace_model.h"

namespace tandem::traces::sql {

class Db {
 public:
  Db(const std::string& path, int flags);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  void exec(const std::string& sql);
  // Runs a statement returning one integer (PRAGMA user_version, COUNT(*)).
  int64_t queryInt(const std::string& sql, int64_t if_no_row = 0);
  [[noreturn]] void fail(std::string_view what) const;
  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

class Stmt {
 public:
  Stmt() = default;
  Stmt(Db& db, const std::string& sql);
  ~Stmt();
  Stmt(Stmt&& other) noexcept;
  Stmt& operator=(Stmt&& other) noexcept;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  void bind(int index, int64_t v) { check(sqlite3_bind_int64(stmt_, index, v)); }
  void bind(int index, int v) { check(sqlite3_bind_int64(stmt_, index, v)); }
  void bind(int index, double v) { check(sqlite3_bind_double(stmt_, index, v)); }
  void bind(int index, std::string_view v) {
    check(sqlite3_bind_text(stmt_, index, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  void bindNull(int index) { check(sqlite3_bind_null(stmt_, index)); }
  void bindBlob(int index, std::string_view bytes) {
    check(sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT));
  }

  // Advances to the next row; false when done.
  bool step();
  // Runs a statement that returns no rows, then resets it for reuse.
  void run();
  void reset();

  int64_t colInt(int i) const { return sqlite3_column_int64(stmt_, i); }
  double colDouble(int i) const { return sqlite3_column_double(stmt_, i); }
  bool colIsNull(int i) const { return sqlite3_column_type(stmt_, i) == SQLITE_NULL; }
  std::string colBlob(int i) const {
    const void* p = sqlite3_column_blob(stmt_, i);
    return p ? std::string(static_cast<const char*>(p), size_t(sqlite3_column_bytes(stmt_, i))) : std::string();
  }
  std::string colText(int i) const {
    const unsigned char* p = sqlite3_column_text(stmt_, i);
    return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(stmt_, i)) : std::string();
  }

 private:
  void check(int rc) const;
  sqlite3_stmt* stmt_ = nullptr;
  Db* db_ = nullptr;
};

}  // namespace tandem::traces::sql
