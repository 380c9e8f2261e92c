#pragma once
// TimelineView: one viewport-sized widget that paints every lane of a run
// with QPainter. Per rank: a header (click to collapse), one lane per stream
// (compute, comm, copy), an overlap lane (hidden vs exposed communication),
// a phase lane and, for profiled runs, a line per sampled counter (GPU power,
// SM clock); step markers and a time axis on top.
//
// Only the visible index range of each lane is visited; runs of sub-pixel
// slices are folded into one box (timeline_math.h coalesce); boxes are
// batched per colour and the painted base layer is cached as an image until
// the window, size, scroll or collapsing change. Hover, selection and the
// range being dragged are an overlay on top of the cached image.
//
// Mouse: wheel zooms at the cursor, Shift+wheel scrolls ranks, drag pans,
// Shift+drag selects a time range, click selects a slice or collapses a rank.
// Keys: W/S zoom, A/D pan, F fits the selection (or the run), 0 fits the run,
// `.`/`,` next/previous slice on the selected lane, Esc clears.

#include <QImage>
#include <QWidget>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "gui/timeline_data.h"
#include "gui/timeline_math.h"

class QScrollBar;

namespace tandem::gui {

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  enum class RowKind { RankHeader, Stream, Overlap, Phase, Counter };
  struct Row {
    RowKind kind = RowKind::Stream;
    int rank_index = 0;  // index into TimelineData::ranks
    int track = -1;      // Stream rows: index into TimelineData::tracks; Counter rows: into the rank's counters
    int y = 0;           // content coordinates (before vertical scrolling)
    int height = 0;
  };

  static constexpr int kLabelWidth = 132;
  static constexpr int kAxisHeight = 26;

  explicit TimelineView(QWidget* parent = nullptr);
  ~TimelineView() override;

  void setData(std::shared_ptr<const TimelineData> data);
  const TimelineData* data() const { return data_.get(); }
  std::shared_ptr<const TimelineData> sharedData() const { return data_; }

  // Visible window; clamped to the run with a small margin.
  void setWindow(int64_t start_ns, int64_t end_ns);
  TimeMapping mapping() const;
  void fitAll();

  void setRankCollapsed(int rank_index, bool collapsed);
  bool isRankCollapsed(int rank_index) const;

  SliceRef selection() const { return selection_; }
  void selectSlice(SliceRef ref);
  // A second slice outlined beside the selection (the selected task's twin
  // in the other run of a side-by-side view); invalid to clear.
  void setLinkedSlice(SliceRef ref);
  SliceRef linkedSlice() const { return linked_; }
  SliceRef hovered() const { return hover_; }
  // Moves the selection to the next (+1) or previous (-1) slice on its lane
  // and pans so it is visible.
  void stepSelection(int direction);
  // Fits the selected slice or selected range (or the whole run).
  void fitSelection();

  // Steps (TimelineData::steps): a run opens on its median step (by
  // duration; the whole run when it has none). showStep fits step k (an
  // index into steps) with a small margin; showAdjacentStep moves to the
  // next (+1) or previous (-1) step from the one under the window's centre.
  void showStep(int k);
  void showAdjacentStep(int direction);
  void showSlowestStep();
  // The step index under the window's centre, or -1.
  int currentStep() const;

  // Lanes of streams with no slice inside the steps (set-up, clock
  // exchange) are hidden unless shown here; runs without steps show all.
  void setShowIdleLanes(bool show);
  bool showIdleLanes() const { return show_idle_lanes_; }

  // Axis labels relative to the first tick shown (or from the run's start).
  void setRelativeAxis(bool relative);
  bool relativeAxis() const { return relative_axis_; }

