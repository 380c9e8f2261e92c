#pragma once
// GPU board power, energy counter, SM clock and clock-limit reasons, sampled
// through NVML while a profile runs. Power is NVML's instantaneous reading
// (field NVML_FI_DEV_POWER_INSTANT) where the driver has it, else
// nvmlDeviceGetPowerUsage, a one-second average on Ampere and newer; the
// energy counter's differences give the power of spans of 100 ms or more.
// On a GPU at its power limit the step time follows the energy a step
// needs, not the kernels' times alone (docs/profiler.md): these counters
// show where the clock dropped, beside the kernels.
//
// NVML is the driver's library: it is opened at run time (dlopen of
// libnvidia-ml.so.1), never linked, so binaries still start where there is
// no driver. Where it is missing, or the device cannot be opened, the
// sampler records nothing and note() says why.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tandem::profiler {

struct PowerSample {
  uint64_t ts = 0;             // from the sampler's clock (CUPTI ns in the profiler)
  double power_w = -1;         // board power in W, -1 when not reported
  bool power_instant = false;  // power_w is the instantaneous reading (else NVML's one-second average)
  double energy_mj = -1;       // the board's energy counter in mJ (since the driver loaded), -1 when not reported
  double sm_clock_mhz = -1;    // current SM clock in MHz, -1 when not reported
  int64_t limit_reasons = -1;  // NVML clock event reasons (bit 0x4: software power cap), -1 when not reported
};

// NVML's bit for a clock held down by the software power cap.
inline constexpr int64_t kPowerCapReason = 0x4;

// Mean board power over [t0, t1] (sample clock) from the energy counter,
// between the first and the last sample inside the window at which the
// counter had moved since the sample before. The counter moves about every
// 100 ms, so between two arbitrary readings the energy covers an unknown
// part of the time (up to 100 ms either end); between two moves it covers
// exactly the time between them, up to the sampling period. -1 when the
// counter moved fewer than twice inside the window.
double meanPowerFromEnergy(const std::vector<PowerSample>& samples, uint64_t t0, uint64_t t1);

class PowerSampler {
 public:
  // Samples the GPU with PCI bus id `pci_bus_id` ("0000:19:00.0") every
  // `period_ms` from a thread of its own; `now` stamps each sample.
  PowerSampler(const std::string& pci_bus_id, int period_ms, std::function<uint64_t()> now);
  ~PowerSampler();
  PowerSampler(const PowerSampler&) = delete;
  PowerSampler& operator=(const PowerSampler&) = delete;

  bool active() const { return active_; }
  const std::string& note() const { return note_; }
  // Ends sampling (idempotent) and hands over the samples taken.
  std::vector<PowerSample> stop();

 private:
  struct Nvml;
  bool readInstantPower(double& watts) const;
  std::unique_ptr<Nvml> nvml_;
  bool active_ = false;
  std::string note_;
  std::function<uint64_t()> now_;
  int period_ms_ = 10;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<PowerSample> samples_;
  std::thread thread_;
  void run();
  PowerSample sample() const;
};

}  // namespace tandem::profiler
