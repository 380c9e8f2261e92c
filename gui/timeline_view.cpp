#include "gui/timeline_view.h"

#include <QElapsedTimer>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QPolygonF>
#include <QScrollBar>
#include <QToolTip>
#include <QWheelEvent>
#include <algorithm>
#include <array>
#include <climits>
#include <cmath>

#include "gui/timeline_palette.h"

namespace tandem::gui {

namespace {

constexpr int kHeaderHeight = 20;
constexpr int kStreamHeight = 22;
constexpr int kOverlapHeight = 12;
constexpr int kPhaseHeight = 10;
constexpr int kCounterHeight = 26;
constexpr int kRankGap = 4;
constexpr int kScrollBarWidth = 12;
// Slices narrower than this many pixels are folded with their neighbours.
constexpr double kMergePx = 2.5;
constexpr int kMinLabelPx = 46;

const QColor kBackground(0xFB, 0xFB, 0xFC);
const QColor kLaneAlt(0xF2, 0xF4, 0xF7);
const QColor kHeaderBg(0xE4, 0xE8, 0xEE);
const QColor kLabelBg(0xF5, 0xF6, 0xF8);
const QColor kGrid(0xDD, 0xE1, 0xE6);
const QColor kText(0x22, 0x26, 0x2B);
const QColor kStepLine(0x55, 0x55, 0x66);
const QColor kCounterLine = counterLineColor();

QString qs(const std::string& s) { return QString::fromStdString(s); }

// The font grown or shrunk by `delta` pixels, whether it was set in points
// or in pixels (tests use pixel sizes for stable output).
QFont resized(QFont f, int delta) {
  if (f.pixelSize() > 0)
    f.setPixelSize(std::max(7, f.pixelSize() + delta));
  else
    f.setPointSizeF(std::max(5.0, f.pointSizeF() + delta * 0.75));
  return f;
}

// A counter lane's line over the window in widget coordinates, its lowest
// value at the bottom of the row. Samples that fall into one pixel column
// become that column's lowest and highest value, so the line stays cheap
// however long the run.
QPolygonF counterLine(const CounterLane& lane, const TimeMapping& m, int y, int height) {
  QPolygonF line;
  const auto [first, last] = lane.visible(m.start_ns, m.end_ns);
  const double span = lane.max > lane.min ? lane.max - lane.min : 0.0;
  const double top = y + 3.0, usable = height - 6.0;
  auto yOf = [&](double v) { return span > 0 ? top + usable * (1.0 - (v - lane.min) / span) : top + usable / 2; };
  long column = LONG_MIN;
  double first_v = 0, lo = 0, hi = 0, last_v = 0;
  auto flush = [&] {
    if (column == LONG_MIN) return;
    const double x = double(column) + 0.5;
    line << QPointF(x, yOf(first_v));
    if (hi > lo) line << QPointF(x, yOf(lo)) << QPointF(x, yOf(hi));
    line << QPointF(x, yOf(last_v));
  };
  for (size_t i = first; i < last; ++i) {
    const double v = lane.value[i];
    const long col = long(std::floor(m.toX(lane.t_ns[i])));
    if (col != column) {
      flush();
      column = col;
      first_v = lo = hi = v;
    }
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    last_v = v;
  }
  flush();
  return line;
}

// Whole-pixel rectangles take the raster engine's plain fill path;
// fractional ones go through the general rasterizer.
QRect pixelRect(float x0, float x1, int y, int h) {
  const int left = int(std::floor(x0));
  const int right = std::max(left + 1, int(std::lround(x1)));
  return QRect(left, y, right - left, h);
}

}  // namespace

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  setFocusPolicy(Qt::StrongFocus);
  setMouseTracking(true);
  setMinimumSize(400, 200);
  vbar_ = new QScrollBar(Qt::Vertical, this);
  vbar_->hide();
  connect(vbar_, &QScrollBar::valueChanged, this, [this](int v) { setVerticalOffset(v); });
}

TimelineView::~TimelineView() = default;

void TimelineView::setData(std::shared_ptr<const TimelineData> data) {
  data_ = std::move(data);
  message_.clear();
  selection_ = hover_ = linked_ = {};
  range_start_ns_ = range_end_ns_ = -1;
  collapsed_.assign(data_ ? data_->ranks.size() : 0, false);
  v_offset_ = 0;
  layoutRows();
  if (data_ && !data_->steps.empty())
    showStep(data_->medianStep());
  else
    fitAll();
  invalidateBase();
}

