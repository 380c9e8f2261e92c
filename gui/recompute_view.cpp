#include "gui/recompute_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QSplitter>
#include <QTableView>
#include <QThread>
#include <QVBoxLayout>
#include <algorithm>
#include <map>

#include "gui/item_models.h"
#include "gui/run_loader.h"
#include "gui/timeline_math.h"
#include "gui/timeline_palette.h"
#include "gui/what_if_worker.h"

namespace tandem::gui {

namespace {

QString mib(int64_t bytes) { return QString::number(double(bytes) / double(1 << 20), 'f', 1) + " MiB"; }

}  // namespace

std::vector<RecomputeRow> recomputeRows(const traces::PlanFacts& facts, const TimelineData* run) {
  std::map<int, int64_t> extra;
  if (run) {
    for (const Track& t : run->tracks) {
      if (t.rank != 0) continue;
      for (size_t i = 0; i < t.size(); ++i)
        if (t.phase[i] == uint8_t(Phase::Recompute)) extra[t.layer[i]] += t.end_ns[i] - t.start_ns[i];
    }
    const int64_t steps = std::max<int64_t>(1, int64_t(run->steps.size()));
    for (auto& [layer, ns] : extra) ns /= steps;
  }
  std::vector<RecomputeRow> rows;
  for (const traces::RecomputeRow& d : facts.recompute) {
    const int64_t measured = extra.count(d.layer) ? extra[d.layer] : 0;
    rows.push_back({d.layer, parseRecomputePolicy(d.policy).value_or(RecomputePolicy::None), d.bytes_kept,
                    d.bytes_saved, d.extra_flops, d.extra_ns >= 0 ? d.extra_ns : measured});
  }
  return rows;
}

std::vector<std::string> recomputeOverrides(const std::map<int, RecomputePolicy>& policies) {
  std::vector<std::string> out;
  for (const auto& [layer, policy] : policies)
    out.push_back("recompute.layers." + std::to_string(layer) + "=" + std::string(toString(policy)));
  return out;
}

// ---------------------------------------------------------------- model

void RecomputeModel::setRows(std::vector<RecomputeRow> rows) {
  beginResetModel();
  rows_ = std::move(rows);
  endResetModel();
}

int RecomputeModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : int(rows_.size()); }
int RecomputeModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant RecomputeModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(rows_.size())) return {};
  const auto& r = rows_[size_t(index.row())];
  if (role == Qt::TextAlignmentRole)
    return index.column() == Policy ? QVariant() : QVariant(int(Qt::AlignRight | Qt::AlignVCenter));
  if (role == Qt::EditRole && index.column() == Policy) return QString::fromStdString(std::string(toString(r.policy)));
  if (role != Qt::DisplayRole && role != kSortRole) return {};
  const bool raw = role == kSortRole;
  switch (index.column()) {
    case Layer: return r.layer;
    case Policy: return QString::fromStdString(std::string(toString(r.policy)));
    case Kept: return raw ? QVariant(qlonglong(r.bytes_kept)) : QVariant(mib(r.bytes_kept));
    case Saved: return raw ? QVariant(qlonglong(r.bytes_saved)) : QVariant(mib(r.bytes_saved));
    case ExtraFlops: return raw ? QVariant(r.extra_flops) : QVariant(QString::number(r.extra_flops / 1e9, 'f', 1));
    case ExtraTime:
      return raw ? QVariant(qlonglong(r.extra_ns)) : QVariant(QString::fromStdString(formatDuration(r.extra_ns)));
  }
  return {};
}

Qt::ItemFlags RecomputeModel::flags(const QModelIndex& index) const {
  Qt::ItemFlags f = QAbstractTableModel::flags(index);
  if (index.isValid() && index.column() == Policy) f |= Qt::ItemIsEditable;
  return f;
}

