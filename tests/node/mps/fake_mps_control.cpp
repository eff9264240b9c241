// A stand-in nvidia-cuda-mps-control for the manager's tests, speaking the same interface:
//   -d       start the control daemon in the background: a socket "control" and the pid file
//            nvidia-cuda-mps-control.pid in $CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps),
//            control.log in $CUDA_MPS_LOG_DIRECTORY; the launched process exits 0 once it listens,
//            1 with a message when a daemon already holds the pipe directory.
//   (none)   the client: each stdin line is a command sent to the daemon, its answer printed;
//            exit 1 with a message when no daemon listens.
// Commands: get_server_list, start_server -uid N (a sleeping child stands for the server),
// get_client_list PID, set_default_active_thread_percentage P, get_default_active_thread_percentage,
// quit (ends the servers and the daemon, removes the socket and the pid file).
// Knobs (environment of `-d`): FAKE_MPS_REFUSE=<message> (exit 1 with it), FAKE_MPS_START_DELAY_MS=N
// (slow start), FAKE_MPS_CRASH_AFTER_MS=N (the daemon dies by SIGABRT N ms after it answered its
// first command, the manager's start-up check, so a loaded machine cannot make it die before; with
// FAKE_MPS_CRASH_ONCE=<file> only while that file exists, which the crash removes),
// FAKE_MPS_MUTE=1 (the daemon accepts commands and never answers).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

std::string pipe_dir() { return env_or("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"); }
std::string log_dir() { return env_or("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"); }
std::string socket_path() { return pipe_dir() + "/control"; }
std::string pid_path() { return pipe_dir() + "/nvidia-cuda-mps-control.pid"; }

long long now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void log_line(const std::string& text) {
  FILE* f = std::fopen((log_dir() + "/control.log").c_str(), "a");
  if (f == nullptr) return;
  std::fprintf(f, "[fake] %s\n", text.c_str());
  std::fclose(f);
}

int connect_control() {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path().c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool running_daemon() {
  FILE* f = std::fopen(pid_path().c_str(), "r");
  if (f == nullptr) return false;
  int pid = 0;
  bool read = std::fscanf(f, "%d", &pid) == 1;
  std::fclose(f);
  return read && pid > 0 && ::kill(pid, 0) == 0;
}

struct Daemon {
  std::map<int, unsigned> servers;  // pid -> uid
  int thread_percentage = 100;
  bool quit = false;

  std::string answer(const std::string& line) {
    char word[64] = {};
    std::sscanf(line.c_str(), "%63s", word);
    const std::string command = word;
    if (command == "get_server_list") {
      std::string out;
      for (const auto& [pid, uid] : servers) out += std::to_string(pid) + "\n";
      return out;
    }
    if (command == "start_server") {
      unsigned uid = 0;
      if (std::sscanf(line.c_str(), "start_server -uid %u", &uid) != 1) return "Invalid arguments\n";
      pid_t pid = ::fork();
      if (pid == 0) {
        for (int fd = 3; fd < 1024; ++fd) ::close(fd);  // the client's connection must end with the answer
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);             // a killed daemon leaves no server behind
        for (;;) ::pause();
      }
      servers[pid] = uid;
      log_line("server " + std::to_string(pid) + " started for uid " + std::to_string(uid));
      return "";
    }
    if (command == "get_client_list") return "";
    if (command == "set_default_active_thread_percentage") {
      int value = 0;
      if (std::sscanf(line.c_str(), "set_default_active_thread_percentage %d", &value) != 1 || value < 1 ||
          value > 100)
        return "Invalid arguments\n";
      thread_percentage = value;
      return std::to_string(value) + ".0\n";
    }
    if (command == "get_default_active_thread_percentage") return std::to_string(thread_percentage) + ".0\n";
    if (command == "quit") {
      quit = true;
      return "";
    }
    return "Unrecognized command: " + command + "\n";
  }

  void end_servers() {
    for (const auto& [pid, uid] : servers) ::kill(pid, SIGTERM);
    for (const auto& [pid, uid] : servers) ::waitpid(pid, nullptr, 0);
    servers.clear();
  }
};

