#include "profiler/power_sampler.h"

#include <dlfcn.h>

#include <chrono>

namespace tandem::profiler {

// The few NVML entry points used, declared from NVML's documented C API
// (return 0 = NVML_SUCCESS; power in milliwatts; clock type 1 = SM).
struct PowerSampler::Nvml {
  using Device = void*;
  using Init = int (*)();
  using Shutdown = int (*)();
  using ByPciBusId = int (*)(const char*, Device*);
  using PowerUsage = int (*)(Device, unsigned int*);
  using ClockInfo = int (*)(Device, int, unsigned int*);
  using Reasons = int (*)(Device, unsigned long long*);
  using Energy = int (*)(Device, unsigned long long*);
  // nvmlFieldValue_t: field id, scope id, timestamp (us), latency (us),
  // value type, return code, and the value (a union of 8 bytes).
  struct FieldValue {
    unsigned int field_id = 0;
    unsigned int scope_id = 0;
    long long timestamp = 0;
    long long latency_us = 0;
    int value_type = 0;  // 0 double, 1 uint, 2 ulong, 3 ulonglong, 4 slonglong, 5 sint, 6 ushort
    int nvml_return = 0;
    union {
      double d;
      unsigned int ui;
      unsigned long ul;
      unsigned long long ull;
      long long sll;
      int si;
      unsigned short us;
    } value{};
  };
  static_assert(sizeof(FieldValue) == 40, "nvmlFieldValue_t is 40 bytes");
  using FieldValues = int (*)(Device, int, FieldValue*);
  static constexpr int kClockSm = 1;
  static constexpr unsigned int kFieldPowerInstant = 186;  // NVML_FI_DEV_POWER_INSTANT, milliwatts

  void* lib = nullptr;
  Shutdown shutdown = nullptr;
  PowerUsage power = nullptr;
  ClockInfo clock = nullptr;
  Reasons reasons = nullptr;
  Energy energy = nullptr;
  FieldValues fields = nullptr;
  bool instant_power = false;  // the device answers NVML_FI_DEV_POWER_INSTANT
  Device device = nullptr;
  bool initialised = false;

  ~Nvml() {
    if (initialised && shutdown) shutdown();
    if (lib) dlclose(lib);
  }
  template <class F>
  F symbol(const char* name) const {
    return reinterpret_cast<F>(dlsym(lib, name));
  }
};

PowerSampler::PowerSampler(const std::string& pci_bus_id, int period_ms, std::function<uint64_t()> now)
    : nvml_(std::make_unique<Nvml>()), now_(std::move(now)), period_ms_(period_ms > 0 ? period_ms : 10) {
  Nvml& n = *nvml_;
  n.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n.lib) {
    note_ = "NVML (libnvidia-ml.so.1) not found: no power or clock samples";
    return;
  }
  const auto init = n.symbol<Nvml::Init>("nvmlInit_v2");
  const auto by_pci = n.symbol<Nvml::ByPciBusId>("nvmlDeviceGetHandleByPciBusId_v2");
  n.shutdown = n.symbol<Nvml::Shutdown>("nvmlShutdown");
  n.power = n.symbol<Nvml::PowerUsage>("nvmlDeviceGetPowerUsage");
  n.clock = n.symbol<Nvml::ClockInfo>("nvmlDeviceGetClockInfo");
  // The newer name first; drivers before 535 only have the older one.
  n.reasons = n.symbol<Nvml::Reasons>("nvmlDeviceGetCurrentClocksEventReasons");
  if (!n.reasons) n.reasons = n.symbol<Nvml::Reasons>("nvmlDeviceGetCurrentClocksThrottleReasons");
  n.energy = n.symbol<Nvml::Energy>("nvmlDeviceGetTotalEnergyConsumption");  // mJ, Volta and newer
  n.fields = n.symbol<Nvml::FieldValues>("nvmlDeviceGetFieldValues");
  if (!init || !by_pci || !n.shutdown || (!n.power && !n.clock)) {
    note_ = "NVML lacks the entry points for power and clocks: no samples";
    return;
  }
  if (const int rc = init(); rc != 0) {
    note_ = "nvmlInit failed (NVML error " + std::to_string(rc) + "): no power or clock samples";
    return;
  }
  n.initialised = true;
  if (const int rc = by_pci(pci_bus_id.c_str(), &n.device); rc != 0) {
    note_ = "NVML cannot open the GPU at " + pci_bus_id + " (NVML error " + std::to_string(rc) + "): no samples";
    return;
  }
  // The instantaneous power where the driver has it: nvmlDeviceGetPowerUsage
  // averages over one second on Ampere and newer, which trails a training
  // step's load by most of a second.
  double watts = -1;
  n.instant_power = readInstantPower(watts);
  active_ = true;
  thread_ = std::thread([this] { run(); });
}

PowerSampler::~PowerSampler() { stop(); }

bool PowerSampler::readInstantPower(double& watts) const {
  const Nvml& n = *nvml_;
  if (!n.fields) return false;
  Nvml::FieldValue f;
  f.field_id = Nvml::kFieldPowerInstant;
  if (n.fields(n.device, 1, &f) != 0 || f.nvml_return != 0) return false;
  switch (f.value_type) {
    case 0: watts = f.value.d / 1000.0; return true;
    case 1: watts = f.value.ui / 1000.0; return true;
    case 2: watts = double(f.value.ul) / 1000.0; return true;
    case 3: watts = double(f.value.ull) / 1000.0; return true;
    case 4: watts = double(f.value.sll) / 1000.0; return true;
    case 5: watts = f.value.si / 1000.0; return true;
    default: return false;
  }
}

PowerSample PowerSampler::sample() const {
  const Nvml& n = *nvml_;
  PowerSample s;
  s.ts = now_();
  unsigned int v = 0;
  if (n.instant_power) {
    double watts = -1;
    if (readInstantPower(watts)) s.power_w = watts, s.power_instant = true;
  } else if (n.power && n.power(n.device, &v) == 0) {
    s.power_w = v / 1000.0;
  }
  if (n.clock && n.clock(n.device, Nvml::kClockSm, &v) == 0) s.sm_clock_mhz = v;
  unsigned long long bits = 0;
  if (n.reasons && n.reasons(n.device, &bits) == 0) s.limit_reasons = int64_t(bits);
  unsigned long long mj = 0;
  if (n.energy && n.energy(n.device, &mj) == 0) s.energy_mj = double(mj);
  return s;
}

void PowerSampler::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    const PowerSample s = sample();  // NVML calls outside the lock (tens of microseconds)
    lock.lock();
    samples_.push_back(s);
    cv_.wait_for(lock, std::chrono::milliseconds(period_ms_), [this] { return stopping_; });
  }
}

std::vector<PowerSample> PowerSampler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(samples_);
}

double meanPowerFromEnergy(const std::vector<PowerSample>& samples, uint64_t t0, uint64_t t1) {
  const PowerSample* first = nullptr;
  const PowerSample* last = nullptr;
  double previous = -1;
  for (const PowerSample& s : samples) {
    if (s.energy_mj < 0) continue;
    const bool moved = previous >= 0 && s.energy_mj != previous;
    previous = s.energy_mj;
    if (!moved || s.ts < t0 || s.ts > t1) continue;
    if (!first) first = &s;
    last = &s;
  }
  if (!first || last->ts <= first->ts) return -1;
  return (last->energy_mj - first->energy_mj) * 1e-3 / (double(last->ts - first->ts) * 1e-9);
}

}  // namespace tandem::profiler
