#include "cli/top_view.h"

#include <curses.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/format.h"
#include "cli/gpu_info.h"
#include "cli/profile_data.h"
#include "cli/status_text.h"
#include "cli/terminal_text.h"
#include "common/clock.h"

namespace gpuslice::cli {
namespace {

volatile sig_atomic_t g_stop = 0;
void on_stop(int) { g_stop = 1; }

enum class SortKey { Memory, Share, Pid };
const char* sort_name(SortKey key) {
  switch (key) {
    case SortKey::Memory:
      return "memory";
    case SortKey::Share:
      return "share";
    case SortKey::Pid:
      return "pid";
  }
  return "";
}

// Compact sizes for narrow columns: "1.5G", "512M", "80G".
std::string compact_bytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "K", "M", "G", "T", "P"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  char text[16];
  if (value < 10.0 && unit > 0 && value != static_cast<double>(static_cast<long long>(value))) {
    std::snprintf(text, sizeof text, "%.1f%s", value, kUnits[unit]);
  } else {
    std::snprintf(text, sizeof text, "%.0f%s", value, kUnits[unit]);
  }
  return text;
}

class Screen {
 public:
  explicit Screen(int width) : width_(width) {}
  // Writes `text` at row y (clipped to the width); returns the next row. Rows from body_start()
  // on scroll: the first `scroll` of them are not shown.
  int line(int y, const std::string& text, attr_t attr = A_NORMAL) {
    const int row = y >= body_start_ ? y - scroll_ : y;
    if ((y >= body_start_ && row < body_start_) || row >= LINES) return y + 1;
    attron(attr);
    // Callers escape what they cut to width; this is where the screen is written, so once more.
    mvaddnstr(row, 0, terminal_text(text).c_str(), width_);
    attroff(attr);
    return y + 1;
  }
  void start_body(int y, int scroll) {
    body_start_ = y;
    scroll_ = scroll;
  }
  // Whether row y falls past the bottom of the screen.
  bool full(int y) const { return (y >= body_start_ ? y - scroll_ : y) >= LINES - 1; }
  int width() const { return width_; }

 private:
  int width_;
  int body_start_ = 1 << 30;
  int scroll_ = 0;
};

bool g_colour = false;  // the terminal has colours (set once the screen starts)

// Green below 75 % of the quota, yellow to 90 %, red above: the colour of a memory figure.
attr_t colour(double fraction) {
  if (!g_colour) return A_NORMAL;
  return COLOR_PAIR(fraction < 0.75 ? 1 : fraction < 0.9 ? 2 : 3);
}
attr_t error_colour() { return g_colour ? COLOR_PAIR(3) : A_NORMAL; }

std::string pad_left(const std::string& text, std::size_t width) {
  if (text.size() >= width) return text.substr(0, width);
  return std::string(width - text.size(), ' ') + text;
}

std::string bar(double fraction, int cells) {
  if (cells <= 0) return "";
  fraction = std::clamp(fraction, 0.0, 1.0);
  int filled = static_cast<int>(std::lround(fraction * cells));
  return "[" + std::string(static_cast<std::size_t>(filled), '#') +
         std::string(static_cast<std::size_t>(cells - filled), '.') + "]";
}

class TopView {
 public:
  explicit TopView(const TopOptions& options) : options_(options), machine_(probe_machine()) {}

  int run() {
    std::uint64_t done = 0;
    std::uint64_t next = monotonic_ns();
    while (!g_stop) {
      if (monotonic_ns() >= next) {
        refresh_view();
        draw();
        ++done;
        if (options_.iterations != 0 && done >= options_.iterations) break;
        next = monotonic_ns() + options_.interval_ns;
      }
      int key = getch();  // waits at most 100 ms (timeout below)
      if (key == 'q' || key == 'Q') break;
      if (key == 'h' || key == 'H' || key == '?') {
        help_ = !help_;
        draw();
        continue;
      }
      if (help_ && key != ERR) {  // any other key closes the help screen
        help_ = false;
        draw();
        continue;
      }
      if (key == 's' || key == 'S') {
        sort_ = sort_ == SortKey::Memory  ? SortKey::Share
                : sort_ == SortKey::Share ? SortKey::Pid
                                          : SortKey::Memory;
        draw();
      } else if (key == 'd' || key == 'D' || key == '\t') {
        device_filter_ = (device_filter_ + 1) % static_cast<int>(device_uuids().size() + 1);
        draw();
      } else if (key == KEY_DOWN || key == 'j' || key == KEY_NPAGE) {
        scroll_ += key == KEY_NPAGE ? std::max(1, LINES - 6) : 1;
        draw();
      } else if (key == KEY_UP || key == 'k' || key == KEY_PPAGE) {
        scroll_ = std::max(0, scroll_ - (key == KEY_PPAGE ? std::max(1, LINES - 6) : 1));
        draw();
      } else if (key == KEY_HOME || key == 'g') {
        scroll_ = 0;
        draw();
      } else if (key == KEY_RESIZE) {
        draw();
      }
    }
    return 0;
  }

