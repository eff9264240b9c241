// `gpuslice top` in a real terminal: tmux runs it at 80x24 and 120x32 against the simulated
// driver's NVML; the test reads the screen (capture-pane), the alternate-screen flag and sends keys.
#include "cli_fixture.h"

namespace {

using namespace gpuslice::cli_test;

std::string shell(const std::string& command) {
  std::string out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[4096];
    std::size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
    pclose(pipe);
  }
  return out;
}

class TopTerminalTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    if (shell("command -v tmux").empty()) GTEST_SKIP() << "tmux is not installed (CI installs it)";
    // One tmux server per test: a server still exiting from the previous test cannot take this one.
    socket_ = "gpuslice-top-" + std::to_string(getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directory(dir_ + "/mock");
  }
  void TearDown() override {
    if (!socket_.empty()) shell(tmux("kill-server") + " 2>/dev/null");
    CliTest::TearDown();
  }
  std::string tmux(const std::string& args) const { return "tmux -L " + socket_ + " " + args; }

  void start(int width, int height) {
    std::string command = std::string(GPUSLICE_CLI_PATH) + " top --file " + state_ + " --interval 0.2";
    std::string start =
        tmux("new-session -d -x " + std::to_string(width) + " -y " + std::to_string(height) +
             " -e LD_LIBRARY_PATH=" + GPUSLICE_MOCK_DIR + " -e GPUSLICE_MOCK_STATE_DIR=" + dir_ +
             "/mock -e TERM=tmux-256color '" + command + "'");
    ASSERT_EQ(std::system(start.c_str()), 0) << start;
  }
  std::string screen() const { return shell(tmux("capture-pane -p")); }
  // Polls the screen until it contains `text` (the view refreshes every 0.2 s).
  std::string wait_for(const std::string& text) const {
    std::string shown;
    for (int i = 0; i < 100; ++i) {
      shown = screen();
      if (contains(shown, text)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return shown;
  }
  bool running() const { return std::system((tmux("has-session") + " 2>/dev/null").c_str()) == 0; }

  std::string socket_;
};

TEST_F(TopTerminalTest, FullScreenViewFitsEightyColumnsAndQuitsOnQ) {
  auto ledger = make_state();
  ASSERT_TRUE(ledger->try_reserve(0, 3 * kGi));
  start(80, 24);
  ledger->add_busy_ns(0, 1);
  std::string shown = wait_for("sm ");
  EXPECT_TRUE(contains(shown, "gpuslice top")) << shown;
  EXPECT_TRUE(contains(shown, "driver 580.00.00-mock")) << shown;
  EXPECT_TRUE(contains(shown, "CUDA 13.0")) << shown;
  EXPECT_TRUE(contains(shown, "gpuslice mock GPU")) << shown;
  EXPECT_TRUE(contains(shown, "00000000..4444 dev 0")) << "UUIDs shortened: " << shown;
  EXPECT_TRUE(contains(shown, "3G/8G")) << shown;
  EXPECT_TRUE(contains(shown, "/30%")) << "compute rate against the limit: " << shown;
  EXPECT_TRUE(contains(shown, std::to_string(getpid()))) << "process row: " << shown;
  std::istringstream lines(shown);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 80u) << line;
  // A device row is one line: the bar and the rates did not wrap onto the next.
  std::size_t row = shown.find("00000000..4444 dev 0");
  std::string device_line = shown.substr(row, shown.find('\n', row) - row);
  EXPECT_TRUE(contains(device_line, "[")) << device_line;
  EXPECT_TRUE(contains(device_line, "refused +")) << device_line;
  EXPECT_EQ(shell(tmux("display -p '#{alternate_on}'")), "1\n") << "not on the alternate screen";

  ASSERT_EQ(std::system(tmux("send-keys s").c_str()), 0);
  EXPECT_TRUE(contains(wait_for("sort share"), "sort share"));
  ASSERT_EQ(std::system(tmux("send-keys d").c_str()), 0);
  shown = wait_for("device 00000000..4444");
  EXPECT_TRUE(contains(shown, "device 00000000..4444")) << shown;
  EXPECT_FALSE(contains(shown, "99999999..5555 dev 1")) << "the other device is still shown: " << shown;

  ASSERT_EQ(std::system(tmux("send-keys q").c_str()), 0);
  for (int i = 0; i < 50 && running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(running()) << "q did not end gpuslice top";
}

// Memory that follows priority: under a device with a guarantee, its guarantee, what the container
// borrowed, moved to host memory and cannot move, and its reclaim episodes, as the ledger says.
TEST_F(TopTerminalTest, ADeviceWithAGuaranteeShowsBorrowedOnHostUnmovableAndReclaims) {
  auto ledger = make_state();
  ledger->set_guarantee(0, 2 * kGi);
  ASSERT_TRUE(ledger->try_reserve(0, 3 * kGi));
  ledger->set_reclaim_figures(0, kGi, 512ULL << 20);
  ledger->add_reclaim_episode(0, 1'000'000'000, 512ULL << 20);
  ledger->add_reclaim_episode(0, 500'000'000, 256ULL << 20);
  start(80, 24);
  const std::string row = "guar 2G  borrowed 1G  on host 512M  unmovable 2G  reclaims 2 768M 1.50s";
  std::string shown = wait_for(row);
  EXPECT_TRUE(contains(shown, row)) << shown;
  // Under its device's row; the device without a guarantee has none.
  const std::size_t device = shown.find("00000000..4444 dev 0");
  ASSERT_NE(device, std::string::npos) << shown;
  EXPECT_EQ(shown.find(row), shown.find('\n', device) + 4) << shown;
  EXPECT_EQ(shown.find("guar "), shown.rfind("guar ")) << "one reclaim row only: " << shown;
  std::istringstream lines(shown);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 80u) << line;
}

TEST_F(TopTerminalTest, WideTerminalShowsTheCardTotalAndHostPids) {
  auto ledger = make_state();
  ASSERT_TRUE(ledger->try_reserve(1, kGi));
  start(120, 32);
  std::string shown = wait_for("HOST PID");
  EXPECT_TRUE(contains(shown, "HOST PID")) << shown;
  EXPECT_TRUE(contains(shown, "of 80G")) << "the card's total: " << shown;
  EXPECT_TRUE(contains(shown, "1G/unl")) << shown;
  EXPECT_TRUE(contains(shown, "99999999..5555 dev 1")) << shown;
  std::istringstream lines(shown);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 120u) << line;
}

