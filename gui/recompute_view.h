#pragma once
// Recompute view: per layer the recompute policy the run was planned with,
// the activation memory it keeps and saves, the extra FLOPs, and the extra
// time the run spent recomputing that layer (as simulated, or measured from
// a profile's timeline). All of it is read from the facts the run recorded
// (traces' PlanFacts), never re-planned: a run shows the decisions it ran
// with, whatever today's planner would choose. A chart puts memory against
// time. The policy column is editable per layer (and a control sets all
// layers at once); re-planning and re-simulating with the table's choices is
// a what-if on a worker thread, with progress, and the result opens as a new
// run beside the old one.

#include <QAbstractTableModel>
#include <QStringList>
#include <QStyledItemDelegate>
#include <QWidget>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/ir/types.h"
#include "gui/timeline_data.h"
#include "gui/what_if.h"
#include "traces/store/trace_model.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QThread;

namespace tandem::gui {

// Every recompute policy's spelling, for the menus that choose one.
QStringList recomputePolicyChoices();

struct RecomputeRow {
  int layer = 0;
  RecomputePolicy policy = RecomputePolicy::None;
  int64_t bytes_kept = 0;
  int64_t bytes_saved = 0;
  double extra_flops = 0;
  int64_t extra_ns = 0;  // recompute time of the layer per step on rank 0, from the run
};

// Rows of a run's recorded recompute decisions, with the time the run
// recorded for each layer or, where it recorded none (a real run), the time
// its timeline spent recomputing the layer on rank 0 per step.
std::vector<RecomputeRow> recomputeRows(const traces::PlanFacts& facts, const TimelineData* run);

// The job overrides that plan exactly the given per-layer policies
// ("recompute.layers.3=full", ...).
std::vector<std::string> recomputeOverrides(const std::map<int, RecomputePolicy>& policies);

class RecomputeModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Layer, Policy, Kept, Saved, ExtraFlops, ExtraTime, ColumnCount };
  using QAbstractTableModel::QAbstractTableModel;
  void setRows(std::vector<RecomputeRow> rows);
  const std::vector<RecomputeRow>& rows() const { return rows_; }
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;
  // The policy column is editable: "none", "selective" or "full".
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
  void setAllPolicies(RecomputePolicy policy);
  // The policy each layer has in the table now (edited or as planned).
  std::map<int, RecomputePolicy> policies() const;

 private:
  std::vector<RecomputeRow> rows_;
};

// Edits the policy column with a drop-down of the three policies.
class PolicyDelegate : public QStyledItemDelegate {
  Q_OBJECT
 public:
  using QStyledItemDelegate::QStyledItemDelegate;
  QWidget* createEditor(QWidget* parent, const QStyleOptionViewItem& option, const QModelIndex& index) const override;
  void setEditorData(QWidget* editor, const QModelIndex& index) const override;
  void setModelData(QWidget* editor, QAbstractItemModel* model, const QModelIndex& index) const override;
};

class RecomputeChart : public QWidget {
  Q_OBJECT
 public:
  explicit RecomputeChart(QWidget* parent = nullptr);
  void setRows(std::vector<RecomputeRow> rows);

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  std::vector<RecomputeRow> rows_;
};

class RecomputeView : public QWidget {
  Q_OBJECT
 public:
  explicit RecomputeView(QWidget* parent = nullptr);
  ~RecomputeView() override;
  // The run to explain: its row (job, topology), the plan facts it recorded,
  // the schema of its file (to say why facts are missing) and its timeline;
  // `path` is the file new what-if runs are appended to.
  void setRun(const QString& path, const traces::RunInfo& info, const traces::PlanFacts& facts, int schema_version,
              std::shared_ptr<const TimelineData> timeline);
  void clear(const QString& why);
  RecomputeModel* model() const { return model_; }
  // The line above the table: the job, what recompute keeps and costs, the
  // planned peak and what a GPU run needs free per rank.
  QString summaryText() const;
  // Starts the re-plan and re-simulation with `policy` for every layer.
  void simulatePolicy(RecomputePolicy policy);
  // Starts it with the table's per-layer policies.
  void simulateTable();
  bool busy() const { return worker_ != nullptr; }

 signals:
  void runCreated(const QString& path, qint64 run_id);
  void failed(const QString& message);

 private:
  QLabel* summary_ = nullptr;
  QComboBox* policy_ = nullptr;
  QLineEdit* topology_ = nullptr;
  QPushButton* run_button_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* status_ = nullptr;
  RecomputeModel* model_ = nullptr;
  RecomputeChart* chart_ = nullptr;
  QString path_;
  QString job_yaml_;
  QString run_topology_;       // the run's topology name ...
  QString run_topology_yaml_;  // ... and its text, used while the name is kept
  QThread* worker_ = nullptr;
};

}  // namespace tandem::gui
