#pragma once
// What-if dialog: choose topology (preset or file), calibration (none, a
// committed one or a file), data-, tensor- and pipeline-parallel sizes,
// sequence parallelism, pipeline stages, blocks and chunks per stage,
// what the ranks shard
// (nothing, the optimizer: ZeRO-1, or the parameters too: ZeRO-3),
// micro-batch, gradient accumulation, bucket size, recompute policy and the
// LM head's groups of tokens (schedule.lm_head_chunks) for a run's job, and
// every option of `tandem simulate` (symmetric mode, collective algorithm and
// protocol, NVLS, trees across hosts, the call floor, kernel sharing);
// "Simulate" re-plans and simulates on a worker thread with progress and
// reports the new run, appended to the given trace file, with any warning
// (a calibration of another GPU than the topology's, a plan too large for
// its GPUs, whose fitting choices the dialog then offers to apply).

#include <QDialog>
#include <vector>

#include "gui/what_if.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QThread;
class QVBoxLayout;

namespace tandem::gui {

class WhatIfDialog : public QDialog {
  Q_OBJECT
 public:
  // job_yaml: the base job (empty: the built-in GPT-2 124M, data parallel 8);
  // out_path: the trace file the new run is appended to.
  // topology: the run's topology name; topology_yaml: its text as the run
  // stored it (used while the name is kept, so a run simulated on a file
  // that is not at hand can be re-simulated).
  WhatIfDialog(const QString& job_yaml, const QString& topology, const QString& out_path, QWidget* parent = nullptr,
               const QString& topology_yaml = {});
  ~WhatIfDialog() override;

  // The request the current settings describe.
  WhatIfRequest request() const;
  void setTopology(const QString& name_or_file);
  // "none" (the roofline defaults) or a calibration file.
  void setCalibration(const QString& none_or_file);
  void setDataParallel(int n);
  // Ranks each replica's blocks are split over (parallel.tensor_parallel).
  void setTensorParallel(int n);
  // The residual stream's tokens split over the tensor-parallel group
  // (parallel.sequence_parallel; asked for only with a group of 2 or more).
  void setSequenceParallel(bool on);
  // Ranks each sequence is split over (parallel.context_parallel).
  void setContextParallel(int n);
  // Pipeline stages (parallel.pipeline_parallel); the micro-batches in
  // flight are the gradient accumulation.
  void setPipelineParallel(int n);
  // Blocks per stage, "7,7,7,3" (parallel.pipeline_layers); empty: even.
  void setPipelineLayers(const QString& counts);
  // Chunks of blocks per stage for the interleaved schedule
  // (parallel.pipeline_chunks; asked for only with 2 or more stages).
  void setPipelineChunks(int n);
  enum class Sharding { None, Optimizer, Gradients, Parameters };
  void setSharding(Sharding sharding);
  // With the parameters sharded: ranks per shard group (0: every rank;
  // fewer than the data-parallel size shard within groups and replicate
  // across them, parallel.shard_group_size).
  void setShardGroupSize(int ranks);
  void setMicroBatch(int n);
  void setGradAccum(int n);
  void setBucketMib(double mib);
  void setRecompute(RecomputePolicy policy);
  void setLmHeadChunks(int n);
  // The simulator's options (every field but topology and calibration).
  void setSimulatorOptions(const sim::SimulateSettings& settings);
  // Starts the simulation (what the Simulate button does).
  void start();
  bool busy() const { return worker_ != nullptr; }
  // The status line: the stage while it runs, then the new run (and any
  // warning) or the error.
  QString statusText() const;
  // After a run whose plan would not fit the topology's GPUs: the choices
  // that would ("recompute.policy=none training.micro_batch=128 (52.7
  // GiB)"), offered under the status line; applying one sets the fields.
  QStringList fittingChoices() const;
  void applyFittingChoice(int index);

 signals:
  void runCreated(const QString& path, qint64 run_id);
  void failed(const QString& message);

 private:
  // The constructor's parts: the job's fields, the simulator's options,
  // the progress and status area with its buttons.
  void addJobFields(QFormLayout* form, const JobSpec& job);
  void addSimulatorFields(QFormLayout* form);
  void addStatusArea(QVBoxLayout* layout);
  bool sequenceParallel() const;
  int pipelineChunks() const;
  sim::SimulateSettings settings() const;
  std::vector<std::string> jobOverrides() const;
  std::string runName(const WhatIfRequest& r) const;

  QString job_yaml_;
  QString out_path_;
  QString run_topology_;       // the run's topology name ...
  QString run_topology_yaml_;  // ... and its text
  QComboBox* symmetry_ = nullptr;
  QComboBox* algorithm_ = nullptr;
  QComboBox* protocol_ = nullptr;
  QCheckBox* nvls_ = nullptr;
  QCheckBox* inter_host_tree_ = nullptr;
  QCheckBox* tree_flows_ = nullptr;
  QSpinBox* call_floor_us_ = nullptr;
  QComboBox* kernel_sharing_ = nullptr;
  QComboBox* topology_ = nullptr;
  QComboBox* calibration_ = nullptr;
  QSpinBox* dp_ = nullptr;
  QSpinBox* tp_ = nullptr;
  QSpinBox* cp_ = nullptr;
  QCheckBox* sequence_parallel_ = nullptr;
  QSpinBox* pp_ = nullptr;
  QLineEdit* stage_layers_ = nullptr;
  QSpinBox* pipeline_chunks_ = nullptr;
  QComboBox* sharding_ = nullptr;  // items in Sharding's order
  QSpinBox* shard_group_ = nullptr;
  QSpinBox* micro_batch_ = nullptr;
  QSpinBox* accum_ = nullptr;
  QDoubleSpinBox* bucket_ = nullptr;
  QComboBox* recompute_ = nullptr;
  QSpinBox* lm_head_chunks_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* status_ = nullptr;
  QWidget* fit_row_ = nullptr;
  QComboBox* fit_choices_ = nullptr;
  std::vector<FittingChoice> fitting_;
  QPushButton* simulate_ = nullptr;
  QThread* worker_ = nullptr;
};

}  // namespace tandem::gui