[[noreturn]] void serve(int listener, int ready_fd) {
  long long answered_first = -1;  // when the first command was answered
  const long long crash_after = std::atoll(env_or("FAKE_MPS_CRASH_AFTER_MS", "-1").c_str());
  const std::string crash_once = env_or("FAKE_MPS_CRASH_ONCE", "");
  const bool mute = env_or("FAKE_MPS_MUTE", "0") == "1";
  {
    FILE* f = std::fopen(pid_path().c_str(), "w");
    if (f != nullptr) {
      std::fprintf(f, "%d\n", static_cast<int>(::getpid()));
      std::fclose(f);
    }
  }
  log_line("control daemon started");
  int devnull = ::open("/dev/null", O_RDWR);
  ::dup2(devnull, 0);
  ::dup2(devnull, 1);
  ::dup2(devnull, 2);
  char ok = 'k';
  (void)!::write(ready_fd, &ok, 1);
  ::close(ready_fd);
  Daemon d;
  while (!d.quit) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (crash_after >= 0 && answered_first >= 0 && now_ms() - answered_first >= crash_after &&
        (crash_once.empty() || ::unlink(crash_once.c_str()) == 0)) {
      log_line("crashing (FAKE_MPS_CRASH_AFTER_MS)");
      ::abort();
    }
    pollfd p{listener, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    int client = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    std::string line;
    char c = 0;
    while (line.size() < 4096 && ::read(client, &c, 1) == 1 && c != '\n') line += c;
    if (mute) {
      ::sleep(3600);
    }
    std::string reply = d.answer(line);
    (void)!::write(client, reply.data(), reply.size());
    ::close(client);
    if (answered_first < 0) answered_first = now_ms();
  }
  d.end_servers();
  ::unlink(socket_path().c_str());
  ::unlink(pid_path().c_str());
  log_line("control daemon quit");
  ::_exit(0);
}

int start_daemon() {
  if (const char* refuse = std::getenv("FAKE_MPS_REFUSE"); refuse != nullptr && *refuse != '\0') {
    std::fprintf(stderr, "%s\n", refuse);
    return 1;
  }
  if (running_daemon()) {
    std::fprintf(stderr, "a control daemon already runs with pipe directory %s\n", pipe_dir().c_str());
    return 1;
  }
  const long long delay = std::atoll(env_or("FAKE_MPS_START_DELAY_MS", "0").c_str());
  if (delay > 0) ::usleep(static_cast<useconds_t>(delay * 1000));
  ::unlink(socket_path().c_str());
  int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path().c_str());
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener, 16) != 0) {
    std::fprintf(stderr, "cannot listen on %s: %s\n", socket_path().c_str(), std::strerror(errno));
    return 1;
  }
  int ready[2];
  if (::pipe(ready) != 0) return 1;
  pid_t child = ::fork();
  if (child < 0) return 1;
  if (child == 0) {
    ::close(ready[0]);
    ::setsid();
    if (::fork() != 0) ::_exit(0);  // the daemon is nobody's child
    serve(listener, ready[1]);
  }
  ::close(ready[1]);
  ::waitpid(child, nullptr, 0);
  char c = 0;
  return ::read(ready[0], &c, 1) == 1 ? 0 : 1;
}

int client() {
  char buffer[4096];
  std::string line;
  int rc = 0;
  while (std::fgets(buffer, sizeof buffer, stdin) != nullptr) {
    line = buffer;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (line.empty()) continue;
    int fd = connect_control();
    if (fd < 0) {
      std::fprintf(stderr, "Cannot find MPS control daemon process\n");
      return 1;
    }
    line += '\n';
    (void)!::write(fd, line.data(), line.size());
    ssize_t n = 0;
    while ((n = ::read(fd, buffer, sizeof buffer)) > 0)
      std::fwrite(buffer, 1, static_cast<std::size_t>(n), stdout);
    ::close(fd);
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  if (argc > 1 && std::strcmp(argv[1], "-d") == 0) return start_daemon();
  if (argc > 1) {
    std::fprintf(stderr, "usage: %s [-d]\n", argv[0]);
    return 2;
  }
  return client();
}
