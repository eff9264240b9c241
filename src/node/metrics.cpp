#include "node/metrics.h"

#include <cmath>
#include <cstdio>
#include <vector>

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

std::vector<Label> gpu_labels(const GpuInfo& gpu) {
  return {{"gpu", std::to_string(gpu.index)}, {"UUID", gpu.uuid}, {"modelName", gpu.name}};
}

std::vector<Label> container_device_labels(const ContainerView& c, const ContainerDevice& d) {
  return {{"container", c.id}, {"gpu", d.gpu ? std::to_string(*d.gpu) : std::string()}, {"UUID", d.uuid}};
}

}  // namespace

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string render_metrics(const NodeView& view, std::string_view version) {
  std::string out;
  out.reserve(1024 + 512 * view.gpus.size() + 1024 * view.containers.size());

  Family(out, "gpuslice_build_info", "gauge", "gpuslice-node build information.")
      .sample({{"version", std::string(version)}}, 1);
  Family(out, "gpuslice_nvml_up", "gauge", "1 if the last NVML probe succeeded.")
      .sample({}, view.gpu_error.empty() ? 1 : 0);

  {
    Family f(out, "gpuslice_gpu_memory_total_bytes", "gauge", "Physical memory of the GPU (NVML).");
    for (const auto& g : view.gpus) f.sample(gpu_labels(g), static_cast<double>(g.memory_total_bytes));
  }
  {
    Family f(out, "gpuslice_gpu_memory_used_bytes", "gauge",
             "Memory in use on the GPU, all processes (NVML).");
    for (const auto& g : view.gpus) f.sample(gpu_labels(g), static_cast<double>(g.memory_used_bytes));
  }
  {
    Family f(out, "gpuslice_gpu_utilization_percent", "gauge", "GPU utilization over NVML's sample period.");
    for (const auto& g : view.gpus) {
      if (g.utilization_percent) f.sample(gpu_labels(g), *g.utilization_percent);
    }
  }
  {
    Family f(out, "gpuslice_gpu_healthy", "gauge", "1 if every NVML query for the GPU succeeds, else 0.");
    for (const auto& g : view.gpus) f.sample(gpu_labels(g), g.healthy ? 1 : 0);
  }

  {
    Family f(out, "gpuslice_container_state_ok", "gauge",
             "1 if the container's shared state and limits file read cleanly, else 0.");
    for (const auto& c : view.containers) f.sample({{"container", c.id}}, c.error.empty() ? 1 : 0);
  }
  {
    Family f(out, "gpuslice_container_processes", "gauge",
             "Live processes registered in the container's state.");
    for (const auto& c : view.containers) {
      if (c.has_state) f.sample({{"container", c.id}}, static_cast<double>(c.processes.size()));
    }
  }
  {
    Family f(out, "gpuslice_container_memory_quota_bytes", "gauge",
             "VRAM quota of the container on the device (absent when unlimited).");
    for (const auto& c : view.containers) {
      for (const auto& d : c.devices) {
        if (d.quota_bytes) f.sample(container_device_labels(c, d), static_cast<double>(*d.quota_bytes));
      }
    }
  }
  {
    Family f(out, "gpuslice_container_memory_used_bytes", "gauge", "VRAM the container's processes hold.");
    for (const auto& c : view.containers) {
      for (const auto& d : c.devices)
        f.sample(container_device_labels(c, d), static_cast<double>(d.used_bytes));
    }
  }
  {
    Family f(out, "gpuslice_container_compute_limit_percent", "gauge",
             "Compute (SM time) limit of the container on the device; 0 = not limited.");
    for (const auto& c : view.containers) {
      for (const auto& d : c.devices) f.sample(container_device_labels(c, d), d.compute_limit);
    }
  }
  {
    Family f(out, "gpuslice_container_compute_utilization_ratio", "gauge",
             "Share of wall time the container's kernels kept the device busy since the previous scan.");
    for (const auto& c : view.containers) {
      for (const auto& d : c.devices) {
        if (d.utilization_ratio) f.sample(container_device_labels(c, d), *d.utilization_ratio);
      }
    }
  }
  {
    Family f(out, "gpuslice_container_refused_allocations_total", "counter",
             "Allocations refused because they would exceed the quota.");
    for (const auto& c : view.containers) {
      for (const auto& d : c.devices) {
        f.sample(container_device_labels(c, d), static_cast<double>(d.refused_allocations));
      }
    }
  }
  return out;
}

}  // namespace gpuslice::node