void TimelineView::showStep(int k) {
  if (!data_ || k < 0 || size_t(k) >= data_->steps.size()) return;
  const StepMark& s = data_->steps[size_t(k)];
  const int64_t pad = std::max<int64_t>((s.end_ns - s.start_ns) / 50, kMinWindowNs / 2);
  setWindow(s.start_ns - pad, s.end_ns + pad);
}

int TimelineView::currentStep() const {
  if (!data_) return -1;
  return data_->stepAt(start_ns_ + (end_ns_ - start_ns_) / 2);
}

void TimelineView::showAdjacentStep(int direction) {
  if (!data_ || data_->steps.empty()) return;
  const int64_t centre = start_ns_ + (end_ns_ - start_ns_) / 2;
  int k = currentStep();
  if (k < 0) {
    // Between steps: the first one after the centre, or the last before it.
    k = 0;
    while (size_t(k) < data_->steps.size() && data_->steps[size_t(k)].start_ns < centre) ++k;
    if (direction < 0) --k;
  } else {
    k += direction;
  }
  showStep(std::clamp(k, 0, int(data_->steps.size()) - 1));
}

void TimelineView::showSlowestStep() {
  if (data_ && !data_->steps.empty()) showStep(data_->slowestStep());
}

void TimelineView::setShowIdleLanes(bool show) {
  if (show == show_idle_lanes_) return;
  show_idle_lanes_ = show;
  layoutRows();
  invalidateBase();
}

void TimelineView::setRelativeAxis(bool relative) {
  relative_axis_ = relative;
  update();
}

void TimelineView::setMessage(const QString& message) {
  message_ = message;
  invalidateBase();
}

void TimelineView::layoutRows() {
  rows_.clear();
  if (!data_) return;
  int y = 0;
  for (size_t r = 0; r < data_->ranks.size(); ++r) {
    rows_.push_back({RowKind::RankHeader, int(r), -1, y, kHeaderHeight});
    y += kHeaderHeight;
    if (!collapsed_[r]) {
      const auto [steps_from, steps_to] = data_->stepsSpan();
      for (int t : data_->ranks[r].tracks) {
        // Streams with nothing in the steps (the set-up's GEMM timing, the
        // profiler's clock exchange) are left out unless asked for.
        const Track& track = data_->tracks[size_t(t)];
        if (!show_idle_lanes_ && !data_->steps.empty() &&
            firstIndex(track.max_end_ns, steps_from) >= lastIndex(track.start_ns, steps_to))
          continue;
        rows_.push_back({RowKind::Stream, int(r), t, y, kStreamHeight});
        y += kStreamHeight;
      }
      rows_.push_back({RowKind::Overlap, int(r), -1, y, kOverlapHeight});
      y += kOverlapHeight;
      rows_.push_back({RowKind::Phase, int(r), -1, y, kPhaseHeight});
      y += kPhaseHeight;
      for (size_t c = 0; c < data_->ranks[r].counters.size(); ++c) {
        rows_.push_back({RowKind::Counter, int(r), int(c), y, kCounterHeight});
        y += kCounterHeight;
      }
    }
    y += kRankGap;
  }
  syncScrollBar();
}

int TimelineView::contentHeight() const { return rows_.empty() ? 0 : rows_.back().y + rows_.back().height; }

void TimelineView::syncScrollBar() {
  const int viewport = height() - kAxisHeight;
  const int max = std::max(0, contentHeight() - viewport);
  vbar_->setVisible(max > 0);
  vbar_->setGeometry(width() - kScrollBarWidth, kAxisHeight, kScrollBarWidth, std::max(0, viewport));
  vbar_->setRange(0, max);
  vbar_->setPageStep(std::max(1, viewport));
  vbar_->setSingleStep(kStreamHeight);
  if (v_offset_ > max) setVerticalOffset(max);
  vbar_->setValue(v_offset_);
}

void TimelineView::setVerticalOffset(int px) {
  const int max = std::max(0, contentHeight() - (height() - kAxisHeight));
  px = std::clamp(px, 0, max);
  if (px == v_offset_) return;
  v_offset_ = px;
  vbar_->setValue(px);
  invalidateBase();
}

int TimelineView::laneWidth() const {
  return std::max(1, width() - kLabelWidth - (vbar_->isVisible() ? kScrollBarWidth : 0));
}

TimeMapping TimelineView::mapping() const {
  return TimeMapping{start_ns_, end_ns_, double(kLabelWidth), double(laneWidth())};
}

void TimelineView::invalidateBase() {
  base_valid_ = false;
  update();
}

void TimelineView::applyWindow(const TimeMapping& next) {
  TimeMapping m = next;
  if (data_) m = clampTo(m, data_->begin_ns, data_->end_ns);
  if (m.end_ns - m.start_ns < kMinWindowNs) m.end_ns = m.start_ns + kMinWindowNs;
  if (m.start_ns == start_ns_ && m.end_ns == end_ns_) return;
  start_ns_ = m.start_ns;
  end_ns_ = m.end_ns;
  invalidateBase();
  emit windowChanged(start_ns_, end_ns_);
}

