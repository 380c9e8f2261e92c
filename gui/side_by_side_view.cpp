#include "gui/side_by_side_view.h"

#include <QCheckBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QVBoxLayout>

#include "gui/timeline_view.h"

namespace tandem::gui {

SideBySideView::SideBySideView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout();
  info_ = new QLabel(this);
  step_a_ = new QSpinBox(this);
  step_b_ = new QSpinBox(this);
  step_a_->setObjectName("align_step_a");
  step_b_->setObjectName("align_step_b");
  bar->addWidget(info_);
  bar->addStretch();
  by_difference_ = new QCheckBox(tr("colour by difference"), this);
  by_difference_->setObjectName("colour_by_difference");
  by_difference_->setToolTip(tr("each task by the second run's time against the first's, per step: dark blue "
                                "< 0.8, light blue < 0.95, grey within 5%, light red <= 1.25, dark red above; "
                                "tasks without a twin in mid grey"));
  bar->addWidget(by_difference_);
  bar->addWidget(new QLabel(tr("align step"), this));
  bar->addWidget(step_a_);
  bar->addWidget(new QLabel(tr("with step"), this));
  bar->addWidget(step_b_);
  layout->addLayout(bar);
  view_ = new TimelineView(this);
  layout->addWidget(view_, 1);
  auto realign = [this] {
    if (!a_ || !b_) return;
    // The spin boxes show recorded step numbers; the layout takes indices.
    auto indexOf = [](const TimelineData& d, int step) {
      for (size_t k = 0; k < d.steps.size(); ++k)
        if (d.steps[k].step == step) return int(k);
      return -1;
    };
    alignAt(indexOf(*a_, step_a_->value()), indexOf(*b_, step_b_->value()));
  };
  connect(by_difference_, &QCheckBox::toggled, this, [this] { applyColours(); });
  connect(step_a_, &QSpinBox::valueChanged, this, realign);
  connect(step_b_, &QSpinBox::valueChanged, this, realign);
  connect(view_, &TimelineView::sliceSelected, this, [this](int track, qint64 index) { linkTwinOf({track, index}); });
  connect(view_, &TimelineView::sliceHovered, this, [this](int track, qint64 index) {
    // The hovered task's twin while hovering, the selection's otherwise.
    linkTwinOf(SliceRef{track, index}.valid() ? SliceRef{track, index} : view_->selection());
  });
  setMessage(tr("Open a second run (File > Compare, or a second file on the command line) to see both on one axis."));
}

void SideBySideView::setMessage(const QString& message) {
  a_.reset();
  b_.reset();
  layout_.reset();
  info_->setText({});
  view_->setData(nullptr);
  view_->setMessage(message);
}

void SideBySideView::setRuns(std::shared_ptr<const TimelineData> a, std::shared_ptr<const TimelineData> b,
                             const QString& label_a, const QString& label_b) {
  a_ = std::move(a);
  b_ = std::move(b);
  label_a_ = label_a.toStdString();
  label_b_ = label_b.toStdString();
  auto range = [](QSpinBox* box, const TimelineData& d) {
    const QSignalBlocker quiet(box);
    box->setEnabled(!d.steps.empty());
    if (d.steps.empty()) return;
    box->setRange(d.steps.front().step, d.steps.back().step);
    box->setValue(d.steps[size_t(d.medianStep())].step);
  };
  range(step_a_, *a_);
  range(step_b_, *b_);
  alignAt(-1, -1);
}

void SideBySideView::alignAt(int k_a, int k_b) {
  if (!a_ || !b_) return;
  layout_ = std::make_unique<SideBySide>(sideBySide(*a_, *b_, k_a, k_b, label_a_, label_b_));
  colourByDifference(*layout_, by_difference_->isChecked());
  view_->setMessage({});
  view_->setData(layout_->data);
  if (layout_->step_a >= 0) view_->showStep(layout_->step_a);
  auto stepName = [](const TimelineData& d, int k) {
    return k >= 0 ? tr("step %1").arg(d.steps[size_t(k)].step) : tr("its start");
  };
  info_->setText(tr("%1 above, %2 below, on one time axis: %3 of the first starts with %4 of the second; "
                    "selecting a task outlines its twin")
                     .arg(QString::fromStdString(label_a_), QString::fromStdString(label_b_),
                          stepName(*a_, layout_->step_a), stepName(*b_, layout_->step_b)));
}

void SideBySideView::setColourByDifference(bool on) { by_difference_->setChecked(on); }

void SideBySideView::applyColours() {
  if (!layout_) return;
  colourByDifference(*layout_, by_difference_->isChecked());
  // The same window and selection, the lanes repainted.
  const TimeMapping m = view_->mapping();
  const SliceRef selected = view_->selection();
  view_->setData(layout_->data);
  view_->setWindow(m.start_ns, m.end_ns);
  view_->selectSlice(selected);
}

void SideBySideView::linkTwinOf(SliceRef ref) {
  if (!layout_) return;
  view_->setLinkedSlice(ref.valid() ? twinOf(*layout_, ref) : SliceRef{});
}

}  // namespace tandem::gui