 private:
  void refresh_view() {
    view_ = read_status(options_.source);
    std::uint64_t now = monotonic_ns();
    for (auto& c : view_.containers) rates_.update(c, now);
    taken_ = time(nullptr);
    // Per GPU: memory and the compute rate of every container on it, and the rate's history.
    gpus_.clear();
    for (const auto& c : view_.containers) {
      for (const auto& d : c.devices) {
        GpuLine& g = gpus_[d.uuid];
        g.used += d.used_bytes;
        g.total = std::max<std::uint64_t>(g.total, d.total_bytes);
        if (d.compute_utilization_ratio) g.rate = g.rate.value_or(0.0) + *d.compute_utilization_ratio;
      }
    }
    for (auto& [uuid, g] : gpus_) {
      std::vector<double>& past = history_[uuid];
      past.push_back(std::min(1.0, g.rate.value_or(0.0)));
      if (past.size() > kHistory) past.erase(past.begin());
    }
  }

  // One line per GPU the containers use: memory of all of them, their compute rate now and over
  // the last kHistory refreshes (oldest left), like nvtop's graphs in one row of characters.
  int draw_gpu_summary(Screen& s, int y) {
    static constexpr char kLevels[] = " _.-=+*#";
    for (const auto& [uuid, g] : gpus_) {
      if (!device_shown(uuid)) continue;
      std::string graph;
      for (double v : history_[uuid]) graph += kLevels[std::lround(v * 7.0)];
      std::string text = "gpu " + short_uuid(uuid) + "  mem " + compact_bytes(g.used) + "/" +
                         compact_bytes(g.total) + "  sm " +
                         (g.rate ? percent_text(std::min(1.0, *g.rate)) : "-") + "  [" + graph +
                         std::string(kHistory - graph.size(), ' ') + "]";
      y = s.line(y, text,
                 colour(g.total > 0 ? static_cast<double>(g.used) / static_cast<double>(g.total) : 0.0));
    }
    return y;
  }

  std::vector<std::string> device_uuids() const {
    std::set<std::string> seen;
    std::vector<std::string> out;
    for (const auto& c : view_.containers) {
      for (const auto& d : c.devices) {
        if (seen.insert(d.uuid).second) out.push_back(d.uuid);
      }
    }
    return out;
  }

  int draw_header(Screen& s) {
    char clock[16];
    tm local{};
    localtime_r(&taken_, &local);
    std::strftime(clock, sizeof clock, "%H:%M:%S", &local);
    std::string head = std::string("gpuslice top  ") + clock + "  driver " +
                       (machine_.driver_version.empty() ? "-" : terminal_text(machine_.driver_version, 24)) +
                       "  CUDA " + (machine_.cuda_version.empty() ? "-" : machine_.cuda_version);
    int y = s.line(0, head, A_BOLD);
    std::map<std::string, int> names;
    for (const auto& g : machine_.gpus) ++names[terminal_text(g.name, 40)];
    if (machine_.gpus.empty()) {
      for (const auto& g : view_.gpus) ++names[terminal_text(g.name, 40)];
    }
    std::string gpus = "GPUs: ";
    if (names.empty())
      gpus += "- (" + (machine_.error.empty() ? std::string("none found") : machine_.error) + ")";
    bool first = true;
    for (const auto& [name, count] : names) {
      gpus += (first ? "" : ", ") + std::to_string(count) + " x " + name;
      first = false;
    }
    y = s.line(y, gpus);
    std::vector<std::string> uuids = device_uuids();
    std::string filter = device_filter_ == 0 || device_filter_ > static_cast<int>(uuids.size())
                             ? "all"
                             : short_uuid(uuids[static_cast<std::size_t>(device_filter_ - 1)]);
    char interval[32];
    std::snprintf(interval, sizeof interval, "%.2gs", static_cast<double>(options_.interval_ns) / 1e9);
    y = s.line(y,
               std::string("sort ") + sort_name(sort_) + "  device " + filter + "  every " + interval +
                   "   keys: q quit  s sort  d device  h help",
               A_DIM);
    return y;
  }

  bool device_shown(const std::string& uuid) const {
    if (device_filter_ == 0) return true;
    std::vector<std::string> uuids = device_uuids();
    return device_filter_ <= static_cast<int>(uuids.size()) &&
           uuids[static_cast<std::size_t>(device_filter_ - 1)] == uuid;
  }

