#include "shared_state/writer_index.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/safe_file.h"
#include "shared_state/assignment_text.h"

namespace gpuslice::shm {
namespace {

std::uint64_t ns_of(const timespec& t) {
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(t.tv_nsec);
}

// Splits off the next '\n'-terminated line of `rest`; false when none is left or the last one has
// no newline.
bool next_line(std::string_view* rest, std::string_view* line) {
  const std::size_t end = rest->find('\n');
  if (end == std::string_view::npos) return false;
  *line = rest->substr(0, end);
  rest->remove_prefix(end + 1);
  return true;
}

// "end <count>" with the count in canonical decimal.
bool end_line(std::string_view line, std::size_t* count) {
  constexpr std::string_view kEnd = "end ";
  if (line.substr(0, kEnd.size()) != kEnd) return false;
  const std::string_view digits = line.substr(kEnd.size());
  if (digits.empty() || digits.size() > 6 || (digits[0] == '0' && digits.size() > 1)) return false;
  std::size_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<std::size_t>(c - '0');
  }
  *count = value;
  return true;
}

}  // namespace

bool uid_writer_name(const char* name, uid_t* uid) {
  if (std::strncmp(name, "uid-", 4) != 0) return false;
  const char* digits = name + 4;
  if (digits[0] == '\0' || (digits[0] == '0' && digits[1] != '\0')) return false;
  std::uint64_t value = 0;
  for (const char* c = digits; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9' || c - digits >= 10) return false;
    value = value * 10 + static_cast<std::uint64_t>(*c - '0');
  }
  if (value > static_cast<uid_t>(-1)) return false;
  *uid = static_cast<uid_t>(value);
  return true;
}

bool writer_trusted(const char* name, const struct stat& st, uid_t reader, const struct stat& node) {
  if (!S_ISDIR(st.st_mode)) return false;
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) return false;
  if ((node.st_mode & (S_IWGRP | S_IWOTH)) == 0 && st.st_uid != node.st_uid && st.st_uid != 0) return false;
  uid_t claimed = 0;
  if (uid_writer_name(name, &claimed)) return st.st_uid == claimed;
  if (std::strncmp(name, "uid-", 4) == 0) return false;
  return st.st_uid == 0 || (reader != kNoReader && st.st_uid == reader);
}

const char* writer_index_error(std::string_view text, std::size_t* count) {
  *count = 0;
  if (text.size() > kMaxWriterIndexBytes) return "longer than its bound";
  if (text.substr(0, kWriterIndexHeader.size()) != kWriterIndexHeader) return "no index header";
  std::string_view rest = text.substr(kWriterIndexHeader.size());
  std::string_view previous;
  std::size_t names = 0;
  std::string_view line;
  while (next_line(&rest, &line)) {
    std::size_t said = 0;
    if (end_line(line, &said)) {
      if (!rest.empty()) return "text after the end line";
      if (said != names) return "the end line's count is not the number of names";
      *count = names;
      return nullptr;
    }
    if (!assignment_plain_name(line)) return "a line that is neither a writer name nor the end line";
    if (names > 0 && !(previous < line)) return "names not in strictly ascending order";
    previous = line;
    ++names;
  }
  return "no end line";
}

void for_each_indexed_writer(std::string_view text, void (*on_name)(void* context, std::string_view name),
                             void* context) {
  std::size_t count = 0;
  if (writer_index_error(text, &count) != nullptr) return;
  std::string_view rest = text.substr(kWriterIndexHeader.size());
  std::string_view line;
  for (std::size_t i = 0; i < count && next_line(&rest, &line); ++i) on_name(context, line);
}

bool writer_index_fresh(std::uint64_t mtime_ns, std::uint64_t wall_ns) {
  // A time ahead of ours by as much is a clock that jumped: not believed either.
  return mtime_ns > wall_ns ? mtime_ns - wall_ns < kWriterIndexFreshNs
                            : wall_ns - mtime_ns < kWriterIndexFreshNs;
}

bool writer_index_stamp(int node_fd, WriterIndexStamp* stamp) {
  struct stat st {};
  if (::fstatat(node_fd, kWriterIndexName, &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
  *stamp = {static_cast<std::uint64_t>(st.st_dev),
            static_cast<std::uint64_t>(st.st_ino),
            static_cast<std::uint64_t>(st.st_size),
            ns_of(st.st_mtim),
            ns_of(st.st_ctim),
            static_cast<std::uint32_t>(st.st_mode),
            static_cast<std::uint32_t>(st.st_uid)};
  return true;
}

WriterIndexState read_writer_index(int node_fd, const struct stat& node, std::uint64_t wall_ns, char* text,
                                   std::size_t* size, const char** why) {
  *size = 0;
  const char* unused = nullptr;
  const char*& reason = why != nullptr ? *why : unused;
  const int fd = fs::open_in_dir_raw(node_fd, kWriterIndexName, O_RDONLY | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return WriterIndexState::Absent;
    reason = errno == ELOOP ? "a symbolic link" : "not a regular file or not readable";
    return WriterIndexState::Untrusted;
  }
  fs::UniqueFd guard(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    reason = "cannot be examined";
    return WriterIndexState::Untrusted;
  }
  // Only the operator writes it: root, or whoever owns the node directory (and may remove anything
  // in it anyway).
  if (st.st_uid != 0 && st.st_uid != node.st_uid) {
    reason = "owned by neither root nor the node directory's owner";
    return WriterIndexState::Untrusted;
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    reason = "writable by group or others";
    return WriterIndexState::Untrusted;
  }
  if (st.st_size < 0 || static_cast<std::size_t>(st.st_size) > kMaxWriterIndexBytes) {
    reason = "longer than its bound";
    return WriterIndexState::Untrusted;
  }
  const auto bytes = static_cast<std::size_t>(st.st_size);
  if (!fs::pread_exact(fd, text, bytes, 0)) {
    reason = "cannot be read";
    return WriterIndexState::Untrusted;
  }
  std::size_t count = 0;
  if (const char* error = writer_index_error(std::string_view(text, bytes), &count); error != nullptr) {
    reason = error;
    return WriterIndexState::Untrusted;
  }
  *size = bytes;
  return writer_index_fresh(ns_of(st.st_mtim), wall_ns) ? WriterIndexState::Believed
                                                        : WriterIndexState::Stale;
}

}  // namespace gpuslice::shm
