#include "engine/checkpoint/checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/checkpoint/crc32c.h"
#include "engine/checkpoint/reshard.h"
#include "engine/numerics/init.h"
#include "engine/plan/planner.h"

namespace tandem::checkpoint {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr const char* kFormat = "tandem checkpoint 1";
constexpr const char* kManifest = "manifest.json";

std::string stepFolderName(int64_t step) { return fmt::format("step-{:08d}", step); }

std::string fileName(int rank, int layer) {
  return layer < 0 ? fmt::format("rank{}-other.bin", rank) : fmt::format("rank{}-layer{}.bin", rank, layer);
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }
std::string hex32(uint32_t v) { return fmt::format("{:08x}", v); }

// The layout a checkpoint's shards depend on.
Json layoutOf(const JobSpec& job, int world) {
  const ParallelSpec& p = job.parallel;
  return Json{{"world", world},
              {"data_parallel", p.data_parallel},
              {"tensor_parallel", p.tensor_parallel},
              {"pipeline_parallel", p.pipeline_parallel},
              {"pipeline_chunks", p.pipeline_chunks},
              {"context_parallel", p.context_parallel},
              {"shard_optimizer", p.shard_optimizer},
              {"shard_gradients", p.shard_gradients},
              {"shard_parameters", p.shard_parameters},
              {"shard_group_size", p.shard_group_size}};
}

// The complete checkpoints of DIR by step.
std::map<int64_t, fs::path> completeCheckpoints(const fs::path& dir) {
  std::map<int64_t, fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("step-", 0) != 0 || name.size() != 13) continue;
    if (name.find_first_not_of("0123456789", 5) != std::string::npos) continue;
    if (!fs::is_regular_file(e.path() / kManifest)) continue;  // interrupted: skipped
    out[std::stoll(name.substr(5))] = e.path();
  }
  return out;
}

void writeWhole(const fs::path& path, const void* data, size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), std::streamsize(size));
  f.flush();
  if (!f) throw CheckpointError(fmt::format("{}: cannot write the checkpoint file", path.string()));
}

// A file written piece by piece, its CRC-32C taken as the pieces go by (a
// checkpoint's buffers go to disk as they are, not gathered into one copy
// first).
class ChecksummedFile {
 public:
  explicit ChecksummedFile(fs::path path) : path_(std::move(path)), f_(path_, std::ios::binary | std::ios::trunc) {}
  void write(const void* data, size_t size) {
    f_.write(static_cast<const char*>(data), std::streamsize(size));
    crc_ = crc32c(crc_, data, size);
    bytes_ += size;
  }
  // Flushes; throws naming the file if any write failed.
  void close() {
    f_.flush();
    if (!f_) throw CheckpointError(fmt::format("{}: cannot write the checkpoint file", path_.string()));
    f_.close();
  }
  uint32_t crc() const { return crc_; }
  size_t bytes() const { return bytes_; }

 private:
  fs::path path_;
  std::ofstream f_;
  uint32_t crc_ = 0;
  size_t bytes_ = 0;
};

// Runs body(0) .. body(n - 1) on up to kFileThreads threads (this one
// among them); rethrows the first exception once all are done.
constexpr unsigned kFileThreads = 4;
void parallelFor(size_t n, const std::function<void(size_t)>& body) {
  std::atomic<size_t> next{0};
  std::mutex failed_mutex;
  std::exception_ptr failed;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        body(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(failed_mutex);
        if (!failed) failed = std::current_exception();
      }
    }
  };
  std::vector<std::thread> helpers;
  const size_t extra = std::min<size_t>(kFileThreads, n) - (n > 0 ? 1 : 0);
  for (size_t t = 0; t < extra; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  if (failed) std::rethrow_exception(failed);
}

// The checksum a file's manifest entry records, taken over the file's bytes
// piece by piece as they are read: CRC-32C ("crc32c"), or FNV-1a
// ("fnv1a64") in checkpoints written before.
class RunningChecksum {
 public:
  explicit RunningChecksum(const Json& entry) : crc_(entry.contains("crc32c")) {
    want_ = entry.at(crc_ ? "crc32c" : "fnv1a64").get<std::string>();
  }
  void add(const void* data, size_t size) {
    if (crc_)
      crc32c_ = crc32c(crc32c_, data, size);
    else
      fnv_ = fnv1a64(data, size, fnv_);
  }
  bool matches() const { return (crc_ ? hex32(crc32c_) : hex64(fnv_)) == want_; }

