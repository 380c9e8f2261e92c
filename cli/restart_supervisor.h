#pragma once
// Self-healing runs (`--restarts K`, issue 51): the command runs again as a
// child process of this one, and when it dies (killed, a CUDA or NCCL
// error, any non-zero exit) it is started again with --resume, from the
// newest complete checkpoint, at most K times. Each restart is said on the
// output; the child learns its attempt from TANDEM_RESTART_ATTEMPT (0 for
// the first), which `tandem run` records in its trace.
//
// Under torchrun or srun their own restart flags do the same
// (`torchrun --max-restarts K`, `srun --requeue` with the job's own retry);
// the command they start needs --resume and a checkpoint folder.

#include <cstdio>
#include <string>
#include <vector>

namespace tandem::cli {

// The attempt this process is (TANDEM_RESTART_ATTEMPT), 0 when not supervised.
int restartAttempt();

// Runs this program with `args` (a command line without --restarts) until
// it exits 0 or has been restarted `restarts` times; attempts after the
// first get --resume appended (unless `args` has it). Returns the last
// attempt's exit status (128 + the signal for a killed child).
int runWithRestarts(const std::vector<std::string>& args, int restarts, std::FILE* out);

// Tests of the supervision: TANDEM_TEST_KILL_AFTER_STEPS="N1,N2,...": the
// i-th attempt kills itself with SIGKILL once step Ni is done. Called after
// every step.
void testKillAfterStep(int step);

}  // namespace tandem::cli
