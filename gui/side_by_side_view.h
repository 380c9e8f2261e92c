#pragma once
// The "Side by side" tab: the shown run and the compared one on one time
// axis (gui/side_by_side.h), aligned at a step of each chosen with two spin
// boxes; selecting or hovering a task outlines its twin in the other run.

#include <QWidget>
#include <memory>

#include "gui/side_by_side.h"

class QCheckBox;
class QLabel;
class QSpinBox;

namespace tandem::gui {

class TimelineView;

class SideBySideView : public QWidget {
  Q_OBJECT
 public:
  explicit SideBySideView(QWidget* parent = nullptr);

  // Shows `a` above `b`, aligned at each one's median step.
  void setRuns(std::shared_ptr<const TimelineData> a, std::shared_ptr<const TimelineData> b, const QString& label_a,
               const QString& label_b);
  void setMessage(const QString& message);
  // Aligns step k_a of A with step k_b of B (indices into their steps).
  void alignAt(int k_a, int k_b);

  TimelineView* timeline() const { return view_; }
  // Colours both runs' tasks by the second's time against the first's
  // (colourByDifference), or by phase.
  void setColourByDifference(bool on);
  const SideBySide* layout() const { return layout_ ? &*layout_ : nullptr; }

 private:
  void linkTwinOf(SliceRef ref);
  void applyColours();

  std::shared_ptr<const TimelineData> a_, b_;
  std::string label_a_, label_b_;
  std::unique_ptr<SideBySide> layout_;
  TimelineView* view_ = nullptr;
  QSpinBox* step_a_ = nullptr;
  QSpinBox* step_b_ = nullptr;
  QLabel* info_ = nullptr;
  QCheckBox* by_difference_ = nullptr;
};

}  // namespace tandem::gui
