#include "interposer/runtime.h"

namespace gpuslice::interposer {

std::atomic<bool> g_memory_active{false};

namespace {
Runtime* g_rt = nullptr;
}

Runtime* runtime() { return g_rt; }
void install_runtime(Runtime* rt) { g_rt = rt; }

const config::Settings& settings() { return g_rt->settings; }
shm::Ledger* ledger() { return g_rt == nullptr ? nullptr : g_rt->ledger.load(std::memory_order_acquire); }

}  // namespace gpuslice::interposer
