#include "gui/compare_view.h"

#include <QHeaderView>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>
#include <cmath>

#include "gui/item_models.h"
#include "gui/timeline_math.h"

namespace tandem::gui {

namespace {

QString dur(double ns) { return QString::fromStdString(formatDuration(int64_t(std::llround(ns)))); }
QString signedDur(double ns) { return (ns >= 0 ? "+" : "-") + dur(std::fabs(ns)); }
QString ms(double ns) { return QString::asprintf("%.3f ms", ns / 1e6); }
QString us(double ns) { return QString::asprintf("%.1f us", ns / 1e3); }
QString share(double part, double whole) {
  return whole > 0 ? QString::asprintf("%.1f%%", 100.0 * part / whole) : QString("-");
}
double ratio(double part, double whole) { return whole > 0 ? part / whole : 0.0; }
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

std::vector<CompareSummaryRow> summaryRows(const traces::RunComparison& c) {
  return {{"step", c.a.step_ns, c.b.step_ns},
          {"compute", c.a.compute_ns, c.b.compute_ns},
          {"exposed comm", c.a.exposed_comm_ns, c.b.exposed_comm_ns},
          {"hidden comm", c.a.hidden_comm_ns, c.b.hidden_comm_ns},
          {"recompute", c.a.recompute_ns, c.b.recompute_ns},
          {"idle", c.a.idle_ns, c.b.idle_ns}};
}

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
  static const char* titles[] = {"per rank and step (median)", "A", "B", "B - A", "change"};
  if (o != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount) return {};
  return tr(titles[section]);
}

void TaskDeltaModel::setRows(std::vector<traces::TaskDelta> rows) {
  beginResetModel();
  rows_ = std::move(rows);
  endResetModel();
}
int TaskDeltaModel::rowCount(const QModelIndex& p) const { return p.isValid() ? 0 : int(rows_.size()); }
int TaskDeltaModel::columnCount(const QModelIndex& p) const { return p.isValid() ? 0 : ColumnCount; }

QVariant TaskDeltaModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(rows_.size())) return {};
  const auto& r = rows_[size_t(index.row())];
  const double delta = r.b_ns - r.a_ns;
  if (role == Qt::TextAlignmentRole) return align(index.column(), MeanA);
  if (role == Qt::ForegroundRole && index.column() >= Delta) return deltaColor(delta);
  if (role != Qt::DisplayRole && role != kSortRole) return {};
  const bool raw = role == kSortRole;
  switch (index.column()) {
    case Rank: return r.rank;
    case Task: return qlonglong(r.task_id);
    case Name: return QString::fromStdString(r.name);
    case Op: return QString::fromStdString(r.op);
    case MeanA: return raw ? QVariant(r.a_ns) : QVariant(dur(r.a_ns));
    case MeanB: return raw ? QVariant(r.b_ns) : QVariant(dur(r.b_ns));
    case Delta: return raw ? QVariant(delta) : QVariant(signedDur(delta));
    case DeltaPct: return raw ? QVariant(r.a_ns > 0 ? delta / r.a_ns : 0.0) : QVariant(pct(r.a_ns, r.b_ns));
  }
  return {};
}

QVariant TaskDeltaModel::headerData(int section, Qt::Orientation o, int role) const {
  static const char* titles[] = {"rank", "task", "name", "op", "A per step", "B per step", "B - A", "change"};
  if (o != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount) return {};
  return tr(titles[section]);
}

void OpErrorModel::setRows(std::vector<traces::OpError> rows) {
  beginResetModel();
  rows_ = std::move(rows);
  endResetModel();
}
int OpErrorModel::rowCount(const QModelIndex& p) const { return p.isValid() ? 0 : int(rows_.size()); }
int OpErrorModel::columnCount(const QModelIndex& p) const { return p.isValid() ? 0 : ColumnCount; }

QVariant OpErrorModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(rows_.size())) return {};
  const auto& r = rows_[size_t(index.row())];
  if (role == Qt::TextAlignmentRole) return align(index.column(), Tasks);
  if (role != Qt::DisplayRole && role != kSortRole) return {};
  const bool raw = role == kSortRole;
  auto percent = [raw](double v) { return raw ? QVariant(v) : QVariant(QString::asprintf("%.1f%%", v)); };
  switch (index.column()) {
    case Op: return QString::fromStdString(r.op);
    case Tasks: return qlonglong(r.tasks);
    case A: return raw ? QVariant(r.a_total_ns) : QVariant(ms(r.a_total_ns));
    case B: return raw ? QVariant(r.b_total_ns) : QVariant(ms(r.b_total_ns));
    case Median: return percent(r.median_abs_pct);
    case P90: return percent(r.p90_abs_pct);
    case Max: return percent(r.max_abs_pct);
    // "-" where the op kind has no such task (sorted below every figure).
    case Alone:
      if (r.alone_tasks == 0) return raw ? QVariant(-1.0) : QVariant(QStringLiteral("-"));
      return raw ? QVariant(r.alone_median_abs_pct)
                 : QVariant(QString::asprintf("%.1f%% (%lld)", r.alone_median_abs_pct, (long long)r.alone_tasks));
    case Beside:
      if (r.beside_tasks == 0) return raw ? QVariant(-1.0) : QVariant(QStringLiteral("-"));
      return raw ? QVariant(r.beside_median_abs_pct)
                 : QVariant(QString::asprintf("%.1f%% (%lld)", r.beside_median_abs_pct, (long long)r.beside_tasks));
  }
  return {};
}