void TimelineView::setWindow(int64_t start_ns, int64_t end_ns) {
  TimeMapping m = mapping();
  m.start_ns = start_ns;
  m.end_ns = std::max(end_ns, start_ns + kMinWindowNs);
  applyWindow(m);
}

void TimelineView::fitAll() {
  if (!data_) return;
  const int64_t span = std::max<int64_t>(data_->end_ns - data_->begin_ns, kMinWindowNs);
  setWindow(data_->begin_ns - span / 100, data_->end_ns + span / 100);
}

void TimelineView::setRankCollapsed(int rank_index, bool collapsed) {
  if (rank_index < 0 || size_t(rank_index) >= collapsed_.size()) return;
  if (collapsed_[size_t(rank_index)] == collapsed) return;
  collapsed_[size_t(rank_index)] = collapsed;
  layoutRows();
  invalidateBase();
}

bool TimelineView::isRankCollapsed(int rank_index) const {
  return rank_index >= 0 && size_t(rank_index) < collapsed_.size() && collapsed_[size_t(rank_index)];
}

SliceRef TimelineView::existing(SliceRef ref) const {
  if (data_ && ref.valid() &&
      (size_t(ref.track) >= data_->tracks.size() || size_t(ref.index) >= data_->tracks[size_t(ref.track)].size()))
    return {};
  return ref;
}

void TimelineView::selectSlice(SliceRef ref) {
  ref = existing(ref);
  selection_ = ref;
  update();
  emit sliceSelected(ref.track, ref.index);
}

void TimelineView::setLinkedSlice(SliceRef ref) {
  linked_ = existing(ref);
  update();
}

void TimelineView::stepSelection(int direction) {
  if (!data_ || !selection_.valid()) return;
  const Track& t = data_->tracks[size_t(selection_.track)];
  const int64_t next = selection_.index + direction;
  if (next < 0 || next >= int64_t(t.size())) return;
  selectSlice({selection_.track, next});
  const int64_t s = t.start_ns[size_t(next)];
  const int64_t e = t.end_ns[size_t(next)];
  if (s < start_ns_ || e > end_ns_) {
    const int64_t w = end_ns_ - start_ns_;
    const int64_t mid = s + (e - s) / 2;
    setWindow(mid - w / 2, mid - w / 2 + w);
  }
}

void TimelineView::fitSelection() {
  if (!data_) return;
  if (selection_.valid()) {
    const Track& t = data_->tracks[size_t(selection_.track)];
    const int64_t s = t.start_ns[size_t(selection_.index)];
    const int64_t e = t.end_ns[size_t(selection_.index)];
    const int64_t pad = std::max<int64_t>((e - s) / 10, kMinWindowNs / 2);
    setWindow(s - pad, e + pad);
  } else if (range_end_ns_ > range_start_ns_) {
    setWindow(range_start_ns_, range_end_ns_);
  } else {
    fitAll();
  }
}

std::pair<size_t, size_t> TimelineView::visibleSteps(const TimeMapping& m) const {
  const auto& steps = data_->steps;
  auto first = std::lower_bound(steps.begin(), steps.end(), m.start_ns,
                                [](const StepMark& s, int64_t t) { return s.end_ns < t; });
  auto last = std::lower_bound(first, steps.end(), m.end_ns,
                               [](const StepMark& s, int64_t t) { return s.start_ns < t; });
  return {size_t(first - steps.begin()), size_t(last - steps.begin())};
}

double TimelineView::stepSpacingPx(const TimeMapping& m) const {
  const auto& steps = data_->steps;
  if (steps.size() < 2) return 1e9;
  const double mean_ns = double(steps.back().start_ns - steps.front().start_ns) / double(steps.size() - 1);
  return mean_ns / m.nsPerPx();
}

const TimelineView::Row* TimelineView::rowAtY(int y) const {
  const int content_y = y - kAxisHeight + v_offset_;
  if (y < kAxisHeight) return nullptr;
  auto it = std::upper_bound(rows_.begin(), rows_.end(), content_y,
                             [](int v, const Row& r) { return v < r.y; });
  if (it == rows_.begin()) return nullptr;
  --it;
  return content_y < it->y + it->height ? &*it : nullptr;
}

