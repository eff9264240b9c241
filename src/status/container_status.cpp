#include "status/container_status.h"

#include <algorithm>

#include "common/text.h"
#include "shared_state/layout.h"

namespace gpuslice::status {

ContainerStatus from_snapshot(const shm::Snapshot& snap) {
  ContainerStatus out;
  out.path = snap.path;
  if (snap.priority) out.priority = priority_name(*snap.priority);
  out.held_back_ns = snap.held_back_ns;
  out.node_channel_refused = snap.node_channel_refused;
  if (snap.assigned_priority) out.assigned_priority = priority_name(*snap.assigned_priority);
  out.assignment_refused = snap.assignment_refused;
  for (const shm::DeviceRow& row : snap.devices) {
    DeviceStatus d;
    d.record = row.record;
    copy_row_figures(row, d);
    if (row.compute_limit != shm::kNoComputeLimit) d.compute_limit_percent = row.compute_limit;
    d.busy_ns = 0;
    out.devices.push_back(std::move(d));
  }
  for (const shm::ProcessRow& p : snap.processes) {
    for (std::size_t i = 0; i < out.devices.size(); ++i) {
      *out.devices[i].busy_ns += i < p.busy_ns_by_device.size() ? p.busy_ns_by_device[i] : 0;
    }
  }
  for (const shm::ProcessRow& p : snap.processes) {
    ProcessStatus ps;
    ps.pid = p.pid;
    if (p.host_pid > 0) ps.host_pid = p.host_pid;
    ps.command = p.command;
    for (std::size_t i = 0; i < out.devices.size(); ++i) {
      ProcessDeviceStatus pd;
      pd.record = out.devices[i].record;
      pd.used_bytes = i < p.used_by_device.size() ? p.used_by_device[i] : 0;
      pd.busy_ns = i < p.busy_ns_by_device.size() ? p.busy_ns_by_device[i] : 0;
      std::uint64_t total = *out.devices[i].busy_ns;
      if (total > 0) pd.compute_share = static_cast<double>(*pd.busy_ns) / static_cast<double>(total);
      ps.devices.push_back(pd);
    }
    out.processes.push_back(std::move(ps));
  }
  reject_bad_uuids(out);
  return out;
}

bool reject_bad_uuids(ContainerStatus& status) {
  for (const DeviceStatus& d : status.devices) {
    if (text::is_gpu_uuid(d.uuid)) continue;
    // The bytes themselves stay out of the message: the printers escape, but a log reader may not.
    status.error = "device record " + std::to_string(d.record) +
                   " of the state file has no valid GPU UUID (" + std::to_string(d.uuid.size()) +
                   " bytes that are not GPU-/MIG- and 8-4-4-4-12 hex digits)";
    status.devices.clear();
    status.processes.clear();
    return false;
  }
  return true;
}

void RateTracker::update(ContainerStatus& status, std::uint64_t now_ns) {
  const std::string container = status.id ? *status.id : status.path.value_or("");
  for (std::size_t i = 0; i < status.devices.size(); ++i) {
    DeviceStatus& d = status.devices[i];
    Sample& prev = previous_[container + '\n' + d.uuid];
    const bool have_prev = prev.at_ns != 0 && now_ns > prev.at_ns;
    const double wall = have_prev ? static_cast<double>(now_ns - prev.at_ns) : 0.0;
    if (have_prev && d.refused_allocations >= prev.refused)
      d.refused_in_interval = d.refused_allocations - prev.refused;
    if (have_prev && d.busy_ns && *d.busy_ns >= prev.busy_ns) {
      d.compute_utilization_ratio =
          std::clamp(static_cast<double>(*d.busy_ns - prev.busy_ns) / wall, 0.0, 1.0);
    }
    Sample next;
    next.at_ns = now_ns;
    next.busy_ns = d.busy_ns.value_or(0);
    next.refused = d.refused_allocations;
    for (ProcessStatus& p : status.processes) {
      if (i >= p.devices.size() || !p.devices[i].busy_ns) continue;
      std::uint64_t busy = *p.devices[i].busy_ns;
      next.process_busy_ns[p.pid] = busy;
      auto it = prev.process_busy_ns.find(p.pid);
      // A process new in this interval started from zero busy time.
      std::uint64_t before = it != prev.process_busy_ns.end() ? it->second : 0;
      if (have_prev && busy >= before) {
        p.devices[i].compute_utilization_ratio =
            std::clamp(static_cast<double>(busy - before) / wall, 0.0, 1.0);
      }
    }
    prev = std::move(next);
  }
}

}  // namespace gpuslice::status
