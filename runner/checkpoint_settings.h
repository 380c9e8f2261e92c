#pragma once
// What `tandem run` asks of checkpoints, apart from the rank session that
// carries them out (runner/rank_session.h): the CLI reads these flags in
// builds without CUDA too.

#include <string>

namespace tandem::runner {

// Checkpoints of a GPU run (engine/checkpoint/checkpoint.h): written every
// `every` steps (the GPU idle while the state is copied out, the files
// written on a thread of their own while the next steps run), the newest
// `keep` kept; `resume` continues from the newest complete one.
struct CheckpointSettings {
  std::string dir;
  int every = 0;
  int keep = 0;
  bool resume = false;
  // The run stops before the end of its schedule (tandem run --stop-after):
  // its last step is saved too, wherever it falls.
  bool save_last = false;
  // Ranks of one run in processes of their own: each writes its part, rank
  // 0 the manifest once every part is there (waiting this long for them).
  double wait_for_parts_s = 600;
  // The replica check (CudaExecutor::checkReplicas) after every N steps; 0:
  // off. A mismatch stops the run (ReplicaMismatchError).
  int check_replicas_every = 0;
  // Tests of the replica check (TANDEM_TEST_FLIP_BIT=RANK:STEP): that rank
  // flips one bit of its first replicated parameter after that step.
  int flip_rank = -1, flip_after_step = 0;
};

}  // namespace tandem::runner
