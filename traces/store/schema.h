#pragma once
// The trace file's schema: creation, version checks and the header sanity
// check that turns a truncated or foreign file into a one-line error.
// The tables are documented in docs/trace-schema.md.

#include <string>

#include "traces/store/sqlite_util.h"

namespace tandem::traces {

// 2: runs keep their plan facts (recompute decisions, memory, the plan) and
// their topology's text beside its name. Version 1 files are read as they
// are (without plan facts) and migrated when a writer opens them.
inline constexpr int kTraceSchemaVersion = 2;
// PRAGMA application_id of a tandem trace file: "TNDM".
inline constexpr int kTraceApplicationId = 0x544E444D;

// Checks that an existing file looks like a whole SQLite database (magic
// bytes, page count against file size). Throws TraceError otherwise.
void checkSqliteHeader(const std::string& path);

// Creates the schema in an empty database, or checks that an existing one is
// a tandem trace file this version can read (and write, when for_write: an
// older schema is then migrated). Returns the file's schema version.
int prepareSchema(sql::Db& db, bool for_write);

// Whether the file has a table of that name (tables added within a schema
// version, such as kernel_resources).
bool hasTable(sql::Db& db, const char* name);

// Sets the per-connection pragmas the writer relies on (WAL, page cache).
void configureForWriting(sql::Db& db);

}  // namespace tandem::traces
