#pragma once
// Colours of the timeline, one per category a user needs to tell apart at a
// glance. Tests check screenshot pixels against these values, so they live
// in one place. Chosen to stay distinguishable for the common forms of
// colour blindness: blues for regular compute, orange (plus a hatch) for
// recompute, green/red only on the overlap lane where they carry the verdict.

#include <QColor>
#include <cstdint>

#include "engine/ir/types.h"

namespace tandem::gui {

// Phase value stored for activities that belong to no phase.
inline constexpr uint8_t kPhaseNone = uint8_t(Phase::None);

enum class PaintClass : uint8_t {
  Forward,
  Backward,
  Recompute,
  Optimizer,
  Data,
  Comm,
  Copy,
  Other,
  Hidden,
  Exposed,
  // Two runs side by side, coloured by how long the second run's twin of a
  // task took against the first's (gui/side_by_side.h): a diverging scale.
  MuchShorter,
  Shorter,
  Alike,
  Longer,
  MuchLonger,
  Count
};

inline QColor paintColor(PaintClass c) {
  switch (c) {
    case PaintClass::Forward: return QColor(0x6A, 0x9F, 0xE0);
    case PaintClass::Backward: return QColor(0x2F, 0x5D, 0xA8);
    case PaintClass::Recompute: return QColor(0xF2, 0x8E, 0x2B);
    case PaintClass::Optimizer: return QColor(0x9C, 0x6A, 0xDE);
    case PaintClass::Data: return QColor(0xA0, 0xA0, 0xA0);
    case PaintClass::Comm: return QColor(0x17, 0xA8, 0xB8);
    case PaintClass::Copy: return QColor(0x9D, 0x76, 0x60);
    case PaintClass::Other: return QColor(0x88, 0x88, 0x88);
    case PaintClass::Hidden: return QColor(0x4C, 0xAF, 0x50);
    case PaintClass::Exposed: return QColor(0xE5, 0x39, 0x35);
    case PaintClass::MuchShorter: return QColor(0x21, 0x66, 0xAC);
    case PaintClass::Shorter: return QColor(0x92, 0xC5, 0xDE);
    case PaintClass::Alike: return QColor(0xD9, 0xD9, 0xD9);
    case PaintClass::Longer: return QColor(0xF4, 0xA5, 0x82);
    case PaintClass::MuchLonger: return QColor(0xB2, 0x18, 0x2B);
    case PaintClass::Count: break;
  }
  return QColor(0, 0, 0);
}

// The hatch drawn over recompute slices (darker orange diagonals).
inline QColor recomputeHatchColor() { return QColor(0xA8, 0x55, 0x0C); }

// The line of a sampled counter (GPU power, SM clock) under a rank's lanes.
inline QColor counterLineColor() { return QColor(0x8E, 0x24, 0xAA); }

inline PaintClass classForPhase(uint8_t phase, StreamKind stream) {
  switch (phase) {
    case uint8_t(Phase::Forward): return PaintClass::Forward;
    case uint8_t(Phase::Backward): return PaintClass::Backward;
    case uint8_t(Phase::Recompute): return PaintClass::Recompute;
    case uint8_t(Phase::Optimizer): return PaintClass::Optimizer;
    case uint8_t(Phase::Data): return PaintClass::Data;
    case uint8_t(Phase::Comm): return PaintClass::Comm;
    default: break;
  }
  if (stream == StreamKind::Comm) return PaintClass::Comm;
  if (stream == StreamKind::Copy) return PaintClass::Copy;
  return PaintClass::Other;
}

}  // namespace tandem::gui
