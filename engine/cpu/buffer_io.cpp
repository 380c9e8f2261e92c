#include "engine/cpu/buffer_io.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/numerics/bf16.h"

namespace tandem::cpu {

std::vector<float> loadAsFloat(const std::byte* arena, const Buffer& b) {
  const int64_t n = b.elementCount();
  std::vector<float> v(n);
  const std::byte* p = arena + b.offset;
  switch (b.dtype) {
    case DType::F32: std::memcpy(v.data(), p, n * 4); break;
    case DType::BF16: {
      const auto* h = reinterpret_cast<const uint16_t*>(p);
      for (int64_t i = 0; i < n; ++i) v[i] = bf16BitsToFloat(h[i]);
      break;
    }
    case DType::I32: {
      const auto* q = reinterpret_cast<const int32_t*>(p);
      for (int64_t i = 0; i < n; ++i) v[i] = float(q[i]);
      break;
    }
    case DType::F8:  // their values need the scale they were written with (TaskBuffers)
      throw std::logic_error("cpu executor: FP8 buffer " + b.name + " read without its scale");
    case DType::U8: {
      const auto* q = reinterpret_cast<const uint8_t*>(p);
      for (int64_t i = 0; i < n; ++i) v[i] = float(q[i]);
      break;
    }
  }
  return v;
}

void storeFromFloat(std::byte* arena, const Buffer& b, const float* values) {
  const int64_t n = b.elementCount();
  std::byte* p = arena + b.offset;
  switch (b.dtype) {
    case DType::F32: std::memcpy(p, values, n * 4); break;
    case DType::BF16: {
      auto* h = reinterpret_cast<uint16_t*>(p);
      for (int64_t i = 0; i < n; ++i) h[i] = floatToBf16Bits(values[i]);
      break;
    }
    case DType::I32: {
      auto* q = reinterpret_cast<int32_t*>(p);
      for (int64_t i = 0; i < n; ++i) q[i] = int32_t(values[i]);
      break;
    }
    case DType::F8:
      throw std::logic_error("cpu executor: FP8 buffer " + b.name + " written without a scale");
    case DType::U8: {
      auto* q = reinterpret_cast<uint8_t*>(p);
      for (int64_t i = 0; i < n; ++i) q[i] = uint8_t(values[i]);
      break;
    }
  }
}

uint8_t* TaskBuffers::bytes(int buffer) {
  const Buffer& b = rp_.buffers[buffer];
  if (b.dtype != DType::U8) throw std::logic_error("cpu executor: byte view of a non-byte buffer " + b.name);
  return reinterpret_cast<uint8_t*>(address(buffer));
}

std::vector<float> TaskBuffers::loadFp8(int buffer) const {
  if (!fp8_) throw std::logic_error("cpu executor: FP8 buffer " + rp_.buffers[buffer].name + " in a plan run without FP8");
  const int64_t n = rp_.buffers[buffer].elementCount();
  const auto* codes = reinterpret_cast<const uint8_t*>(address(buffer));
  const float scale = fp8_->scaleOf(buffer);
  const Fp8Format format = fp8_->formatOf(buffer);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = fp8ToFloat(codes[i], format) / scale;
  return v;
}

void TaskBuffers::storeFp8(int buffer, const std::vector<float>& values) {
  if (!fp8_ || !task_)
    throw std::logic_error("cpu executor: FP8 buffer " + rp_.buffers[buffer].name + " written outside a task");
  float amax = 0.0f;
  for (float v : values) amax = std::max(amax, std::fabs(v));
  const float scale = fp8_->scaleForWrite(*task_, buffer, amax);
  const Fp8Format format = fp8_->formatOf(buffer);
  auto* codes = reinterpret_cast<uint8_t*>(address(buffer));
  for (size_t i = 0; i < values.size(); ++i) codes[i] = fp8FromFloat(values[i] * scale, format);
}

TaskBuffers::Scratch& TaskBuffers::scratchFor(int buffer) {
  for (auto& s : scratch_)
    if (s.buffer == buffer) return s;
  const Buffer& b = rp_.buffers[buffer];
  scratch_.push_back({buffer, false, b.dtype == DType::F8 ? loadFp8(buffer) : loadAsFloat(arena_, b)});
  return scratch_.back();
}

const float* TaskBuffers::in(int buffer) {
  const Buffer& b = rp_.buffers[buffer];
  if (b.dtype == DType::F32) return reinterpret_cast<const float*>(address(buffer));
  if (b.dtype != DType::BF16 && b.dtype != DType::F8)
    throw std::logic_error("cpu executor: float view of an integer buffer " + b.name);
  return scratchFor(buffer).values.data();
}

float* TaskBuffers::out(int buffer) {
  const Buffer& b = rp_.buffers[buffer];
  if (b.dtype == DType::F32) return reinterpret_cast<float*>(address(buffer));
  if (b.dtype != DType::BF16 && b.dtype != DType::F8)
    throw std::logic_error("cpu executor: float view of an integer buffer " + b.name);
  // A buffer read and then written by the same task (in place) shares one scratch.
  Scratch& s = scratchFor(buffer);
  s.dirty = true;
  return s.values.data();
}

const int32_t* TaskBuffers::ints(int buffer) const {
  return reinterpret_cast<const int32_t*>(address(buffer));
}

int32_t* TaskBuffers::mutableInts(int buffer) { return reinterpret_cast<int32_t*>(address(buffer)); }

void TaskBuffers::settle(int buffer) {
  if (rp_.buffers[buffer].dtype != DType::BF16) return;
  for (float& v : scratchFor(buffer).values) v = roundToBf16(v);
}

void TaskBuffers::commit() {
  for (auto& s : scratch_) {
    if (!s.dirty) continue;
    if (rp_.buffers[s.buffer].dtype == DType::F8) storeFp8(s.buffer, s.values);
    else storeFromFloat(arena_, rp_.buffers[s.buffer], s.values.data());
  }
  scratch_.clear();
}

}  // namespace tandem::cpu