TEST_F(TopTerminalTest, HelpScreenOpensOnHAndClosesOnAnyKey) {
  auto ledger = make_state();
  start(80, 24);
  ASSERT_TRUE(contains(wait_for("h help"), "h help"));
  ASSERT_EQ(std::system(tmux("send-keys h").c_str()), 0);
  std::string shown = wait_for("gpuslice top: keys");
  EXPECT_TRUE(contains(shown, "gpuslice top: keys")) << shown;
  EXPECT_TRUE(contains(shown, "sort processes")) << shown;
  ASSERT_EQ(std::system(tmux("send-keys x").c_str()), 0);
  // The view's own hint: the help screen names "HOST PID" too, so waiting for that returned while
  // the help was still up whenever the redraw came later than the first look (under ASan).
  shown = wait_for("h help");
  EXPECT_FALSE(contains(shown, "gpuslice top: keys")) << shown;
  EXPECT_TRUE(running()) << "a key other than q closed the help, not the view";
}

// Commands were cut at 40 characters at any width; a wide terminal shows as much as fits.
TEST_F(TopTerminalTest, AWideTerminalShowsTheCommandLineAsFarAsItFits) {
  auto ledger = make_state();
  std::string command = read_file("/proc/self/cmdline");
  for (char& c : command) c = c == '\0' ? ' ' : c;
  while (!command.empty() && command.back() == ' ') command.pop_back();
  if (command.size() < 50) GTEST_SKIP() << "this test's own command line is too short: " << command;
  start(200, 32);
  std::string shown = wait_for("HOST PID");
  EXPECT_TRUE(contains(shown, command.substr(0, 50))) << shown;
}

// As nvtop shows a graph per GPU: one summary line per GPU with the compute rate's history, and
// memory figures in colour (green, yellow, red by how full the quota is).
TEST_F(TopTerminalTest, EachGpuHasASummaryLineWithHistoryAndMemoryInColour) {
  auto ledger = make_state();
  ASSERT_TRUE(ledger->try_reserve(0, 7 * kGi));  // 7 of 8 GiB: yellow
  start(100, 30);
  for (int i = 0; i < 5; ++i) {
    ledger->add_busy_ns(0, 150'000'000);  // busy while the view refreshes every 0.2 s
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::string shown = wait_for("gpu 00000000..4444");
  EXPECT_TRUE(contains(shown, "gpu 00000000..4444  mem 7G/80G  sm ")) << shown;
  std::size_t row = shown.find("gpu 00000000..4444");
  std::string line = shown.substr(row, shown.find('\n', row) - row);
  EXPECT_NE(line.find_first_of("_.-=+*#", line.find('[')), std::string::npos) << "no history: " << line;
  const std::string coloured = shell(tmux("capture-pane -p -e"));
  EXPECT_TRUE(contains(coloured, "\x1b[33m")) << "no yellow for a quota 7/8 full: " << coloured;
}

// What does not fit was out of reach: the view scrolls below the header and the GPU lines.
TEST_F(TopTerminalTest, ALowTerminalScrollsToTheProcessRows) {
  auto ledger = make_state();
  start(80, 7);
  std::string shown = wait_for("gpu 00000000..4444");
  const std::string pid = std::to_string(getpid());
  ASSERT_FALSE(contains(shown, "HOST PID")) << "fits without scrolling; make the terminal lower: " << shown;
  for (int i = 0; i < 6 && !contains(shown, "HOST PID"); ++i) {
    ASSERT_EQ(std::system(tmux("send-keys j").c_str()), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    shown = screen();
  }
  EXPECT_TRUE(contains(shown, "HOST PID")) << shown;
  EXPECT_TRUE(contains(shown, "gpuslice top")) << "the header stays: " << shown;
  ASSERT_EQ(std::system(tmux("send-keys g").c_str()), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(contains(screen(), "HOST PID")) << "Home goes back to the top";
}

TEST_F(TopTerminalTest, NotATerminalPrintsThePlainRefreshes) {
  auto ledger = make_state();
  Outcome o = run({"top", "--file", state_, "--interval", "0.05", "--iterations", "2"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_FALSE(contains(o.out, "\x1b")) << "escape sequences in a pipe";
  std::size_t first = o.out.find("State file:");
  ASSERT_NE(first, std::string::npos) << o.out;
  EXPECT_NE(o.out.find("State file:", first + 1), std::string::npos) << "two refreshes: " << o.out;
  EXPECT_TRUE(contains(o.out, "NOW")) << "the rate column once an interval has passed: " << o.out;
}

}  // namespace
