#include "gui/main_window.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMenuBar>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QThread>
#include <QToolButton>
#include <QVBoxLayout>
#include <map>

#include "gui/compare_view.h"
#include "gui/side_by_side_view.h"
#include "gui/compare_worker.h"
#include "gui/item_models.h"
#include "gui/load_worker.h"
#include "gui/recompute_view.h"
#include "gui/slice_stats.h"
#include "gui/synthetic_run.h"
#include "gui/timeline_math.h"
#include "gui/timeline_view.h"
#include "gui/topology_view.h"
#include "gui/what_if_dialog.h"
#include "simulator/topology/topology_presets.h"
#include "simulator/topology/topology_yaml.h"
#include "traces/store/trace_reader.h"

namespace tandem::gui {

// Tasks the compare view lists, largest difference first: every task of a
// GPT-2-size step, and a bound on a thousand-layer one's.
constexpr size_t kCompareTasksShown = 20000;

namespace {

// sort_column < 0 keeps the model's own order (longest first for statistics).
QTableView* makeTable(QAbstractItemModel* model, QWidget* parent, bool sortable, int sort_column = -1,
                      Qt::SortOrder order = Qt::AscendingOrder) {
  auto* view = new QTableView(parent);
  if (sortable) {
    auto* proxy = new QSortFilterProxyModel(view);
    proxy->setSourceModel(model);
    proxy->setSortRole(kSortRole);
    view->setModel(proxy);
    view->setSortingEnabled(true);
    // Enabling sorting sorts by the header's default indicator (column 0,
    // descending); start from a deliberate order instead.
    view->sortByColumn(sort_column, order);
  } else {
    view->setModel(model);
  }
  view->setAlternatingRowColors(true);
  view->setSelectionBehavior(QAbstractItemView::SelectRows);
  view->verticalHeader()->hide();
  view->verticalHeader()->setDefaultSectionSize(20);
  view->horizontalHeader()->setStretchLastSection(true);
  view->setWordWrap(false);
  return view;
}

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("tandem"));
  details_ = new DetailsModel(this);
  range_stats_ = new KernelStatsModel(this);
  stats_ = new KernelStatsModel(this);
  breakdown_ = new BreakdownModel(this);
  runs_ = new RunListModel(this);

  tabs_ = new QTabWidget(this);
  timeline_ = new TimelineView(tabs_);
  tabs_->addTab(timeline_, tr("Timeline"));

  // Statistics: per op / name / phase above, overlap and breakdown per rank below.
  auto* stats_page = new QWidget(tabs_);
  auto* stats_layout = new QVBoxLayout(stats_page);
  auto* stats_bar = new QHBoxLayout();
  group_box_ = new QComboBox(stats_page);
  group_box_->addItems({tr("by op kind"), tr("by name"), tr("by phase")});
  stats_bar->addWidget(group_box_);
  // The steps by default: start-up and set-up (GEMM timing, copies in)
  // would otherwise lead the table.
  whole_run_box_ = new QCheckBox(tr("whole run (start-up and tail too)"), stats_page);
  whole_run_box_->setObjectName("statistics_whole_run");
  stats_bar->addWidget(whole_run_box_);
  stats_bar->addStretch();
  stats_layout->addLayout(stats_bar);
  auto* split = new QSplitter(Qt::Vertical, stats_page);
  auto* stats_view = makeTable(stats_, split, true);
  stats_view->horizontalHeader()->resizeSection(0, 280);
  split->addWidget(stats_view);
  split->addWidget(makeTable(breakdown_, split, true, BreakdownModel::Rank));
  stats_layout->addWidget(split);
  tabs_->addTab(stats_page, tr("Statistics"));
  recompute_view_ = new RecomputeView(tabs_);
  tabs_->addTab(recompute_view_, tr("Recompute"));
  topology_view_ = new TopologyView(tabs_);
  tabs_->addTab(topology_view_, tr("Topology"));
  compare_view_ = new CompareView(tabs_);
  tabs_->addTab(compare_view_, tr("Compare"));
  side_by_side_ = new SideBySideView(tabs_);
  tabs_->addTab(side_by_side_, tr("Side by side"));
  setCentralWidget(tabs_);
  connect(recompute_view_, &RecomputeView::runCreated, this, [this](const QString& path, qint64 run) {
    // The new run is shown and compared against the run it came from.
    const QString old_path = current_path_;
    const qint64 old_run = current_run_;
    if (openFile(path, run) && !old_path.isEmpty()) openCompare(old_path, old_run);
  });
  connect(recompute_view_, &RecomputeView::failed, this,
          [this](const QString& msg) { statusBar()->showMessage(tr("What-if failed: %1").arg(msg)); });

