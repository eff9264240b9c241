#include "cli/profile_trace.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace gpuslice::cli {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxLanes = 256;

double micros(std::uint64_t ns, std::uint64_t origin) { return static_cast<double>(ns - origin) / 1000.0; }

}  // namespace

std::string memcpy_direction(std::string_view api) {
  for (std::string_view dir : {"H2D", "D2H", "D2D", "H2H"}) {
    std::string name = "cuMemcpy" + std::string(dir);
    if (api == name) return std::string(dir);
  }
  return {};
}

std::uint64_t trace_origin(const ProfileData& data) {
  std::uint64_t origin = ~0ULL;
  for (const ProfileCall& call : data.calls) origin = std::min(origin, call.start_ns);
  for (const RefusedAllocation& r : data.refusals) origin = std::min(origin, r.time_ns);
  return origin == ~0ULL ? 0 : origin;
}

std::vector<CallTrack> assign_tracks(const ProfileData& data) {
  std::vector<CallTrack> tracks(data.calls.size());
  std::vector<std::size_t> order(data.calls.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return data.calls[a].start_ns < data.calls[b].start_ns;
  });
  std::vector<std::uint64_t> lane_end;  // per lane, when its last call ended
  for (std::size_t i : order) {
    const ProfileCall& call = data.calls[i];
    if (call.pid) {
      tracks[i] = {static_cast<std::int64_t>(*call.pid),
                   static_cast<std::int64_t>(call.tid ? *call.tid : *call.pid)};
      continue;
    }
    std::size_t lane = 0;
    while (lane < lane_end.size() && lane_end[lane] > call.start_ns) ++lane;
    if (lane == lane_end.size()) {
      if (lane_end.size() < kMaxLanes) {
        lane_end.push_back(0);
      } else {
        lane = kMaxLanes - 1;  // more overlap than lanes: the last one takes the rest
      }
    }
    lane_end[lane] = std::max(lane_end[lane], call.start_ns + call.duration_ns);
    tracks[i] = {kTraceUnknownPid, static_cast<std::int64_t>(lane + 1)};
  }
  return tracks;
}

json chrome_trace(const ProfileData& data) {
  const std::uint64_t origin = trace_origin(data);
  std::vector<CallTrack> tracks = assign_tracks(data);
  json events = json::array();
  std::set<std::pair<std::int64_t, std::int64_t>> threads;
  std::set<std::int64_t> processes;
  for (std::size_t i = 0; i < data.calls.size(); ++i) {
    const ProfileCall& call = data.calls[i];
    const std::string& api = data.api_names[call.api];
    std::string direction = memcpy_direction(api);
    json event = {{"name", api},
                  {"cat", direction.empty() ? "cuda_api" : "memcpy"},
                  {"ph", "X"},
                  {"ts", micros(call.start_ns, origin)},
                  {"dur", static_cast<double>(call.duration_ns) / 1000.0},
                  {"pid", tracks[i].pid},
                  {"tid", tracks[i].tid}};
    if (!direction.empty()) event["args"] = {{"direction", direction}};
    events.push_back(std::move(event));
    threads.insert({tracks[i].pid, tracks[i].tid});
    processes.insert(tracks[i].pid);
  }
  for (const RefusedAllocation& r : data.refusals) {
    auto pid = static_cast<std::int64_t>(r.pid);
    events.push_back({{"name", "allocation refused"},
                      {"cat", "refused_allocation"},
                      {"ph", "i"},
                      {"s", "t"},
                      {"ts", micros(r.time_ns, origin)},
                      {"pid", pid},
                      {"tid", kTraceRefusalTid},
                      {"args",
                       {{"device", r.device},
                        {"requested_bytes", r.requested},
                        {"quota_bytes", r.quota},
                        {"in_use_bytes", r.in_use},
                        {"suppressed", r.suppressed},
                        {"top", r.top}}}});
    threads.insert({pid, kTraceRefusalTid});
    processes.insert(pid);
  }
  for (std::int64_t pid : processes) {
    std::string name = pid == kTraceUnknownPid ? "calls of " + data.dir + "/timeline.log (no pid recorded)"
                                               : "pid " + std::to_string(pid);
    events.push_back(
        {{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", name}}}});
  }
  for (const auto& [pid, tid] : threads) {
    std::string name;
    if (tid == kTraceRefusalTid) {
      name = "refused allocations";
    } else if (pid == kTraceUnknownPid) {
      name = "lane " + std::to_string(tid) + " (calls that overlap go to separate lanes)";
    } else {
      name = "thread " + std::to_string(tid);
    }
    events.push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ns"},
          {"otherData",
           {{"source", "gpuslice profile"},
            {"profile_dir", data.dir},
            {"start_epoch_ns", origin},
            {"timeline_calls", data.timeline_calls},
            {"calls_in_trace", data.calls.size()}}}};
}

}  // namespace gpuslice::cli
