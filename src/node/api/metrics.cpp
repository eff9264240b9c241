#include "node/api/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/escape.h"
#include "status/container_status.h"

namespace gpuslice::node {
namespace {

struct Label {
  const char* name;
  std::string value;
};

class Family {
 public:
  Family(std::string& out, const char* name, const char* type, const char* help) : out_(out), name_(name) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }

  void sample(const std::vector<Label>& labels, double value) {
    out_ += name_;
    if (!labels.empty()) {
      out_ += '{';
      for (std::size_t i = 0; i < labels.size(); ++i) {
        if (i) out_ += ',';
        out_ += labels[i].name;
        out_ += "=\"";
        out_ += escape_label_value(labels[i].value);
        out_ += '"';
      }
      out_ += '}';
    }
    out_ += ' ';
    out_ += format(value);
    out_ += '\n';
  }

 private:
  static std::string format(double value) {
    if (std::isnan(value)) return "NaN";
    if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
    // Integers (byte counts) print exactly; below 2^53 a double holds them exactly.
    if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.0f", value);
      return buf;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", value);
    return buf;
  }

  std::string& out_;
  const char* name_;
};

std::vector<Label> gpu_labels(const NodeView& view, const GpuInfo& gpu) {
  return {
      {"node", view.node}, {"gpu", std::to_string(gpu.index)}, {"uuid", gpu.uuid}, {"model_name", gpu.name}};
}

std::vector<Label> container_labels(const NodeView& view, const ContainerView& c) {
  return {{"node", view.node},
          {"gpuslice_allocation", c.id},
          {"namespace", c.owner.namespace_name},
          {"pod", c.owner.pod},
          {"container", c.owner.container}};
}

std::vector<Label> container_device_labels(const NodeView& view, const ContainerView& c,
                                           const ContainerDevice& d) {
  std::vector<Label> labels = container_labels(view, c);
  labels.push_back({"gpu", d.gpu ? std::to_string(*d.gpu) : std::string()});
  labels.push_back({"uuid", d.uuid});
  return labels;
}

std::vector<Label> with(std::vector<Label> labels, const char* name, std::string value) {
  labels.push_back({name, std::move(value)});
  return labels;
}

// Length of the well-formed UTF-8 sequence `s` starts with (Unicode table 3-7), 0 when it starts none.
std::size_t utf8_sequence(std::string_view s) {
  auto byte = [&s](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xbf;  // the second byte's range, narrower after some leads
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;   // overlong
    if (lead == 0xed) high = 0x9f;  // surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;   // overlong
    if (lead == 0xf4) high = 0x8f;  // above U+10FFFF
  } else {
    return 0;  // a continuation byte, C0/C1 (overlong) or F5..FF
  }
  if (s.size() < length || byte(1) < low || byte(1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  }
  return length;
}

// Memory that follows priority (docs/quota.md, "Guarantees and borrowing"): per container device
// with a guarantee or anything borrowed, its guarantee, what it borrowed, moved to host memory and
// cannot move, and its reclaim episodes.
void render_reclaim(std::string& out, const NodeView& view) {
  {
    Family f(out, "gpuslice_container_memory_guarantee_bytes", "gauge",
             "Memory guarantee of the container on the device (absent when none).");
    for (const auto& c : view.containers) {
      for (const auto& d : c.devices) {
        if (d.guarantee_bytes)
          f.sample(container_device_labels(view, c, d), static_cast<double>(*d.guarantee_bytes));
      }
    }
  }
  struct Figure {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const ContainerDevice&);
  };
  static constexpr Figure kFigures[] = {
      {"gpuslice_container_memory_borrowed_bytes", "gauge",
       "Of the memory used, what the container borrowed above its guarantee (movable to host memory).",
       [](const ContainerDevice& d) { return static_cast<double>(d.borrowed_bytes); }},
      {"gpuslice_container_memory_on_host_bytes", "gauge",
       "Borrowed memory a reclaim moved to host memory and has not brought back yet.",
       [](const ContainerDevice& d) { return static_cast<double>(d.on_host_bytes); }},
      {"gpuslice_container_memory_unmovable_bytes", "gauge",
       "Of the memory used, what no reclaim moves (used less borrowed).",
       [](const ContainerDevice& d) { return static_cast<double>(status::unmovable_bytes(d)); }},
      {"gpuslice_container_reclaim_episodes_total", "counter",
       "Times the container gave borrowed memory back to a guaranteed or higher-priority one.",
       [](const ContainerDevice& d) { return static_cast<double>(d.reclaim_episodes); }},
      {"gpuslice_container_reclaim_bytes_total", "counter",
       "Borrowed memory the container's reclaim episodes moved to host memory.",
       [](const ContainerDevice& d) { return static_cast<double>(d.reclaim_bytes); }},
      {"gpuslice_container_reclaim_seconds_total", "counter", "Time the container's reclaim episodes took.",
       [](const ContainerDevice& d) { return static_cast<double>(d.reclaim_ns) / 1e9; }},
  };
  for (const Figure& figure : kFigures) {
    Family f(out, figure.name, figure.type, figure.help);
    for (const auto& c : view.containers) {
      for (const auto& d : c.devices) {
        if (status::reclaim_applies(d)) f.sample(container_device_labels(view, c, d), figure.value(d));
      }
    }
  }
}

}  // namespace