  auto* details_dock = new QDockWidget(tr("Details"), this);
  auto* details_view = makeTable(details_, details_dock, false);
  details_view->horizontalHeader()->resizeSection(0, 110);
  details_dock->setWidget(details_view);
  addDockWidget(Qt::RightDockWidgetArea, details_dock);

  auto* range_dock = new QDockWidget(tr("Selected range"), this);
  auto* range_page = new QWidget(range_dock);
  auto* range_layout = new QVBoxLayout(range_page);
  range_layout->setContentsMargins(4, 2, 4, 2);
  range_label_ = new QLabel(tr("Shift-drag on the timeline to aggregate a time range."), range_page);
  range_layout->addWidget(range_label_);
  auto* range_view = makeTable(range_stats_, range_page, true);
  range_view->horizontalHeader()->resizeSection(0, 260);
  range_layout->addWidget(range_view);
  range_dock->setWidget(range_page);
  addDockWidget(Qt::BottomDockWidgetArea, range_dock);

  auto* runs_dock = new QDockWidget(tr("Runs"), this);
  auto* runs_page = new QWidget(runs_dock);
  auto* runs_layout = new QVBoxLayout(runs_page);
  runs_layout->setContentsMargins(4, 2, 4, 2);
  runs_view_ = makeTable(runs_, runs_page, true, RunListModel::Id);
  runs_layout->addWidget(runs_view_);
  auto* compare_button = new QPushButton(tr("Compare shown run with selected"), runs_page);
  runs_layout->addWidget(compare_button);
  runs_dock->setWidget(runs_page);
  addDockWidget(Qt::BottomDockWidgetArea, runs_dock);
  tabifyDockWidget(range_dock, runs_dock);
  range_dock->raise();
  resizeDocks({details_dock}, {340}, Qt::Horizontal);
  resizeDocks({range_dock}, {220}, Qt::Vertical);

  connect(timeline_, &TimelineView::sliceSelected, this, &MainWindow::onSliceSelected);
  connect(timeline_, &TimelineView::rangeSelected, this, &MainWindow::onRangeSelected);
  connect(runs_view_, &QTableView::doubleClicked, this, &MainWindow::onRunActivated);
  connect(compare_button, &QPushButton::clicked, this, &MainWindow::onCompareWithSelectedRun);
  connect(group_box_, &QComboBox::currentIndexChanged, this, [this] {
    stats_dirty_ = true;
    refreshStats();
  });
  connect(whole_run_box_, &QCheckBox::toggled, this, [this] {
    stats_dirty_ = true;
    refreshStats();
  });
  connect(tabs_, &QTabWidget::currentChanged, this, [this] { refreshStats(); });
  buildMenus();
  load_progress_ = new QProgressBar(this);
  load_progress_->setRange(0, 100);
  load_progress_->setMaximumWidth(220);
  load_cancel_button_ = new QToolButton(this);
  load_cancel_button_->setText(tr("Cancel"));
  connect(load_cancel_button_, &QToolButton::clicked, this, [this] { cancelLoad(); });
  statusBar()->addPermanentWidget(load_progress_);
  statusBar()->addPermanentWidget(load_cancel_button_);
  load_progress_->hide();
  load_cancel_button_->hide();
  statusBar()->showMessage(hints());
}

QString MainWindow::warningText(const std::vector<traces::StatRow>& warnings) const {
  QString text = QString::fromStdString(warnings.front().description);
  if (warnings.size() > 1) text += tr(" (and %1 more; tandem report lists them)").arg(warnings.size() - 1);
  return text;
}

QString MainWindow::hints() const {
  return tr("Wheel: zoom · drag: pan · Shift-drag: select range · W/A/S/D · F: fit · ./,: next/previous");
}

