// The bearer token of the daemon's API: given once (GPUSLICE_NODE_TOKEN), or read from a file that
// is read again whenever it changes, so that a Secret mounted after the daemon started is picked
// up and a rotated token replaces the old one (which is refused from then on) without a restart.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <string>

namespace gpuslice::node {

inline constexpr std::size_t kMaxTokenBytes = 4096;
inline constexpr std::uint64_t kTokenRereadNs = 10'000'000'000ULL;

class ApiToken {
 public:
  // `file` empty: the token is `fixed` for good. Otherwise the file wins and `fixed` is unused.
  ApiToken(std::string fixed, std::string file);

  // The token to accept now; empty when there is none (the API then answers 401). With a file,
  // its identity (device, inode, size, mtime, ctime) is checked on every call and the file re-read
  // when it changed: a stat per request costs microseconds. ctime catches an in-place rewrite of
  // the same size that put the old mtime back; a file read more than kTokenRereadNs ago is read
  // again whatever its stamp says (a filesystem whose times are coarse or not kept).
  std::string current();

  const std::string& file() const { return file_; }

 private:
  struct Stamp {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = -1;
    std::int64_t mtime_ns = -1;
    std::int64_t ctime_ns = -1;
    bool operator==(const Stamp&) const = default;
  };

  std::string fixed_;
  std::string file_;
  std::mutex mutex_;
  Stamp stamp_;
  bool loaded_ = false;
  std::uint64_t read_at_ns_ = 0;  // CLOCK_MONOTONIC of the last read
  std::string token_;
  std::string last_problem_;
};

// Reads a token file: a regular file of at most kMaxTokenBytes, surrounding whitespace trimmed.
// Follows symlinks on purpose: Kubernetes mounts Secrets as links into a ..data directory.
// Returns an empty string and sets `problem` when there is no usable token.
std::string read_token_file(const std::string& path, std::string& problem);

}  // namespace gpuslice::node
