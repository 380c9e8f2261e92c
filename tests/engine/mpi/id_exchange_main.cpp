// Run under mpirun by tests/engine/test_rendezvous.cpp: rank 0 makes a
// 128-byte id, mpiBroadcastId (engine/cuda/mpi_exchange.cpp) hands it to every
// rank, and each rank prints what the launcher detection saw and a checksum
// of the id it holds.
#include <unistd.h>

#include <cstdint>
#include <cstdio>

#include "engine/cuda/rendezvous.h"

int main() {
  using namespace tandem::cuda;
  try {
    mpiInit();
    const LaunchInfo info = detectLauncher(processEnvironment());
    IdBlob id{};
    if (info.rank == 0) {
      uint32_t x = uint32_t(getpid()) * 2654435761u + 1;
      for (char& c : id) {
        x = x * 1664525u + 1013904223u;
        c = char(x >> 24);
      }
    }
    id = mpiBroadcastId(id, 0);
    uint64_t h = 1469598103934665603ull;
    for (char c : id) h = (h ^ uint8_t(c)) * 1099511628211ull;
    std::printf("rank %d of %d local %d launcher '%s' id %016llx\n", info.rank, info.world, info.local_rank,
                launcherName(info.launcher), static_cast<unsigned long long>(h));
    mpiFinalize();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