MainWindow::~MainWindow() {
  // Loads stop at their next progress point; they and the comparisons still
  // reading the files finish first (their results, queued to this window,
  // are then dropped with it).
  for (const BackgroundLoad& load : loads_)
    if (load.cancel) *load.cancel = true;
  for (const QPointer<QThread>& worker : load_workers_)
    if (worker) worker->wait();
  for (const QPointer<QThread>& worker : trace_compare_workers_)
    if (worker) worker->wait();
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open trace..."), QKeySequence::Open, this, &MainWindow::onOpenDialog);
  file->addAction(tr("Open &generated run"), this, [this] {
    auto data = std::make_shared<TimelineData>(makeSyntheticRun({}));
    showRun(data, breakdownFromTimeline(*data), tr("generated run"));
  });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, qApp, &QApplication::quit);
  QMenu* sim_menu = menuBar()->addMenu(tr("&Simulate"));
  sim_menu->addAction(tr("&What-if..."), this, [this] {
    // Based on the shown run's job and topology; the new run is appended to
    // the shown run's file.
    QString job, topo, topo_yaml;
    if (!current_path_.isEmpty()) {
      for (int r = 0; r < runs_->rowCount(); ++r) {
        const auto& e = runs_->entry(r);
        if (QString::fromStdString(e.path) == current_path_ && e.info.id == current_run_) {
          job = QString::fromStdString(e.info.job_yaml);
          topo = QString::fromStdString(e.info.topology);
          topo_yaml = QString::fromStdString(e.info.topology_yaml);
        }
      }
    }
    auto* dialog = new WhatIfDialog(job, topo, current_path_, this, topo_yaml);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    connect(dialog, &WhatIfDialog::runCreated, this, [this](const QString& path, qint64 run) {
      const QString old_path = current_path_;
      const qint64 old_run = current_run_;
      if (openFile(path, run) && !old_path.isEmpty()) openCompare(old_path, old_run);
    });
    dialog->show();
  });
  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->addAction(tr("&Timeline"), this, [this] { setView(View::Timeline); });
  view->addAction(tr("&Statistics"), this, [this] { setView(View::Statistics); });
  view->addAction(tr("&Fit run"), this, [this] { timeline_->fitAll(); });
  view->addSeparator();
  view->addAction(tr("&Median step"), this, [this] {
    if (const TimelineData* d = timeline_->data()) timeline_->showStep(d->medianStep());
  });
  view->addAction(tr("&Next step\t]"), this, [this] { timeline_->showAdjacentStep(+1); });
  view->addAction(tr("&Previous step\t["), this, [this] { timeline_->showAdjacentStep(-1); });
  view->addAction(tr("S&lowest step\tL"), this, [this] { timeline_->showSlowestStep(); });
  QAction* idle_lanes = view->addAction(tr("Lanes &idle in the steps"));
  idle_lanes->setObjectName("idle_lanes");
  idle_lanes->setCheckable(true);
  connect(idle_lanes, &QAction::toggled, timeline_, &TimelineView::setShowIdleLanes);
  QAction* relative = view->addAction(tr("&Relative time axis"));
  relative->setObjectName("relative_time_axis");
  relative->setShortcut(Qt::Key_T);
  relative->setCheckable(true);
  connect(relative, &QAction::toggled, timeline_, &TimelineView::setRelativeAxis);
}

void MainWindow::addRunsOf(const std::string& path) {
  try {
    traces::TraceReader reader(path);
    runs_->setRunsOf(path, reader.runs());
  } catch (const std::exception&) {
    // The load itself reports the problem.
  }
}

bool MainWindow::openFile(const QString& path, qint64 run) {
  cancelLoad(kShown);  // its result would replace this one later
  try {
    showLoaded(path, loadRunFile(path.toStdString(), run));
    return true;
  } catch (const std::exception& e) {
    showError(tr("Cannot show %1:\n%2").arg(path, QString::fromUtf8(e.what())));
    return false;
  }
}

void MainWindow::openFileInBackground(const QString& path, qint64 run) { startLoad(kShown, path, run); }

void MainWindow::openCompareInBackground(const QString& path, qint64 run) { startLoad(kCompared, path, run); }