SliceRef TimelineView::sliceAt(QPoint pos) const {
  if (!data_ || pos.x() < kLabelWidth) return {};
  const Row* row = rowAtY(pos.y());
  if (!row || row->kind != RowKind::Stream) return {};
  const TimeMapping m = mapping();
  const int64_t t = m.toTime(pos.x());
  const int64_t tol = int64_t(std::ceil(2.0 * m.nsPerPx()));
  const int64_t i = hitTest(data_->tracks[size_t(row->track)], t, tol);
  return i < 0 ? SliceRef{} : SliceRef{row->track, i};
}

QString TimelineView::counterTextAt(QPoint pos) const {
  if (!data_ || pos.x() < kLabelWidth) return {};
  const Row* row = rowAtY(pos.y());
  if (!row || row->kind != RowKind::Counter) return {};
  const CounterLane& lane = data_->ranks[size_t(row->rank_index)].counters[size_t(row->track)];
  if (lane.size() == 0) return {};
  const int64_t t = mapping().toTime(pos.x());
  size_t i = size_t(std::lower_bound(lane.t_ns.begin(), lane.t_ns.end(), t) - lane.t_ns.begin());
  if (i == lane.size() || (i > 0 && t - lane.t_ns[i - 1] < lane.t_ns[i] - t)) --i;
  return QStringLiteral("%1 %2 at %3")
      .arg(qs(lane.label))
      .arg(lane.value[i], 0, 'f', 0)
      .arg(qs(formatDuration(lane.t_ns[i] - data_->begin_ns)));
}

// What one rebuild paints, gathered before any painting so that boxes of
// one colour are drawn in one call.
struct TimelineView::BaseGeometry {
  struct Label {
    QRect rect;
    int32_t name;
    uint32_t count;
  };
  std::array<std::vector<QRect>, size_t(PaintClass::Count)> rects;
  std::vector<Label> labels;
  std::vector<QPolygonF> counter_lines;
  std::vector<QRect> row_alt;
  std::vector<QRect> headers;
};

void TimelineView::rebuildBase() {
  ++base_rebuilds_;
  const qreal dpr = devicePixelRatioF();
  // Reuse the buffer across frames: a fresh 6 MB image per frame costs page
  // faults that show up in the frame time.
  if (base_.size() != size() * dpr) {
    base_ = QImage(size() * dpr, QImage::Format_ARGB32_Premultiplied);
    base_.setDevicePixelRatio(dpr);
  }
  base_.fill(kBackground);
  base_valid_ = true;
  if (!data_) return;

  QPainter p(&base_);
  const TimeMapping m = mapping();
  const int top = kAxisHeight;
  const int bottom = height();
  const int lane_right = kLabelWidth + laneWidth();

  BaseGeometry g;
  QElapsedTimer timer;
  timer.start();
  p.setClipRect(QRect(kLabelWidth, top, laneWidth(), bottom - top));
  collectGeometry(m, top, bottom, g);

  last_geometry_ms_ = double(timer.nsecsElapsed()) / 1e6;
  timer.start();
  paintGeometry(p, m, g, top, bottom);
  paintSliceLabels(p, g);
  paintStepMarkers(p, m, top, bottom, lane_right);
  paintLabelColumn(p, top, bottom);
  p.setClipping(false);
  paintAxis(p, m);
  last_paint_ms_ = double(timer.nsecsElapsed()) / 1e6;
}

// The boxes, labels and counter lines of every row in view, in content order.
void TimelineView::collectGeometry(const TimeMapping& m, int top, int bottom, BaseGeometry& g) {
  const int lane_right = kLabelWidth + laneWidth();
  for (const Row& row : rows_) {
    const int y = top + row.y - v_offset_;
    if (y + row.height < top || y > bottom) continue;
    const RankLanes& rank = data_->ranks[size_t(row.rank_index)];
    switch (row.kind) {
      case RowKind::RankHeader:
        g.headers.push_back(QRect(0, y, lane_right, row.height));
        break;
      case RowKind::Stream:
        collectStreamRow(row, y, m, g);
        break;
      case RowKind::Overlap:
      case RowKind::Phase:
        collectIntervalRow(row, y, m, g);
        break;
      case RowKind::Counter:
        g.counter_lines.push_back(counterLine(rank.counters[size_t(row.track)], m, y, row.height));
        break;
    }
  }
}

