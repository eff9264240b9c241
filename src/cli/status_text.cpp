#include "cli/status_text.h"

#include "cli/dra_text.h"
#include "cli/format.h"
#include "cli/mps_text.h"
#include "cli/profile_data.h"
#include "cli/terminal_text.h"

namespace gpuslice::cli {

std::string percent_text(double ratio) {
  char text[16];
  std::snprintf(text, sizeof text, "%.0f%%", 100.0 * ratio);
  return text;
}

std::string index_text(int index) { return index >= 0 ? std::to_string(index) : "-"; }

std::string short_uuid(const std::string& uuid) {
  // GPU-6d6f636b-0000-4000-8000-000000000001 -> 6d6f636b..0001: cards of one model share a prefix.
  std::string_view hex = uuid;
  if (hex.rfind("GPU-", 0) == 0) hex.remove_prefix(4);
  if (hex.size() <= 14) return std::string(hex);
  return std::string(hex.substr(0, 8)) + ".." + std::string(hex.substr(hex.size() - 4));
}

namespace {

std::string share_text(const std::optional<double>& ratio) { return ratio ? percent_text(*ratio) : "-"; }

std::string usage_percent(const status::DeviceStatus& d) {
  if (!d.quota_bytes || *d.quota_bytes == 0) return "-";
  return percent_text(static_cast<double>(d.used_bytes) / static_cast<double>(*d.quota_bytes));
}

}  // namespace

void print_container_text(const status::ContainerStatus& c, std::FILE* out) {
  if (c.path) std::fprintf(out, "State file: %s\n\n", terminal_text(*c.path).c_str());
  if (c.priority) {
    std::fprintf(out, "Priority: %s, held back %.3f s\n\n", terminal_text(*c.priority, 16).c_str(),
                 static_cast<double>(c.held_back_ns) / 1e9);
  }
  if (c.assigned_priority) {
    std::fprintf(out,
                 "Assigned priority: %s (the operator's: the level it runs at when it asks for none, and the "
                 "highest)\n\n",
                 terminal_text(*c.assigned_priority, 16).c_str());
  }
  if (c.assignment_refused) {
    std::fprintf(out,
                 "Assignment: REFUSED (the operator's .assigned file is malformed or unreadable): the "
                 "container runs at low with no compute share; see the process's log\n\n");
  }
  if (c.node_channel_refused) {
    std::fprintf(out,
                 "Node channel: REFUSED (a process found the node directory or its writer directory "
                 "untrustworthy): no compute turns and no priorities with other containers; see the "
                 "process's log\n\n");
  }
  if (c.devices.empty()) {
    std::fprintf(out, "No device is attached yet (no limited process has used a GPU).\n");
  } else {
    bool rates = false;
    for (const auto& d : c.devices) rates = rates || d.compute_utilization_ratio.has_value();
    std::vector<std::string> headers = {"DEV",  "CUDA", "UUID",    "QUOTA",  "GUARANTEE",
                                        "USED", "USE%", "COMPUTE", "REFUSED"};
    if (rates) headers.insert(headers.end(), {"NOW", "REFUSED/INT"});
    Table devices(headers, {true, true, false, true, true, true, true, true, true, true, true});
    for (const auto& d : c.devices) {
      std::vector<std::string> row = {
          index_text(d.record),
          index_text(d.cuda_index),
          d.uuid,
          d.quota_bytes ? format_bytes(*d.quota_bytes) : "unlimited",
          d.guarantee_bytes ? format_bytes(*d.guarantee_bytes) : "none",
          format_bytes(d.used_bytes),
          usage_percent(d),
          d.compute_limit_percent ? std::to_string(*d.compute_limit_percent) + "%" : "none",
          std::to_string(d.refused_allocations)};
      if (rates) {
        row.push_back(share_text(d.compute_utilization_ratio));
        row.push_back(d.refused_in_interval ? std::to_string(*d.refused_in_interval) : "-");
      }
      devices.add_row(row);
    }
    devices.print(out);
    // Borrowing (docs/quota.md, "Guarantees and borrowing"): shown where a container borrowed.
    for (const auto& d : c.devices) {
      if (d.borrowed_bytes == 0 && d.on_host_bytes == 0 && d.reclaim_episodes == 0) continue;
      std::fprintf(out,
                   "device %s: borrowed %s on the device, %s moved to host memory, %s unmovable; %llu "
                   "reclaim episode(s), %s moved in %.1f ms\n",
                   index_text(d.record).c_str(), format_bytes(d.borrowed_bytes).c_str(),
                   format_bytes(d.on_host_bytes).c_str(), format_bytes(status::unmovable_bytes(d)).c_str(),
                   static_cast<unsigned long long>(d.reclaim_episodes), format_bytes(d.reclaim_bytes).c_str(),
                   static_cast<double>(d.reclaim_ns) / 1e6);
    }
    // QUOTA is what is enforced; say so where a cap holds the request below what was asked.
    for (const auto& d : c.devices) {
      if (d.quota_cap_bytes && d.quota_bytes && *d.quota_bytes == *d.quota_cap_bytes &&
          d.requested_quota_bytes.value_or(~0ULL) > *d.quota_cap_bytes) {
        std::fprintf(out, "device %s: requested %s, capped to %s by the container's limits file\n",
                     index_text(d.record).c_str(),
                     d.requested_quota_bytes ? format_bytes(*d.requested_quota_bytes).c_str() : "unlimited",
                     format_bytes(*d.quota_cap_bytes).c_str());
      }
    }
  }
  std::fprintf(out, "\n");
  if (c.processes.empty()) {
    std::fprintf(out, "No live process.\n");
    return;
  }
  Table processes({"PID", "HOST PID", "DEV", "USED", "SHARE", "COMMAND"},
                  {true, true, true, true, true, false});
  for (const auto& p : c.processes) {
    std::string host = p.host_pid ? std::to_string(*p.host_pid) : "-";
    std::string command = terminal_text(p.command, 64);
    if (p.devices.empty()) processes.add_row({std::to_string(p.pid), host, "-", "-", "-", command});
    for (const auto& pd : p.devices) {
      processes.add_row({std::to_string(p.pid), host, index_text(pd.record), format_bytes(pd.used_bytes),
                         share_text(pd.compute_share), command});
    }
  }
  processes.print(out);
}

void print_view_text(const StatusView& view, bool node, std::FILE* out) {
  if (!node) {
    for (const auto& c : view.containers) print_container_text(c, out);
    return;
  }
  if (view.mps) {
    print_mps_text(*view.mps, out);
    std::fprintf(out, "\n");
  }
  if (view.dra) {
    print_dra_text(*view.dra, out);
    std::fprintf(out, "\n");
  }
  if (view.containers.empty()) std::fprintf(out, "No container on this node.\n");
  for (const auto& c : view.containers) {
    std::string title = "Container " + (c.id ? *c.id : std::string("?"));
    if (c.pod_name)
      title += "  pod " + (c.pod_namespace ? *c.pod_namespace + "/" : std::string()) + *c.pod_name;
    std::fprintf(out, "== %s\n", terminal_text(title, 200).c_str());
    if (c.error) {
      std::fprintf(out, "error: %s\n\n", terminal_text(*c.error, 300).c_str());
      continue;
    }
    if (!c.has_state) {
      std::fprintf(out, "No state yet (no process has used CUDA).\n\n");
      continue;
    }
    status::ContainerStatus shown = c;
    shown.path.reset();
    print_container_text(shown, out);
    std::fprintf(out, "\n");
  }
}

}  // namespace gpuslice::cli
