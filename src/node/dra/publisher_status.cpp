#include "node/dra/publisher_status.h"

#include "node/api/metrics.h"

namespace gpuslice::node::dra {

using nlohmann::json;

std::string render_publisher_metrics(const PublisherStatus& st, const std::string& node) {
  const std::string n = "node=\"" + escape_label_value(node) + "\"";
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  family("gpuslice_dra_publish_failures_total", "counter",
         "Rounds of the ResourceSlice publisher that failed since the daemon started.");
  out += "gpuslice_dra_publish_failures_total{" + n + "} " + std::to_string(st.failures) + "\n";
  family("gpuslice_dra_publish_failing", "gauge",
         "1 while the ResourceSlice publisher fails, labelled with the cause (lease, unreachable, forbidden, "
         "write-rejected, layout-refused, fields-dropped, conflict, list).");
  out += "gpuslice_dra_publish_failing{" + n + ",cause=\"" + escape_label_value(st.cause) + "\"} " +
         (st.consecutive_failures > 0 ? "1" : "0") + "\n";
  family("gpuslice_dra_slice_layout", "gauge",
         "The ResourceSlice layout the API server keeps (1 for the one in use).");
  out += "gpuslice_dra_slice_layout{" + n + ",layout=\"" + std::string(layout_name(st.layout)) + "\"} " +
         (st.layout_known ? "1" : "0") + "\n";
  family("gpuslice_dra_fractions_schedulable", "gauge",
         "1 if the scheduler can give claims fractions of a GPU as published; 0 when the API server keeps no "
         "consumable capacity (each GPU goes to one claim).");
  out += "gpuslice_dra_fractions_schedulable{" + n + "} " + (st.fractions_schedulable ? "1" : "0") + "\n";
  family("gpuslice_dra_layout_degraded", "gauge",
         "1 while the layout is poorer than the one asked for, labelled with the reason of the Event on the "
         "Node (GpusliceFractionsNotEnforceable, GpusliceWholeGpuDevicesNotPublished).");
  out += "gpuslice_dra_layout_degraded{" + n + ",reason=\"" + escape_label_value(st.degraded_reason) +
         "\"} " + (st.degraded_reason.empty() ? "0" : "1") + "\n";
  family("gpuslice_dra_pool_generation", "gauge", "The generation of this node's ResourceSlice pool.");
  out += "gpuslice_dra_pool_generation{" + n + "} " + std::to_string(st.generation) + "\n";
  family("gpuslice_dra_leader", "gauge", "1 while this daemon holds the node's publishing Lease.");
  out += "gpuslice_dra_leader{" + n + "} " + (st.leader ? "1" : "0") + "\n";
  return out;
}

namespace {

json text_or_null(const std::string& text) { return text.empty() ? json(nullptr) : json(text); }

}  // namespace

json publisher_status_json(const PublisherStatus& st) {
  return {{"leader", st.leader},
          {"published", st.published},
          {"layout", st.layout_known ? json(layout_name(st.layout)) : json(nullptr)},
          {"fractions_schedulable", st.fractions_schedulable},
          {"whole_gpu_devices", st.partitionable},
          {"degraded", st.degraded_reason.empty()
                           ? json(nullptr)
                           : json{{"reason", st.degraded_reason}, {"message", st.degraded_message}}},
          {"node_events", st.node_events},
          {"node_event_error", text_or_null(st.node_event_error)},
          {"pool_generation", st.generation},
          {"publishing",
           {{"failing", st.consecutive_failures > 0},
            {"cause", text_or_null(st.cause)},
            {"error", text_or_null(st.error)},
            {"failures", st.failures},
            {"consecutive_failures", st.consecutive_failures},
            {"next_retry_ms", st.next_wait.count()}}}};
}

}  // namespace gpuslice::node::dra