 private:
  bool crc_;
  std::string want_;
  uint32_t crc32c_ = 0;
  uint64_t fnv_ = 14695981039346656037ull;  // FNV-1a's offset basis
};

// One file of a checkpoint as its manifest describes it, and what reading
// it gives: its buffers (each read straight into its own memory, checksummed
// on the way) or, for a rank's state file, its text.
struct FileToRead {
  fs::path path;
  const Json* entry = nullptr;
  size_t bytes = 0;
  int rank = -1;
  bool state = false;
  struct Piece {
    int buffer = -1;
    size_t offset = 0, bytes = 0;
  };
  std::vector<Piece> pieces;  // by offset
  std::vector<BufferBytes> buffers;
  std::string state_text;
};

// Reads `file`, checking its size and checksum; throws naming it.
void readFile(FileToRead& file) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(file.path, ec);
  if (ec) throw CheckpointError(fmt::format("{}: missing (the checkpoint's manifest names it)", file.path.string()));
  if (size != file.bytes)
    throw CheckpointError(fmt::format("{}: {} bytes where the manifest says {} (a truncated file)",
                                      file.path.string(), size, file.bytes));
  std::ifstream in(file.path, std::ios::binary);
  RunningChecksum sum(*file.entry);
  auto readInto = [&](void* to, size_t n) {
    in.read(static_cast<char*>(to), std::streamsize(n));
    if (!in) throw CheckpointError(fmt::format("{}: cannot read", file.path.string()));
    sum.add(to, n);
  };
  if (file.state) {
    file.state_text.resize(file.bytes);
    readInto(file.state_text.data(), file.bytes);
  } else {
    std::vector<std::byte> gap;
    size_t at = 0;
    auto skipTo = [&](size_t to) {  // bytes no buffer claims still count in the checksum
      gap.resize(to - at);
      readInto(gap.data(), gap.size());
      at = to;
    };
    for (const FileToRead::Piece& p : file.pieces) {
      if (p.offset > at) skipTo(p.offset);
      BufferBytes b;
      b.buffer = p.buffer;
      b.bytes.resize(p.bytes);
      readInto(b.bytes.data(), p.bytes);
      at = p.offset + p.bytes;
      file.buffers.push_back(std::move(b));
    }
    if (at < file.bytes) skipTo(file.bytes);
  }
  if (!sum.matches()) throw CheckpointError(fmt::format("{}: checksum mismatch (a damaged file)", file.path.string()));
}

}  // namespace

std::vector<int> savedBuffers(const RankPlan& program, bool update_pending) {
  std::vector<int> ids;
  for (const Buffer& b : program.buffers)
    if (b.persistent && b.parent < 0 && b.bytes > 0 && (update_pending || b.category != TensorCategory::Gradient))
      ids.push_back(b.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

void checkSavedBuffers(const RankPlan& program, bool update_pending, const std::vector<BufferBytes>& held,
                       const std::string& where) {
  std::set<int> have;
  for (const BufferBytes& b : held) have.insert(b.buffer);
  const std::vector<int> want = savedBuffers(program, update_pending);
  int missing = 0;
  std::string first;
  for (int id : want)
    if (!have.count(id) && missing++ == 0) first = program.buffers.at(size_t(id)).name;
  if (missing > 0)
    throw CheckpointError(fmt::format("{}: {} of the {} buffers a checkpoint must hold are missing (first: {})", where,
                                      missing, want.size(), first));
}

namespace {

std::string partName(int rank) { return fmt::format("rank{}.part.json", rank); }

// The step's folder, created; `fresh`: an interrupted write of the same
// step removed first (one process writes every rank).
fs::path stepFolder(const fs::path& dir, int64_t step, bool fresh) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw CheckpointError(fmt::format("{}: cannot create the checkpoint folder: {}", dir.string(), ec.message()));
  const fs::path folder = dir / stepFolderName(step);
  if (fresh) fs::remove_all(folder, ec);
  fs::create_directories(folder, ec);
  if (ec) throw CheckpointError(fmt::format("{}: cannot create: {}", folder.string(), ec.message()));
  return folder;
}

// Writes through a temporary name and a rename: readers see all or nothing.
void writeAtomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + fmt::format(".tmp-{}", ::getpid());
  writeWhole(tmp, text.data(), text.size());
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw CheckpointError(fmt::format("{}: cannot complete: {}", path.string(), ec.message()));
}

}  // namespace

