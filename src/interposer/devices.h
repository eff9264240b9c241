// The device table: a CUDA device is described (UUID, memory) and attached to the container
// ledger on first use, with the limits that apply to it. This is the interposer's one place for
// the limits rule: the ledger record keeps the request (environment, `gpuslice set`) and the
// read-only file's cap apart and enforces min(request, cap) (shm::effective_quota); this module
// hands it the caps whenever a device attaches and whenever the file changes.
#pragma once

#include <cstdint>

#include "abi/cuda_abi.h"
#include "interposer/runtime.h"

namespace gpuslice::interposer {

// State of a CUDA device (ordinal), attached to the ledger on first use; null if out of range or
// the driver cannot describe it. A device with ledger_dev < 0 is not limited.
DeviceState* device_state(CUdevice dev);
// The state of a device that was already attached, without attaching it; null otherwise.
DeviceState* device_state_if_attached(CUdevice dev);
// The device of the calling thread's current context, or null when there is none.
DeviceState* current_device_state(CUdevice* out_dev = nullptr);

// Whether every device ordinal a limit variable names exists in this process (asked once the
// driver is initialised); false after logging, per variable, which device it names and how many the
// process sees. A limit for a device the container does not have means its configuration is wrong
// (the device it has may be left unlimited): the caller fails closed. Under CUDA_VISIBLE_DEVICES
// the process chose a subset, so an absent device is only reported (true).
bool named_devices_exist();

// Whether, for every device this process sees, the memory guarantee asked for is at most the limit
// asked for, and the limits file's at most its own (asked once the driver is initialised); false
// after logging each device where it is not, naming both values. The caller fails closed.
bool guarantees_within_limits();

// Finds or attaches the ledger record of a device known by UUID only (NVML callers), with its
// request and cap; the record index, -1 if not limited, -2 if the ledger refused it.
int attach_limits(const char* uuid, int cuda_index, std::uint64_t physical_total);

// Re-reads the limits file when it changed (mtime, ctime, inode or size) and applies its caps to
// every attached device; gives a record to a ready device that had no limit once a cap covers it.
// A malformed file keeps the previous caps (and says so). True when this process has no ledger yet
// and the file now caps something: the caller opens the ledger and calls again. Watcher thread.
bool refresh_limits_file();

}  // namespace gpuslice::interposer
