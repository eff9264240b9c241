# Initial cache for the test builds of `make test` (scripts/test.sh passes it with -C): line tables
# instead of full debug information. Stack traces, sanitizer reports and gdb's backtraces keep file
# and line; a build compiles about a quarter faster. Release packages (make install, packaging/)
# keep the default RelWithDebInfo flags.
set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O2 -g1 -DNDEBUG" CACHE STRING "")
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O2 -g1 -DNDEBUG" CACHE STRING "")
set(CMAKE_C_FLAGS_DEBUG "-O0 -g1" CACHE STRING "")
set(CMAKE_CXX_FLAGS_DEBUG "-O0 -g1" CACHE STRING "")
# The CLI, node daemon, simulated driver and tests in unity batches (CMakeLists.txt,
# GPUSLICE_UNITY_BUILD): half the compile time; the injected libraries are built as they ship.
set(GPUSLICE_UNITY_BUILD ON CACHE BOOL "")
# The GoogleTest programs at -O1 instead of -O2 (tests/CMakeLists.txt): a fifth less compile time
# for their gtest-heavy sources; everything they test stays at the build type's -O2.
set(GPUSLICE_TEST_DRIVER_FLAGS "-O1" CACHE STRING "")