void writeRankPart(const fs::path& dir, const Plan& plan, int64_t step, int rank,
                   const std::vector<BufferBytes>& buffers, const std::string& token, const std::string& rank_state) {
  const fs::path folder = stepFolder(dir, step, /*fresh=*/false);
  const RankPlan& program = plan.forRank(rank);
  // One file per layer of the rank's buffers, in id order within it.
  std::map<int, std::vector<const BufferBytes*>> by_layer;
  for (const BufferBytes& b : buffers) by_layer[program.buffers.at(size_t(b.buffer)).layer].push_back(&b);
  const std::vector<std::pair<int, std::vector<const BufferBytes*>>> layers(by_layer.begin(), by_layer.end());
  // The layers' files on a few threads at once: one thread's writes and
  // checksum reached 1.5-1.7 GB/s on an H100 machine (its disk and tmpfs
  // alike), below what fast storage takes.
  std::vector<Json> entries_of(layers.size());
  parallelFor(layers.size(), [&](size_t i) {
    const auto& [layer, in_layer] = layers[i];
    const std::string name = fileName(rank, layer);
    ChecksummedFile file(folder / name);
    Json entries = Json::array();
    for (const BufferBytes* b : in_layer) {
      const Buffer& buf = program.buffers.at(size_t(b->buffer));
      entries.push_back({{"id", buf.id}, {"name", buf.name}, {"offset", file.bytes()}, {"bytes", b->bytes.size()}});
      file.write(b->bytes.data(), b->bytes.size());
    }
    file.close();
    entries_of[i] = Json{{"path", name},      {"rank", rank},
                         {"layer", layer},    {"bytes", file.bytes()},
                         {"crc32c", hex32(file.crc())}, {"buffers", entries}};
  });
  Json files = Json::array();
  for (Json& f : entries_of) files.push_back(std::move(f));
  if (!rank_state.empty()) {
    const std::string name = fmt::format("rank{}.state", rank);
    ChecksummedFile file(folder / name);
    file.write(rank_state.data(), rank_state.size());
    file.close();
    files.push_back({{"path", name},
                     {"rank", rank},
                     {"kind", "rank_state"},
                     {"bytes", file.bytes()},
                     {"crc32c", hex32(file.crc())},
                     {"buffers", Json::array()}});
  }
  writeAtomically(folder / partName(rank), Json{{"token", token}, {"rank", rank}, {"files", files}}.dump() + "\n");
}