// A stream row: its slices folded into boxes coloured by phase, with a name
// label on those wide enough; every other row gets the alternate background.
void TimelineView::collectStreamRow(const Row& row, int y, const TimeMapping& m, BaseGeometry& g) {
  const Track& t = data_->tracks[size_t(row.track)];
  if ((&row - rows_.data()) % 2 == 0) g.row_alt.push_back(QRect(kLabelWidth, y, laneWidth(), row.height));
  coalesce(t.start_ns.data(), t.end_ns.data(), t.max_end_ns.data(), t.size(), m, kMergePx, scratch_,
           &t.start_sample);
  for (const LaneBox& b : scratch_) {
    const PaintClass c = t.paint.empty() ? classForPhase(t.phase[b.first], t.kind) : PaintClass(t.paint[b.first]);
    const QRect r = pixelRect(b.x0, b.x1, y + 2, row.height - 4);
    g.rects[size_t(c)].push_back(r);
    if (r.width() >= kMinLabelPx) g.labels.push_back({r, t.name_id[b.first], b.count});
  }
}

// An overlap or phase row: its intervals folded into boxes, coloured by the
// hidden/exposed verdict or by phase.
void TimelineView::collectIntervalRow(const Row& row, int y, const TimeMapping& m, BaseGeometry& g) {
  const RankLanes& rank = data_->ranks[size_t(row.rank_index)];
  const IntervalLane& lane = row.kind == RowKind::Overlap ? rank.overlap : rank.phases;
  // Disjoint lanes: the end array is its own running maximum.
  coalesce(lane.start_ns.data(), lane.end_ns.data(), lane.end_ns.data(), lane.size(), m, kMergePx,
           scratch_, &lane.start_sample);
  for (const LaneBox& b : scratch_) {
    PaintClass c;
    if (row.kind == RowKind::Overlap) {
      // A folded box takes the verdict covering most of its time, so
      // launch gaps of a few microseconds between kernels do not paint
      // mostly hidden communication red.
      if (b.count == 1) {
        c = lane.code[b.first] == uint8_t(OverlapCode::Hidden) ? PaintClass::Hidden : PaintClass::Exposed;
      } else {
        const int64_t exposed = lane.nonzeroLength(b.first, b.count);
        const int64_t total = lane.totalLength(b.first, b.count);
        c = 2 * exposed > total ? PaintClass::Exposed : PaintClass::Hidden;
      }
    } else {
      c = classForPhase(lane.code[b.first], StreamKind::Compute);
    }
    g.rects[size_t(c)].push_back(pixelRect(b.x0, b.x1, y + 1, row.height - 2));
  }
}

// Row backgrounds, the time grid, the coloured boxes and the counter lines.
void TimelineView::paintGeometry(QPainter& p, const TimeMapping& m, const BaseGeometry& g, int top, int bottom) const {
  p.setPen(Qt::NoPen);
  p.setBrush(kLaneAlt);
  p.drawRects(g.row_alt.data(), int(g.row_alt.size()));
  p.setBrush(kHeaderBg);
  p.drawRects(g.headers.data(), int(g.headers.size()));

  // Vertical grid at the axis ticks, under the slices.
  const int64_t step = tickStep(m.end_ns - m.start_ns, m.width_px, 90);
  p.setPen(QPen(kGrid, 1));
  for (int64_t t = (m.start_ns / step) * step; t <= m.end_ns; t += step) {
    const double x = m.toX(t);
    if (x >= kLabelWidth) p.drawLine(QPointF(x, top), QPointF(x, bottom));
  }

  p.setPen(Qt::NoPen);
  for (size_t c = 0; c < g.rects.size(); ++c) {
    if (g.rects[c].empty()) continue;
    p.setBrush(paintColor(PaintClass(c)));
    p.drawRects(g.rects[c].data(), int(g.rects[c].size()));
  }
  // Recompute is hatched as well as coloured so it reads in greyscale too.
  const auto& rec = g.rects[size_t(PaintClass::Recompute)];
  if (!rec.empty()) {
    p.setBrush(QBrush(recomputeHatchColor(), Qt::BDiagPattern));
    p.drawRects(rec.data(), int(rec.size()));
  }

  // Counters as lines over their lane's range (min at the bottom).
  p.setBrush(Qt::NoBrush);
  p.setPen(QPen(kCounterLine, 1.5));
  for (const QPolygonF& line : g.counter_lines) p.drawPolyline(line);
  p.setPen(Qt::NoPen);
}

// Names inside slices wide enough to hold some text.
void TimelineView::paintSliceLabels(QPainter& p, const BaseGeometry& g) const {
  p.setPen(Qt::white);
  const QFontMetrics fm(font());
  for (const BaseGeometry::Label& l : g.labels) {
    QString text = l.count > 1 ? QStringLiteral("%1 slices").arg(l.count) : qs(data_->names[size_t(l.name)]);
    const QString shown = fm.elidedText(text, Qt::ElideRight, int(l.rect.width()) - 6);
    if (shown.size() <= 1) continue;
    p.drawText(l.rect.adjusted(3, 0, -3, 0), Qt::AlignVCenter | Qt::AlignLeft, shown);
  }
}

