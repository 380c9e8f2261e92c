// The only MPI code of tandem: handing the NCCL id from rank 0 to the others
// with MPI_Bcast when the ranks were started by mpirun. Compiled with
// TANDEM_HAVE_MPI only when the build found MPI (TANDEM_WITH_MPI); otherwise
// the functions say MPI is not built in.
#include "engine/cuda/rendezvous.h"

#ifdef TANDEM_HAVE_MPI
#include <mpi.h>

#include <string>

namespace tandem::cuda {

namespace {

bool g_initialised_here = false;

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw LaunchError(std::string(what) + " failed: " + text);
}

}  // namespace

bool mpiBuiltIn() { return true; }

void mpiInit() {
  int initialised = 0;
  check(MPI_Initialized(&initialised), "MPI_Initialized");
  if (initialised) return;
  check(MPI_Init(nullptr, nullptr), "MPI_Init");
  g_initialised_here = true;
}

IdBlob mpiBroadcastId(const IdBlob& id, int root) {
  IdBlob out = id;
  check(MPI_Bcast(out.data(), int(out.size()), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast of the NCCL id");
  return out;
}

void mpiFinalize() {
  if (!g_initialised_here) return;
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised) MPI_Finalize();
  g_initialised_here = false;
}

}  // namespace tandem::cuda

#else

namespace tandem::cuda {

namespace {
[[noreturn]] void notBuilt() {
  throw LaunchError("this tandem was built without MPI (configure with -DTANDEM_WITH_MPI=ON where Open MPI is "
                    "installed, or use --rendezvous DIR)");
}
}  // namespace

bool mpiBuiltIn() { return false; }
void mpiInit() { notBuilt(); }
IdBlob mpiBroadcastId(const IdBlob&, int) { notBuilt(); }
void mpiFinalize() {}

}  // namespace tandem::cuda

#endif
