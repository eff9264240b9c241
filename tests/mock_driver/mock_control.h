// Test controls exported by the simulated libcuda (not part of any real driver). Tests and
// benchmarks that load the mock may declare and call them; nothing else should.
#pragma once

extern "C" {

// Back to "before cuInit" in this process: unmaps all simulated memory, gives this process's
// usage back to the shared state and forgets every handle, so the next cuInit reads the
// GPUSLICE_MOCK_* environment again. No other thread may be inside the mock meanwhile.
void gpuslice_mock_reset(void);

// Moves the simulated clock forward (GPUSLICE_MOCK_FAKE_CLOCK only). Returns 0, or -1 when the
// mock is not initialised or runs on the real clock.
int gpuslice_mock_advance_clock_ns(unsigned long long ns);

}  // extern "C"