// Step markers across all lanes, only for the visible steps and only while
// they are far enough apart to tell apart (thousands of dashed lines on a
// zoomed-out run would cost more than every slice together).
void TimelineView::paintStepMarkers(QPainter& p, const TimeMapping& m, int top, int bottom, int lane_right) const {
  const auto [step_first, step_last] = visibleSteps(m);
  if (step_last > step_first && stepSpacingPx(m) >= 6) {
    p.setPen(QPen(kStepLine, 1, Qt::DashLine));
    std::vector<QLineF> lines;
    for (size_t k = step_first; k < step_last; ++k) {
      const double x = std::round(m.toX(data_->steps[k].start_ns)) + 0.5;
      if (x >= kLabelWidth && x <= lane_right) lines.push_back(QLineF(x, top, x, bottom));
    }
    p.drawLines(lines.data(), int(lines.size()));
  }
}

// Label column and rank headers' text.
void TimelineView::paintLabelColumn(QPainter& p, int top, int bottom) const {
  p.setClipping(false);
  p.setPen(Qt::NoPen);
  p.setBrush(kLabelBg);
  p.drawRect(QRect(0, top, kLabelWidth, bottom - top));
  p.setPen(QPen(kGrid, 1));
  p.drawLine(kLabelWidth - 1, top, kLabelWidth - 1, bottom);
  p.setClipRect(QRect(0, top, width(), bottom - top));
  for (const Row& row : rows_) {
    const int y = top + row.y - v_offset_;
    if (y + row.height < top || y > bottom) continue;
    paintRowLabel(p, row, y);
  }
}

// One row's label; a rank header also gets its totals across the lanes.
void TimelineView::paintRowLabel(QPainter& p, const Row& row, int y) const {
  const RankLanes& rank = data_->ranks[size_t(row.rank_index)];
  QRect label_rect(8, y, kLabelWidth - 12, row.height);
  switch (row.kind) {
    case RowKind::RankHeader: {
      p.setPen(Qt::NoPen);
      p.setBrush(kHeaderBg);
      p.drawRect(QRect(0, y, width(), row.height));
      p.setPen(kText);
      QFont bold = font();
      bold.setBold(true);
      p.setFont(bold);
      const bool collapsed = collapsed_[size_t(row.rank_index)];
      p.drawText(QRect(6, y, kLabelWidth, row.height), Qt::AlignVCenter,
                 rank.title.empty()
                     ? QStringLiteral("%1 rank %2").arg(collapsed ? QChar(0x25B8) : QChar(0x25BE)).arg(rank.rank)
                     : QStringLiteral("%1 %2").arg(collapsed ? QChar(0x25B8) : QChar(0x25BE))
                           .arg(QString::fromStdString(rank.title)));
      p.setFont(font());
      const double share = rank.comm_ns > 0 ? 100.0 * double(rank.exposed_ns) / double(rank.comm_ns) : 0.0;
      p.drawText(QRect(kLabelWidth + 6, y, laneWidth() - 12, row.height), Qt::AlignVCenter,
                 QStringLiteral("%6compute %1  ·  comm %2  ·  hidden %3  ·  exposed %4 (%5% of comm)")
                     .arg(qs(formatDuration(rank.compute_ns)), qs(formatDuration(rank.comm_ns)),
                          qs(formatDuration(rank.hidden_ns)), qs(formatDuration(rank.exposed_ns)))
                     .arg(share, 0, 'f', 1)
                     .arg(rank.totals_in_steps ? tr("steps: ") : QString()));
      break;
    }
    case RowKind::Stream:
      p.setPen(kText);
      p.drawText(label_rect, Qt::AlignVCenter, qs(data_->tracks[size_t(row.track)].label));
      break;
    case RowKind::Overlap:
    case RowKind::Phase: {
      p.setFont(resized(font(), -2));
      p.setPen(QColor(0x66, 0x6B, 0x73));
      p.drawText(label_rect, Qt::AlignVCenter, row.kind == RowKind::Overlap ? tr("overlap") : tr("phase"));
      p.setFont(font());
      break;
    }
    case RowKind::Counter: {
      const CounterLane& lane = rank.counters[size_t(row.track)];
      p.setFont(resized(font(), -2));
      p.setPen(QColor(0x66, 0x6B, 0x73));
      p.drawText(label_rect, Qt::AlignVCenter,
                 QStringLiteral("%1\n%2 to %3")
                     .arg(qs(lane.label))
                     .arg(lane.min, 0, 'f', 0)
                     .arg(lane.max, 0, 'f', 0));
      p.setFont(font());
      break;
    }
  }
}

