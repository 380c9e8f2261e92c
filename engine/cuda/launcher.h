#pragma once
// Local multi-GPU launch without any extra service: `tandem run --gpus N`
// re-executes itself N times (under mpirun, srun or torchrun the launcher
// starts the ranks instead: see rendezvous.h) with the rank in the environment; rank 0
// creates the NCCL unique id and hands it to the others through a file in a
// private temporary folder (written to a temp name, then renamed, so a
// reader never sees half an id). If a rank fails or dies, the others get a
// grace period to stop on their own (their NCCL watchdog aborts) and are
// then killed, so the launch never hangs.

#include <string>
#include <vector>

#include "engine/cuda/nccl_comm.h"
#include "engine/cuda/rendezvous.h"

namespace tandem::cuda {

struct RankEnvironment {
  bool launched = false;  // this process is one rank of a local launch
  int rank = 0;
  int world = 1;
  std::string id_file;
};

// Reads TANDEM_RANK, TANDEM_WORLD_SIZE and TANDEM_NCCL_ID_FILE.
RankEnvironment rankEnvironment();

// Starts `world` copies of this executable with `args` (argv[1..]); returns
// 0 when every rank exited 0, else 1 after printing which rank failed.
int launchLocalRanks(int world, const std::vector<std::string>& args, double grace_s);

// Rank 0 creates the id and publishes it; other ranks wait for it (up to timeout_s).
NcclId shareNcclId(const RankEnvironment& env, double timeout_s);

// Any launcher (see rendezvous.h): rank 0 creates the id and hands it over as
// `plan` says (MPI_Bcast or a file); the others receive it, waiting for the
// file up to timeout_s. Throws LaunchError or CudaError.
NcclId shareNcclId(const LaunchInfo& info, const RendezvousPlan& plan, double timeout_s);
// Rank 0, once every rank joined the communicator: removes the id file.
void finishRendezvous(const LaunchInfo& info, const RendezvousPlan& plan);

}  // namespace tandem::cuda
