// checkpoint_write: how fast a rank's checkpoint goes to disk and comes
// back, against the way the writer worked before (each layer's buffers
// gathered into one copy, hashed with FNV-1a, written on one thread), in the
// same run on the same bytes. Also each checksum alone. The state is a real
// plan's persistent buffers (GPT-2 124M by default, 1.7 GB: parameters,
// master weights, moments), filled with pseudo-random bytes.
//   bench_checkpoint_write [--job NAME] [--layers N] [--dir DIR] [--rounds N]
#include <fmt/core.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/crc32c.h"
#include "engine/numerics/init.h"
#include "engine/plan/planner.h"
#include "engine/spec/job.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

checkpoint::Snapshot filledSnapshot(const Plan& plan) {
  checkpoint::Snapshot s;
  s.step = 1;
  s.ranks.resize(size_t(plan.world_size));
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int id : checkpoint::savedBuffers(plan.forRank(0), /*update_pending=*/false)) {
    checkpoint::BufferBytes bb;
    bb.buffer = id;
    bb.bytes.resize(size_t(plan.forRank(0).buffers.at(size_t(id)).bytes));
    for (size_t i = 0; i + 8 <= bb.bytes.size(); i += 8) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      std::memcpy(bb.bytes.data() + i, &x, 8);
    }
    s.ranks[0].push_back(std::move(bb));
  }
  return s;
}

// The writer before: per layer, the buffers gathered into one vector, its
// FNV-1a taken, the vector written; one thread. Returns the files' hashes
// combined (printed, so that the hashing is not optimised away).
uint64_t writeAsBefore(const fs::path& folder, const Plan& plan, const checkpoint::Snapshot& s) {
  fs::create_directories(folder);
  std::map<int, std::vector<const checkpoint::BufferBytes*>> by_layer;
  for (const auto& b : s.ranks[0]) by_layer[plan.forRank(0).buffers.at(size_t(b.buffer)).layer].push_back(&b);
  uint64_t all = 0;
  for (const auto& [layer, in_layer] : by_layer) {
    std::vector<std::byte> data;
    for (const auto* b : in_layer) data.insert(data.end(), b->bytes.begin(), b->bytes.end());
    all ^= fnv1a64(data.data(), data.size());
    std::ofstream f(folder / fmt::format("rank0-layer{}.bin", layer), std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
    f.flush();
    if (!f) throw std::runtime_error("write failed in " + folder.string());
  }
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  std::string job_name = "gpt2-124m-dp8";
  int layers = 0, rounds = 3;
  fs::path dir = fs::temp_directory_path() / fmt::format("tandem-bench-ckpt-{}", ::getpid());
  bench::ArgReader args("bench_checkpoint_write", "[--job NAME] [--layers N] [--dir DIR] [--rounds N]", argc, argv);
  while (args.next()) {
    if (args.is("--job")) job_name = args.text();
    else if (args.is("--layers")) layers = int(args.integer(1, 1000));
    else if (args.is("--dir")) dir = fs::path(args.text()) / fmt::format("tandem-bench-ckpt-{}", ::getpid());
    else if (args.is("--rounds")) rounds = int(args.integer(1, 100));
    else args.unknown();
  }
  std::vector<std::string> sets{"parallel.data_parallel=1"};
  if (layers > 0) sets.push_back(fmt::format("model.layers={}", layers));
  const JobSpec job = parseJob(std::string(builtinJobText(job_name)), job_name, sets);
  const Plan plan = buildPlan(job);
  const checkpoint::Snapshot snap = filledSnapshot(plan);
  const double gb = double(checkpoint::snapshotBytes(snap)) / 1e9;
  for (int r = 0; r < rounds; ++r) {
    auto t = std::chrono::steady_clock::now();
    uint64_t fnv = 0;
    for (const auto& b : snap.ranks[0]) fnv ^= fnv1a64(b.bytes.data(), b.bytes.size());
    const double fnv_s = secondsSince(t);
    t = std::chrono::steady_clock::now();
    uint32_t crc = 0;
    for (const auto& b : snap.ranks[0]) crc ^= checkpoint::crc32c(0, b.bytes.data(), b.bytes.size());
    const double crc_s = secondsSince(t);
    fs::remove_all(dir);
    t = std::chrono::steady_clock::now();
    const uint64_t before_hash = writeAsBefore(dir / "before", plan, snap);
    const double before_s = secondsSince(t);
    t = std::chrono::steady_clock::now();
    const fs::path written = checkpoint::writeCheckpoint(dir / "now", plan, snap, 0, "bench");
    const double write_s = secondsSince(t);
    t = std::chrono::steady_clock::now();
    const checkpoint::Snapshot back = checkpoint::readCheckpoint(written, plan);
    const double read_s = secondsSince(t);
    const bool same = back.ranks.at(0).size() == snap.ranks[0].size() &&
                      back.ranks[0].front().bytes == snap.ranks[0].front().bytes;
    fmt::print(R"({{"bench":"checkpoint_write","job":"{}","round":{},"gb":{:.3f},"fnv1a64_gb_per_s":{:.2f},)"
               R"("crc32c_gb_per_s":{:.2f},"before_write_gb_per_s":{:.2f},"write_gb_per_s":{:.2f},)"
               R"("write_speedup":{:.2f},"read_gb_per_s":{:.2f},"read_back_equal":{},"hashes":"{:x}/{:x}/{:x}"}})" "\n",
               job.name, r + 1, gb, gb / fnv_s, gb / crc_s, gb / before_s, gb / write_s, before_s / write_s,
               gb / read_s, same ? "true" : "false", fnv, crc, before_hash);
    std::fflush(stdout);
  }
  fs::remove_all(dir);
}
