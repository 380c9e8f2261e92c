#include "engine/cpu/fp8_scales.h"

#include <algorithm>

namespace tandem::cpu {

Fp8Scales::Fp8Scales(const RankPlan& rp, bool current_scaling)
    : current_(current_scaling),
      buffer_scale_(rp.buffers.size(), 1.0f),
      buffer_format_(rp.buffers.size(), Fp8Format::E4M3) {}

std::string Fp8Scales::castKey(const std::string& task_name) {
  std::string key = task_name;
  if (const size_t mb = key.rfind(".mb"); mb != std::string::npos &&
                                          key.find_first_not_of("0123456789", mb + 3) == std::string::npos)
    key.resize(mb);
  if (const size_t rc = key.find(".recompute"); rc != std::string::npos) key.replace(rc, 10, ".fwd");
  return key;
}

float Fp8Scales::scaleForWrite(const Task& task, int buffer, float amax) {
  const Fp8Format format = task.phase == Phase::Backward ? Fp8Format::E5M2 : Fp8Format::E4M3;
  const std::string key = castKey(task.name);
  float& last = last_scale_.try_emplace(key, 1.0f).first->second;
  float scale = 1.0f;
  if (current_) {
    scale = fp8Scale(amax, format, last);
  } else {
    const auto h = history_.find(key);
    if (h != history_.end() && !h->second.empty())
      scale = fp8Scale(*std::max_element(h->second.begin(), h->second.end()), format, last);
    float& seen = step_amax_.try_emplace(key, 0.0f).first->second;
    seen = std::max(seen, amax);
  }
  last = scale;
  buffer_scale_[size_t(buffer)] = scale;
  buffer_format_[size_t(buffer)] = format;
  return scale;
}

void Fp8Scales::endStep() {
  for (const auto& [key, amax] : step_amax_) {
    std::deque<float>& h = history_[key];
    h.push_back(amax);
    if (int(h.size()) > kHistory) h.pop_front();
  }
  step_amax_.clear();
}

}  // namespace tandem::cpu