bool RecomputeModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (!index.isValid() || index.column() != Policy || role != Qt::EditRole || index.row() >= int(rows_.size()))
    return false;
  const auto policy = parseRecomputePolicy(value.toString().trimmed().toStdString());
  if (!policy) return false;
  rows_[size_t(index.row())].policy = *policy;
  emit dataChanged(index, index, {Qt::DisplayRole, Qt::EditRole});
  return true;
}

void RecomputeModel::setAllPolicies(RecomputePolicy policy) {
  for (auto& r : rows_) r.policy = policy;
  if (!rows_.empty()) emit dataChanged(index(0, Policy), index(int(rows_.size()) - 1, Policy));
}

std::map<int, RecomputePolicy> RecomputeModel::policies() const {
  std::map<int, RecomputePolicy> out;
  for (const auto& r : rows_) out[r.layer] = r.policy;
  return out;
}

QStringList recomputePolicyChoices() {
  QStringList out;
  for (std::string_view name : recomputePolicyNames()) out << QString::fromUtf8(name.data(), int(name.size()));
  return out;
}

QWidget* PolicyDelegate::createEditor(QWidget* parent, const QStyleOptionViewItem&, const QModelIndex&) const {
  auto* box = new QComboBox(parent);
  box->addItems(recomputePolicyChoices());
  return box;
}

void PolicyDelegate::setEditorData(QWidget* editor, const QModelIndex& index) const {
  static_cast<QComboBox*>(editor)->setCurrentText(index.data(Qt::EditRole).toString());
}

void PolicyDelegate::setModelData(QWidget* editor, QAbstractItemModel* model, const QModelIndex& index) const {
  model->setData(index, static_cast<QComboBox*>(editor)->currentText(), Qt::EditRole);
}

QVariant RecomputeModel::headerData(int section, Qt::Orientation o, int role) const {
  static const char* titles[] = {"layer", "policy", "activations kept", "memory saved", "extra GFLOP",
                                 "extra time / step"};
  if (o != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount) return {};
  return tr(titles[section]);
}

// ---------------------------------------------------------------- chart

RecomputeChart::RecomputeChart(QWidget* parent) : QWidget(parent) { setMinimumHeight(180); }

void RecomputeChart::setRows(std::vector<RecomputeRow> rows) {
  rows_ = std::move(rows);
  update();
}

void RecomputeChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), QColor(0xFB, 0xFB, 0xFC));
  if (rows_.empty()) return;
  const QRect area = rect().adjusted(60, 28, -60, -26);
  int64_t max_bytes = 1, max_ns = 1;
  for (const auto& r : rows_) {
    max_bytes = std::max(max_bytes, r.bytes_kept + r.bytes_saved);
    max_ns = std::max(max_ns, r.extra_ns);
  }
  const double slot = double(area.width()) / double(rows_.size());
  const QColor kept(0x2F, 0x5D, 0xA8), saved(0xC9, 0xD3, 0xE3);
  const QColor time = paintColor(PaintClass::Recompute);
  p.setPen(Qt::NoPen);
  for (size_t i = 0; i < rows_.size(); ++i) {
    const auto& r = rows_[i];
    const double x = area.left() + slot * double(i) + slot * 0.15;
    const double w = slot * 0.4;
    const double hk = double(area.height()) * double(r.bytes_kept) / double(max_bytes);
    const double hs = double(area.height()) * double(r.bytes_saved) / double(max_bytes);
    p.setBrush(kept);
    p.drawRect(QRectF(x, area.bottom() - hk, w, hk));
    p.setBrush(saved);
    p.drawRect(QRectF(x, area.bottom() - hk - hs, w, hs));
    const double ht = double(area.height()) * double(r.extra_ns) / double(max_ns);
    p.setBrush(time);
    p.drawRect(QRectF(x + w + 2, area.bottom() - ht, slot * 0.3, ht));
    p.setBrush(QBrush(recomputeHatchColor(), Qt::BDiagPattern));
    p.drawRect(QRectF(x + w + 2, area.bottom() - ht, slot * 0.3, ht));
    p.setBrush(Qt::NoBrush);
  }
  p.setPen(QColor(0x22, 0x26, 0x2B));
  for (size_t i = 0; i < rows_.size(); ++i)
    p.drawText(QRectF(area.left() + slot * double(i), area.bottom() + 4, slot, 16), Qt::AlignCenter,
               QString::number(rows_[i].layer));
  p.drawText(QRect(4, area.top() - 22, 400, 16), Qt::AlignLeft,
             tr("activation memory per micro-batch (max %1)").arg(mib(max_bytes)));
  p.drawText(QRect(width() - 404, area.top() - 22, 400, 16), Qt::AlignRight,
             tr("recompute time per step (max %1)").arg(QString::fromStdString(formatDuration(max_ns))));
  // Legend.
  int lx = area.left();
  const int ly = height() - 14;
  auto legend = [&](const QColor& c, const QString& text) {
    p.fillRect(QRect(lx, ly, 10, 10), c);
    p.drawText(QRect(lx + 14, ly - 3, 200, 16), Qt::AlignLeft | Qt::AlignVCenter, text);
    lx += 30 + p.fontMetrics().horizontalAdvance(text);
  };
  legend(kept, tr("kept"));
  legend(saved, tr("saved by recompute"));
  legend(time, tr("extra time"));
  p.setPen(QColor(0xDD, 0xE1, 0xE6));
  p.drawLine(area.bottomLeft(), area.bottomRight());
}

