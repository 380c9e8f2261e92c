#pragma once
// Checkpoints of a training run (issue 51), shared by the executors: what a
// step's state is, how it is laid out on disk, and how it is read back.
//
// A checkpoint is a folder DIR/step-NNNNNNNN holding, per rank, one file
// per layer of that rank's persistent buffers (parameters, master weights,
// optimizer state, the gradient accumulators: whatever the memory plan
// keeps across steps, so a reader can stream layer by layer), and
// manifest.json, written last through a temporary name and a rename: the
// job's content hash, the plan format and tool version, the step (the data
// position and the learning-rate schedule follow from it; the data and
// dropout are functions of the step and the job's seed), the layout (world,
// tensor, pipeline, data, context parallel; what is sharded) and per file
// its size, its FNV-1a 64 checksum and the buffers in it. A folder without a
// manifest is an interrupted write and is skipped; a file whose size or
// checksum differs from the manifest's is named in a one-line error.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/plan/plan.h"

namespace tandem::checkpoint {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One rank's persistent buffer as it is saved: the plan's buffer and its bytes.
struct BufferBytes {
  int buffer = -1;  // index into the rank's program's buffers
  std::vector<std::byte> bytes;
};

// A step's state: every rank's persistent buffers, copied out of the
// executor (so that writing it can go on while training does).
struct Snapshot {
  int64_t step = 0;              // steps completed
  bool update_pending = false;   // schedule.optimizer_beside_forward: the last step's AdamW not yet applied
  std::vector<std::vector<BufferBytes>> ranks;  // per rank
  // Per rank, state an executor keeps outside its buffers, as text (FP8
  // delayed scaling's amax histories, engine/cpu/fp8_scales.h); empty
  // strings, or no entries, where there is none. Saved as a file of its own
  // per rank (rankR.state), checksummed like the others.
  std::vector<std::string> rank_state;
  // Whatever the executor that copied into these buffers keeps for them
  // (the GPU executor page-locks them once, so that the next snapshot copied
  // into the same memory moves at the bus's speed); released before the
  // buffers are freed (declared after them).
  std::shared_ptr<void> host_memory_hold;
};

// The buffers a rank's checkpoint holds: its program's persistent buffers
// that are not views into another, in id order; the gradients only while an
// update is pending (schedule.optimizer_beside_forward: the next step's
// AdamW applies them). Otherwise a step's first contribution overwrites its
// gradient buffer, so they are dead between steps (12% of a bf16 job's
// checkpoint, a quarter of an fp32 one's).
std::vector<int> savedBuffers(const RankPlan& program, bool update_pending);

// Throws CheckpointError unless `held` has every buffer savedBuffers(program,
// update_pending) names (more are fine: checkpoints written before gradients
// were left out hold them).
void checkSavedBuffers(const RankPlan& program, bool update_pending, const std::vector<BufferBytes>& held,
                       const std::string& where);

// Writes `snap` of `plan` as DIR/step-NNNNNNNN (manifest last); then keeps
// the newest `keep` complete checkpoints (0: all). Returns the folder.
// Throws CheckpointError naming the path on a failed write.
std::filesystem::path writeCheckpoint(const std::filesystem::path& dir, const Plan& plan, const Snapshot& snap,
                                      int keep, const std::string& tool_version);

// The same in two halves, for runs with a process per rank: each rank
// writes its files and a part record (DIR/step-N/rankR.part.json, written
// last, holding `token`: an identifier of this write that an interrupted
// write of the same step does not have); then one process (rank 0) waits up
// to `wait_s` for every rank's part of this token, writes the manifest,
// removes the parts and keeps the newest `keep`.
void writeRankPart(const std::filesystem::path& dir, const Plan& plan, int64_t step, int rank,
                   const std::vector<BufferBytes>& buffers, const std::string& token,
                   const std::string& rank_state = "");
std::filesystem::path completeCheckpoint(const std::filesystem::path& dir, const Plan& plan, int64_t step,
                                         bool update_pending, int keep, const std::string& tool_version,
                                         const std::string& token, double wait_s);

// The newest complete checkpoint in DIR (one with a manifest), if any.
std::optional<std::filesystem::path> latestCheckpoint(const std::filesystem::path& dir);

// Reads a checkpoint for `plan`: checks the job (content hash) and the
// layout, every file's size and checksum, and returns the snapshot. Throws
// CheckpointError with one line naming what differs: another job, another
// layout it cannot reshard into the job's (reshard.h says which it can, and
// why not the others), a damaged file. Another data-parallel layout with the
// same global batch is read for the plan it was written with and resharded.
Snapshot readCheckpoint(const std::filesystem::path& folder, const Plan& plan);

// What checkpointing cost a run (AsyncWriter::cost): the writes, their
// bytes (this process's files) and time on the writer's thread, and how
// long the step loop waited for a write before it could hand over the next
// snapshot. The copy-out itself (the executor's snapshot()) is the caller's
// to time.
struct WriteCost {
  int writes = 0;
  int64_t bytes = 0;
  double write_s = 0;        // summed over the writes
  double loop_waited_s = 0;  // submit() and wait() waiting for a write in flight
  double gbPerSecond() const { return write_s > 0 ? double(bytes) / write_s / 1e9 : 0; }
};

// The bytes a snapshot's rank parts hold (the whole snapshot's when rank < 0).
int64_t snapshotBytes(const Snapshot& snap, int rank = -1);

// Writes snapshots on a thread of its own, one at a time: the step loop
// hands a snapshot over and goes on; the next submit (or wait) waits for
// the write before.
class AsyncWriter {
 public:
  AsyncWriter(std::filesystem::path dir, const Plan& plan, int keep, std::string tool_version);
  ~AsyncWriter();  // waits for the write in flight
  void submit(Snapshot snap);
  // Waits for the write in flight (counted as the loop's wait) and hands
  // back its snapshot, for the next copy-out to reuse its memory (already
  // touched, and page-locked by the GPU executor); empty when none was
  // written since the last call.
  std::optional<Snapshot> takeWritten();
  // A process per rank: write only `rank`'s part of each snapshot (its entry
  // of snap.ranks); rank 0 then completes the checkpoint, waiting up to
  // wait_s for the other ranks' parts. Call before the first submit.
  void writeRankPartOnly(int rank, std::string token, double wait_s);
  // Waits for the write in flight; rethrows its error.
  void wait();
  // Called on the writer's thread after each completed write (the folder).
  std::function<void(const std::filesystem::path&)> on_written;
  // The writes completed so far (call after wait() for all of them).
  WriteCost cost() const { return cost_; }

 private:
  std::filesystem::path dir_;
  const Plan& plan_;
  int keep_;
  std::string tool_version_;
  std::thread thread_;
  std::exception_ptr error_;
  int part_rank_ = -1;  // -1: every rank of each snapshot, and the manifest
  std::string part_token_;
  double part_wait_s_ = 0;
  WriteCost cost_;  // write_s and bytes written by the writer's thread, read after a join
  std::optional<Snapshot> written_;  // the last snapshot written, set by the writer's thread before it ends
};

}  // namespace tandem::checkpoint