  // Priority sharing: the level and the time the container was held back by higher ones.
  static std::string priority_text(const status::ContainerStatus& c) {
    if (!c.priority) return "";
    char held[32];
    std::snprintf(held, sizeof held, "%.1fs", static_cast<double>(c.held_back_ns) / 1e9);
    return "  prio " + terminal_text(*c.priority, 8) + " held " + held;
  }

  int draw_device(Screen& s, int y, const status::DeviceStatus& d) {
    const int w = s.width();
    std::string used =
        compact_bytes(d.used_bytes) + "/" + (d.quota_bytes ? compact_bytes(*d.quota_bytes) : "unl");
    std::string card = "of " + compact_bytes(d.total_bytes);
    std::string compute =
        "sm " + (d.compute_utilization_ratio ? percent_text(*d.compute_utilization_ratio) : "-") + "/" +
        (d.compute_limit_percent ? std::to_string(*d.compute_limit_percent) + "%" : "none");
    std::string refused =
        "refused +" + (d.refused_in_interval ? std::to_string(*d.refused_in_interval) : "-");
    std::string name = short_uuid(d.uuid) + " dev " + index_text(d.record >= 0 ? d.record : d.cuda_index);
    double fraction =
        d.quota_bytes && *d.quota_bytes > 0
            ? static_cast<double>(d.used_bytes) / static_cast<double>(*d.quota_bytes)
            : (d.total_bytes > 0 ? static_cast<double>(d.used_bytes) / static_cast<double>(d.total_bytes)
                                 : 0.0);
    // Columns by priority: name, used/quota, compute, refused, bar, card total.
    std::vector<std::string> parts = {name, used, compute, refused};
    std::size_t fixed = 0;
    for (const auto& p : parts) fixed += p.size() + 2;
    bool with_card = static_cast<int>(fixed + card.size() + 2 + 12) <= w;
    if (with_card) fixed += card.size() + 2;
    int bar_cells = std::min(30, w - static_cast<int>(fixed) - 2 - 1);
    std::string text = " " + name + "  ";
    if (bar_cells >= 6) text += bar(fraction, bar_cells) + " ";
    text += used + (with_card ? "  " + card : "") + "  " + compute + "  " + refused;
    y = s.line(y, text, colour(fraction));
    return status::reclaim_applies(d) ? s.line(y, reclaim_text(d)) : y;
  }

  // Memory that follows priority (docs/quota.md, "Guarantees and borrowing"): the guarantee, what
  // is borrowed, moved to host memory and unmovable, and the reclaim episodes (how many, bytes
  // moved, total time), under the device row.
  static std::string reclaim_text(const status::DeviceStatus& d) {
    char took[32];
    std::snprintf(took, sizeof took, "%.2fs", static_cast<double>(d.reclaim_ns) / 1e9);
    return "   guar " + (d.guarantee_bytes ? compact_bytes(*d.guarantee_bytes) : std::string("none")) +
           "  borrowed " + compact_bytes(d.borrowed_bytes) + "  on host " + compact_bytes(d.on_host_bytes) +
           "  unmovable " + compact_bytes(status::unmovable_bytes(d)) + "  reclaims " +
           std::to_string(d.reclaim_episodes) + " " + compact_bytes(d.reclaim_bytes) + " " + took;
  }

