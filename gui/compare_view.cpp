#include "gui/compare_view.h"

#include <QHeaderView>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <cmath>

#include "gui/item_models.h"
#include "gui/timeline_math.h"

namespace tandem::gui {

namespace {

QString dur(double ns) { return QString::fromStdString(formatDuration(int64_t(std::llround(ns)))); }
QString signedDur(double ns) { return (ns >= 0 ? "+" : "-") + dur(std::fabs(ns)); }
QString pct(double a, double b) {
  if (a == 0) return b == 0 ? QString("0%") : QString("new");
  return QString::asprintf("%+.1f%%", 100.0 * (b - a) / a);
}
QVariant align(int column, int first_numeric) {
  return column >= first_numeric ? QVariant(int(Qt::AlignRight | Qt::AlignVCenter)) : QVariant();
}
// Slower in B is red, faster green: the colour says which way it went.
QVariant deltaColor(double d) {
  if (std::fabs(d) < 1) return {};
  return d > 0 ? QColor(0xC6, 0x28, 0x28) : QColor(0x2E, 0x7D, 0x32);
}

}  // namespace

void CompareSummaryModel::setRows(std::vector<CompareSummaryRow> rows) {
  beginResetModel();
  rows_ = std::move(rows);
  endResetModel();
}
int CompareSummaryModel::rowCount(const QModelIndex& p) const { return p.isValid() ? 0 : int(rows_.size()); }
int CompareSummaryModel::columnCount(const QModelIndex& p) const { return p.isValid() ? 0 : ColumnCount; }

QVariant CompareSummaryModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(rows_.size())) return {};
  const auto& r = rows_[size_t(index.row())];
  if (role == Qt::TextAlignmentRole) return align(index.column(), A);
  if (role == Qt::ForegroundRole && index.column() >= Delta) return deltaColor(r.b_ns - r.a_ns);
  if (role != Qt::DisplayRole && role != kSortRole) return {};
  const bool raw = role == kSortRole;
  switch (index.column()) {
    case Metric: return QString::fromStdString(r.metric);
    case A: return raw ? QVariant(r.a_ns) : QVariant(dur(r.a_ns));
    case B: return raw ? QVariant(r.b_ns) : QVariant(dur(r.b_ns));
    case Delta: return raw ? QVariant(r.b_ns - r.a_ns) : QVariant(signedDur(r.b_ns - r.a_ns));
    case DeltaPct: return pct(r.a_ns, r.b_ns);
  }
  return {};
}

QVariant CompareSummaryModel::headerData(int section, Qt::Orientation o, int role) const {
  static const char* titles[] = {"per step (rank 0)", "A", "B", "B - A", "change"};
  if (o != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount) return {};
  return tr(titles[section]);
}

void TaskDeltaModel::setRows(std::vector<TaskDelta> rows) {
  beginResetModel();
  rows_ = std::move(rows);
  endResetModel();
}
int TaskDeltaModel::rowCount(const QModelIndex& p) const { return p.isValid() ? 0 : int(rows_.size()); }
int TaskDeltaModel::columnCount(const QModelIndex& p) const { return p.isValid() ? 0 : ColumnCount; }

QVariant TaskDeltaModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(rows_.size())) return {};
  const auto& r = rows_[size_t(index.row())];
  if (role == Qt::TextAlignmentRole) return align(index.column(), MeanA);
  if (role == Qt::ForegroundRole && index.column() >= Delta) return deltaColor(r.delta_ns());
  if (role != Qt::DisplayRole && role != kSortRole) return {};
  const bool raw = role == kSortRole;
  switch (index.column()) {
    case Task: return r.task_id;
    case Name: return QString::fromStdString(r.name);
    case Phase: return QString::fromStdString(r.phase);
    case Stream: return QString::fromStdString(r.stream);
    case MeanA: return raw ? QVariant(r.mean_a_ns) : QVariant(dur(r.mean_a_ns));
    case MeanB: return raw ? QVariant(r.mean_b_ns) : QVariant(dur(r.mean_b_ns));
    case Delta: return raw ? QVariant(r.delta_ns()) : QVariant(signedDur(r.delta_ns()));
    case DeltaPct:
      return raw ? QVariant(r.mean_a_ns > 0 ? r.delta_ns() / r.mean_a_ns : 0.0)
                 : QVariant(pct(r.mean_a_ns, r.mean_b_ns));
  }
  return {};
}

QVariant TaskDeltaModel::headerData(int section, Qt::Orientation o, int role) const {
  static const char* titles[] = {"task", "name", "phase", "stream", "mean A", "mean B", "B - A", "change"};
  if (o != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount) return {};
  return tr(titles[section]);
}

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  title_ = new QLabel(this);
  verdict_ = new QLabel(this);
  verdict_->setWordWrap(true);
  QFont bold = verdict_->font();
  bold.setBold(true);
  verdict_->setFont(bold);
  layout->addWidget(title_);
  layout->addWidget(verdict_);
  summary_ = new CompareSummaryModel(this);
  tasks_ = new TaskDeltaModel(this);
  auto* split = new QSplitter(Qt::Vertical, this);
  auto* summary_view = new QTableView(split);
  summary_view->setModel(summary_);
  summary_view->verticalHeader()->hide();
  summary_view->verticalHeader()->setDefaultSectionSize(20);
  summary_view->horizontalHeader()->setStretchLastSection(true);
  summary_view->horizontalHeader()->resizeSection(0, 180);
  auto* proxy = new QSortFilterProxyModel(this);
  proxy->setSourceModel(tasks_);
  proxy->setSortRole(kSortRole);
  auto* task_view = new QTableView(split);
  task_view->setModel(proxy);
  task_view->setSortingEnabled(true);
  task_view->sortByColumn(-1, Qt::AscendingOrder);
  task_view->verticalHeader()->hide();
  task_view->verticalHeader()->setDefaultSectionSize(20);
  task_view->horizontalHeader()->setStretchLastSection(true);
  task_view->horizontalHeader()->resizeSection(1, 300);
  task_view->setAlternatingRowColors(true);
  split->addWidget(summary_view);
  split->addWidget(task_view);
  split->setSizes({180, 500});
  layout->addWidget(split, 1);
  setMessage(tr("Choose a run in the Runs panel and press \"Compare shown run with selected\"."));
}

void CompareView::setMessage(const QString& message) {
  title_->setText(message);
  verdict_->clear();
  summary_->setRows({});
  tasks_->setRows({});
}

void CompareView::setComparison(const QString& a_label, const QString& b_label, Comparison c) {
  title_->setText(tr("A: %1    B: %2    (%3 tasks matched, %4 only in A, %5 only in B)")
                      .arg(a_label, b_label)
                      .arg(c.matched)
                      .arg(c.only_a)
                      .arg(c.only_b));
  verdict_->setText(QString::fromStdString(c.verdict));
  summary_->setRows(std::move(c.summary));
  tasks_->setRows(std::move(c.tasks));
}

}  // namespace tandem::gui
