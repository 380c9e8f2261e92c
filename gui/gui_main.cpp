// tandem-gui: the desktop viewer. With --screenshot it renders offscreen,
// writes a PNG and exits (non-zero when the input could not be shown).
#include <QApplication>
#include <QCommandLineParser>
#include <QElapsedTimer>
#include <QFont>
#include <QFontDatabase>
#include <QImage>
#include <QSaveFile>
#include <QStatusBar>
#include <QThread>
#include <cstdio>
#include <cstring>
#include <map>

#include "gui/main_window.h"
#include "gui/run_loader.h"
#include "gui/synthetic_run.h"
#include "gui/timeline_math.h"
#include "gui/timeline_view.h"

namespace {

// "12345" (ns), "1.5ms", "200us", "2s".
bool parseTime(const QString& text, qint64& ns) {
  QString t = text.trimmed();
  double scale = 1;
  for (auto [suffix, mult] : {std::pair{"ms", 1e6}, {"us", 1e3}, {"ns", 1.0}, {"s", 1e9}}) {
    if (t.endsWith(suffix)) {
      t.chop(int(std::strlen(suffix)));
      scale = mult;
      break;
    }
  }
  bool ok = false;
  const double v = t.toDouble(&ok);
  if (!ok) return false;
  ns = qint64(v * scale);
  return true;
}

bool wantsScreenshot(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--screenshot") == 0 || std::strncmp(argv[i], "--screenshot=", 13) == 0) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const bool headless = wantsScreenshot(argc, argv);
  // Screenshots render offscreen unless the caller chose a platform.
  if (headless && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  if (headless) QCoreApplication::setAttribute(Qt::AA_Use96Dpi);
  QApplication app(argc, argv);
  QApplication::setApplicationName("tandem-gui");
  if (headless) {
    // A fixed font so screenshots look the same on every machine.
    QFontDatabase::addApplicationFont("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
    QFont f("DejaVu Sans");
    f.setPixelSize(12);
    QApplication::setFont(f);
  }

  QCommandLineParser parser;
  parser.setApplicationDescription("tandem-gui: timelines, overlap and statistics of real and simulated runs");
  parser.addHelpOption();
  parser.addPositionalArgument("DB", "trace database(s) written by tandem (the first is shown)", "[DB...]");
  QCommandLineOption run_opt("run", "run id to show (default: the file's latest run)", "ID");
  QCommandLineOption compare_opt("compare", "run id of the first file to compare the shown run against", "ID");
  QCommandLineOption shot_opt("screenshot", "render offscreen to this PNG and exit", "out.png");
  QCommandLineOption view_opt("view", "view for the screenshot: timeline|statistics|recompute|topology|compare|side-by-side",
                              "VIEW", "timeline");
  QCommandLineOption range_opt("range", "visible time range START:END from the run's start (ns, or 1.5ms, 200us)",
                               "START:END");
  QCommandLineOption select_opt("select", "select the time range START:END (fills the range table)", "START:END");
  QCommandLineOption pick_opt("pick", "select the slice at TIME on rank 0's first lane (fills the details)", "TIME");
  QCommandLineOption size_opt("size", "window size for the screenshot", "WxH", "1600x1000");
  QCommandLineOption demo_opt("generated", "show a generated 8-rank run instead of a file");
  parser.addOptions({run_opt, compare_opt, shot_opt, view_opt, range_opt, select_opt, pick_opt, size_opt, demo_opt});
  parser.process(app);

  auto fail = [](const QString& msg) {
    std::fprintf(stderr, "tandem-gui: error: %s\n", qPrintable(msg));
    return 1;
  };

  tandem::gui::MainWindow window;
  const QStringList size = parser.value(size_opt).split('x');
  if (size.size() != 2 || size[0].toInt() < 200 || size[1].toInt() < 200)
    return fail("--size: expected WxH such as 1600x1000, got '" + parser.value(size_opt) + "'");
  window.resize(size[0].toInt(), size[1].toInt());

  bool ok = true;
  const QStringList files = parser.positionalArguments();
  if (parser.isSet(demo_opt)) {
    auto data = std::make_shared<tandem::gui::TimelineData>(tandem::gui::makeSyntheticRun({}));
    window.showRun(data, tandem::gui::breakdownFromTimeline(*data), "generated run");
  } else if (!files.isEmpty()) {
    qint64 run = -1;
    if (parser.isSet(run_opt)) {
      bool num = false;
      run = parser.value(run_opt).toLongLong(&num);
      if (!num) return fail("--run: expected a run id (an integer), got '" + parser.value(run_opt) + "'");
    }
    // On screen, with nothing to apply to the loaded run, the window shows
    // at once and the file loads behind it with progress; a screenshot, a
    // range or a pick needs the run first.
    const bool background = !headless && !parser.isSet(range_opt) && !parser.isSet(select_opt) &&
                            !parser.isSet(pick_opt) && !parser.isSet(compare_opt);
    if (background)
      window.openFileInBackground(files.front(), run);
    else
      ok = window.openFile(files.front(), run);
    for (int i = 1; i < files.size(); ++i) window.openCompare(files[i], -1);
    if (ok && parser.isSet(compare_opt)) ok = window.openCompare(files.front(), parser.value(compare_opt).toLongLong());
  } else if (headless) {
    window.showError("No trace database given.\nUsage: tandem-gui --screenshot out.png DB [--run ID]");
    ok = false;
  }

  auto applyRange = [&](const QCommandLineOption& opt, bool select) {
    if (!parser.isSet(opt)) return true;
    const QStringList parts = parser.value(opt).split(':');
    qint64 a = 0, b = 0;
    if (parts.size() != 2 || !parseTime(parts[0], a) || !parseTime(parts[1], b) || b <= a) {
      fail("--" + opt.names().front() + ": expected START:END with START < END, got '" + parser.value(opt) + "'");
      return false;
    }
    const auto* d = window.timeline()->data();
    const qint64 origin = d ? d->begin_ns : 0;
    if (select)
      window.selectRange(origin + a, origin + b);
    else
      window.timeline()->setWindow(origin + a, origin + b);
    return true;
  };

  using View = tandem::gui::MainWindow::View;
  const QString view = parser.value(view_opt);
  const std::map<QString, View> views = {{"timeline", View::Timeline},   {"statistics", View::Statistics},
                                         {"recompute", View::Recompute}, {"topology", View::Topology},
                                         {"compare", View::Compare},     {"side-by-side", View::SideBySide}};
  auto v = views.find(view);
  if (v == views.end())
    return fail("--view: unknown view '" + view + "' (allowed: timeline, statistics, recompute, topology, compare, side-by-side)");
  window.setView(v->second);

  auto applyPick = [&] {
    if (!parser.isSet(pick_opt)) return true;
    qint64 t = 0;
    if (!parseTime(parser.value(pick_opt), t)) {
      fail("--pick: expected a time such as 12.5ms, got '" + parser.value(pick_opt) + "'");
      return false;
    }
    const auto* d = window.timeline()->data();
    if (d && !d->ranks.empty() && !d->ranks[0].tracks.empty()) {
      const int track = d->ranks[0].tracks[0];
      const int64_t i = tandem::gui::hitTest(d->tracks[size_t(track)], d->begin_ns + t, 0);
      if (i >= 0) window.timeline()->selectSlice({track, i});
    }
    return true;
  };

  if (!headless) {
    window.show();
    if (!applyRange(range_opt, false) || !applyRange(select_opt, true) || !applyPick()) return 1;
    return app.exec();
  }

  window.show();
  QApplication::processEvents();
  if (!applyRange(range_opt, false) || !applyRange(select_opt, true) || !applyPick()) return 1;
  // The compare view's store figures come from a worker thread.
  QElapsedTimer waited;
  waited.start();
  while (window.traceComparisonPending() && waited.elapsed() < 120000) {
    QApplication::processEvents();
    QThread::msleep(5);
  }
  QApplication::processEvents();
  const QImage image = window.grab().toImage();
  QSaveFile out(parser.value(shot_opt));
  if (!out.open(QIODevice::WriteOnly) || !image.save(&out, "PNG") || !out.commit())
    return fail("cannot write " + parser.value(shot_opt));
  if (!ok) return fail(window.lastError().isEmpty() ? "input could not be shown" : window.lastError().simplified());
  return 0;
}