void TimelineView::paintAxis(QPainter& p, const TimeMapping& m) {
  p.setPen(Qt::NoPen);
  p.setBrush(QColor(0xFF, 0xFF, 0xFF));
  p.drawRect(QRect(0, 0, width(), kAxisHeight));
  p.setPen(QPen(kGrid, 1));
  p.drawLine(0, kAxisHeight - 1, width(), kAxisHeight - 1);
  p.setPen(kText);
  const int64_t origin = data_ ? data_->begin_ns : 0;
  const AxisLabels axis = axisLabels(m, origin, relative_axis_, 90);
  if (data_) {
    // Relative labels count from the first tick: the corner says from when.
    const QString corner = relative_axis_ ? tr("from %1").arg(QString::fromStdString(axis.base))
                                          : QString::fromStdString(formatDuration(m.end_ns - m.start_ns)) + tr(" shown");
    p.drawText(QRect(6, 0, kLabelWidth - 8, kAxisHeight), Qt::AlignVCenter, corner);
  }
  p.setClipRect(QRect(kLabelWidth, 0, laneWidth(), kAxisHeight));
  for (const AxisTick& tick : axis.ticks) {
    const double x = m.toX(tick.t_ns);
    p.drawLine(QPointF(x, kAxisHeight - 6), QPointF(x, kAxisHeight - 1));
    p.drawText(QRectF(x + 3, 0, 120, kAxisHeight - 4), Qt::AlignBottom | Qt::AlignLeft,
               QString::fromStdString(tick.label));
  }
  if (data_) {
    QFont bold = font();
    bold.setBold(true);
    p.setFont(bold);
    p.setPen(kStepLine);
    const auto [step_first, step_last] = visibleSteps(m);
    if (stepSpacingPx(m) >= 60) {
      for (size_t k = step_first; k < step_last; ++k) {
        const double x = m.toX(data_->steps[k].start_ns);
        if (x >= kLabelWidth - 40 && x <= kLabelWidth + laneWidth())
          p.drawText(QRectF(x + 3, 1, 80, 12), Qt::AlignLeft | Qt::AlignTop, tr("step %1").arg(data_->steps[k].step));
      }
    }
    p.setFont(font());
  }
  p.setClipping(false);
}

void TimelineView::paintOverlay(QPainter& p, const TimeMapping& m) {
  if (!data_) return;
  auto sliceRect = [&](SliceRef ref) -> QRectF {
    for (const Row& row : rows_) {
      if (row.kind != RowKind::Stream || row.track != ref.track) continue;
      const Track& t = data_->tracks[size_t(ref.track)];
      const double x0 = m.toX(t.start_ns[size_t(ref.index)]);
      const double x1 = std::max(m.toX(t.end_ns[size_t(ref.index)]), x0 + 2);
      return QRectF(x0, kAxisHeight + row.y - v_offset_ + 1, x1 - x0, row.height - 2);
    }
    return {};
  };
  p.setClipRect(QRect(kLabelWidth, kAxisHeight, laneWidth(), height() - kAxisHeight));
  p.setBrush(Qt::NoBrush);
  if (hover_.valid() && !(hover_ == selection_)) {
    p.setPen(QPen(QColor(0, 0, 0, 140), 1));
    p.drawRect(sliceRect(hover_));
  }
  if (selection_.valid()) {
    const QRectF r = sliceRect(selection_);
    p.setPen(QPen(QColor(0xFF, 0xD6, 0x00), 3));
    p.drawRect(r);
    p.setPen(QPen(Qt::black, 1));
    p.drawRect(r);
  }
  if (linked_.valid() && !(linked_ == selection_)) {
    // The twin: a magenta outline, dashed so it reads apart from the selection.
    const QRectF r = sliceRect(linked_);
    p.setPen(QPen(QColor(0xD0, 0x1C, 0x8B), 3, Qt::DashLine));
    p.drawRect(r);
  }
  if (range_end_ns_ > range_start_ns_) {
    const double x0 = m.toX(range_start_ns_);
    const double x1 = m.toX(range_end_ns_);
    p.setPen(QPen(QColor(0x1E, 0x5A, 0xC8), 1));
    p.setBrush(QColor(0x1E, 0x5A, 0xC8, 40));
    p.drawRect(QRectF(x0, kAxisHeight, x1 - x0, height() - kAxisHeight));
    p.setClipping(false);
    p.setBrush(QColor(0x1E, 0x5A, 0xC8));
    const QString len = QString::fromStdString(formatDuration(range_end_ns_ - range_start_ns_));
    QRectF tag(x0, 0, std::max(60.0, x1 - x0), kAxisHeight - 12);
    p.drawRect(tag);
    p.setPen(Qt::white);
    p.drawText(tag, Qt::AlignCenter, len);
  }
  p.setClipping(false);
}

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  if (!message_.isEmpty() || !data_) {
    p.fillRect(rect(), kBackground);
    p.setPen(kText);
    p.setFont(resized(font(), 3));
    const QString text = message_.isEmpty() ? tr("Open a trace database (File > Open) to see its timeline.")
                                            : message_;
    p.drawText(rect().adjusted(40, 40, -40, -40), Qt::AlignCenter | Qt::TextWordWrap, text);
    return;
  }
  if (!base_valid_ || base_.size() != size() * devicePixelRatioF()) rebuildBase();
  p.drawImage(0, 0, base_);
  paintOverlay(p, mapping());
}