QVariant OpErrorModel::headerData(int section, Qt::Orientation o, int role) const {
  static const char* titles[] = {"op",  "tasks", "A per step", "B per step", "median |B-A|/A", "p90", "max",
                                 "alone", "beside"};
  if (o != Qt::Horizontal || section < 0 || section >= ColumnCount) return {};
  if (role == Qt::ToolTipRole && section == Alone)
    return tr("Median error of the tasks that ran without another stream's GPU work beside them in both runs "
              "(the cost model's error), and how many");
  if (role == Qt::ToolTipRole && section == Beside)
    return tr("Median error of the tasks that shared the GPU with another stream's kernels in either run "
              "(the cost model's and kernel sharing's error), and how many");
  if (role != Qt::DisplayRole) return {};
  return tr(titles[section]);
}

void StreamWaitModel::setRows(std::vector<traces::StreamWaitDelta> rows) {
  beginResetModel();
  rows_ = std::move(rows);
  endResetModel();
}
int StreamWaitModel::rowCount(const QModelIndex& p) const { return p.isValid() ? 0 : int(rows_.size()); }
int StreamWaitModel::columnCount(const QModelIndex& p) const { return p.isValid() ? 0 : ColumnCount; }

QVariant StreamWaitModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(rows_.size())) return {};
  const auto& r = rows_[size_t(index.row())];
  if (role == Qt::TextAlignmentRole) return align(index.column(), A);
  if (role == Qt::ForegroundRole && index.column() == Delta) return deltaColor(r.b_ns - r.a_ns);
  if (role != Qt::DisplayRole && role != kSortRole) return {};
  const bool raw = role == kSortRole;
  switch (index.column()) {
    case Stream: return QString("s%1 %2").arg(r.stream).arg(QString::fromStdString(r.name));
    case A: return raw ? QVariant(r.a_ns) : QVariant(us(r.a_ns));
    case B: return raw ? QVariant(r.b_ns) : QVariant(us(r.b_ns));
    case Delta: return raw ? QVariant(r.b_ns - r.a_ns) : QVariant(signedDur(r.b_ns - r.a_ns));
    case AFilled: return raw ? QVariant(ratio(r.a_filled_ns, r.a_ns)) : QVariant(share(r.a_filled_ns, r.a_ns));
    case BFilled: return raw ? QVariant(ratio(r.b_filled_ns, r.b_ns)) : QVariant(share(r.b_filled_ns, r.b_ns));
  }
  return {};
}

QVariant StreamWaitModel::headerData(int section, Qt::Orientation o, int role) const {
  static const char* titles[] = {"stream", "A waits per step", "B waits per step", "B - A", "A filled", "B filled"};
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
  task_view->horizontalHeader()->resizeSection(TaskDeltaModel::Name, 300);
  task_view->setAlternatingRowColors(true);
  auto* lower = new QTabWidget(split);
  lower->addTab(task_view, tr("Tasks"));
  op_errors_ = new OpErrorModel(this);
  stream_waits_ = new StreamWaitModel(this);
  auto table = [&](QAbstractTableModel* model, int first_width) {
    auto* sorted = new QSortFilterProxyModel(this);
    sorted->setSourceModel(model);
    sorted->setSortRole(kSortRole);
    auto* view = new QTableView(lower);
    view->setModel(sorted);
    view->setSortingEnabled(true);
    view->sortByColumn(-1, Qt::AscendingOrder);
    view->verticalHeader()->hide();
    view->verticalHeader()->setDefaultSectionSize(20);
    view->horizontalHeader()->setStretchLastSection(true);
    view->horizontalHeader()->resizeSection(0, first_width);
    view->setAlternatingRowColors(true);
    return view;
  };
  lower->addTab(table(op_errors_, 180), tr("Error by op"));
  lower->addTab(table(stream_waits_, 220), tr("Stream waits"));
  split->addWidget(summary_view);
  split->addWidget(lower);
  split->setSizes({180, 500});
  trace_summary_ = new QLabel(this);
  trace_summary_->setWordWrap(true);
  trace_summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(trace_summary_);
  layout->addWidget(split, 1);
  setMessage(tr("Choose a run in the Runs panel and press \"Compare shown run with selected\"."));
}

void CompareView::setMessage(const QString& message) {
  title_->setText(message);
  verdict_->clear();
  trace_summary_->setText(message);
  summary_->setRows({});
  tasks_->setRows({});
  op_errors_->setRows({});
  stream_waits_->setRows({});
}

void CompareView::setComparison(const QString& a_label, const QString& b_label, const traces::RunComparison& c) {
  title_->setText(tr("A: %1    B: %2").arg(a_label, b_label));
  verdict_->setText(QString::fromStdString(c.verdict));
  auto pp = [](double a, double b) { return QString::asprintf("%.1f%% / %.1f%% (%+.1f points)", a, b, b - a); };
  trace_summary_->setText(tr("As tandem compare (tasks by %1: %2 matched, %3 only in A, %4 only in B): "
                             "step (median of ranks and steps) %5 / %6, %7; overlap A / B %8; exposed "
                             "communication %9 / %10.")
                              .arg(QString::fromStdString(c.matched_by))
                              .arg(c.matched)
                              .arg(c.only_a)
                              .arg(c.only_b)
                              .arg(ms(c.a.step_ns), ms(c.b.step_ns), QString::asprintf("%+.2f%%", c.step_error_pct),
                                   pp(c.a.overlap_pct, c.b.overlap_pct), ms(c.a.exposed_comm_ns),
                                   ms(c.b.exposed_comm_ns)));
  summary_->setRows(summaryRows(c));
  tasks_->setRows(c.top_tasks);
  op_errors_->setRows(c.by_op);
  stream_waits_->setRows(c.stream_waits);
}

QString CompareView::traceComparisonText() const { return trace_summary_->text(); }

}  // namespace tandem::gui
