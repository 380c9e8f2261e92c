#include "engine/cpu/fp8_scales.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <stdexcept>

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

namespace {

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

constexpr const char* kHeader = "tandem fp8 scales 1";

}  // namespace

std::string Fp8Scales::save() const {
  if (current_) return "";
  // One line per cast: its key, last scale and amax history, tab-separated.
  std::ostringstream out;
  out << kHeader << "\n";
  for (const auto& [key, scale] : last_scale_) {
    out << key << '\t' << std::hex << bitsOf(scale);
    if (const auto h = history_.find(key); h != history_.end())
      for (float a : h->second) out << '\t' << bitsOf(a);
    out << std::dec << '\n';
  }
  return out.str();
}

void Fp8Scales::load(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kHeader)
    throw std::runtime_error("FP8 scale state: not a state this version writes (first line '" + line + "')");
  std::map<std::string, std::deque<float>> history;
  std::map<std::string, float> last;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key, word;
    if (!std::getline(fields, key, '\t') || !std::getline(fields, word, '\t'))
      throw std::runtime_error("FP8 scale state: a line without a key and a scale: '" + line + "'");
    try {
      last[key] = floatOf(uint32_t(std::stoul(word, nullptr, 16)));
      while (std::getline(fields, word, '\t')) history[key].push_back(floatOf(uint32_t(std::stoul(word, nullptr, 16))));
    } catch (const std::logic_error&) {
      throw std::runtime_error("FP8 scale state: not a number in '" + line + "'");
    }
  }
  history_ = std::move(history);
  last_scale_ = std::move(last);
  step_amax_.clear();
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
