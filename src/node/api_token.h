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

class ApiToken {
 public:
  // `file` empty: the token is `fixed` for good. Otherwise the file wins and `fixed` is unused.
  ApiToken(std::string fixed, std::string file);

  // The token to accept now; empty when there is none (the API then answers 401). With a file,
  // its identity (device, inode, size, mtime) is checked on every call and the file re-read when
  // it changed: a stat per request costs microseconds, and no rotation is ever missed.
  std::string current();

  const std::string& file() const { return file_; }

 private:
  struct Stamp {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = -1;
    std::int64_t mtime_ns = -1;
    bool operator==(const Stamp&) const = default;
  };

  std::string fixed_;
  std::string file_;
  std::mutex mutex_;
  Stamp stamp_;
  bool loaded_ = false;
  std::string token_;
  std::string last_problem_;
};

// Reads a token file: a regular file of at most kMaxTokenBytes, surrounding whitespace trimmed.
// Follows symlinks on purpose: Kubernetes mounts Secrets as links into a ..data directory.
// Returns an empty string and sets `problem` when there is no usable token.
std::string read_token_file(const std::string& path, std::string& problem);

}  // namespace gpuslice::node
