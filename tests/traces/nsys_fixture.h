#pragma once
// Writes a small Nsight Systems SQLite export the way `nsys export --type
// sqlite` lays it out (tables, column names and NVTX event types from the
// export schema documentation): two GPUs, kernels, an NCCL kernel, memcpy,
// memset, runtime launches, NVTX ranges, GPU info and the metadata table.

#include <sqlite3.h>

#include <stdexcept>
#include <string>

namespace tandem::traces::testing {

inline void writeNsysFixture(const std::string& path) {
  std::remove(path.c_str());
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) throw std::runtime_error("cannot create nsys fixture");
  const char* sql = R"SQL(
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
CREATE TABLE TARGET_INFO_GPU (id INTEGER NOT NULL, name TEXT, busLocation TEXT, totalMemory INTEGER, smCount INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER,
  cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,
  gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL,
  staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, srcKind INTEGER, dstKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  value INTEGER NOT NULL, bytes INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
  domainId INTEGER);
CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER, eventClass INTEGER, globalTid INTEGER, nameId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_OVERHEAD (start INTEGER NOT NULL, end INTEGER);

INSERT INTO StringIds VALUES (1, 'void gemm_kernel<128, 256>(float*, float const*)'), (2, 'gemm_kernel'),
  (3, 'ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)'),
  (4, 'ncclDevKernel_AllReduce_Sum_f32_RING_LL'), (5, 'cudaLaunchKernel'), (6, 'cudaMemcpyAsync'),
  (7, 'cudaStreamSynchronize'), (8, 'forward');
INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.11.1'), ('EXPORT_PRODUCT_VERSION', '2024.5.1');
INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H200', '0000:19:00.0', 150754820096, 132),
  (1, 'NVIDIA H200', '0000:3b:00.0', 150754820096, 132);
-- device 0: a GEMM on stream 7, an all-reduce on stream 13 overlapping it, a copy on stream 14.
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
  (1000, 1500, 0, 1, 7, 11, 100, 1, 2, 0, 0, 0, 128, 132, 1, 1, 256, 1, 1, 0, 49152),
  (1200, 1800, 0, 1, 13, 12, 100, 3, 4, 0, 0, 0, 96, 32, 1, 1, 512, 1, 1, 0, 0),
  (1000, 1400, 1, 2, 7, 21, 200, 1, 2, 0, 0, 0, 128, 132, 1, 1, 256, 1, 1, 0, 49152),
  (0, 0, 1, 2, 7, 22, 200, 1, 2, 0, 0, 0, 128, 132, 1, 1, 256, 1, 1, 0, 49152);
INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (1900, 2000, 0, 1, 14, 13, 100, 65536, 2, 3, 1);
INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (1450, 1460, 1, 2, 7, 23, 200, 0, 4096);
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES
  (900, 950, 0, 5001, 11, 5, 0), (1100, 1150, 0, 5001, 12, 5, 0), (1850, 1870, 0, 5001, 13, 6, 0),
  (905, 960, 0, 5002, 21, 5, 0), (1440, 1449, 0, 5002, 23, 6, 0), (2100, 2500, 0, 5001, 99, 7, 0);
INSERT INTO NVTX_EVENTS VALUES
  (800, 2600, 59, 0, 0, 0, 'step', 5001, 5001, NULL, 0),
  (850, 1700, 59, 0, 0, 0, NULL, 5001, 5001, 8, 0),
  (870, 880, 34, 0, 0, 0, 'mark', 5001, 5001, NULL, 0);
INSERT INTO OSRT_API VALUES (10, 20, 0, 5001, 5);
)SQL";
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "?";
    sqlite3_free(err);
    sqlite3_close(db);
    throw std::runtime_error("nsys fixture: " + msg);
  }
  sqlite3_close(db);
}

}  // namespace tandem::traces::testing
