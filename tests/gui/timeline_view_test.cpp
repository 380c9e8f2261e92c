// TimelineView on a hand-built fixture, rendered offscreen: pixels at known
// positions (overlap colours, recompute colour), interaction through real
// events, and the geometry cache.
#include <QImage>
#include <QSignalSpy>
#include <QTest>
#include <catch2/catch.hpp>

#include "gui/timeline_palette.h"
#include "gui/timeline_view.h"
#include "gui_test_app.h"

using namespace tandem;
using namespace tandem::gui;

namespace {

// Rank 0: forward 0-1 ms, recompute 1-2 ms, backward 2-4 ms on compute; an
// all-reduce 2.5-3.5 ms (under backward: hidden) and 4.2-5 ms (nothing
// computes: exposed) on comm.
std::shared_ptr<TimelineData> fixture() {
  auto d = std::make_shared<TimelineData>();
  NameTable names(d->names);
  Track compute;
  compute.rank = 0;
  compute.stream = 0;
  compute.kind = StreamKind::Compute;
  compute.label = "compute";
  compute.append(0, 1'000'000, names.intern("f"), 0, TaskKind::Kernel, Phase::Forward, 0, 0);
  compute.append(1'000'000, 2'000'000, names.intern("r"), 1, TaskKind::Kernel, Phase::Recompute, 0, 0);
  compute.append(2'000'000, 4'000'000, names.intern("b"), 2, TaskKind::Kernel, Phase::Backward, 0, 0);
  Track comm;
  comm.rank = 0;
  comm.stream = 1;
  comm.kind = StreamKind::Comm;
  comm.label = "comm 0";
  comm.append(2'500'000, 3'500'000, names.intern("ar0"), 3, TaskKind::Collective, Phase::Comm, -1, 0);
  comm.append(4'200'000, 5'000'000, names.intern("ar1"), 4, TaskKind::Collective, Phase::Comm, -1, 0);
  d->tracks = {compute, comm};
  d->steps.push_back({0, 0, 5'000'000});
  d->finalize();
  return d;
}

const TimelineView::Row& rowOf(const TimelineView& v, TimelineView::RowKind kind, int track = -1) {
  for (const auto& r : v.rows())
    if (r.kind == kind && (track < 0 || r.track == track)) return r;
  FAIL("row not found");
  return v.rows().front();
}

QRgb pixelAt(const QImage& img, double x, int y) { return img.pixel(int(std::lround(x)), y) & 0xFFFFFF; }
QRgb rgb(PaintClass c) { return paintColor(c).rgb() & 0xFFFFFF; }

// The application must exist before the view member is constructed.
struct AppFirst {
  AppFirst() { test::app(); }
};

struct ViewFixture : AppFirst {
  ViewFixture() {
    view.resize(1000, 300);
    view.setData(fixture());
    view.setWindow(0, 5'000'000);
    view.show();
  }
  TimelineView view;
};

}  // namespace

TEST_CASE("overlap lane shows hidden and exposed communication in their colours", "[gui][pixels]") {
  ViewFixture f;
  const QImage img = f.view.grab().toImage();
  if (const char* dir = std::getenv("TANDEM_GUI_TEST_IMAGES")) img.save(QString(dir) + "/fixture.png");
  const auto m = f.view.mapping();
  const int y = f.view.rowCenterY(rowOf(f.view, TimelineView::RowKind::Overlap));
  CHECK(pixelAt(img, m.toX(3'000'000), y) == rgb(PaintClass::Hidden));
  CHECK(pixelAt(img, m.toX(2'700'000), y) == rgb(PaintClass::Hidden));
  CHECK(pixelAt(img, m.toX(4'600'000), y) == rgb(PaintClass::Exposed));
  // No communication at 1 ms: the lane stays empty there.
  const QRgb empty = pixelAt(img, m.toX(1'000'000), y);
  CHECK(empty != rgb(PaintClass::Hidden));
  CHECK(empty != rgb(PaintClass::Exposed));
}