// ---------------------------------------------------------------- view

RecomputeView::RecomputeView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  summary_ = new QLabel(this);
  summary_->setWordWrap(true);
  layout->addWidget(summary_);
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(tr("Set all layers to:"), this));
  policy_ = new QComboBox(this);
  policy_->addItems(recomputePolicyChoices());
  controls->addWidget(policy_);
  controls->addWidget(new QLabel(tr("topology:"), this));
  topology_ = new QLineEdit("dgx-h200", this);
  topology_->setMaximumWidth(200);
  controls->addWidget(topology_);
  run_button_ = new QPushButton(tr("Re-plan and simulate"), this);
  controls->addWidget(run_button_);
  progress_ = new QProgressBar(this);
  progress_->setRange(0, 100);
  progress_->setValue(0);
  progress_->setMaximumWidth(220);
  controls->addWidget(progress_);
  status_ = new QLabel(this);
  controls->addWidget(status_, 1);
  layout->addLayout(controls);
  auto* split = new QSplitter(Qt::Vertical, this);
  model_ = new RecomputeModel(this);
  auto* table = new QTableView(split);
  table->setModel(model_);
  table->setItemDelegateForColumn(RecomputeModel::Policy, new PolicyDelegate(table));
  table->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::SelectedClicked);
  table->verticalHeader()->hide();
  table->verticalHeader()->setDefaultSectionSize(20);
  table->horizontalHeader()->setStretchLastSection(true);
  table->setAlternatingRowColors(true);
  split->addWidget(table);
  chart_ = new RecomputeChart(split);
  split->addWidget(chart_);
  split->setSizes({300, 300});
  layout->addWidget(split, 1);
  connect(policy_, &QComboBox::textActivated, this, [this](const QString& text) {
    if (auto p = parseRecomputePolicy(text.toStdString())) model_->setAllPolicies(*p);
  });
  connect(run_button_, &QPushButton::clicked, this, [this] { simulateTable(); });
  clear(tr("Open a run to see its recompute choices."));
}

RecomputeView::~RecomputeView() {
  if (worker_) worker_->wait();
}

void RecomputeView::clear(const QString& why) {
  summary_->setText(why);
  model_->setRows({});
  chart_->setRows({});
  run_button_->setEnabled(false);
}

