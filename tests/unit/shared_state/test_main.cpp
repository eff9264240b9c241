// The shared-state test binary doubles as the stress test's worker process, so that workers
// start fresh (exec) instead of inheriting a threaded parent through fork.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace gpuslice::shm {
int run_stress_worker(const char* path, unsigned seed);
}

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--stress-worker") == 0) {
    return gpuslice::shm::run_stress_worker(argv[2],
                                            static_cast<unsigned>(std::strtoul(argv[3], nullptr, 10)));
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
