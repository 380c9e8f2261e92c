#include "gui/what_if_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QThread>
#include <QVBoxLayout>

#include "engine/spec/job.h"
#include "gui/recompute_view.h"
#include "gui/sweep_dialog.h"
#include "gui/timeline_math.h"
#include "gui/what_if_worker.h"
#include "simulator/cost/calibration_lookup.h"
#include "simulator/topology/topology_presets.h"

namespace tandem::gui {

namespace {
const QString kNoCalibration = QStringLiteral("none");
const QString kShippedCalibration = QStringLiteral("auto");
}  // namespace

WhatIfDialog::WhatIfDialog(const QString& job_yaml, const QString& topology, const QString& out_path, QWidget* parent,
                           const QString& topology_yaml)
    : QDialog(parent), job_yaml_(job_yaml), out_path_(out_path), run_topology_(topology),
      run_topology_yaml_(topology_yaml) {
  setWindowTitle(tr("What-if"));
  JobSpec job = defaultJob();
  try {
    if (!job_yaml.isEmpty()) job = parseJob(job_yaml.toStdString(), "<run>");
  } catch (const std::exception&) {
    // Keep the defaults; the simulation reports the job's problem.
  }
  auto* form = new QFormLayout;
  topology_ = new QComboBox(this);
  topology_->setEditable(true);  // a preset name or a topology file
  for (const auto& name : sim::fixedPresetNames()) topology_->addItem(QString::fromStdString(name));
  setTopology(topology.isEmpty() ? QString("dgx-h200") : topology);
  form->addRow(tr("topology (preset or file)"), topology_);
  calibration_ = new QComboBox(this);
  calibration_->setEditable(true);  // "auto", "none" or a calibration file
  calibration_->addItem(kShippedCalibration);  // the profile shipped for the topology's GPU, as tandem simulate
  calibration_->addItem(kNoCalibration);
  // The calibrations that come with tandem (resources/calibration).
  for (const std::string& f : sim::committedCalibrations()) calibration_->addItem(QString::fromStdString(f));
  calibration_->setToolTip(tr("Measured kernel and collective times replacing the roofline defaults "
                              "(tandem calibrate): auto takes the profile shipped for the topology's GPU; a "
                              "calibration of another GPU than the topology's is warned about"));
  form->addRow(tr("calibration (auto, none or file)"), calibration_);
  addJobFields(form, job);
  addSimulatorFields(form);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  addStatusArea(layout);
}

void WhatIfDialog::addJobFields(QFormLayout* form, const JobSpec& job) {
  dp_ = new QSpinBox(this);
  dp_->setRange(1, 4096);
  dp_->setValue(job.parallel.data_parallel);
  form->addRow(tr("data-parallel size"), dp_);
  tp_ = new QSpinBox(this);
  tp_->setRange(1, 64);
  tp_->setValue(job.parallel.tensor_parallel);
  tp_->setToolTip(tr("Split each block's attention heads and MLP units over this many consecutive ranks "
                     "(Megatron-style tensor parallelism); the job then takes data-parallel x tensor-parallel "
                     "GPUs. Must divide the heads and the MLP width"));
  form->addRow(tr("tensor-parallel size"), tp_);
  sequence_parallel_ = new QCheckBox(tr("split the residual stream's tokens too"), this);
  sequence_parallel_->setChecked(job.parallel.sequence_parallel);
  sequence_parallel_->setToolTip(tr("Sequence parallelism: between the split layers each rank of a tensor-parallel "
                                    "group holds its share of the tokens (norms, residual sums), an all-gather "
                                    "and a reduce-scatter replacing each all-reduce: less activation memory for "
                                    "the same communicated bytes"));
  sequence_parallel_->setEnabled(tp_->value() > 1);
  connect(tp_, &QSpinBox::valueChanged, this, [this](int n) { sequence_parallel_->setEnabled(n > 1); });
  form->addRow(tr("sequence parallel"), sequence_parallel_);
  cp_ = new QSpinBox(this);
  cp_->setRange(1, 64);
  cp_->setValue(job.parallel.context_parallel);
  cp_->setToolTip(tr("Split each sequence over this many ranks (context parallelism: two chunks each, the keys "
                     "and values gathered for the attention); they see the same samples, so the job takes "
                     "data-parallel x context-parallel x tensor-parallel x pipeline GPUs. 2 x this must divide "
                     "the sequence length"));
  form->addRow(tr("context-parallel size"), cp_);
  pp_ = new QSpinBox(this);
  pp_->setRange(1, 256);
  pp_->setValue(job.parallel.pipeline_parallel);
  pp_->setToolTip(tr("Split the blocks into this many pipeline stages on GPUs of their own (1F1B); the gradient "
                     "accumulation is the number of micro-batches in flight. Must divide the layers"));
  form->addRow(tr("pipeline stages"), pp_);
  stage_layers_ = new QLineEdit(this);
  QStringList counts;
  for (int n : job.parallel.pipeline_layers) counts << QString::number(n);
  stage_layers_->setText(counts.join(','));
  stage_layers_->setPlaceholderText(tr("even"));
  stage_layers_->setToolTip(tr("Blocks per pipeline stage, first stage first, e.g. 7,7,7,3 (they must add up to the "
                               "layers); the last stage also runs the LM head, so it often takes fewer. Empty: an "
                               "even split"));
  stage_layers_->setEnabled(pp_->value() > 1);
  form->addRow(tr("blocks per stage"), stage_layers_);
  pipeline_chunks_ = new QSpinBox(this);
  pipeline_chunks_->setRange(1, 64);
  pipeline_chunks_->setValue(job.parallel.pipeline_chunks);
  pipeline_chunks_->setToolTip(tr("Interleaved 1F1B: each stage holds this many chunks of blocks, dealt round-robin, "
                                  "so the bubble shrinks by that factor for more transfers; the gradient "
                                  "accumulation must be a multiple of the stages, and with blocks per stage given, "
                                  "list one count per chunk (stages x chunks)"));
  pipeline_chunks_->setEnabled(pp_->value() > 1);
  connect(pp_, &QSpinBox::valueChanged, this, [this](int n) {
    stage_layers_->setEnabled(n > 1);
    pipeline_chunks_->setEnabled(n > 1);
  });
  form->addRow(tr("chunks per stage"), pipeline_chunks_);
  sharding_ = new QComboBox(this);
  sharding_->addItems({tr("none"), tr("optimizer (ZeRO-1)"), tr("gradients and optimizer (ZeRO-2)"),
                       tr("parameters and optimizer (ZeRO-3)")});
  sharding_->setCurrentIndex(int(job.parallel.shard_parameters   ? Sharding::Parameters
                                 : job.parallel.shard_gradients ? Sharding::Gradients
                                 : job.parallel.shard_optimizer ? Sharding::Optimizer
                                                                : Sharding::None));
  sharding_->setToolTip(tr("What each data-parallel rank keeps only its share of: the optimizer's master weights "
                           "and moments (ZeRO-1), the gradients too once reduced (ZeRO-2), or the parameters "
                           "too, gathered before each use (ZeRO-3)"));
  form->addRow(tr("sharded across ranks"), sharding_);
  shard_group_ = new QSpinBox(this);
  shard_group_->setRange(0, 4096);
  shard_group_->setSpecialValueText(tr("all ranks"));
  shard_group_->setValue(job.parallel.shard_group_size);
  shard_group_->setToolTip(tr("With the parameters sharded: shard within groups of this many consecutive ranks "
                              "(a host's GPUs) and all-reduce the gradient shards across the groups (hybrid "
                              "sharding); must divide the data-parallel size"));
  shard_group_->setEnabled(sharding_->currentIndex() == int(Sharding::Parameters));
  connect(sharding_, &QComboBox::currentIndexChanged, this,
          [this](int index) { shard_group_->setEnabled(index == int(Sharding::Parameters)); });
  form->addRow(tr("shard group (ranks)"), shard_group_);
  micro_batch_ = new QSpinBox(this);
  micro_batch_->setRange(1, 4096);
  micro_batch_->setValue(job.training.micro_batch);
  form->addRow(tr("micro-batch (sequences)"), micro_batch_);
  accum_ = new QSpinBox(this);
  accum_->setRange(1, 1024);
  accum_->setValue(job.training.grad_accum);
  form->addRow(tr("gradient accumulation"), accum_);
  bucket_ = new QDoubleSpinBox(this);
  bucket_->setRange(0.25, 4096);
  bucket_->setSuffix(" MiB");
  bucket_->setValue(job.comm.bucket_mib);
  form->addRow(tr("gradient bucket"), bucket_);
  recompute_ = new QComboBox(this);
  recompute_->addItems(recomputePolicyChoices());
  recompute_->setCurrentText(QString::fromStdString(std::string(toString(job.recompute.policy))));
  form->addRow(tr("recompute (all layers)"), recompute_);
  lm_head_chunks_ = new QSpinBox(this);
  lm_head_chunks_->setRange(1, 1024);
  lm_head_chunks_->setValue(job.schedule.lm_head_chunks);
  lm_head_chunks_->setToolTip(tr("The LM head and cross-entropy in this many groups of tokens, each with logits of "
                                 "its own: less memory for some step time (a divisor of micro-batch x sequence "
                                 "leaving a multiple of 8 tokens)"));
  form->addRow(tr("LM head groups"), lm_head_chunks_);

}

void WhatIfDialog::addSimulatorFields(QFormLayout* form) {
  // `tandem simulate`'s options, with its defaults.
  symmetry_ = new QComboBox(this);
  symmetry_->addItems({"auto", "on", "off"});
  symmetry_->setToolTip(tr("Simulate one representative rank per program: auto (when the check passes), on, off "
                           "(every rank)"));
  form->addRow(tr("symmetric ranks"), symmetry_);
  algorithm_ = new QComboBox(this);
  algorithm_->addItems({tr("model's choice"), "ring", "tree", "nvls"});
  form->addRow(tr("collective algorithm"), algorithm_);
  protocol_ = new QComboBox(this);
  protocol_->addItems({tr("model's choice"), "ll", "ll128", "simple"});
  form->addRow(tr("collective protocol"), protocol_);
  nvls_ = new QCheckBox(tr("allow NVLink SHARP all-reduce on NVSwitch machines"), this);
  form->addRow(tr("NVLS"), nvls_);
  inter_host_tree_ = new QCheckBox(tr("allow tree all-reduce across hosts, as NCCL's tuner weighs it"), this);
  inter_host_tree_->setChecked(true);
  form->addRow(tr("trees across hosts"), inter_host_tree_);
  tree_flows_ = new QCheckBox(tr("simulate them flow by flow (spine collisions; slow at 1000+ GPUs)"), this);
  form->addRow(tr("tree flows"), tree_flows_);
  call_floor_us_ = new QSpinBox(this);
  call_floor_us_->setRange(-1, 1'000'000);
  call_floor_us_->setValue(-1);
  call_floor_us_->setSuffix(" us");
  call_floor_us_->setSpecialValueText(tr("model default (20 us)"));
  call_floor_us_->setToolTip(tr("Shortest time of one collective call: host overhead of eager frameworks; 0 for "
                                "CUDA-graph replays"));
  form->addRow(tr("collective call floor"), call_floor_us_);
  kernel_sharing_ = new QComboBox(this);
  kernel_sharing_->addItems({tr("calibration's"), "first_holds", "fair"});
  kernel_sharing_->setToolTip(tr("How kernels of two compute streams divide a GPU: first_holds (the one that started "
                                 "first runs as alone) or fair (processor sharing)"));
  form->addRow(tr("kernel sharing"), kernel_sharing_);
}

void WhatIfDialog::addStatusArea(QVBoxLayout* layout) {
  progress_ = new QProgressBar(this);
  progress_->setRange(0, 100);
  progress_->setValue(0);
  layout->addWidget(progress_);
  status_ = new QLabel(out_path_.isEmpty() ? tr("No trace file to append the new run to.")
                                           : tr("The new run is appended to %1").arg(out_path_),
                       this);
  status_->setWordWrap(true);
  layout->addWidget(status_);
  // Shown after a run that would not fit its GPUs: the planner's choices.
  fit_row_ = new QWidget(this);
  auto* fit_layout = new QHBoxLayout(fit_row_);
  fit_layout->setContentsMargins(0, 0, 0, 0);
  fit_layout->addWidget(new QLabel(tr("Make it fit:"), fit_row_));
  fit_choices_ = new QComboBox(fit_row_);
  fit_layout->addWidget(fit_choices_, 1);
  auto* apply = new QPushButton(tr("Apply"), fit_row_);
  fit_layout->addWidget(apply);
  connect(apply, &QPushButton::clicked, this, [this] { applyFittingChoice(fit_choices_->currentIndex()); });
  fit_row_->hide();
  layout->addWidget(fit_row_);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
  // A sweep over some fields, from these settings (gui/sweep_dialog.h).
  auto* sweep = buttons->addButton(tr("Sweep..."), QDialogButtonBox::ActionRole);
  connect(sweep, &QPushButton::clicked, this, [this] {
    auto* d = new SweepDialog(request(), this);
    d->setAttribute(Qt::WA_DeleteOnClose);
    d->show();
  });
  simulate_ = buttons->addButton(tr("Simulate"), QDialogButtonBox::ActionRole);
  simulate_->setEnabled(!out_path_.isEmpty());
  layout->addWidget(buttons);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(simulate_, &QPushButton::clicked, this, &WhatIfDialog::start);
}

WhatIfDialog::~WhatIfDialog() {
  if (worker_) worker_->wait();
}

void WhatIfDialog::setTopology(const QString& name_or_file) { topology_->setCurrentText(name_or_file); }
void WhatIfDialog::setCalibration(const QString& none_or_file) { calibration_->setCurrentText(none_or_file); }
QString WhatIfDialog::statusText() const { return status_->text(); }

QStringList WhatIfDialog::fittingChoices() const {
  QStringList out;
  for (int i = 0; i < fit_choices_->count(); ++i) out << fit_choices_->itemText(i);
  return out;
}

void WhatIfDialog::applyFittingChoice(int index) {
  if (index < 0 || size_t(index) >= fitting_.size()) return;
  const FittingChoice& f = fitting_[size_t(index)];
  setRecompute(f.policy);
  setMicroBatch(f.micro_batch);
  setGradAccum(f.grad_accum);  // the global batch kept
  setLmHeadChunks(f.lm_head_chunks);
  if (f.shard_parameters) setSharding(Sharding::Parameters);
  status_->setText(tr("Applied: %1. Simulate to see its step.").arg(fit_choices_->itemText(index)));
}
void WhatIfDialog::setDataParallel(int n) { dp_->setValue(n); }
void WhatIfDialog::setTensorParallel(int n) { tp_->setValue(n); }
void WhatIfDialog::setContextParallel(int n) { cp_->setValue(n); }
void WhatIfDialog::setSequenceParallel(bool on) { sequence_parallel_->setChecked(on); }
void WhatIfDialog::setPipelineParallel(int n) { pp_->setValue(n); }
void WhatIfDialog::setPipelineLayers(const QString& counts) { stage_layers_->setText(counts); }
void WhatIfDialog::setPipelineChunks(int n) { pipeline_chunks_->setValue(n); }
void WhatIfDialog::setSharding(Sharding sharding) { sharding_->setCurrentIndex(int(sharding)); }
void WhatIfDialog::setShardGroupSize(int ranks) { shard_group_->setValue(ranks); }
void WhatIfDialog::setMicroBatch(int n) { micro_batch_->setValue(n); }
void WhatIfDialog::setGradAccum(int n) { accum_->setValue(n); }
void WhatIfDialog::setBucketMib(double mib) { bucket_->setValue(mib); }
void WhatIfDialog::setRecompute(RecomputePolicy policy) {
  recompute_->setCurrentText(QString::fromStdString(std::string(toString(policy))));
}
void WhatIfDialog::setLmHeadChunks(int n) { lm_head_chunks_->setValue(n); }

// Only with a tensor-parallel group to split the tokens over (the job
// refuses it without).
bool WhatIfDialog::sequenceParallel() const { return tp_->value() > 1 && sequence_parallel_->isChecked(); }
// Chunks only with stages to deal them over.
int WhatIfDialog::pipelineChunks() const { return pp_->value() > 1 ? pipeline_chunks_->value() : 1; }

sim::SimulateSettings WhatIfDialog::settings() const {
  sim::SimulateSettings s;
  s.topology = topology_->currentText().trimmed().toStdString();
  // The run's own topology while its name is kept: its stored text, so that
  // a file no longer at hand still simulates.
  if (!run_topology_yaml_.isEmpty() && topology_->currentText().trimmed() == run_topology_)
    s.topology_yaml = run_topology_yaml_.toStdString();
  const QString calibration = calibration_->currentText().trimmed();
  // Empty is read as the default, the shipped profile.
  s.calibration = calibration.isEmpty() ? kShippedCalibration.toStdString() : calibration.toStdString();
  s.symmetry = sim::parseSymmetrySetting(symmetry_->currentText().toStdString());
  s.algorithm = sim::parseAlgorithmSetting(algorithm_->currentIndex() == 0 ? "" : algorithm_->currentText().toStdString());
  s.protocol = sim::parseProtocolSetting(protocol_->currentIndex() == 0 ? "" : protocol_->currentText().toStdString());
  s.nvls = nvls_->isChecked();
  s.inter_host_tree = inter_host_tree_->isChecked();
  s.tree_flows = tree_flows_->isChecked();
  s.call_floor_ns = call_floor_us_->value() < 0 ? -1 : int64_t(call_floor_us_->value()) * 1000;
  s.kernel_sharing = sim::parseKernelSharingSetting(
      kernel_sharing_->currentIndex() == 0 ? "" : kernel_sharing_->currentText().toStdString());
  return s;
}

void WhatIfDialog::setSimulatorOptions(const sim::SimulateSettings& s) {
  symmetry_->setCurrentIndex(s.symmetry == sim::SymmetryMode::Auto ? 0 : s.symmetry == sim::SymmetryMode::On ? 1 : 2);
  algorithm_->setCurrentIndex(s.algorithm ? algorithm_->findText(QString::fromUtf8(sim::toString(*s.algorithm).data())) : 0);
  protocol_->setCurrentIndex(s.protocol ? protocol_->findText(QString::fromUtf8(sim::toString(*s.protocol).data())) : 0);
  nvls_->setChecked(s.nvls);
  inter_host_tree_->setChecked(s.inter_host_tree);
  tree_flows_->setChecked(s.tree_flows);
  call_floor_us_->setValue(s.call_floor_ns < 0 ? -1 : int(s.call_floor_ns / 1000));
  kernel_sharing_->setCurrentIndex(!s.kernel_sharing ? 0 : *s.kernel_sharing == sim::KernelSharing::FirstHolds ? 1 : 2);
}

std::vector<std::string> WhatIfDialog::jobOverrides() const {
  std::vector<std::string> o = {
      "parallel.data_parallel=" + std::to_string(dp_->value()),
      "parallel.tensor_parallel=" + std::to_string(tp_->value()),
      std::string("parallel.sequence_parallel=") + (sequenceParallel() ? "true" : "false"),
      "parallel.context_parallel=" + std::to_string(cp_->value()),
      "parallel.pipeline_parallel=" + std::to_string(pp_->value()),
      "parallel.pipeline_chunks=" + std::to_string(pipelineChunks()),
      // The job parser checks the list (one count per stage, adding up to the layers).
      "parallel.pipeline_layers=[" +
          (pp_->value() > 1 ? stage_layers_->text().trimmed().toStdString() : std::string()) + "]",
      "training.micro_batch=" + std::to_string(micro_batch_->value()),
      "training.grad_accum=" + std::to_string(accum_->value()),
      "comm.bucket_mib=" + QString::number(bucket_->value()).toStdString(),
      "recompute.policy=" + recompute_->currentText().toStdString(),
      "schedule.lm_head_chunks=" + std::to_string(lm_head_chunks_->value()),
  };
  const auto sharding = Sharding(sharding_->currentIndex());
  o.push_back(std::string("parallel.shard_optimizer=") + (sharding == Sharding::Optimizer ? "true" : "false"));
  o.push_back(std::string("parallel.shard_gradients=") + (sharding == Sharding::Gradients ? "true" : "false"));
  o.push_back(std::string("parallel.shard_parameters=") + (sharding == Sharding::Parameters ? "true" : "false"));
  const int shard_group = sharding == Sharding::Parameters ? shard_group_->value() : 0;
  o.push_back("parallel.shard_group_size=" + std::to_string(shard_group));
  return o;
}

std::string WhatIfDialog::runName(const WhatIfRequest& r) const {
  const auto sharding = Sharding(sharding_->currentIndex());
  const int shard_group = sharding == Sharding::Parameters ? shard_group_->value() : 0;
  std::string sharded;
  if (sharding == Sharding::Optimizer) sharded = ", ZeRO-1";
  if (sharding == Sharding::Gradients) sharded = ", ZeRO-2";
  if (sharding == Sharding::Parameters)
    sharded = shard_group > 0 && shard_group < dp_->value() ? ", ZeRO-3 in groups of " + std::to_string(shard_group)
                                                            : std::string(", ZeRO-3");
  std::string name = "what-if: dp " + std::to_string(dp_->value()) +
                     (tp_->value() > 1 ? " x tp " + std::to_string(tp_->value()) : std::string()) +
                     (sequenceParallel() ? " (sequence parallel)" : "") +
                     (cp_->value() > 1 ? " x cp " + std::to_string(cp_->value()) : std::string()) +
                     (pp_->value() > 1 ? " x pp " + std::to_string(pp_->value()) : std::string()) +
                     (pipelineChunks() > 1 ? " (interleaved, " + std::to_string(pipelineChunks()) + " chunks)"
                                           : std::string()) +
                     (pp_->value() > 1 && !stage_layers_->text().trimmed().isEmpty()
                          ? " (" + stage_layers_->text().trimmed().toStdString() + " blocks)"
                          : std::string()) +
                     ", mb " + std::to_string(micro_batch_->value()) + ", accum " + std::to_string(accum_->value()) +
                     ", recompute " + recompute_->currentText().toStdString() +
                     (lm_head_chunks_->value() > 1
                          ? ", LM head in " + std::to_string(lm_head_chunks_->value()) + " groups"
                          : std::string()) +
                     sharded + " on " + r.settings.topology;
  // A calibration chosen by file; auto (the shipped profile) and none need no word.
  if (r.settings.calibration != kShippedCalibration.toStdString() &&
      r.settings.calibration != kNoCalibration.toStdString() && !r.settings.calibration.empty())
    name += ", calibrated";
  return name;
}

WhatIfRequest WhatIfDialog::request() const {
  WhatIfRequest r;
  r.job_yaml = job_yaml_.toStdString();
  r.settings = settings();
  r.out_path = out_path_.toStdString();
  r.overrides = jobOverrides();
  r.run_name = runName(r);
  return r;
}

void WhatIfDialog::start() {
  if (worker_ || out_path_.isEmpty()) return;
  const WhatIfRequest req = request();
  simulate_->setEnabled(false);
  progress_->setValue(0);
  worker_ = startWhatIf(
      this, req,
      {[this](int pct, const QString& stage) {
         progress_->setValue(pct);
         status_->setText(stage);
       },
       [this](const WhatIfResult& r) {
         QString text = tr("New run %1: step %2, peak memory %3 GiB")
                            .arg(r.run_id)
                            .arg(QString::fromStdString(formatDuration(r.step_ns)))
                            .arg(double(r.peak_memory_bytes) / double(int64_t(1) << 30), 0, 'f', 2);
         if (!r.kernel_time_sources.empty()) text += "\n" + QString::fromStdString(r.kernel_time_sources);
         for (const std::string& w : r.warnings) text += tr("\nWarning: %1").arg(QString::fromStdString(w));
         status_->setText(text);
         fitting_ = r.fitting_choices;
         fit_choices_->clear();
         for (const FittingChoice& f : fitting_) fit_choices_->addItem(QString::fromStdString(f.text(r.job)));
         fit_row_->setVisible(!fitting_.empty());
         emit runCreated(out_path_, r.run_id);
       },
       [this](const QString& msg) {
         status_->setText(tr("Failed: %1").arg(msg));
         emit failed(msg);
       },
       [this] {
         worker_ = nullptr;
         simulate_->setEnabled(true);
       }});
}

}  // namespace tandem::gui