fs::path completeCheckpoint(const fs::path& dir, const Plan& plan, int64_t step, bool update_pending, int keep,
                            const std::string& tool_version, const std::string& token, double wait_s) {
  const fs::path folder = dir / stepFolderName(step);
  // Every rank's part of this write (the token: not a part an earlier,
  // interrupted write of the same step left), waiting for the other
  // processes' parts up to wait_s.
  Json files = Json::array();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(wait_s, 0.0));
  for (int r = 0; r < plan.world_size; ++r) {
    while (true) {
      std::ifstream in(folder / partName(r));
      Json part;
      if (in) {
        try {
          part = Json::parse(in);
        } catch (const Json::parse_error&) {
          part = Json();
        }
      }
      if (part.is_object() && part.value("token", "") == token) {
        for (const Json& file : part.at("files")) files.push_back(file);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline)
        throw CheckpointError(fmt::format("{}: rank {}'s part of the checkpoint did not appear within {:.0f} s",
                                          folder.string(), r, wait_s));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  Json m;
  m["format"] = kFormat;
  m["tool_version"] = tool_version;
  m["plan_format"] = kPlanFormatVersion;
  m["job_hash"] = plan.job.content_hash;
  m["job_yaml"] = plan.job.yaml;
  m["step"] = step;
  m["data_position"] = step;  // the data and dropout are functions of (seed, step)
  m["lr_step"] = step;
  m["seed"] = plan.job.training.seed;
  m["update_pending"] = update_pending;
  m["layout"] = layoutOf(plan.job, plan.world_size);
  m["files"] = files;
  writeAtomically(folder / kManifest, m.dump(2) + "\n");  // the checkpoint exists from here on
  std::error_code ec;
  for (int r = 0; r < plan.world_size; ++r) fs::remove(folder / partName(r), ec);
  if (keep > 0) {
    const auto all = completeCheckpoints(dir);
    int excess = int(all.size()) - keep;
    for (const auto& [s, path] : all)
      if (excess-- > 0) fs::remove_all(path, ec);
  }
  return folder;
}

fs::path writeCheckpoint(const fs::path& dir, const Plan& plan, const Snapshot& snap, int keep,
                         const std::string& tool_version) {
  stepFolder(dir, snap.step, /*fresh=*/true);  // an interrupted write of the same step removed
  const std::string token = fmt::format("pid{}", ::getpid());
  for (size_t r = 0; r < snap.ranks.size(); ++r)
    writeRankPart(dir, plan, snap.step, int(r), snap.ranks[r], token,
                  r < snap.rank_state.size() ? snap.rank_state[r] : std::string());
  return completeCheckpoint(dir, plan, snap.step, snap.update_pending, keep, tool_version, token, 0);
}

std::optional<fs::path> latestCheckpoint(const fs::path& dir) {
  const auto all = completeCheckpoints(dir);
  if (all.empty()) return std::nullopt;
  return all.rbegin()->second;
}

Snapshot readCheckpoint(const fs::path& folder, const Plan& plan) {
  const fs::path manifest_path = folder / kManifest;
  std::ifstream in(manifest_path);
  if (!in) throw CheckpointError(fmt::format("{}: no manifest (an interrupted checkpoint)", folder.string()));
  Json m;
  try {
    m = Json::parse(in);
  } catch (const Json::parse_error& e) {
    throw CheckpointError(fmt::format("{}: damaged manifest: {}", manifest_path.string(), e.what()));
  }
  if (!m.is_object() || m.value("format", "") != kFormat)
    throw CheckpointError(fmt::format("{}: not a tandem checkpoint manifest", manifest_path.string()));
  try {
    // The same model, training and data; the layout is checked apart, so
    // that the message says which of the two differs.
    const JobSpec saved = parseJob(m.at("job_yaml").get<std::string>(), manifest_path.string());
    TrainingSpec a = saved.training, b = plan.job.training;
    a.steps = b.steps = 0;  // resuming for more steps is the point
    // The batch's split may change with the layout (reshard.h checks that
    // the global batch does not).
    a.micro_batch = b.micro_batch = 0;
    a.grad_accum = b.grad_accum = 0;
    if (!(saved.model == plan.job.model) || !(a == b) || !(saved.data == plan.job.data))
      throw CheckpointError(fmt::format("{}: written by another job ({}, hash {}), not {}: its model, training or "
                                        "data settings differ",
                                        folder.string(), saved.name, m.at("job_hash").get<std::string>(),
                                        plan.job.name));
    const bool same_split = saved.training.micro_batch == plan.job.training.micro_batch &&
                            saved.training.grad_accum == plan.job.training.grad_accum;
    if (m.at("layout") != layoutOf(plan.job, plan.world_size) || !same_split) {
      // Another data-parallel layout: read for the plan it was written
      // with, then laid out as this one keeps it (reshard.h).
      if (const std::string why = reshardRefusal(saved, plan); !why.empty())
        throw CheckpointError(fmt::format("{}: written with layout {} but the job now has {}; resharding refused: {}",
                                          folder.string(), m.at("layout").dump(),
                                          layoutOf(plan.job, plan.world_size).dump(), why));
      const Plan saved_plan = buildPlan(saved);
      return reshard(saved_plan, readCheckpoint(folder, saved_plan), plan);
    }
    Snapshot snap;
    snap.step = m.at("step").get<int64_t>();
    snap.update_pending = m.value("update_pending", false);
    snap.ranks.resize(size_t(plan.world_size));
    // What each file must hold, checked against the plan first; then the
    // files read (a few at a time), each buffer straight into its memory.
    std::vector<FileToRead> files;
    for (const Json& f : m.at("files")) {
      FileToRead file;
      file.path = folder / f.at("path").get<std::string>();
      file.entry = &f;
      file.bytes = f.at("bytes").get<size_t>();
      file.rank = f.at("rank").get<int>();
      if (file.rank < 0 || file.rank >= plan.world_size)
        throw CheckpointError(fmt::format("{}: rank {} outside the job's {} ranks", file.path.string(), file.rank,
                                          plan.world_size));
      file.state = f.value("kind", "") == "rank_state";
      const RankPlan& program = plan.forRank(file.rank);
      size_t end = 0;
      for (const Json& e : f.at("buffers")) {
        const int id = e.at("id").get<int>();
        const size_t offset = e.at("offset").get<size_t>(), bytes = e.at("bytes").get<size_t>();
        if (id < 0 || size_t(id) >= program.buffers.size() || program.buffers[size_t(id)].name != e.at("name") ||
            size_t(program.buffers[size_t(id)].bytes) != bytes || offset < end || offset + bytes > file.bytes)
          throw CheckpointError(fmt::format("{}: buffer {} ({}) does not match the job's plan", file.path.string(),
                                            id, e.at("name").get<std::string>()));
        file.pieces.push_back({id, offset, bytes});
        end = offset + bytes;
      }
      files.push_back(std::move(file));
    }
    parallelFor(files.size(), [&files](size_t i) { readFile(files[i]); });
    for (FileToRead& file : files) {
      if (file.state) {
        snap.rank_state.resize(size_t(plan.world_size));
        snap.rank_state[size_t(file.rank)] = std::move(file.state_text);
        continue;
      }
      for (BufferBytes& b : file.buffers) snap.ranks[size_t(file.rank)].push_back(std::move(b));
    }
    // Every buffer the plan keeps across steps must be there.
    for (int r = 0; r < plan.world_size; ++r)
      checkSavedBuffers(plan.forRank(r), snap.update_pending, snap.ranks[size_t(r)],
                        fmt::format("{}: rank {}", folder.string(), r));
    return snap;
  } catch (const Json::exception& e) {
    throw CheckpointError(fmt::format("{}: damaged manifest: {}", manifest_path.string(), e.what()));
  }
}

AsyncWriter::AsyncWriter(fs::path dir, const Plan& plan, int keep, std::string tool_version)
    : dir_(std::move(dir)), plan_(plan), keep_(keep), tool_version_(std::move(tool_version)) {}

AsyncWriter::~AsyncWriter() {
  if (thread_.joinable()) thread_.join();
}

void AsyncWriter::writeRankPartOnly(int rank, std::string token, double wait_s) {
  part_rank_ = rank;
  part_token_ = std::move(token);
  part_wait_s_ = wait_s;
}

int64_t snapshotBytes(const Snapshot& snap, int rank) {
  int64_t n = 0;
  for (size_t r = 0; r < snap.ranks.size(); ++r) {
    if (rank >= 0 && int(r) != rank) continue;
    for (const BufferBytes& b : snap.ranks[r]) n += int64_t(b.bytes.size());
    if (r < snap.rank_state.size()) n += int64_t(snap.rank_state[r].size());
  }
  return n;
}

void AsyncWriter::wait() {
  if (thread_.joinable()) {
    const auto start = std::chrono::steady_clock::now();
    thread_.join();
    cost_.loop_waited_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

std::optional<Snapshot> AsyncWriter::takeWritten() {
  wait();
  return std::exchange(written_, std::nullopt);
}

void AsyncWriter::submit(Snapshot snap) {
  wait();
  written_.reset();
  thread_ = std::thread([this, s = std::move(snap)]() mutable {
    const auto start = std::chrono::steady_clock::now();
    try {
      fs::path folder;
      if (part_rank_ < 0) {
        folder = writeCheckpoint(dir_, plan_, s, keep_, tool_version_);
      } else {
        // One rank of a run with a process per rank: its part; rank 0 then
        // waits for the others' and completes the checkpoint.
        writeRankPart(dir_, plan_, s.step, part_rank_, s.ranks.at(size_t(part_rank_)), part_token_,
                      size_t(part_rank_) < s.rank_state.size() ? s.rank_state[size_t(part_rank_)] : std::string());
        if (part_rank_ == 0)
          folder = completeCheckpoint(dir_, plan_, s.step, s.update_pending, keep_, tool_version_, part_token_,
                                      part_wait_s_);
      }
      cost_.writes += 1;
      cost_.bytes += snapshotBytes(s, part_rank_);
      cost_.write_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (on_written && !folder.empty()) on_written(folder);
      written_ = std::move(s);
    } catch (...) {
      error_ = std::current_exception();
    }
  });
}

}  // namespace tandem::checkpoint