void RecomputeView::setRun(const QString& path, const traces::RunInfo& info, const traces::PlanFacts& facts,
                           int schema_version, std::shared_ptr<const TimelineData> timeline) {
  path_ = path;
  job_yaml_ = QString::fromStdString(info.job_yaml);
  run_topology_ = QString::fromStdString(info.topology);
  run_topology_yaml_ = QString::fromStdString(info.topology_yaml);
  if (!run_topology_.isEmpty()) topology_->setText(run_topology_);
  if (facts.recompute.empty()) {
    clear(schema_version < 2 ? tr("This run was written before tandem stored its plan's decisions (trace schema %1), "
                                  "so they are not known; re-plan and simulate to see today's plan of its job.")
                                   .arg(schema_version)
                             : tr("This run carries no plan facts (an imported trace or a run without a plan)."));
    run_button_->setEnabled(!path_.isEmpty() && !job_yaml_.isEmpty());
    return;
  }
  auto rows = recomputeRows(facts, timeline.get());
  int64_t kept = 0, saved = 0, extra = 0;
  for (const auto& r : rows) {
    kept += r.bytes_kept;
    saved += r.bytes_saved;
    extra += r.extra_ns;
  }
  // Rank 0's program: its planned peak, and what `tandem run` checks against
  // free device memory before it allocates (arena, executor buffers, reserve).
  const traces::MemoryRow* memory = nullptr;
  for (const traces::MemoryRow& m : facts.memory)
    if (!memory || m.first_rank == 0) memory = &m;
  summary_->setText(tr("<b>%1</b> · %2 layers · activations kept %3, saved %4 per micro-batch "
                       "· recompute %5 per step · planned peak memory %6 · a GPU run needs %7 free per rank")
                        .arg(QString::fromStdString(jobNameOf(info)))
                        .arg(rows.size())
                        .arg(mib(kept), mib(saved), QString::fromStdString(formatDuration(extra)),
                             mib(memory ? memory->peak_bytes : 0), mib(memory ? memory->gpu_run_bytes : 0)));
  model_->setRows(rows);
  chart_->setRows(std::move(rows));
  run_button_->setEnabled(!path_.isEmpty() && !job_yaml_.isEmpty());
}

QString RecomputeView::summaryText() const { return summary_->text(); }

void RecomputeView::simulatePolicy(RecomputePolicy policy) {
  model_->setAllPolicies(policy);
  simulateTable();
}

void RecomputeView::simulateTable() {
  if (worker_ || path_.isEmpty()) return;
  const std::map<int, RecomputePolicy> policies = model_->policies();
  std::map<RecomputePolicy, int> counts;
  for (const auto& [layer, p] : policies) counts[p]++;
  std::string label;
  for (const auto& [p, n] : counts)
    label += (label.empty() ? "" : ", ") + std::to_string(n) + " " + std::string(toString(p));
  WhatIfRequest req;
  req.job_yaml = job_yaml_.toStdString();
  req.overrides = recomputeOverrides(policies);
  req.settings.topology = topology_->text().trimmed().toStdString();
  if (!run_topology_yaml_.isEmpty() && topology_->text().trimmed() == run_topology_)
    req.settings.topology_yaml = run_topology_yaml_.toStdString();
  req.out_path = path_.toStdString();
  req.run_name = counts.size() == 1 ? "what-if: recompute " + std::string(toString(policies.begin()->second))
                                    : "what-if: recompute per layer (" + label + ")";
  run_button_->setEnabled(false);
  progress_->setValue(0);
  status_->setText(tr("starting"));
  worker_ = startWhatIf(
      this, req,
      {[this](int pct, const QString& stage) {
         progress_->setValue(pct);
         status_->setText(stage);
       },
       [this](const WhatIfResult& r) {
         status_->setText(tr("new run %1: step %2, peak memory %3")
                              .arg(r.run_id)
                              .arg(QString::fromStdString(formatDuration(r.step_ns)), mib(r.peak_memory_bytes)));
         emit runCreated(path_, r.run_id);
       },
       [this](const QString& msg) {
         status_->setText(tr("failed: %1").arg(msg));
         emit failed(msg);
       },
       [this] {
         worker_ = nullptr;
         run_button_->setEnabled(true);
       }});
}

}  // namespace tandem::gui
