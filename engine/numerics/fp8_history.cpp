#include "engine/numerics/fp8_history.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace tandem {

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

std::string fp8CastKey(const std::string& task_name) {
  std::string key = task_name;
  if (const size_t mb = key.rfind(".mb"); mb != std::string::npos &&
                                          key.find_first_not_of("0123456789", mb + 3) == std::string::npos)
    key.resize(mb);
  if (const size_t rc = key.find(".recompute"); rc != std::string::npos) key.replace(rc, 10, ".fwd");
  return key;
}

float fp8DelayedScale(const std::deque<float>& history, Fp8Format f, float last_scale) {
  if (history.empty()) return 1.0f;
  return fp8Scale(*std::max_element(history.begin(), history.end()), f, last_scale);
}

std::deque<float> fp8HistoryFromRing(const float* ring, int steps) {
  std::deque<float> h;
  for (int n = std::max(0, steps - kFp8History); n < steps; ++n) h.push_back(ring[n % kFp8History]);
  return h;
}

void fp8HistoryToRing(const std::deque<float>& history, float* ring) {
  if (history.size() > size_t(kFp8History))
    throw std::runtime_error("FP8 scale state: more than " + std::to_string(kFp8History) + " steps of history");
  std::copy(history.begin(), history.end(), ring);
}

std::string encodeFp8History(const Fp8History& h) {
  std::ostringstream out;
  out << kHeader << "\n";
  for (const auto& [key, scale] : h.last_scale) {
    out << key << '\t' << std::hex << bitsOf(scale);
    if (const auto a = h.amax.find(key); a != h.amax.end())
      for (float v : a->second) out << '\t' << bitsOf(v);
    out << std::dec << '\n';
  }
  return out.str();
}

Fp8History decodeFp8History(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kHeader)
    throw std::runtime_error("FP8 scale state: not a state this version writes (first line '" + line + "')");
  Fp8History h;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key, word;
    if (!std::getline(fields, key, '\t') || !std::getline(fields, word, '\t'))
      throw std::runtime_error("FP8 scale state: a line without a key and a scale: '" + line + "'");
    try {
      h.last_scale[key] = floatOf(uint32_t(std::stoul(word, nullptr, 16)));
      while (std::getline(fields, word, '\t')) h.amax[key].push_back(floatOf(uint32_t(std::stoul(word, nullptr, 16))));
    } catch (const std::logic_error&) {
      throw std::runtime_error("FP8 scale state: not a number in '" + line + "'");
    }
    if (h.amax.count(key) && h.amax[key].size() > size_t(kFp8History))
      throw std::runtime_error("FP8 scale state: " + key + " holds more than " + std::to_string(kFp8History) +
                               " steps of history");
  }
  return h;
}

}  // namespace tandem
