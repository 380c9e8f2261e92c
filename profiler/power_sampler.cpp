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
  static constexpr int kClockSm = 1;

  void* lib = nullptr;
  Shutdown shutdown = nullptr;
  PowerUsage power = nullptr;
  ClockInfo clock = nullptr;
  Reasons reasons = nullptr;
  Energy energy = nullptr;
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
  active_ = true;
  thread_ = std::thread([this] { run(); });
}

PowerSampler::~PowerSampler() { stop(); }

PowerSample PowerSampler::sample() const {
  const Nvml& n = *nvml_;
  PowerSample s;
  s.ts = now_();
  unsigned int v = 0;
  if (n.power && n.power(n.device, &v) == 0) s.power_w = v / 1000.0;
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

}  // namespace tandem::profiler