TEST_CASE("recompute slices are painted in the recompute colour with a hatch", "[gui][pixels]") {
  ViewFixture f;
  const QImage img = f.view.grab().toImage();
  const auto m = f.view.mapping();
  const auto& compute_row = rowOf(f.view, TimelineView::RowKind::Stream, 0);
  const int y = f.view.rowCenterY(compute_row);
  int orange = 0, hatch = 0, other = 0;
  for (int x = int(m.toX(1'300'000)); x < int(m.toX(1'900'000)); ++x)
    for (int dy = -4; dy <= 4; ++dy) {
      const QRgb c = img.pixel(x, y + dy) & 0xFFFFFF;
      if (c == rgb(PaintClass::Recompute)) ++orange;
      else if (c == (recomputeHatchColor().rgb() & 0xFFFFFF)) ++hatch;
      else ++other;
    }
  CHECK(orange > 3 * hatch);
  CHECK(hatch > 0);
  CHECK(other == 0);
  CHECK(pixelAt(img, m.toX(900'000), y) == rgb(PaintClass::Forward));
  CHECK(pixelAt(img, m.toX(3'900'000), y) == rgb(PaintClass::Backward));
  // The phase lane carries the same colours.
  const int py = f.view.rowCenterY(rowOf(f.view, TimelineView::RowKind::Phase));
  CHECK(pixelAt(img, m.toX(1'500'000), py) == rgb(PaintClass::Recompute));
  CHECK(pixelAt(img, m.toX(500'000), py) == rgb(PaintClass::Forward));
}

TEST_CASE("a counter lane draws its samples as a line, lowest value at the bottom", "[gui][pixels]") {
  AppFirst app;
  auto data = fixture();
  CounterLane power;
  power.name = "gpu.power_w";
  power.label = "power W";
  power.t_ns = {0, 2'000'000, 2'100'000, 5'000'000};
  power.value = {700, 700, 600, 600};
  power.finalize();
  data->ranks[0].counters.push_back(power);
  TimelineView view;
  view.resize(1000, 300);
  view.setData(data);
  view.setWindow(0, 5'000'000);
  view.show();
  const QImage img = view.grab().toImage();
  const auto& row = rowOf(view, TimelineView::RowKind::Counter, 0);
  const int row_top = view.rowCenterY(row) - row.height / 2;
  const auto m = view.mapping();
  // Rows of the line's colour in the column at time t, relative to the row's top.
  auto lineRows = [&](int64_t t) {
    std::vector<int> ys;
    const int x = int(std::lround(m.toX(t)));
    for (int dy = 0; dy < row.height; ++dy)
      if ((img.pixel(x, row_top + dy) & 0xFFFFFF) == (counterLineColor().rgb() & 0xFFFFFF)) ys.push_back(dy);
    return ys;
  };
  const auto high = lineRows(1'000'000), low = lineRows(4'000'000);
  REQUIRE_FALSE(high.empty());
  REQUIRE_FALSE(low.empty());
  CHECK(high.front() <= 5);               // 700 W, the highest sample: near the top
  CHECK(low.back() >= row.height - 5);    // 600 W, the lowest: near the bottom
  // Nothing of the line's colour in the stream lanes above.
  const int compute_y = view.rowCenterY(rowOf(view, TimelineView::RowKind::Stream, 0));
  CHECK((img.pixel(int(m.toX(1'000'000)), compute_y) & 0xFFFFFF) != (counterLineColor().rgb() & 0xFFFFFF));
  // Hovering reads the nearest sample; other rows read nothing.
  const QString at4 = view.counterTextAt(QPoint(int(m.toX(4'000'000)), view.rowCenterY(row)));
  CHECK(at4.startsWith(QStringLiteral("power W 600 at ")));
  const QString at0 = view.counterTextAt(QPoint(int(m.toX(300'000)), view.rowCenterY(row)));
  CHECK(at0.startsWith(QStringLiteral("power W 700 at ")));
  CHECK(view.counterTextAt(QPoint(int(m.toX(4'000'000)), compute_y)).isEmpty());
}

TEST_CASE("clicking selects the slice under the cursor; keys move and fit", "[gui][interaction]") {
  ViewFixture f;
  QSignalSpy spy(&f.view, &TimelineView::sliceSelected);
  const auto m = f.view.mapping();
  const int y = f.view.rowCenterY(rowOf(f.view, TimelineView::RowKind::Stream, 0));
  QTest::mouseClick(&f.view, Qt::LeftButton, {}, QPoint(int(m.toX(1'500'000)), y));
  REQUIRE(spy.count() == 1);
  CHECK(spy.at(0).at(0).toInt() == 0);
  CHECK(spy.at(0).at(1).toLongLong() == 1);
  CHECK(f.view.selection() == SliceRef{0, 1});

  QTest::keyClick(&f.view, Qt::Key_Period);
  CHECK(f.view.selection() == SliceRef{0, 2});
  QTest::keyClick(&f.view, Qt::Key_Comma);
  QTest::keyClick(&f.view, Qt::Key_Comma);
  CHECK(f.view.selection() == SliceRef{0, 0});
  QTest::keyClick(&f.view, Qt::Key_Comma);  // nothing before the first slice
  CHECK(f.view.selection() == SliceRef{0, 0});

  QTest::keyClick(&f.view, Qt::Key_F);  // fit the forward slice
  const auto fm = f.view.mapping();
  CHECK(fm.start_ns < 0);
  CHECK(fm.start_ns > -200'000);
  CHECK(fm.end_ns > 1'000'000);
  CHECK(fm.end_ns < 1'200'000);

  // A click on empty lane space clears the selection.
  QTest::keyClick(&f.view, Qt::Key_0);
  const auto m2 = f.view.mapping();
  const int cy = f.view.rowCenterY(rowOf(f.view, TimelineView::RowKind::Stream, 1));
  QTest::mouseClick(&f.view, Qt::LeftButton, {}, QPoint(int(m2.toX(1'000'000)), cy));
  CHECK_FALSE(f.view.selection().valid());
}

TEST_CASE("wheel zooms at the cursor and W/A/S/D zoom and pan", "[gui][interaction]") {
  ViewFixture f;
  const auto m = f.view.mapping();
  const QPoint at(int(m.toX(2'000'000)), 60);
  const int64_t under = m.toTime(at.x());
  QWheelEvent wheel(QPointF(at), f.view.mapToGlobal(QPointF(at)), QPoint(), QPoint(0, 240), Qt::NoButton,
                    Qt::NoModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(&f.view, &wheel);
  const auto z = f.view.mapping();
  CHECK(z.end_ns - z.start_ns < m.end_ns - m.start_ns);
  CHECK(std::llabs(z.toTime(at.x()) - under) <= int64_t(z.nsPerPx()) + 1);

  const auto before = f.view.mapping();
  QTest::keyClick(&f.view, Qt::Key_D);
  CHECK(f.view.mapping().start_ns > before.start_ns);
  QTest::keyClick(&f.view, Qt::Key_A);
  CHECK(f.view.mapping().start_ns == Approx(before.start_ns).margin(double(before.nsPerPx())));
  QTest::keyClick(&f.view, Qt::Key_W);
  CHECK(f.view.mapping().end_ns - f.view.mapping().start_ns < before.end_ns - before.start_ns);
  QTest::keyClick(&f.view, Qt::Key_S);
  QTest::keyClick(&f.view, Qt::Key_S);
  CHECK(f.view.mapping().end_ns - f.view.mapping().start_ns > before.end_ns - before.start_ns);
}

TEST_CASE("shift-drag selects a time range; plain drag pans", "[gui][interaction]") {
  ViewFixture f;
  QSignalSpy spy(&f.view, &TimelineView::rangeSelected);
  const auto m = f.view.mapping();
  const int y = f.view.rowCenterY(rowOf(f.view, TimelineView::RowKind::Stream, 0));
  const QPoint a(int(m.toX(1'000'000)), y), b(int(m.toX(3'000'000)), y);
  QTest::mousePress(&f.view, Qt::LeftButton, Qt::ShiftModifier, a);
  QMouseEvent move(QEvent::MouseMove, QPointF(b), f.view.mapToGlobal(QPointF(b)), Qt::NoButton,
                   Qt::LeftButton, Qt::ShiftModifier);
  QApplication::sendEvent(&f.view, &move);
  QTest::mouseRelease(&f.view, Qt::LeftButton, Qt::ShiftModifier, b);
  REQUIRE(spy.count() == 1);
  CHECK(std::llabs(spy.at(0).at(0).toLongLong() - 1'000'000) <= 10'000);
  CHECK(std::llabs(spy.at(0).at(1).toLongLong() - 3'000'000) <= 10'000);

  const auto before = f.view.mapping();
  QTest::mousePress(&f.view, Qt::LeftButton, {}, b);
  QMouseEvent pan(QEvent::MouseMove, QPointF(a), f.view.mapToGlobal(QPointF(a)), Qt::NoButton,
                  Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(&f.view, &pan);
  QTest::mouseRelease(&f.view, Qt::LeftButton, {}, a);
  // Dragging leftwards by 2 ms worth of pixels shows later times.
  CHECK(f.view.mapping().start_ns > before.start_ns + 100'000);
}

TEST_CASE("rank headers collapse their lanes; the base layer is cached", "[gui][interaction]") {
  ViewFixture f;
  const size_t rows = f.view.rows().size();
  CHECK(rows == 5);  // header, compute, comm, overlap, phase
  const auto& header = rowOf(f.view, TimelineView::RowKind::RankHeader);
  QTest::mouseClick(&f.view, Qt::LeftButton, {}, QPoint(400, f.view.rowCenterY(header)));
  CHECK(f.view.isRankCollapsed(0));
  CHECK(f.view.rows().size() == 1);
  f.view.setRankCollapsed(0, false);
  CHECK(f.view.rows().size() == rows);

  f.view.grab();
  const int rebuilt = f.view.baseRebuilds();
  // Hovering and selecting repaint only the overlay.
  const auto m = f.view.mapping();
  const int y = f.view.rowCenterY(rowOf(f.view, TimelineView::RowKind::Stream, 0));
  QTest::mouseMove(&f.view, QPoint(int(m.toX(500'000)), y));
  f.view.selectSlice({0, 2});
  f.view.grab();
  CHECK(f.view.baseRebuilds() == rebuilt);
  f.view.setWindow(0, 2'000'000);
  f.view.grab();
  CHECK(f.view.baseRebuilds() == rebuilt + 1);
}

TEST_CASE("a message replaces the lanes for bad input", "[gui][pixels]") {
  test::app();
  TimelineView v;
  v.resize(600, 200);
  v.setMessage("not a tandem trace");
  const QImage img = v.grab().toImage();
  CHECK(v.message() == "not a tandem trace");
  // Text was drawn: some dark pixels on the light background.
  int dark = 0;
  for (int y = 0; y < img.height(); ++y)
    for (int x = 0; x < img.width(); ++x)
      if (qGray(img.pixel(x, y)) < 128) ++dark;
  CHECK(dark > 20);
}
