#include "node/api/api_token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "common/errno_text.h"
#include "common/log.h"
#include "config/text_util.h"

namespace gpuslice::node {

std::string read_token_file(const std::string& path, std::string& problem) {
  problem.clear();
  // O_NONBLOCK: a FIFO planted in place of the file must not hang the request that checks it.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    problem = "cannot read token file " + path + ": " + fs::errno_text(errno);
    return {};
  }
  struct stat st {};
  std::string text;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    problem = "token file " + path + " is not a regular file";
  } else {
    text.resize(kMaxTokenBytes + 1);
    std::size_t got = 0;
    while (got < text.size()) {
      ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    text.resize(got);
    if (got > kMaxTokenBytes) problem = "token file " + path + " is larger than 4 KiB";
  }
  ::close(fd);
  if (!problem.empty()) return {};
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!text.empty() && space(text.back())) text.pop_back();
  std::size_t start = 0;
  while (start < text.size() && space(text[start])) ++start;
  text.erase(0, start);
  if (text.empty()) problem = "token file " + path + " is empty";
  return text;
}

ApiToken::ApiToken(std::string fixed, std::string file) : fixed_(std::move(fixed)), file_(std::move(file)) {}

std::string ApiToken::current() {
  if (file_.empty()) return fixed_;
  struct stat st {};
  Stamp stamp;
  if (::stat(file_.c_str(), &st) == 0) {
    stamp = {st.st_dev, st.st_ino, st.st_size,
             static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
             static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec};
  }
  timespec now_ts{};
  clock_gettime(CLOCK_MONOTONIC, &now_ts);
  const std::uint64_t now =
      static_cast<std::uint64_t>(now_ts.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(now_ts.tv_nsec);
  std::lock_guard lock(mutex_);
  if (loaded_ && stamp == stamp_ && now - read_at_ns_ < kTokenRereadNs) return token_;
  read_at_ns_ = now;
  std::string problem;
  std::string token = stamp.size < 0 ? std::string() : read_token_file(file_, problem);
  if (stamp.size < 0) problem = "token file " + file_ + " does not exist (yet)";
  if (problem != last_problem_ || token != token_ || !loaded_) {
    if (!problem.empty()) {
      GS_LOG(Warn, "API token: %s; /api/v1 answers 401", config::detail::printable(problem, 256).c_str());
    } else {
      GS_LOG(Info, "API token: read %s", config::detail::printable(file_, 256).c_str());
    }
  }
  last_problem_ = problem;
  token_ = std::move(token);
  stamp_ = stamp;
  loaded_ = true;
  return token_;
}

}  // namespace gpuslice::node