void MainWindow::startLoad(LoadTarget target, const QString& path, qint64 run) {
  cancelLoad(target);
  BackgroundLoad& load = loads_[target];
  const int generation = ++load.generation;
  load.cancel = std::make_shared<std::atomic<bool>>(false);
  load.pending = true;
  load_progress_->setValue(0);
  load_progress_->show();
  load_cancel_button_->show();
  const QString name = QFileInfo(path).fileName();
  const QString what = target == kShown ? tr("Opening %1").arg(name) : tr("Loading %1 to compare").arg(name);
  statusBar()->showMessage(what + "...");
  auto current = [this, target, generation] { return generation == loads_[target].generation; };
  RunLoadCallbacks callbacks;
  callbacks.progress = [this, current, what](int pct, const QString& stage) {
    if (!current()) return;
    load_progress_->setValue(pct);
    statusBar()->showMessage(what + ": " + stage);
  };
  callbacks.done = [this, current, target, path](std::shared_ptr<LoadedRun> loaded) {
    if (!current()) return;
    bool shown = true;
    try {
      if (target == kShown) showLoaded(path, std::move(*loaded));
      else showCompareLoaded(path, std::move(*loaded));
    } catch (const std::exception& e) {
      showError(tr("Cannot show %1:\n%2").arg(path, QString::fromUtf8(e.what())));
      shown = false;
    }
    endLoad(target, shown);
  };
  callbacks.failed = [this, current, target, path, what](const QString& message, bool cancelled) {
    if (!current()) return;
    if (cancelled) {
      statusBar()->showMessage(what + tr(" cancelled"));
    } else if (target == kShown) {
      showError(tr("Cannot show %1:\n%2").arg(path, message));
    } else {
      last_error_ = message;
      statusBar()->showMessage(tr("Cannot compare: %1").arg(message));
    }
    endLoad(target, false);
  };
  std::erase_if(load_workers_, [](const QPointer<QThread>& w) { return w.isNull(); });
  load_workers_.push_back(startRunLoad(this, path.toStdString(), run, load.cancel, std::move(callbacks)));
}

void MainWindow::cancelLoad() {
  const bool any = loadPending();
  cancelLoad(kShown);
  cancelLoad(kCompared);
  if (any) statusBar()->showMessage(tr("Loading cancelled"));
}

void MainWindow::cancelLoad(LoadTarget target) {
  BackgroundLoad& load = loads_[target];
  if (!load.pending) return;
  *load.cancel = true;
  // Whatever the worker still sends belongs to an older generation now.
  ++load.generation;
  endLoad(target, false);
}

void MainWindow::endLoad(LoadTarget target, bool shown) {
  loads_[target].pending = false;
  if (!loadPending()) {
    load_progress_->hide();
    load_cancel_button_->hide();
  }
  if (target == kShown) emit loadFinished(shown);
  else emit compareLoadFinished(shown);
}

void MainWindow::showLoaded(const QString& path, LoadedRun loaded) {
  addRunsOf(loaded.path);
  const QString label = QString::fromStdString(describeRun(loaded.info)) + " — " + QFileInfo(path).fileName();
  showRun(loaded.timeline, loaded.breakdown, label);
  current_path_ = QString::fromStdString(loaded.path);  // an imported file's database
  current_run_ = loaded.info.id;
  current_label_ = label;
  current_kind_ = QString::fromStdString(std::string(traces::toString(loaded.info.kind)));
  recompute_view_->setRun(current_path_, loaded.info, loaded.facts, loaded.schema_version, loaded.timeline);
  showTopologyOf(loaded);
  refreshComparison();
  // What the run's producer warned about stays in view until the next
  // message: a step that rests on unmeasured shapes or lost records
  // should not pass for a clean one.
  statusBar()->showMessage(loaded.warnings.empty() ? hints()
                                                   : tr("Warning about this run: %1").arg(warningText(loaded.warnings)));
}

bool MainWindow::openCompare(const QString& path, qint64 run) {
  cancelLoad(kCompared);  // its result would replace this one later
  try {
    showCompareLoaded(path, loadRunFile(path.toStdString(), run));
    return true;
  } catch (const std::exception& e) {
    last_error_ = QString::fromUtf8(e.what());
    statusBar()->showMessage(tr("Cannot compare: %1").arg(last_error_));
    return false;
  }
}

