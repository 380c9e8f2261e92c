#include "engine/cpu/fp8_scales.h"

#include <algorithm>

namespace tandem::cpu {

Fp8Scales::Fp8Scales(const RankPlan& rp, bool current_scaling)
    : current_(current_scaling),
      buffer_scale_(rp.buffers.size(), 1.0f),
      buffer_format_(rp.buffers.size(), Fp8Format::E4M3) {}

float Fp8Scales::scaleForWrite(const Task& task, int buffer, float amax) {
  const Fp8Format format = task.phase == Phase::Backward ? Fp8Format::E5M2 : Fp8Format::E4M3;
  const std::string key = fp8CastKey(task.name);
  float& last = state_.last_scale.try_emplace(key, 1.0f).first->second;
  float scale = 1.0f;
  if (current_) {
    scale = fp8Scale(amax, format, last);
  } else {
    if (const auto h = state_.amax.find(key); h != state_.amax.end()) scale = fp8DelayedScale(h->second, format, last);
    float& seen = step_amax_.try_emplace(key, 0.0f).first->second;
    seen = std::max(seen, amax);
  }
  last = scale;
  buffer_scale_[size_t(buffer)] = scale;
  buffer_format_[size_t(buffer)] = format;
  return scale;
}

std::string Fp8Scales::save() const { return current_ ? "" : encodeFp8History(state_); }

void Fp8Scales::load(const std::string& text) {
  state_ = decodeFp8History(text);
  step_amax_.clear();
}

void Fp8Scales::endStep() {
  for (const auto& [key, amax] : step_amax_) {
    std::deque<float>& h = state_.amax[key];
    h.push_back(amax);
    if (int(h.size()) > kFp8History) h.pop_front();
  }
  step_amax_.clear();
}

}  // namespace tandem::cpu
