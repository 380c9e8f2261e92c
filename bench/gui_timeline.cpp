// bench_gui_timeline: how fast the timeline opens and redraws a large run.
//
// Generates a data-parallel run of about ten million activities (8 ranks x
// 3 streams), writes it to a trace file through the trace store's writer,
// then measures (1) opening it: reading the file, building the timeline's
// model and the store's overlap analysis, and painting the first frame;
// (2) 100 frames of zooming and panning, each a real repaint of a
// 1600x1000 TimelineView rendered offscreen; (3) the main window opening the
// same file in the background (MainWindow::openFileInBackground) while a
// 5 ms timer ticks on the GUI thread: the longest gap between ticks is how
// long the window stopped answering, against the synchronous open's whole
// time in (1). Prints JSON lines.
//
//   bench_gui_timeline [--activities N] [--db FILE] [--keep]
#include <QApplication>
#include <QEventLoop>
#include <QStatusBar>
#include <QElapsedTimer>
#include <QTimer>
#include <QFont>
#include <QFontDatabase>
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "gui/main_window.h"
#include "gui/run_loader.h"
#include "gui/synthetic_run.h"
#include "gui/timeline_palette.h"
#include "gui/timeline_view.h"
#include "traces/store/trace_reader.h"
#include "traces/store/trace_writer.h"

using namespace tandem;
using namespace tandem::gui;