void MainWindow::showCompareLoaded(const QString& path, LoadedRun loaded) {
  addRunsOf(loaded.path);
  compare_ = loaded.timeline;
  compare_breakdown_ = std::move(loaded.breakdown);
  compare_path_ = QString::fromStdString(loaded.path);
  compare_run_ = loaded.info.id;
  compare_label_ = QString::fromStdString(describeRun(loaded.info)) + " — " + QFileInfo(path).fileName();
  compare_kind_ = QString::fromStdString(std::string(traces::toString(loaded.info.kind)));
  refreshComparison();
  QString text = tr("Comparing with %1").arg(QString::fromStdString(describeRun(loaded.info)));
  if (!loaded.warnings.empty()) text += tr(" — warning about that run: %1").arg(warningText(loaded.warnings));
  statusBar()->showMessage(text);
  onSliceSelected(timeline_->selection().track, timeline_->selection().index);
}

void MainWindow::showRun(std::shared_ptr<TimelineData> data, std::vector<RankBreakdown> breakdown,
                         const QString& title) {
  last_error_.clear();
  setWindowTitle(tr("tandem — %1").arg(title));
  current_path_.clear();
  current_run_ = -1;
  current_label_ = title;
  current_breakdown_ = breakdown;
  recompute_view_->clear(tr("This run did not come from a trace file with a job."));
  topology_view_->setMessage(tr("This run names no topology."));
  timeline_->setData(std::move(data));
  breakdown_->setRows(std::move(breakdown));
  refreshComparison();
  details_->setRows({});
  range_stats_->setRows({}, tr("name"));
  stats_dirty_ = true;
  refreshStats();
}

void MainWindow::showError(const QString& message) {
  last_error_ = message;
  timeline_->setData(nullptr);
  timeline_->setMessage(message);
  details_->setRows({});
  range_stats_->setRows({}, tr("name"));
  stats_->setRows({}, tr("op"));
  breakdown_->setRows({});
  statusBar()->showMessage(message.section('\n', -1));
}

void MainWindow::setView(View view) { tabs_->setCurrentIndex(int(view)); }

void MainWindow::showTopologyOf(const LoadedRun& run) {
  const std::string& topo = run.info.topology;
  if (topo.empty() && run.info.topology_yaml.empty()) {
    topology_view_->setMessage(tr("This run names no topology."));
    return;
  }
  try {
    // The topology the run was simulated on, as it stored it; runs from
    // before the store kept the text name a preset.
    sim::Topology t = run.info.topology_yaml.empty()
                          ? sim::loadTopology(topo)
                          : sim::parseTopologyYaml(run.info.topology_yaml, "<topology of run " +
                                                                                std::to_string(run.info.id) + ">");
    std::map<std::string, double> util;
    traces::TraceReader reader(run.path);
    const std::string prefix = "link.util.";
    for (const auto& c : reader.counters(run.info.id))
      if (c.name.rfind(prefix, 0) == 0) {
        double& u = util[c.name.substr(prefix.size())];
        u = std::max(u, c.value);
      }
    topology_view_->setTopology(std::move(t), std::move(util));
  } catch (const std::exception& e) {
    topology_view_->setMessage(
        tr("Cannot show topology %1: %2").arg(QString::fromStdString(topo), QString::fromUtf8(e.what())));
  }
}