  // Rows in content coordinates; the lane area starts at kLabelWidth.
  const std::vector<Row>& rows() const { return rows_; }
  int contentHeight() const;
  int verticalOffset() const { return v_offset_; }
  void setVerticalOffset(int px);
  // The slice under a widget position, or an invalid ref.
  SliceRef sliceAt(QPoint pos) const;
  // On a counter row: the sample nearest in time to the position, as shown
  // in the tooltip ("power W 640 at 2.10 s"); empty elsewhere.
  QString counterTextAt(QPoint pos) const;
  // Widget y of the middle of a row (for tests and keyboard navigation).
  int rowCenterY(const Row& row) const { return kAxisHeight + row.y - v_offset_ + row.height / 2; }

  // Replaces the lanes by a readable message (bad input, empty run).
  void setMessage(const QString& message);
  QString message() const { return message_; }

  // Number of base-layer rebuilds (the geometry cache's misses), for tests.
  int baseRebuilds() const { return base_rebuilds_; }
  // Time the last rebuild spent computing boxes and painting them, in ms.
  double lastGeometryMs() const { return last_geometry_ms_; }
  double lastPaintMs() const { return last_paint_ms_; }

 signals:
  void sliceSelected(int track, qint64 index);
  void sliceHovered(int track, qint64 index);
  void rangeSelected(qint64 start_ns, qint64 end_ns);
  void windowChanged(qint64 start_ns, qint64 end_ns);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  void leaveEvent(QEvent* event) override;

 private:
  void layoutRows();
  void invalidateBase();
  void applyWindow(const TimeMapping& m);
  void rebuildBase();
  // rebuildBase's steps: gather every visible row's boxes, labels and counter
  // lines, then paint them layer by layer.
  struct BaseGeometry;
  void collectGeometry(const TimeMapping& m, int top, int bottom, BaseGeometry& g);
  void collectStreamRow(const Row& row, int y, const TimeMapping& m, BaseGeometry& g);
  void collectIntervalRow(const Row& row, int y, const TimeMapping& m, BaseGeometry& g);
  void paintGeometry(QPainter& p, const TimeMapping& m, const BaseGeometry& g, int top, int bottom) const;
  void paintSliceLabels(QPainter& p, const BaseGeometry& g) const;
  void paintStepMarkers(QPainter& p, const TimeMapping& m, int top, int bottom, int lane_right) const;
  void paintLabelColumn(QPainter& p, int top, int bottom) const;
  void paintRowLabel(QPainter& p, const Row& row, int y) const;
  void paintAxis(QPainter& p, const TimeMapping& m);
  void paintOverlay(QPainter& p, const TimeMapping& m);
  const Row* rowAtY(int y) const;
  // Steps overlapping the window, as an index range, and their mean spacing.
  std::pair<size_t, size_t> visibleSteps(const TimeMapping& m) const;
  double stepSpacingPx(const TimeMapping& m) const;
  int laneWidth() const;
  void syncScrollBar();

  std::shared_ptr<const TimelineData> data_;
  QString message_;
  std::vector<Row> rows_;
  std::vector<bool> collapsed_;
  int64_t start_ns_ = 0;
  int64_t end_ns_ = 1;
  int v_offset_ = 0;
  QScrollBar* vbar_ = nullptr;

  // Cached base layer and the key it was painted for.
  QImage base_;
  bool base_valid_ = false;
  int base_rebuilds_ = 0;
  double last_geometry_ms_ = 0;
  double last_paint_ms_ = 0;

  SliceRef selection_;
  SliceRef hover_;
  SliceRef linked_;
  // `ref` if it names a slice of the data, else an invalid reference.
  SliceRef existing(SliceRef ref) const;
  bool relative_axis_ = false;
  bool show_idle_lanes_ = false;
  int64_t range_start_ns_ = -1;
  int64_t range_end_ns_ = -1;
  // Drag state.
  bool pressed_ = false;
  bool dragged_ = false;
  bool range_drag_ = false;
  QPoint press_pos_;
  QPoint last_pos_;
  std::vector<LaneBox> scratch_;
};

}  // namespace tandem::gui
