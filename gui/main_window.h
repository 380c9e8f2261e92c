#pragma once
// The main window: the timeline in the middle; details of the selected slice
// on the right; the aggregate of a selected range, the run browser and the
// statistics below. Files are opened through the trace store; whatever goes
// wrong (not a database, foreign schema, empty run) is shown as a message in
// the window, never a crash.

#include <QMainWindow>
#include <QPointer>
#include <atomic>
#include <memory>
#include <vector>

#include "gui/run_loader.h"
#include "gui/timeline_data.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QProgressBar;
class QToolButton;
class QTabWidget;
class QTableView;
class QThread;

namespace tandem::gui {

class BreakdownModel;
class CompareView;
class SideBySideView;
class RecomputeView;
class TopologyView;
class DetailsModel;
class KernelStatsModel;
class RunListModel;
class TimelineView;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  enum class View { Timeline, Statistics, Recompute, Topology, Compare, SideBySide };
  SideBySideView* sideBySideView() const { return side_by_side_; }

  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Opens run `run` of a trace file (-1: its default run). On failure the
  // reason is shown in the window and returned by lastError().
  bool openFile(const QString& path, qint64 run = -1);
  // The same on a worker thread, with progress and a Cancel button in the
  // status bar; the shown run stays usable meanwhile. A load of the shown
  // run still running is cancelled. Emits loadFinished when the run is
  // shown or the load failed or was cancelled.
  void openFileInBackground(const QString& path, qint64 run = -1);
  // openCompare on a worker thread, the same way; emits compareLoadFinished.
  void openCompareInBackground(const QString& path, qint64 run = -1);
  // Cancels both background loads, if running.
  void cancelLoad();
  bool loadPending() const { return loads_[0].pending || loads_[1].pending; }
  // Loads a run to compare the shown run against (details show the
  // counterpart of the selected task there).
  bool openCompare(const QString& path, qint64 run = -1);
  // Shows a run that did not come from a file (generated runs, tests).
  void showRun(std::shared_ptr<TimelineData> data, std::vector<RankBreakdown> breakdown, const QString& title);
  void showError(const QString& message);
  QString lastError() const { return last_error_; }

  void setView(View view);
  // Selects a time range as a shift-drag would (fills the aggregate table).
  void selectRange(qint64 start_ns, qint64 end_ns);

  TimelineView* timeline() const { return timeline_; }
  DetailsModel* details() const { return details_; }
  KernelStatsModel* rangeStats() const { return range_stats_; }
  KernelStatsModel* stats() const { return stats_; }
  BreakdownModel* breakdown() const { return breakdown_; }
  RunListModel* runs() const { return runs_; }
  RecomputeView* recomputeView() const { return recompute_view_; }
  TopologyView* topologyView() const { return topology_view_; }
  CompareView* compareView() const { return compare_view_; }
  // Whether the trace store's comparison is still being computed (a
  // screenshot of the compare view waits for it).
  bool traceComparisonPending() const { return trace_compare_pending_; }

 signals:
  // A background load ended: `shown` when its run is now the shown one
  // (loadFinished) or the compared one (compareLoadFinished).
  void loadFinished(bool shown);
  void compareLoadFinished(bool shown);

 private slots:
  void onSliceSelected(int track, qint64 index);
  void onRangeSelected(qint64 start_ns, qint64 end_ns);
  void onOpenDialog();
  void onRunActivated(const QModelIndex& index);
  void onCompareWithSelectedRun();
  void refreshStats();

 private:
  // The status bar's usage hints (shown when a run has nothing to warn about).
  QString hints() const;
  // A run's warnings (LoadedRun::warnings, not empty) in one line: the first
  // and how many more.
  QString warningText(const std::vector<traces::StatRow>& warnings) const;
  void buildMenus();
  // The second halves of openFile and openCompare: show a loaded run (or
  // compare with it) and its warnings.
  void showLoaded(const QString& path, LoadedRun loaded);
  void showCompareLoaded(const QString& path, LoadedRun loaded);
  // Background loads: of the shown run (0) and of the compared run (1).
  enum LoadTarget { kShown = 0, kCompared = 1 };
  void startLoad(LoadTarget target, const QString& path, qint64 run);
  void cancelLoad(LoadTarget target);
  void endLoad(LoadTarget target, bool shown);
  void addRunsOf(const std::string& path);
  void showTopologyOf(const LoadedRun& run);
  void refreshComparison();

  TimelineView* timeline_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  QLabel* range_label_ = nullptr;
  QComboBox* group_box_ = nullptr;
  QCheckBox* whole_run_box_ = nullptr;
  QTableView* runs_view_ = nullptr;
  DetailsModel* details_ = nullptr;
  KernelStatsModel* range_stats_ = nullptr;
  KernelStatsModel* stats_ = nullptr;
  BreakdownModel* breakdown_ = nullptr;
  RunListModel* runs_ = nullptr;
  RecomputeView* recompute_view_ = nullptr;
  TopologyView* topology_view_ = nullptr;
  CompareView* compare_view_ = nullptr;
  SideBySideView* side_by_side_ = nullptr;
  QString current_kind_, compare_kind_;  // "real", "simulated", ...: the side-by-side labels
  // The shown run (when it came from a file) and the run compared with it.
  QString current_path_;
  qint64 current_run_ = -1;
  QString current_label_;
  std::vector<RankBreakdown> current_breakdown_;
  std::shared_ptr<TimelineData> compare_;
  std::vector<RankBreakdown> compare_breakdown_;
  QString compare_label_;
  // The compared run's file and id (empty for runs not from a file), and the
  // trace store's comparison being computed: a result that arrives after
  // the runs changed (another generation) is dropped.
  QString compare_path_;
  qint64 compare_run_ = -1;
  std::vector<QPointer<QThread>> trace_compare_workers_;  // started, not yet deleted
  int trace_compare_generation_ = 0;
  bool trace_compare_pending_ = false;
  // The background loads: cancel flag and generation (a result of an older
  // generation is dropped) per target, their workers, and the status bar's
  // progress widgets (the latest progress of either load).
  struct BackgroundLoad {
    std::shared_ptr<std::atomic<bool>> cancel;
    int generation = 0;
    bool pending = false;
  };
  BackgroundLoad loads_[2];
  std::vector<QPointer<QThread>> load_workers_;  // started, not yet deleted
  QProgressBar* load_progress_ = nullptr;
  QToolButton* load_cancel_button_ = nullptr;
  bool stats_dirty_ = true;
  QString last_error_;
};

}  // namespace tandem::gui
