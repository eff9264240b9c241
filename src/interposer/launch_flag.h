// The one flag the launch hooks test before the launch gate (launch_gate.h): on while the container
// takes part in priority sharing or some device has a compute limit, so that an unlimited process
// pays one predictable branch per launch. The features behind the gate raise it; it is a header of
// its own so that they do not include the gate that calls them.
#pragma once

#include <atomic>

namespace gpuslice::interposer {

extern std::atomic<bool> g_launch_gated;

inline bool launch_gated() { return g_launch_gated.load(std::memory_order_relaxed); }

namespace launch_flag {
// A feature that needs the launches from now on (a limit or a level set at start or live) turns the
// flag on; it stays on for the life of the process.
inline void turn_on() { g_launch_gated.store(true, std::memory_order_relaxed); }
}  // namespace launch_flag

}  // namespace gpuslice::interposer
