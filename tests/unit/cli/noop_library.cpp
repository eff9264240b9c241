// A shared library that does nothing: `gpuslice run` tests preload it in place of libgpuslice.so.
extern "C" int gpuslice_test_noop_library_marker() { return 0; }
