#include "cli/profile_html.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli/profile_trace.h"
#include "cli/terminal_text.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

// JSON that is safe inside <script>: '<', '>' and '&' only occur inside strings, where \u escapes
// mean the same, so "</script>" in an API name cannot end the script.
std::string script_safe(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else {
      out += c;
    }
  }
  return out;
}

std::string html_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

json page_data(const ProfileData& data) {
  json apis = json::array();
  for (const ApiSummary& row : summarise(data)) {
    apis.push_back({{"api", row.api},
                    {"count", row.count},
                    {"total_ns", row.total_ns},
                    {"p50_ns", row.p50 ? json(*row.p50) : json(nullptr)},
                    {"p99_ns", row.p99 ? json(*row.p99) : json(nullptr)}});
  }
  // The longest calls when there are too many to draw, shown in time order.
  std::vector<std::size_t> chosen(data.calls.size());
  std::iota(chosen.begin(), chosen.end(), 0);
  if (chosen.size() > kHtmlMaxTimelineCalls) {
    std::nth_element(
        chosen.begin(), chosen.begin() + kHtmlMaxTimelineCalls, chosen.end(),
        [&](std::size_t a, std::size_t b) { return data.calls[a].duration_ns > data.calls[b].duration_ns; });
    chosen.resize(kHtmlMaxTimelineCalls);
  }
  const std::uint64_t origin = trace_origin(data);
  std::vector<CallTrack> tracks = assign_tracks(data);
  json calls = json::array();
  for (std::size_t i : chosen) {
    const ProfileCall& call = data.calls[i];
    std::string track = tracks[i].pid == kTraceUnknownPid ? "lane " + std::to_string(tracks[i].tid)
                                                          : "pid " + std::to_string(tracks[i].pid) + " tid " +
                                                                std::to_string(tracks[i].tid);
    calls.push_back({call.api, call.start_ns - origin, call.duration_ns, track});
  }
  json refusals = json::array();
  for (const RefusedAllocation& r : data.refusals) {
    refusals.push_back({{"t", r.time_ns - origin},
                        {"pid", r.pid},
                        {"device", r.device},
                        {"requested", r.requested},
                        {"quota", r.quota},
                        {"in_use", r.in_use}});
  }
  return {
      {"dir", data.dir},           {"api_names", data.api_names},           {"apis", std::move(apis)},
      {"calls", std::move(calls)}, {"timeline_calls", data.timeline_calls}, {"refusals", std::move(refusals)},
      {"start_epoch_ns", origin}};
}

