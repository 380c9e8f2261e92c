#include "traces/store/sqlite_util.h"

#include <fmt/core.h>

namespace tandem::traces::sql {

Db::Db(const std::string& path, int flags) : path_(path) {
  int rc = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string reason = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    throw TraceError(fmt::format("{}: cannot open trace file: {}", path, reason));
  }
  // Readers and a writer may meet on the same file (GUI while a run records).
  sqlite3_busy_timeout(db_, 5000);
}

Db::~Db() { sqlite3_close_v2(db_); }

void Db::fail(std::string_view what) const {
  throw TraceError(fmt::format("{}: {}: {}", path_, what, sqlite3_errmsg(db_)));
}

void Db::exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw TraceError(fmt::format("{}: {}", path_, msg));
  }
}

int64_t Db::queryInt(const std::string& sql, int64_t if_no_row) {
  Stmt s(*this, sql);
  return s.step() ? s.colInt(0) : if_no_row;
}

Stmt::Stmt(Db& db, const std::string& sql) : db_(&db) {
  if (sqlite3_prepare_v2(db.handle(), sql.c_str(), static_cast<int>(sql.size()), &stmt_, nullptr) != SQLITE_OK)
    db.fail("cannot prepare query");
}

Stmt::~Stmt() { sqlite3_finalize(stmt_); }

Stmt::Stmt(Stmt&& other) noexcept : stmt_(other.stmt_), db_(other.db_) { other.stmt_ = nullptr; }

Stmt& Stmt::operator=(Stmt&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    stmt_ = other.stmt_;
    db_ = other.db_;
    other.stmt_ = nullptr;
  }
  return *this;
}

void Stmt::check(int rc) const {
  if (rc != SQLITE_OK) db_->fail("cannot bind value");
}

bool Stmt::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  db_->fail("query failed");
}

void Stmt::run() {
  int rc = sqlite3_step(stmt_);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
    std::string reason = sqlite3_errmsg(db_->handle());
    sqlite3_reset(stmt_);
    throw TraceError(fmt::format("{}: write failed: {}", db_->path(), reason));
  }
  sqlite3_reset(stmt_);
}

void Stmt::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

}  // namespace tandem::traces::sql