std::string valid_utf8(std::string_view text, std::size_t max_bytes) {
  static constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD
  std::string out;
  out.reserve(std::min(text.size(), max_bytes));
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t n = utf8_sequence(text.substr(i));
    // One U+FFFD per byte that starts no sequence, as Prometheus's own (Go) decoder counts them.
    const std::string_view piece = n ? text.substr(i, n) : kReplacement;
    if (out.size() + piece.size() > max_bytes) break;
    out += piece;
    i += n ? n : 1;
  }
  return out;
}

std::string escape_label_value(std::string_view raw) {
  return text::escape_chars(valid_utf8(raw, kMaxLabelValueBytes),
                            {{'\\', "\\\\"}, {'"', "\\\""}, {'\n', "\\n"}});
}

std::string render_metrics(const NodeView& view, std::string_view version) {
  std::string out;
  out.reserve(2048 + 512 * view.gpus.size() + 2048 * view.containers.size());
  const std::vector<Label> node = {{"node", view.node}};

  Family(out, "gpuslice_build_info", "gauge", "gpuslice-node build information.")
      .sample(with(node, "version", std::string(version)), 1);
  Family(out, "gpuslice_nvml_up", "gauge", "1 if the last NVML probe succeeded.")
      .sample(node, view.gpu_error.empty() ? 1 : 0);
  if (view.podresources != AttributionState::Off) {
    Family(out, "gpuslice_podresources_up", "gauge",
           "1 if the last List of the kubelet's PodResources API succeeded.")
        .sample(node, view.podresources == AttributionState::Up ? 1 : 0);
  }
  Family(out, "gpuslice_containers_removed_total", "counter",
         "Container directories removed by garbage collection since the daemon started.")
      .sample(node, static_cast<double>(view.containers_removed));
  if (view.podresources != AttributionState::Off) {
    Family(out, "gpuslice_gc_failures_total", "counter",
           "Released container directories garbage collection could not remove (logged; the "
           "container's state is error).")
        .sample(node, static_cast<double>(view.gc_failures));
    Family(out, "gpuslice_gc_held_back", "gauge",
           "1 while no directory is removed because the kubelet's answer is empty or younger than the "
           "grace period.")
        .sample(node, view.gc_held_back.empty() ? 0 : 1);
  }

  if (view.mps) {
    {
      Family f(
          out, "gpuslice_mps_state", "gauge",
          "State of the node's MPS control daemon as gpuslice manages it (--mps), one series per state.");
      for (const char* name : mps::kMpsStateNames)
        f.sample(with(node, "state", name),
                 std::string_view(mps::mps_state_name(view.mps->state)) == name ? 1 : 0);
    }
    Family(out, "gpuslice_mps_restarts_total", "counter",
           "MPS control daemons that ended (or stopped answering) and were started again.")
        .sample(node, static_cast<double>(view.mps->restarts));
    Family(out, "gpuslice_mps_servers", "gauge", "MPS servers the control daemon lists (get_server_list).")
        .sample(node, static_cast<double>(view.mps->server_pids.size()));
  }

  if (view.device_plugin) {
    {
      Family f(out, "gpuslice_device_plugin_state", "gauge",
               "Registration state of the device plugin with the kubelet, one series per state.");
      for (const auto& p : view.plugins) {
        for (RegistrationState state : kRegistrationStates) {
          f.sample(with(with(node, "resource", p.resource), "state", registration_state_name(state)),
                   p.state == state ? 1 : 0);
        }
      }
    }
    {
      Family f(out, "gpuslice_device_plugin_registered", "gauge",
               "1 while the device plugin is registered with the kubelet.");
      for (const auto& p : view.plugins) {
        f.sample(with(node, "resource", p.resource), p.state == RegistrationState::Registered ? 1 : 0);
      }
    }
    {
      Family f(out, "gpuslice_device_plugin_vram_unit_bytes", "gauge",
               "Memory per device of a vram resource (--vram-unit; auto derives it from the node's VRAM).");
      for (const auto& p : view.plugins) {
        if (p.unit_bytes != 0)
          f.sample(with(node, "resource", p.resource), static_cast<double>(p.unit_bytes));
      }
    }
    {
      Family f(out, "gpuslice_device_plugin_registrations_total", "counter",
               "Successful registrations with the kubelet (one more after each kubelet restart).");
      for (const auto& p : view.plugins) f.sample(with(node, "resource", p.resource), p.registrations);
    }
  }

  {
    Family f(out, "gpuslice_gpu_memory_total_bytes", "gauge", "Physical memory of the GPU (NVML).");
    for (const auto& g : view.gpus) f.sample(gpu_labels(view, g), static_cast<double>(g.memory_total_bytes));
  }
  {
    Family f(out, "gpuslice_gpu_memory_used_bytes", "gauge",
             "Memory in use on the GPU, all processes (NVML).");
    for (const auto& g : view.gpus) f.sample(gpu_labels(view, g), static_cast<double>(g.memory_used_bytes));
  }
  {
    Family f(out, "gpuslice_gpu_utilization_percent", "gauge", "GPU utilization over NVML's sample period.");
    for (const auto& g : view.gpus) {
      if (g.utilization_percent) f.sample(gpu_labels(view, g), *g.utilization_percent);
    }
  }
  {
    Family f(out, "gpuslice_gpu_healthy", "gauge", "1 if every NVML query for the GPU succeeds, else 0.");
    for (const auto& g : view.gpus) f.sample(gpu_labels(view, g), g.healthy ? 1 : 0);
  }

  {
    Family f(out, "gpuslice_container_state", "gauge",
             "State of the container directory, one series per state: ok, error (unreadable, skipped), "
             "released (no longer allocated by the kubelet).");
    for (const auto& c : view.containers) {
      for (ContainerState state : kContainerStates) {
        f.sample(with(container_labels(view, c), "state", container_state_name(state)),
                 c.state == state ? 1 : 0);
      }
    }
  }
  {
    Family f(out, "gpuslice_container_processes", "gauge",
             "Live processes registered in the container's state.");
    for (const auto& c : view.containers) {
      if (c.has_state) f.sample(container_labels(view, c), static_cast<double>(c.processes.size()));
    }
  }
  {
    Family f(out, "gpuslice_container_memory_quota_bytes", "gauge",
             "VRAM quota of the container on the device (absent when unlimited).");
    for (const auto& c : view.containers) {
      for (const auto& d : c.devices) {
        if (d.quota_bytes) f.sample(container_device_labels(view, c, d), static_cast<double>(*d.quota_bytes));
      }
    }
  }
  {
    Family f(out, "gpuslice_container_memory_used_bytes", "gauge", "VRAM the container's processes hold.");
    for (const auto& c : view.containers) {
      for (const auto& d : c.devices)
        f.sample(container_device_labels(view, c, d), static_cast<double>(d.used_bytes));
    }
  }
  render_reclaim(out, view);
  {
    Family f(out, "gpuslice_container_compute_limit_percent", "gauge",
             "Compute (SM time) limit of the container on the device; 0 = not limited.");
    for (const auto& c : view.containers) {
      for (const auto& d : c.devices) f.sample(container_device_labels(view, c, d), d.compute_limit);
    }
  }
  {
    Family f(out, "gpuslice_container_compute_utilization_ratio", "gauge",
             "Share of wall time the container's kernels kept the device busy since the previous scan.");
    for (const auto& c : view.containers) {
      for (const auto& d : c.devices) {
        if (d.utilization_ratio) f.sample(container_device_labels(view, c, d), *d.utilization_ratio);
      }
    }
  }
  {
    Family f(out, "gpuslice_container_priority", "gauge",
             "Priority of the container among those sharing a GPU: 0 low, 1 normal, 2 high (absent when "
             "not set).");
    for (const auto& c : view.containers) {
      // The documented scale starts at 0 for low.
      if (c.has_state && c.priority)
        f.sample(container_labels(view, c), static_cast<double>(priority_value(*c.priority) - 1));
    }
  }
  {
    Family f(out, "gpuslice_container_held_back_seconds_total", "counter",
             "Time the container's kernel launches were held back by higher-priority containers.");
    for (const auto& c : view.containers) {
      if (c.has_state && c.priority)
        f.sample(container_labels(view, c), static_cast<double>(c.held_back_ns) / 1e9);
    }
  }
  {
    Family f(out, "gpuslice_container_node_channel_refused", "gauge",
             "1 when a process of the container had its node channel refused (an untrustworthy node or "
             "writer directory): it takes no compute turns and no priorities with other containers.");
    for (const auto& c : view.containers) {
      if (c.has_state) f.sample(container_labels(view, c), c.node_channel_refused ? 1.0 : 0.0);
    }
  }
  {
    Family f(out, "gpuslice_container_refused_allocations_total", "counter",
             "Allocations refused because they would exceed the quota.");
    for (const auto& c : view.containers) {
      for (const auto& d : c.devices) {
        f.sample(container_device_labels(view, c, d), static_cast<double>(d.refused_allocations));
      }
    }
  }
  out += view.extra_metrics;
  return out;
}

}  // namespace gpuslice::node