constexpr const char* kStyle = R"CSS(
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d232a;background:#fafbfc}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px} .sub{color:#5b6670;font-size:13px}
table{border-collapse:collapse;font-size:13px;background:#fff} th,td{padding:4px 10px;border-bottom:1px solid #e3e7eb}
th{text-align:left;background:#f0f3f6;cursor:pointer} td.n{text-align:right;font-variant-numeric:tabular-nums}
svg{background:#fff;border:1px solid #e3e7eb} .axis{font-size:11px;fill:#5b6670} .lbl{font-size:12px;fill:#1d232a}
#render-status{font-size:12px;color:#5b6670;margin-top:16px}
)CSS";

constexpr const char* kScript = R"JS(
(function () {
  'use strict';
  const data = JSON.parse(document.getElementById('profile-data').textContent);
  const NS = 'http://www.w3.org/2000/svg';
  const palette = ['#3b7dd8','#e0803a','#3aa17e','#c44e8a','#8a6fd1','#b5a12c','#4aa3b8','#d0584f','#6d8f3a','#9a7b5f'];
  const color = (i) => palette[i % palette.length];
  function dur(ns) {
    if (ns < 1e3) return ns.toFixed(0) + ' ns';
    if (ns < 1e6) return (ns / 1e3).toPrecision(3) + ' us';
    if (ns < 1e9) return (ns / 1e6).toPrecision(3) + ' ms';
    return (ns / 1e9).toFixed(3) + ' s';
  }
  function el(tag, attrs, text) {
    const node = document.createElementNS(NS, tag);
    for (const k in attrs) node.setAttribute(k, attrs[k]);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  const apiColor = {};
  data.api_names.forEach((name, i) => { apiColor[name] = color(i); });
  data.apis.forEach((row, i) => { if (!(row.api in apiColor)) apiColor[row.api] = color(i + data.api_names.length); });

  // Table, sortable by clicking a header.
  const tbody = document.querySelector('#api-table tbody');
  let rows = data.apis.slice();
  function fill() {
    tbody.textContent = '';
    for (const r of rows) {
      const tr = document.createElement('tr');
      const cells = [r.api, r.count, dur(r.total_ns), dur(r.count ? r.total_ns / r.count : 0),
                     r.p50_ns === null ? '-' : dur(r.p50_ns), r.p99_ns === null ? '-' : dur(r.p99_ns)];
      cells.forEach((c, i) => {
        const td = document.createElement('td');
        td.textContent = String(c);
        if (i > 0) td.className = 'n';
        tr.appendChild(td);
      });
      tbody.appendChild(tr);
    }
  }
  const keys = ['api', 'count', 'total_ns', 'mean', 'p50_ns', 'p99_ns'];
  document.querySelectorAll('#api-table th').forEach((th, i) => {
    th.addEventListener('click', () => {
      const k = keys[i];
      const v = (r) => k === 'mean' ? (r.count ? r.total_ns / r.count : 0) : (r[k] === null ? -1 : r[k]);
      rows.sort((a, b) => k === 'api' ? a.api.localeCompare(b.api) : v(b) - v(a));
      fill();
    });
  });
  fill();

  // Time per API: horizontal bars.
  const chart = document.getElementById('api-chart');
  const shown = data.apis.slice(0, 20);
  const maxTotal = Math.max(1, ...shown.map((r) => r.total_ns));
  const labelW = 190, barW = 520, rowH = 22;
  chart.setAttribute('width', labelW + barW + 110);
  chart.setAttribute('height', Math.max(1, shown.length) * rowH + 10);
  shown.forEach((r, i) => {
    const y = 5 + i * rowH;
    chart.appendChild(el('text', {x: labelW - 8, y: y + 15, 'text-anchor': 'end', class: 'lbl'}, r.api.slice(0, 28)));
    const w = Math.max(1, barW * r.total_ns / maxTotal);
    const bar = el('rect', {x: labelW, y: y + 3, width: w, height: rowH - 6, fill: apiColor[r.api]});
    bar.appendChild(el('title', {}, r.api + ': ' + dur(r.total_ns) + ' in ' + r.count + ' calls'));
    chart.appendChild(bar);
    chart.appendChild(el('text', {x: labelW + w + 6, y: y + 15, class: 'axis'}, dur(r.total_ns)));
  });

  // Timeline: one row per track, calls as bars, refused allocations as red marks.
  const tl = document.getElementById('timeline');
  const tracks = [...new Set(data.calls.map((c) => c[3]))].sort((a, b) => a.localeCompare(b, undefined, {numeric: true}));
  const hasRefusals = data.refusals.length > 0;
  const lanes = tracks.length + (hasRefusals ? 1 : 0);
  let end = 1;
  for (const c of data.calls) end = Math.max(end, c[1] + c[2]);
  for (const r of data.refusals) end = Math.max(end, r.t + 1);
  const left = 150, width = 760, laneH = 18, top = 24;
  tl.setAttribute('width', left + width + 20);
  tl.setAttribute('height', top + Math.max(1, lanes) * laneH + 10);
  const x = (t) => left + width * t / end;
  for (let i = 0; i <= 4; i++) {
    const t = end * i / 4;
    tl.appendChild(el('line', {x1: x(t), x2: x(t), y1: 16, y2: top + lanes * laneH, stroke: '#e3e7eb'}));
    tl.appendChild(el('text', {x: x(t), y: 12, 'text-anchor': i === 4 ? 'end' : 'middle', class: 'axis'}, dur(t)));
  }
  tracks.forEach((name, i) => {
    tl.appendChild(el('text', {x: left - 8, y: top + i * laneH + 13, 'text-anchor': 'end', class: 'axis'}, name));
  });
  const laneOf = {};
  tracks.forEach((name, i) => { laneOf[name] = i; });
  for (const c of data.calls) {
    const name = data.api_names[c[0]];
    const rect = el('rect', {x: x(c[1]), y: top + laneOf[c[3]] * laneH + 2, width: Math.max(1, x(c[1] + c[2]) - x(c[1])),
                             height: laneH - 4, fill: apiColor[name]});
    rect.appendChild(el('title', {}, name + ' ' + dur(c[2]) + ' at +' + dur(c[1])));
    tl.appendChild(rect);
  }
  if (hasRefusals) {
    const y = top + tracks.length * laneH;
    tl.appendChild(el('text', {x: left - 8, y: y + 13, 'text-anchor': 'end', class: 'axis'}, 'refused allocations'));
    for (const r of data.refusals) {
      const mark = el('rect', {x: x(r.t) - 1, y: y + 2, width: 3, height: laneH - 4, fill: '#d0021b'});
      mark.appendChild(el('title', {}, 'pid ' + r.pid + ' device ' + r.device + ': ' + r.requested + ' bytes refused'));
      tl.appendChild(mark);
    }
  }
  const note = data.calls.length < data.timeline_calls
      ? ' (the ' + data.calls.length + ' longest of ' + data.timeline_calls + ' calls drawn)' : '';
  document.getElementById('timeline-note').textContent = note;
  const status = document.getElementById('render-status');
  status.setAttribute('data-rendered', 'yes');
  status.textContent = 'Rendered ' + data.apis.length + ' APIs, ' + data.calls.length + ' calls and ' +
      data.refusals.length + ' refused allocations.';
})();
)JS";

}  // namespace

std::string profile_html(const ProfileData& data) {
  std::string title = "gpuslice profile: " + html_escape(terminal_text(data.dir, 200));
  std::string page = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" + title +
                     "</title>\n<style>" + kStyle + "</style></head>\n<body>\n<h1>" + title + "</h1>\n";
  page +=
      "<div class=\"sub\">" + std::to_string(data.timeline_calls) + " timeline calls, " +
      std::to_string(data.refusals.size()) + " refused allocations" +
      (data.malformed ? ", " + std::to_string(data.malformed) + " malformed lines skipped" : std::string()) +
      "</div>\n";
  page +=
      "<h2>Per API</h2>\n<table "
      "id=\"api-table\"><thead><tr><th>API</th><th>Count</th><th>Total</th><th>Mean</th>"
      "<th>P50</th><th>P99</th></tr></thead><tbody></tbody></table>\n"
      "<h2>Time per API</h2>\n<svg id=\"api-chart\" role=\"img\" aria-label=\"time per API\"></svg>\n"
      "<h2>Timeline <span id=\"timeline-note\" class=\"sub\"></span></h2>\n"
      "<svg id=\"timeline\" role=\"img\" aria-label=\"timeline of calls\"></svg>\n"
      "<div id=\"render-status\" data-rendered=\"no\">The page's script did not run.</div>\n";
  page +=
      "<script type=\"application/json\" id=\"profile-data\">" + script_safe(page_data(data)) + "</script>\n";
  page += std::string("<script>") + kScript + "</script>\n</body></html>\n";
  return page;
}

}  // namespace gpuslice::cli
