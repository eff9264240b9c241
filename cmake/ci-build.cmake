# Initial cache for the test builds of `make test` (scripts/test.sh passes it with -C): line tables
# instead of full debug information. Stack traces, sanitizer reports and gdb's backtraces keep file
# and line; a build compiles about a quarter faster. Release packages (make install, packaging/)
# keep the default RelWithDebInfo flags.
set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O2 -g1 -DNDEBUG" CACHE STRING "")
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O2 -g1 -DNDEBUG" CACHE STRING "")
set(CMAKE_C_FLAGS_DEBUG "-O0 -g1" CACHE STRING "")
set(CMAKE_CXX_FLAGS_DEBUG "-O0 -g1" CACHE STRING "")
