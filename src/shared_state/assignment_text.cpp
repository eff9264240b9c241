#include "shared_state/assignment_text.h"

#include <cstring>

namespace gpuslice::shm {
namespace {

constexpr std::string_view kAllocationPrefix = "# allocation ";

bool blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

// The line without its comment: '#' at its start or after a blank.
std::string_view without_comment(std::string_view line) {
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '#' && (i == 0 || blank(line[i - 1]))) return line.substr(0, i);
  }
  return line;
}

// "0".."100" exactly (no sign, no blanks inside, at most three digits).
bool percent_text(std::string_view text, unsigned* out) {
  if (text.empty() || text.size() > 3) return false;
  unsigned value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value > 100) return false;
  *out = value;
  return true;
}

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

enum class LineKind { Empty, Meaningful, Malformed };

// One line of the file: Empty (blank, comment), Meaningful (*out filled) or Malformed (*what said).
LineKind read_line(std::string_view raw, AssignmentLine* out, const char** what) {
  const std::string_view whole = trim_blanks(raw);
  if (whole.substr(0, kAllocationPrefix.size()) == kAllocationPrefix) {
    const std::string_view rest = trim_blanks(whole.substr(kAllocationPrefix.size()));
    const std::size_t space = rest.find(' ');
    if (space == std::string_view::npos || !assignment_resource_name(rest.substr(0, space)) ||
        !assignment_hex_digest(trim_blanks(rest.substr(space + 1)))) {
      *what = "malformed allocation line (expected: # allocation <resource> <hex digest>)";
      return LineKind::Malformed;
    }
    out->key = AssignmentLine::Key::Allocation;
    out->resource = rest.substr(0, space);
    out->digest = trim_blanks(rest.substr(space + 1));
    return LineKind::Meaningful;
  }
  const std::string_view line = trim_blanks(without_comment(whole));
  if (line.empty()) return LineKind::Empty;
  const std::size_t eq = line.find('=');
  if (eq == std::string_view::npos) {
    *what = "a line without '=' (expected key=value)";
    return LineKind::Malformed;
  }
  const std::string_view key = trim_blanks(line.substr(0, eq));
  const std::string_view value = trim_blanks(line.substr(eq + 1));
  if (key == "priority") {
    const auto level = priority_from_name(value);
    if (!level) {
      *what = "priority is not low, normal or high";
      return LineKind::Malformed;
    }
    out->key = AssignmentLine::Key::Priority;
    out->level = *level;
    return LineKind::Meaningful;
  }
  const bool share = key == "compute" || (key.size() > 8 && key.substr(0, 8) == "compute.");
  if (share || key == "floor" || key == "light-share") {
    if (!percent_text(value, &out->percent) || (share && out->percent == 0)) {
      *what = share ? "a compute share is not a whole percent from 1 to 100"
                    : "floor and light-share are whole percents from 0 to 100";
      return LineKind::Malformed;
    }
    if (key == "floor") {
      out->key = AssignmentLine::Key::Floor;
    } else if (key == "light-share") {
      out->key = AssignmentLine::Key::LightShare;
    } else if (key == "compute") {
      out->key = AssignmentLine::Key::Compute;
    } else {
      out->gpu = key.substr(8);
      if (!assignment_plain_name(out->gpu)) {
        *what = "compute.<gpu uuid>: the UUID is not a plain name";
        return LineKind::Malformed;
      }
      out->key = AssignmentLine::Key::ComputeGpu;
    }
    return LineKind::Meaningful;
  }
  *what = "unknown key (expected priority, compute, compute.<gpu uuid>, floor or light-share)";
  return LineKind::Malformed;
}

// Calls `each` for every line with its 1-based number; stops (false) when `each` does.
template <class Each>
bool for_each_line(std::string_view text, Each each) {
  unsigned number = 0;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    if (!each(++number, line)) return false;
  }
  return true;
}

// Whether a key given once at most is given again: the keys of lines before `upto` are compared.
bool repeated(std::string_view text, unsigned upto, const AssignmentLine& line) {
  bool seen = false;
  for_each_line(text, [&](unsigned number, std::string_view raw) {
    if (number >= upto) return false;
    AssignmentLine earlier;
    const char* what = nullptr;
    if (read_line(raw, &earlier, &what) != LineKind::Meaningful || earlier.key != line.key) return true;
    seen = line.key != AssignmentLine::Key::ComputeGpu || iequal(earlier.gpu, line.gpu);
    return !seen;
  });
  return seen;
}

}  // namespace

bool assignment_resource_name(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.' || c == '/';
    if (!ok) return false;
  }
  return true;
}

bool assignment_hex_digest(std::string_view digest) {
  if (digest.empty() || digest.size() > 128) return false;
  for (char c : digest) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool assignment_plain_name(std::string_view name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

bool scan_assignment(std::string_view text, void (*on_line)(void* context, const AssignmentLine& line),
                     void* context, AssignmentSyntaxError* error) {
  AssignmentSyntaxError local;
  AssignmentSyntaxError& e = error != nullptr ? *error : local;
  e = {};
  if (text.size() > kMaxAssignmentBytes) {
    e.what = "longer than 1024 bytes";
    return false;
  }
  if (std::memchr(text.data(), '\0', text.size()) != nullptr) {
    e.what = "contains a NUL byte";
    return false;
  }
  bool priority = false;
  const bool clean = for_each_line(text, [&](unsigned number, std::string_view raw) {
    AssignmentLine line;
    const LineKind kind = read_line(raw, &line, &e.what);
    if (kind == LineKind::Malformed) {
      e.line = number;
      return false;
    }
    if (kind == LineKind::Empty) return true;
    if (repeated(text, number, line)) {
      e.line = number;
      e.what = "a key given twice";
      return false;
    }
    priority = priority || line.key == AssignmentLine::Key::Priority;
    return true;
  });
  if (!clean) return false;
  if (!priority) {
    e.what = "no priority line";
    return false;
  }
  for_each_line(text, [&](unsigned, std::string_view raw) {
    AssignmentLine line;
    const char* what = nullptr;
    if (read_line(raw, &line, &what) == LineKind::Meaningful) on_line(context, line);
    return true;
  });
  return true;
}

Assignment assignment_for_gpu(std::string_view text, std::string_view uuid, AssignmentSyntaxError* error) {
  struct Reading {
    std::string_view uuid;
    Assignment out;
    bool gpu_share = false;
  } reading{uuid, {}, false};
  reading.out.state = Assignment::State::Believed;
  const bool ok = scan_assignment(
      text,
      [](void* context, const AssignmentLine& line) {
        auto& r = *static_cast<Reading*>(context);
        switch (line.key) {
          case AssignmentLine::Key::Priority:
            r.out.priority = line.level;
            break;
          case AssignmentLine::Key::Compute:
            if (!r.gpu_share) r.out.compute_percent = line.percent;
            break;
          case AssignmentLine::Key::ComputeGpu:
            if (iequal(line.gpu, r.uuid)) {
              r.out.compute_percent = line.percent;
              r.gpu_share = true;
            }
            break;
          case AssignmentLine::Key::Floor:
            r.out.floor_percent = static_cast<int>(line.percent);
            break;
          case AssignmentLine::Key::LightShare:
            r.out.light_share_percent = static_cast<int>(line.percent);
            break;
          case AssignmentLine::Key::Allocation:
            break;
        }
      },
      &reading, error);
  if (ok) return reading.out;
  Assignment refused;
  refused.state = Assignment::State::Refused;
  refused.priority = Priority::Low;
  return refused;
}

}  // namespace gpuslice::shm