  int draw_processes(Screen& s, int y, const status::ContainerStatus& c) {
    const int w = s.width();
    const bool host_column = w >= 64;
    std::string header = "   " + pad_left("PID", 7) + (host_column ? " " + pad_left("HOST PID", 8) : "") +
                         " " + pad_left("DEV", 3) + " " + pad_left("MEMORY", 7) + " " + pad_left("SHARE", 5) +
                         "  COMMAND";
    y = s.line(y, header, A_UNDERLINE);
    struct Row {
      const status::ProcessStatus* p;
      const status::ProcessDeviceStatus* pd;
    };
    std::vector<Row> rows;
    for (const auto& p : c.processes) {
      for (std::size_t i = 0; i < p.devices.size() && i < c.devices.size(); ++i) {
        if (device_shown(c.devices[i].uuid)) rows.push_back({&p, &p.devices[i]});
      }
    }
    std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
      switch (sort_) {
        case SortKey::Memory:
          return a.pd->used_bytes > b.pd->used_bytes;
        case SortKey::Share:
          return a.pd->compute_utilization_ratio.value_or(-1) > b.pd->compute_utilization_ratio.value_or(-1);
        case SortKey::Pid:
          return a.p->pid < b.p->pid;
      }
      return false;
    });
    if (rows.empty()) return s.line(y, "   (no process)");
    for (const Row& r : rows) {
      if (s.full(y)) break;
      std::string share =
          r.pd->compute_utilization_ratio ? percent_text(*r.pd->compute_utilization_ratio) : "-";
      std::string text =
          "   " + pad_left(std::to_string(r.p->pid), 7) +
          (host_column ? " " + pad_left(r.p->host_pid ? std::to_string(*r.p->host_pid) : "-", 8) : "") + " " +
          pad_left(index_text(r.pd->record), 3) + " " + pad_left(compact_bytes(r.pd->used_bytes), 7) + " " +
          pad_left(share, 5) + "  ";
      // The command gets what is left of the line, however wide the terminal is.
      const int room = std::max(8, w - static_cast<int>(text.size()));
      text += terminal_text(r.p->command, static_cast<std::size_t>(room));
      y = s.line(y, text);
    }
    return y;
  }

  void draw_help() {
    static constexpr const char* kLines[] = {
        "gpuslice top: keys",
        "",
        "  q        quit",
        "  s        sort processes: memory, share, pid",
        "  d, Tab   show one device, the next, or all",
        "  j k, arrows, PgUp PgDn, Home   scroll the containers and processes",
        "  h, ?     this help (any key closes it)",
        "",
        "Device row: memory bar (used/quota), 'sm NOW/LIMIT' the compute rate of the last",
        "interval against the limit, 'refused +N' allocations refused in it.",
        "With a memory guarantee, a row under it: 'guar' the guarantee, memory 'borrowed'",
        "above it, moved 'on host', 'unmovable', and 'reclaims N BYTES TIME' (episodes).",
        "Process rows: PID (in the container), HOST PID, DEV (device record), MEMORY,",
        "SHARE (the process's compute rate), COMMAND (as wide as the terminal allows).",
    };
    erase();
    Screen s(COLS);
    int y = 0;
    for (const char* line : kLines) y = s.line(y, line, y == 0 ? A_BOLD : A_NORMAL);
    refresh();
  }

  void draw() {
    if (help_) {
      draw_help();
      return;
    }
    erase();
    Screen s(COLS);
    int y = draw_header(s);
    y = draw_gpu_summary(s, y);
    // What follows scrolls (arrows, j/k, PgUp/PgDn, Home); the header and the GPUs stay.
    s.start_body(y, scroll_);
    if (!view_.error.empty())
      y = s.line(y, "error: " + terminal_text(view_.error, 300), A_BOLD | error_colour());
    for (const auto& c : view_.containers) {
      if (s.full(y)) break;
      if (options_.node) {
        std::string title = "container " + terminal_text(c.id.value_or("?"), 48);
        if (c.pod_name) {
          title +=
              "  pod " + terminal_text((c.pod_namespace ? *c.pod_namespace + "/" : "") + *c.pod_name, 60);
        }
        y = s.line(y, title + priority_text(c), A_BOLD);
      } else if (c.path) {
        y = s.line(y, "state " + terminal_text(*c.path, 200) + priority_text(c), A_BOLD);
      }
      if (c.error) {
        y = s.line(y, " error: " + terminal_text(*c.error, 200), error_colour());
        continue;
      }
      if (c.devices.empty()) {
        y = s.line(y, " no device attached yet");
        continue;
      }
      for (const auto& d : c.devices) {
        if (device_shown(d.uuid)) y = draw_device(s, y, d);
      }
      y = draw_processes(s, y, c);
    }
    refresh();
  }

  const TopOptions& options_;
  MachineInfo machine_;
  StatusView view_;
  status::RateTracker rates_;
  time_t taken_ = 0;
  SortKey sort_ = SortKey::Memory;
  int device_filter_ = 0;  // 0: all, else 1 + index into device_uuids()
  bool help_ = false;
  int scroll_ = 0;  // body rows scrolled off the top
  struct GpuLine {
    std::uint64_t used = 0, total = 0;
    std::optional<double> rate;
  };
  static constexpr std::size_t kHistory = 30;
  std::map<std::string, GpuLine> gpus_;                 // by UUID, this refresh
  std::map<std::string, std::vector<double>> history_;  // by UUID, compute rate per refresh
};

}  // namespace

bool top_view_available() { return true; }

int run_top_view(const TopOptions& options) {
  struct sigaction action {};
  action.sa_handler = on_stop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  TopView view(options);  // probes NVML before the screen changes, so its messages stay readable
  if (initscr() == nullptr) return 1;
  if (has_colors()) {
    start_color();
    use_default_colors();
    init_pair(1, COLOR_GREEN, -1);
    init_pair(2, COLOR_YELLOW, -1);
    init_pair(3, COLOR_RED, -1);
    g_colour = true;
  }
  cbreak();
  noecho();
  keypad(stdscr, TRUE);
  curs_set(0);
  timeout(100);
  int status = view.run();
  endwin();
  return status;
}

}  // namespace gpuslice::cli
