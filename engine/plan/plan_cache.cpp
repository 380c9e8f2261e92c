#include "engine/plan/plan_cache.h"

#include <elf.h>
#include <fmt/format.h>
#include <link.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "engine/numerics/init.h"
#include "engine/plan/plan_json.h"
#include "engine/plan/planner.h"

namespace tandem {
namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// dl_iterate_phdr's first object is the executable itself: its PT_NOTE
// segments hold the build id as a note of type NT_GNU_BUILD_ID named "GNU".
int findBuildId(struct dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::optional<std::string>*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + ((note->n_namesz + 3) & ~3u);
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0 &&
          desc + note->n_descsz <= end) {
        std::string hex;
        for (uint32_t b = 0; b < note->n_descsz; ++b) hex += fmt::format("{:02x}", uint8_t(desc[b]));
        *out = hex;
        return 1;
      }
      p = desc + ((note->n_descsz + 3) & ~3u);
    }
  }
  return 1;  // only the executable
}

}  // namespace

std::string defaultPlanCacheDir() {
  if (std::string d = env("TANDEM_PLAN_CACHE"); !d.empty()) return d;
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) return x + "/tandem/plans";
  if (std::string h = env("HOME"); !h.empty()) return h + "/.cache/tandem/plans";
  return "";
}

std::optional<std::string> programBuildId() {
  static const std::optional<std::string> id = [] {
    std::optional<std::string> out;
    dl_iterate_phdr(findBuildId, &out);
    return out;
  }();
  return id;
}

PlanCache::PlanCache(std::string dir, int64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes), build_id_(programBuildId()) {}

std::string PlanCache::disabledReason() const {
  if (dir_.empty()) return "no plan cache folder (--plan-cache, or HOME unset)";
  if (!build_id_) return "this tandem binary has no build id to key plans by, so plans are built every time";
  return "";
}

std::string PlanCache::pathFor(const JobSpec& job) const {
  JobSpec canonical = job;
  refreshJobText(canonical);  // the fields are the truth; the text follows them
  const std::string identity = fmt::format("{}\n{} {}\n{}", canonical.yaml, kPlanFormatName, kPlanFormatVersion,
                                           build_id_.value_or(""));
  return fmt::format("{}/{:016x}.plan.json", dir_, fnv1a64(identity.data(), identity.size(), 0x504c414e));
}

Plan PlanCache::planFor(const JobSpec& job, PlanCacheStats* stats) const {
  PlanCacheStats local;
  PlanCacheStats& s = stats ? *stats : local;
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  if (!enabled()) {
    s.note = disabledReason();
    Plan plan = buildPlan(job);
    s.seconds = elapsed();
    return plan;
  }
  s.path = pathFor(job);
  std::error_code ec;
  if (fs::exists(s.path, ec)) {
    try {
      Plan plan = readPlanJson(s.path);
      JobSpec want = job;
      refreshJobText(want);
      if (plan.job.content_hash == want.content_hash) {
        fs::last_write_time(s.path, fs::file_time_type::clock::now(), ec);  // recently used
        s.from_cache = true;
        s.seconds = elapsed();
        return plan;
      }
      s.note = s.path + ": holds the plan of another job (a hash collision); planned again";
    } catch (const std::exception& e) {
      s.note = std::string(e.what()) + "; planned again";
    }
  }
  Plan plan = buildPlan(job);
  try {
    fs::create_directories(dir_);
    writePlanJson(plan, s.path);
    prune();
  } catch (const std::exception& e) {
    s.note = fmt::format("plan not cached: {}", e.what());
  }
  s.seconds = elapsed();
  return plan;
}

void PlanCache::prune() const {
  struct Entry {
    fs::path path;
    fs::file_time_type used;
    int64_t bytes;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 10 || name.compare(name.size() - 10, 10, ".plan.json") != 0) continue;
    const int64_t bytes = int64_t(e.file_size(ec));
    if (ec) continue;
    entries.push_back({e.path(), e.last_write_time(ec), bytes});
    total += bytes;
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  // The newest plan stays even alone over the limit.
  for (size_t i = 0; total > max_bytes_ && i + 1 < entries.size(); ++i) {
    fs::remove(entries[i].path, ec);
    if (!ec) total -= entries[i].bytes;
  }
}

}  // namespace tandem