void MainWindow::refreshComparison() {
  const TimelineData* d = timeline_->data();
  if (compare_ && d) {
    // One above the other; the same kind of run twice is told apart by "shown" and "compared".
    const bool same = current_kind_ == compare_kind_ || current_kind_.isEmpty();
    side_by_side_->setRuns(timeline_->sharedData(), compare_, same ? tr("shown") : current_kind_,
                           same ? tr("compared") : compare_kind_);
  } else {
    side_by_side_->setMessage(tr("Open a second run (Runs panel, or a second file on the command line) to see both "
                                 "on one time axis."));
  }
  const int generation = ++trace_compare_generation_;
  trace_compare_pending_ = false;
  if (!compare_ || !d) {
    compare_view_->setMessage(tr("Choose a run in the Runs panel and press \"Compare shown run with selected\"."));
    return;
  }
  if (compare_path_.isEmpty() || current_path_.isEmpty()) {
    compare_view_->setMessage(tr("Comparing needs both runs from trace files (as tandem compare)."));
    return;
  }
  compare_view_->setMessage(tr("Comparing as tandem compare…"));
  TraceComparisonRequest request;
  request.a_path = compare_path_.toStdString();
  request.a_run = compare_run_;
  request.b_path = current_path_.toStdString();
  request.b_run = current_run_;
  request.top_n = kCompareTasksShown;
  trace_compare_pending_ = true;
  std::erase_if(trace_compare_workers_, [](const QPointer<QThread>& w) { return w.isNull(); });
  trace_compare_workers_.push_back(startTraceComparison(
      this, request,
      [this, generation, a = compare_label_, b = current_label_](const traces::RunComparison& c) {
        if (generation != trace_compare_generation_) return;
        trace_compare_pending_ = false;
        compare_view_->setComparison(a, b, c);
      },
      [this, generation](const QString& message) {
        if (generation != trace_compare_generation_) return;
        trace_compare_pending_ = false;
        compare_view_->setMessage(tr("No comparison: %1").arg(message));
      }));
}

void MainWindow::selectRange(qint64 start_ns, qint64 end_ns) { onRangeSelected(start_ns, end_ns); }

void MainWindow::refreshStats() {
  // Statistics over a whole run can take a moment on ten million slices, so
  // they are computed when the tab is looked at, once per run and grouping.
  if (!stats_dirty_ || tabs_->currentIndex() != 1) return;
  stats_dirty_ = false;
  const TimelineData* d = timeline_->data();
  if (!d) return;
  const int g = group_box_->currentIndex();
  const StatsGroup group = g == 0 ? StatsGroup::Op : g == 1 ? StatsGroup::Name : StatsGroup::Phase;
  const auto [from, to] = whole_run_box_->isChecked() ? std::make_pair(INT64_MIN, INT64_MAX) : d->stepsSpan();
  stats_->setRows(sliceStats(*d, group, from, to), group_box_->currentText().mid(3));
}

void MainWindow::onSliceSelected(int track, qint64 index) {
  const TimelineData* d = timeline_->data();
  if (!d || track < 0 || index < 0) {
    details_->setRows({});
    return;
  }
  details_->setRows(sliceDetails(*d, track, index, compare_.get()));
}

void MainWindow::onRangeSelected(qint64 start_ns, qint64 end_ns) {
  const TimelineData* d = timeline_->data();
  if (!d) return;
  range_stats_->setRows(sliceStats(*d, StatsGroup::Name, start_ns, end_ns), tr("name"));
  range_label_->setText(tr("%1 to %2 (%3): %4 groups")
                            .arg(QString::fromStdString(formatDuration(start_ns - d->begin_ns)),
                                 QString::fromStdString(formatDuration(end_ns - d->begin_ns)),
                                 QString::fromStdString(formatDuration(end_ns - start_ns)))
                            .arg(range_stats_->rowCount()));
}

void MainWindow::onOpenDialog() {
  const QString path =
      QFileDialog::getOpenFileName(this, tr("Open trace"), {}, tr("Traces (*.sqlite *.db);;All files (*)"));
  if (!path.isEmpty()) openFileInBackground(path);
}

void MainWindow::onRunActivated(const QModelIndex& index) {
  auto* proxy = qobject_cast<QSortFilterProxyModel*>(runs_view_->model());
  const QModelIndex src = proxy ? proxy->mapToSource(index) : index;
  const auto& e = runs_->entry(src.row());
  openFileInBackground(QString::fromStdString(e.path), e.info.id);
}

void MainWindow::onCompareWithSelectedRun() {
  const QModelIndex current = runs_view_->currentIndex();
  if (!current.isValid()) return;
  auto* proxy = qobject_cast<QSortFilterProxyModel*>(runs_view_->model());
  const QModelIndex src = proxy ? proxy->mapToSource(current) : current;
  const auto& e = runs_->entry(src.row());
  openCompareInBackground(QString::fromStdString(e.path), e.info.id);
}

}  // namespace tandem::gui
