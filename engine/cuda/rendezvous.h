#pragma once
// How the ranks of `tandem run` find each other. No CUDA here (the tests run
// on machines without a GPU):
//
// - Launcher detection: which launcher started this process (tandem's own
//   `--gpus N`, Open MPI's mpirun, MPICH/Hydra or another PMI launcher, Slurm's
//   srun, torchrun) and the rank, world size and local rank it gives.
// - The NCCL unique id (128 bytes) travels from rank 0 to the others either
//   through MPI_Bcast (when tandem is built with MPI, see mpi_exchange.cpp) or
//   through a file in a folder every rank can see: rank 0 writes it to a temp
//   name and renames it (a reader never sees half an id), the others poll
//   for it until a deadline.

#include <array>
#include <functional>
#include <stdexcept>
#include <string>

namespace tandem::cuda {

// A launch or rendezvous problem, worded as one line for the user.
class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Launcher { None, Tandem, OpenMpi, Mpich, Slurm, Torchrun };

// "Open MPI (mpirun)", "Slurm (srun)", ...
const char* launcherName(Launcher l);

struct LaunchInfo {
  Launcher launcher = Launcher::None;
  int rank = 0;
  int world = 1;
  int local_rank = -1;   // rank on this host (picks the GPU); -1: not given
  std::string id_file;   // Tandem only: where rank 0 puts the NCCL id
  std::string job_key;   // the launcher's job id when it has one ("" otherwise)
  bool launched() const { return launcher != Launcher::None; }
  bool external() const { return launcher != Launcher::None && launcher != Launcher::Tandem; }
};

// Looks a variable up; nullptr when unset. The default reads the process environment.
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup processEnvironment();

// Reads the launcher variables, in this order (the first complete set wins):
//   TANDEM_RANK, TANDEM_WORLD_SIZE, TANDEM_NCCL_ID_FILE          (tandem run --gpus N)
//   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK  (Open MPI)
//   PMI_RANK, PMI_SIZE, MPI_LOCALRANKID (or PMI_LOCAL_RANK)      (MPICH / Hydra / PMI)
//   SLURM_PROCID, SLURM_STEP_NUM_TASKS (or SLURM_NTASKS), SLURM_LOCALID  (srun)
//   RANK, WORLD_SIZE, LOCAL_RANK                                  (torchrun)
// MPI's variables come before Slurm's: mpirun inside a Slurm allocation sees
// both. A Slurm allocation without a job step (the batch script or an salloc
// shell: SLURM_JOB_ID set, SLURM_STEP_ID not) is not a launch. Throws
// LaunchError for values that are not integers or that contradict each other
// (rank >= world size, ...).
LaunchInfo detectLauncher(const EnvLookup& env);

// The folder the ranks meet in when --rendezvous is not given: under srun
// $SLURM_SUBMIT_DIR/.tandem-rendezvous/$SLURM_JOB_ID.$SLURM_STEP_ID, else "".
std::string defaultRendezvousDir(const LaunchInfo& info, const EnvLookup& env);

// The id file inside a rendezvous folder (named after the launcher's job id
// when there is one, so two jobs sharing a folder do not meet).
std::string rendezvousFile(const std::string& dir, const LaunchInfo& info);

// The world size of the run: the launcher's, which `--gpus` (0: not given)
// must then equal; without a launcher `--gpus` or `job_world`. Throws LaunchError.
int launchWorldSize(const LaunchInfo& info, int gpus_flag, int job_world);

// How this rank gets the NCCL id.
struct RendezvousPlan {
  bool needed = false;     // world > 1
  bool mpi = false;        // MPI_Bcast (mpirun and tandem built with MPI)
  std::string file;        // else: the id file rank 0 writes and the others read
  bool remove_dir = false; // rank 0 also removes the file's folder (the srun default)
  std::string describe() const;  // "MPI_Bcast", "file /x/nccl-id"
};

// Picks the exchange: tandem's own id file; `rendezvous_dir` (--rendezvous)
// when given; MPI under mpirun when built in; the srun default folder; else
// throws LaunchError naming --rendezvous.
RendezvousPlan planRendezvous(const LaunchInfo& info, const std::string& rendezvous_dir, const EnvLookup& env);

using IdBlob = std::array<char, 128>;

// Rank 0: writes the blob to `path` atomically (temp file in the same folder,
// then rename), creating the folder when needed. Throws LaunchError.
void publishId(const std::string& path, const IdBlob& id);
// Other ranks: waits until `path` holds a complete blob, up to timeout_s.
// Throws LaunchError naming the file and the time waited.
IdBlob waitForId(const std::string& path, int rank, double timeout_s);
// Rank 0, once every rank has the id: removes the file (and the folder when
// `remove_dir` and it is empty). Never throws.
void removeId(const std::string& path, bool remove_dir);

// MPI (mpi_exchange.cpp): built in only with TANDEM_WITH_MPI. Without it
// mpiBuiltIn() is false and the others throw LaunchError.
bool mpiBuiltIn();
void mpiInit();                                   // MPI_Init unless initialised already
IdBlob mpiBroadcastId(const IdBlob& id, int root);  // MPI_Bcast over MPI_COMM_WORLD
void mpiFinalize();                               // MPI_Finalize when mpiInit initialised it

}  // namespace tandem::cuda