void TimelineView::resizeEvent(QResizeEvent*) {
  syncScrollBar();
  invalidateBase();
}

void TimelineView::wheelEvent(QWheelEvent* event) {
  const double steps = event->angleDelta().y() / 120.0;
  if (event->modifiers() & Qt::ShiftModifier) {
    setVerticalOffset(v_offset_ - int(steps * 3 * kStreamHeight));
  } else if (steps != 0) {
    applyWindow(zoomAt(mapping(), event->position().x(), std::pow(0.8, steps)));
  }
  event->accept();
}

void TimelineView::mousePressEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) return;
  pressed_ = true;
  dragged_ = false;
  range_drag_ = event->modifiers() & Qt::ShiftModifier;
  press_pos_ = last_pos_ = event->position().toPoint();
}

void TimelineView::mouseMoveEvent(QMouseEvent* event) {
  const QPoint pos = event->position().toPoint();
  if (!pressed_) {
    const SliceRef h = sliceAt(pos);
    if (!(h == hover_)) {
      hover_ = h;
      update();
      emit sliceHovered(h.track, h.index);
    }
    const QString sample = counterTextAt(pos);
    if (sample.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(event->globalPosition().toPoint(), sample, this);
    return;
  }
  if ((pos - press_pos_).manhattanLength() > 3) dragged_ = true;
  if (!dragged_) return;
  const TimeMapping m = mapping();
  if (range_drag_) {
    range_start_ns_ = std::min(m.toTime(press_pos_.x()), m.toTime(pos.x()));
    range_end_ns_ = std::max(m.toTime(press_pos_.x()), m.toTime(pos.x()));
    update();
  } else {
    applyWindow(panBy(m, pos.x() - last_pos_.x()));
    setVerticalOffset(v_offset_ - (pos.y() - last_pos_.y()));
  }
  last_pos_ = pos;
}

void TimelineView::mouseReleaseEvent(QMouseEvent* event) {
  if (!pressed_ || event->button() != Qt::LeftButton) return;
  pressed_ = false;
  const QPoint pos = event->position().toPoint();
  if (dragged_) {
    if (range_drag_ && range_end_ns_ > range_start_ns_) emit rangeSelected(range_start_ns_, range_end_ns_);
    return;
  }
  const Row* row = rowAtY(pos.y());
  if (row && row->kind == RowKind::RankHeader) {
    setRankCollapsed(row->rank_index, !isRankCollapsed(row->rank_index));
    return;
  }
  range_start_ns_ = range_end_ns_ = -1;
  selectSlice(sliceAt(pos));
}

void TimelineView::keyPressEvent(QKeyEvent* event) {
  const TimeMapping m = mapping();
  const double center = m.x0_px + m.width_px / 2;
  switch (event->key()) {
    case Qt::Key_W: applyWindow(zoomAt(m, center, 0.7)); break;
    case Qt::Key_S: applyWindow(zoomAt(m, center, 1 / 0.7)); break;
    case Qt::Key_A: applyWindow(panBy(m, m.width_px * 0.2)); break;
    case Qt::Key_D: applyWindow(panBy(m, -m.width_px * 0.2)); break;
    case Qt::Key_F: fitSelection(); break;
    case Qt::Key_0: fitAll(); break;
    case Qt::Key_BracketRight: showAdjacentStep(+1); break;
    case Qt::Key_BracketLeft: showAdjacentStep(-1); break;
    case Qt::Key_L: showSlowestStep(); break;
    case Qt::Key_Period: stepSelection(+1); break;
    case Qt::Key_Comma: stepSelection(-1); break;
    case Qt::Key_Escape:
      range_start_ns_ = range_end_ns_ = -1;
      selectSlice({});
      break;
    default: QWidget::keyPressEvent(event); return;
  }
  event->accept();
}

void TimelineView::leaveEvent(QEvent*) {
  if (hover_.valid()) {
    hover_ = {};
    update();
  }
}

}  // namespace tandem::gui