namespace {

// CPU time of this thread: on a shared machine the wall time of a frame
// includes time other processes held the cores; both are reported.
double threadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

traces::ActivityKind activityKind(uint8_t k) {
  switch (TaskKind(k)) {
    case TaskKind::Collective: return traces::ActivityKind::Collective;
    case TaskKind::Memcpy: return traces::ActivityKind::Memcpy;
    default: return traces::ActivityKind::Kernel;
  }
}

void writeRun(const TimelineData& d, const std::string& path) {
  traces::WriterOptions opt;
  opt.truncate = true;
  opt.batch_rows = 200'000;
  traces::TraceWriter w(path, opt);
  traces::RunInfo info;
  info.kind = traces::RunKind::Simulated;
  info.name = "bench_gui_timeline";
  info.world_size = int(d.ranks.size());
  w.beginRun(info);
  const StreamKind kinds[] = {StreamKind::Compute, StreamKind::Comm, StreamKind::Copy};
  for (const Track& t : d.tracks) w.addStream({t.rank, t.stream, kinds[int(t.kind)], t.label, t.rank});
  traces::ActivityRow row;
  for (const Track& t : d.tracks) {
    row.rank = t.rank;
    row.device = t.rank;
    row.stream = t.stream;
    for (size_t i = 0; i < t.size(); ++i) {
      row.start_ns = t.start_ns[i];
      row.end_ns = t.end_ns[i];
      row.kind = activityKind(t.task_kind[i]);
      row.name = d.names[size_t(t.name_id[i])];
      row.task_id = t.task_id[i];
      row.phase = Phase(t.phase[i]);
      row.layer = t.layer[i];
      row.micro_batch = t.micro_batch[i];
      w.addActivity(row);
    }
  }
  for (const StepMark& s : d.steps)
    for (const auto& r : d.ranks) w.addStep({r.rank, s.step, s.start_ns, s.end_ns});
  w.flush();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t target = 10'000'000;
  std::string db = (std::filesystem::temp_directory_path() / "bench_gui_timeline.sqlite").string();
  bool keep = false;
  tandem::bench::ArgReader args("bench_gui_timeline", "[--activities N] [--db FILE] [--keep]", argc, argv);
  while (args.next()) {
    if (args.is("--activities")) target = args.integer(1, int64_t(1) << 40);
    else if (args.is("--db")) db = args.text();
    else if (args.is("--keep")) keep = true;
    else args.unknown();
  }
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QCoreApplication::setAttribute(Qt::AA_Use96Dpi);
  QApplication app(argc, argv);
  QFontDatabase::addApplicationFont("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
  QFont font("DejaVu Sans");
  font.setPixelSize(12);
  QApplication::setFont(font);

  SyntheticSpec spec;
  spec.ranks = 8;
  spec.steps = int((target + syntheticSlicesPerStep(spec) - 1) / syntheticSlicesPerStep(spec));
  auto t0 = std::chrono::steady_clock::now();
  {
    TimelineData generated = makeSyntheticRun(spec);
    std::printf("{\"bench\":\"gui_timeline\",\"stage\":\"generate\",\"activities\":%zu,\"ranks\":%d,"
                "\"streams_per_rank\":3,\"steps\":%d,\"seconds\":%.3f}\n",
                generated.sliceCount(), spec.ranks, spec.steps, secondsSince(t0));
    if (!keep || !std::filesystem::exists(db)) {
      t0 = std::chrono::steady_clock::now();
      writeRun(generated, db);
      std::printf("{\"bench\":\"gui_timeline\",\"stage\":\"write_trace\",\"seconds\":%.3f,\"file_bytes\":%lld}\n",
                  secondsSince(t0), (long long)std::filesystem::file_size(db));
    }
  }
  std::fflush(stdout);

  // Open: read the file, build the model and analyses, paint the first frame.
  TimelineView view;
  view.resize(1600, 1000);
  view.show();
  QApplication::processEvents();
  t0 = std::chrono::steady_clock::now();
  const std::clock_t cpu0 = std::clock();  // process CPU, all threads
  LoadedRun loaded = loadRunFile(db, -1);
  const double load_s = secondsSince(t0);
  view.setData(loaded.timeline);
  view.repaint();
  const double open_s = secondsSince(t0);
  const double open_cpu_s = double(std::clock() - cpu0) / CLOCKS_PER_SEC;
  std::printf("{\"bench\":\"gui_timeline\",\"stage\":\"open\",\"activities\":%zu,\"load_seconds\":%.3f,"
              "\"read_seconds\":%.3f,\"model_seconds\":%.3f,\"analysis_seconds\":%.3f,"
              "\"open_to_first_frame_seconds\":%.3f,\"open_cpu_seconds\":%.3f,\"limit_seconds\":3}\n",
              loaded.timeline->sliceCount(), load_s, loaded.timings.read_s, loaded.timings.model_s,
              loaded.timings.analysis_s, open_s, open_cpu_s);
  std::fflush(stdout);

  // 100 frames: zoom in at moving cursor positions down to a few hundred
  // microseconds, pan, zoom back out to the whole run, pan again. Every
  // frame changes the window, so every frame rebuilds the geometry.
  std::vector<double> frame_ms, frame_cpu_ms;
  const TimeMapping start = view.mapping();
  int64_t narrowest_ns = start.end_ns - start.start_ns;
  QElapsedTimer timer;
  for (int f = 0; f < 100; ++f) {
    TimeMapping m = view.mapping();
    const double x = m.x0_px + m.width_px * (0.2 + 0.6 * ((f * 37) % 100) / 100.0);
    if (f < 35) m = zoomAt(m, x, 0.75);
    else if (f < 50) m = panBy(m, (f % 2 ? 1 : -1) * 180.0);
    else if (f < 85) m = zoomAt(m, x, 1 / 0.75);
    else m = panBy(m, (f % 2 ? 1 : -1) * 240.0);
    const double cpu0 = threadCpuMs();
    timer.start();
    view.setWindow(m.start_ns, m.end_ns);
    view.repaint();
    frame_ms.push_back(double(timer.nsecsElapsed()) / 1e6);
    frame_cpu_ms.push_back(threadCpuMs() - cpu0);
    if (std::getenv("BENCH_FRAMES"))
      std::printf("{\"frame\":%d,\"window_ns\":%lld,\"ms\":%.2f,\"cpu_ms\":%.2f,\"geometry_ms\":%.2f,"
                  "\"paint_ms\":%.2f}\n", f, (long long)(view.mapping().end_ns - view.mapping().start_ns),
                  frame_ms.back(), frame_cpu_ms.back(), view.lastGeometryMs(), view.lastPaintMs());
    narrowest_ns = std::min(narrowest_ns, view.mapping().end_ns - view.mapping().start_ns);
  }
  std::vector<double> sorted = frame_ms, cpu = frame_cpu_ms;
  std::sort(sorted.begin(), sorted.end());
  std::sort(cpu.begin(), cpu.end());
  // Nearest-rank percentiles.
  auto rank = [](const std::vector<double>& v, double p) {
    size_t k = size_t(std::ceil(p / 100.0 * double(v.size())));
    return v[std::clamp<size_t>(k, 1, v.size()) - 1];
  };
  auto nearest = [&](double p) { return rank(sorted, p); };
  std::printf("{\"bench\":\"gui_timeline\",\"stage\":\"frames\",\"frames\":%zu,\"width\":1600,\"height\":1000,"
              "\"median_ms\":%.2f,\"p95_ms\":%.2f,\"max_ms\":%.2f,\"min_ms\":%.2f,"
              "\"cpu_median_ms\":%.2f,\"cpu_p95_ms\":%.2f,"
              "\"window_fit_ns\":%lld,\"window_narrowest_ns\":%lld,\"limit_median_ms\":16,\"limit_p95_ms\":33}\n",
              sorted.size(), nearest(50), nearest(95), sorted.back(), sorted.front(), rank(cpu, 50), rank(cpu, 95),
              (long long)(start.end_ns - start.start_ns), (long long)narrowest_ns);
  std::fflush(stdout);

  // The window opening the file behind a ticking GUI thread.
  {
    MainWindow window;
    window.resize(1600, 1000);
    window.show();
    QApplication::processEvents();
    QElapsedTimer since_tick;
    double longest_stall_ms = 0;
    int ticks = 0, progress_updates = 0;
    QTimer tick;
    tick.setInterval(5);
    QObject::connect(&tick, &QTimer::timeout, [&] {
      if (ticks++ > 0) longest_stall_ms = std::max(longest_stall_ms, double(since_tick.nsecsElapsed()) / 1e6);
      since_tick.start();
    });
    QEventLoop loop;
    bool shown = false;
    QObject::connect(&window, &MainWindow::loadFinished, [&](bool ok) {
      shown = ok;
      loop.quit();
    });
    QObject::connect(window.statusBar(), &QStatusBar::messageChanged, [&] { ++progress_updates; });
    tick.start();
    t0 = std::chrono::steady_clock::now();
    window.openFileInBackground(QString::fromStdString(db));
    loop.exec();
    const double background_s = secondsSince(t0);
    QApplication::processEvents();  // the first frame of the shown run
    tick.stop();
    std::printf("{\"bench\":\"gui_timeline\",\"stage\":\"background_open\",\"shown\":%s,\"seconds\":%.3f,"
                "\"gui_thread_longest_stall_ms\":%.1f,\"ticks\":%d,\"status_updates\":%d,"
                "\"synchronous_open_stall_ms\":%.1f}\n",
                shown ? "true" : "false", background_s, longest_stall_ms, ticks, progress_updates, open_s * 1e3);
  }
  if (!keep) std::filesystem::remove(db);
  return 0;
}
