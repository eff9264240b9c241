// Helpers for the profiler tests: temporary directories, strict parsers of the Alnair formats, and
// child processes.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "temp_dir.h"

namespace gpuslice::profiler::test {

// The shared temp-dir helper, its path as a std::filesystem::path (these tests compose paths with /).
class TempDir : public gpuslice::test::TempDir {
 public:
  TempDir() : gpuslice::test::TempDir("gpuslice-profiler") {
    if (gpuslice::test::TempDir::path().empty()) ADD_FAILURE() << "mkdtemp failed";
  }
  std::filesystem::path path() const { return gpuslice::test::TempDir::path(); }
};

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

struct MetricsEntry {
  std::string name;
  std::uint64_t count = 0;
  std::uint64_t burst = 0;
  bool operator==(const MetricsEntry&) const = default;
};
inline void PrintTo(const MetricsEntry& e, std::ostream* os) {
  *os << "{" << e.name << " count:" << e.count << " burst:" << e.burst << "}";
}

struct TimelineEntry {
  std::string name;
  std::uint64_t start = 0;
  std::uint64_t burst = 0;
  std::uint64_t pid = 0;  // who made the call: compared by the tests that are about it
  std::uint64_t tid = 0;
  bool operator==(const TimelineEntry& o) const {
    return name == o.name && start == o.start && burst == o.burst;
  }
};
inline void PrintTo(const TimelineEntry& e, std::ostream* os) {
  *os << "{" << e.name << " start:" << e.start << " burst:" << e.burst << "}";
}

inline bool parse_number(const std::string& text, std::uint64_t* value) {
  if (text.empty() || text.size() > 20) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  errno = 0;
  *value = std::strtoull(text.c_str(), nullptr, 10);
  return errno == 0;
}

// Whole lines only; a missing final newline means a partial file.
inline bool split_lines(const std::string& text, std::vector<std::string>* lines) {
  if (!text.empty() && text.back() != '\n') return false;
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    lines->push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return true;
}

inline bool take_field(const std::string& line, const std::string& key, std::string* value) {
  if (line.compare(0, key.size(), key) != 0) return false;
  *value = line.substr(key.size());
  return true;
}

// metrics.log: repeated "name:<api>" "count:<n>" "burst:<ns>". Returns {} on any deviation.
inline std::vector<MetricsEntry> parse_metrics(const std::string& text, bool report_errors = true) {
  std::vector<std::string> lines;
  std::vector<MetricsEntry> entries;
  bool ok = split_lines(text, &lines) && lines.size() % 3 == 0;
  for (std::size_t i = 0; ok && i < lines.size(); i += 3) {
    MetricsEntry entry;
    std::string count;
    std::string burst;
    ok = take_field(lines[i], "name:", &entry.name) && !entry.name.empty() &&
         entry.name.find_first_of(" \t") == std::string::npos && take_field(lines[i + 1], "count:", &count) &&
         parse_number(count, &entry.count) && entry.count > 0 && take_field(lines[i + 2], "burst:", &burst) &&
         parse_number(burst, &entry.burst);
    entries.push_back(entry);
  }
  if (!ok) {
    if (report_errors) ADD_FAILURE() << "malformed metrics.log:\n" << text;
    return {};
  }
  return entries;
}

// timeline.log: "name:<api> start:<epoch ns> burst:<ns>" per line. Returns {} on any deviation.
inline std::vector<TimelineEntry> parse_timeline(const std::string& text) {
  std::vector<std::string> lines;
  std::vector<TimelineEntry> entries;
  bool ok = split_lines(text, &lines);
  for (std::size_t i = 0; ok && i < lines.size(); ++i) {
    // name:<api> start:<ns> burst:<ns> pid:<n> tid:<n>: Alnair's three fields, then ours.
    std::vector<std::string> fields;
    std::size_t from = 0;
    const std::string& line = lines[i];
    for (std::size_t space; (space = line.find(' ', from)) != std::string::npos; from = space + 1)
      fields.push_back(line.substr(from, space - from));
    fields.push_back(line.substr(from));
    TimelineEntry entry;
    std::string start, burst, pid, tid;
    ok = fields.size() == 5 && take_field(fields[0], "name:", &entry.name) && !entry.name.empty() &&
         take_field(fields[1], "start:", &start) && parse_number(start, &entry.start) &&
         take_field(fields[2], "burst:", &burst) && parse_number(burst, &entry.burst) &&
         take_field(fields[3], "pid:", &pid) && parse_number(pid, &entry.pid) &&
         take_field(fields[4], "tid:", &tid) && parse_number(tid, &entry.tid);
    entries.push_back(entry);
  }
  if (!ok) {
    ADD_FAILURE() << "malformed timeline.log";
    return {};
  }
  return entries;
}

// Runs `body` in a forked child; the body ends the child itself (falling off the end exits 100).
template <class Body>
pid_t run_in_child(Body body) {
  const pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(100);
  }
  return pid;
}

// The raw wait status; with a limit, a child still running after it is killed and -1 returned.
inline int wait_for_status(pid_t pid, int give_up_after_s = 0) {
  int status = 0;
  if (give_up_after_s <= 0) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
  }
  for (long waited_ms = 0; waited_ms < give_up_after_s * 1000L; waited_ms += 10) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  ADD_FAILURE() << "child " << pid << " still running after " << give_up_after_s << " s";
  return -1;
}

// Exit code of a child that exited normally; -1 when it was killed by a signal.
inline int wait_for_exit(pid_t pid) {
  const int status = wait_for_status(pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace gpuslice::profiler::test
