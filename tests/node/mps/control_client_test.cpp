// Talking to nvidia-cuda-mps-control (here the fake): the client's answers, its failures, a deadline.
#include "node/mps/control_client.h"

#include <gtest/gtest.h>

#include "node/mps/preflight.h"
#include "test_util.h"

namespace gpuslice::node::mps {
namespace {

using namespace std::chrono_literals;

TEST(ServerList, TakesOnePidALineAndSkipsAnythingElse) {
  EXPECT_EQ(parse_server_list("123\n  456 \n"), (std::vector<int>{123, 456}));
  EXPECT_EQ(parse_server_list(""), std::vector<int>{});
  EXPECT_EQ(parse_server_list("Server 12 ready\n0\n-4\n99999999999\n7"), std::vector<int>{7});
}

TEST(OneLine, KeepsTheFirstLineWithoutControlCharacters) {
  EXPECT_EQ(one_line("\n  bad \x1b[31mthing\nsecond"), "bad ?[31mthing");
  EXPECT_EQ(one_line(std::string(500, 'x'), 10), std::string(10, 'x'));
}

TEST(ControlClient, SaysWhenNoDaemonListens) {
  test::TempDir dir;
  ControlEnv env{GPUSLICE_FAKE_MPS_CONTROL, dir.path(), dir.path()};
  auto answer = send_command(env, "get_server_list", 2s);
  ASSERT_FALSE(answer);
  EXPECT_NE(answer.error().find("exit status 1: Cannot find MPS control daemon process"), std::string::npos)
      << answer.error();
}

TEST(ControlClient, AnswersCommandsOfARunningDaemon) {
  test::TempDir dir;
  ControlEnv env{GPUSLICE_FAKE_MPS_CONTROL, dir.path(), dir.path()};
  ASSERT_TRUE(start_daemon(env, 3s));
  auto set = send_command(env, "set_default_active_thread_percentage 40", 2s);
  ASSERT_TRUE(set) << set.error();
  EXPECT_EQ(*set, "40.0\n");
  auto got = send_command(env, "get_default_active_thread_percentage", 2s);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, "40.0\n");
  auto empty = send_command(env, "get_server_list", 2s);
  ASSERT_TRUE(empty);
  EXPECT_EQ(*empty, "");
  const auto pid = live_control_pid(dir.path());
  ASSERT_TRUE(pid);
  ASSERT_TRUE(send_command(env, "quit", 2s));
  EXPECT_TRUE(test::wait_until([&] { return !process_alive(*pid); }));
}

TEST(ControlClient, KillsACommandThatOutlivesItsDeadline) {
  test::TempDir dir;
  ControlEnv env{"/bin/sleep", dir.path(), dir.path()};
  auto ran = run_control(env, {"5"}, {}, 100ms);
  ASSERT_FALSE(ran);
  EXPECT_NE(ran.error().find("did not finish within 100 ms"), std::string::npos) << ran.error();
}

TEST(ControlClient, PassesTheMpsDirectoriesAndNothingOfTheCallersOwn) {
  test::TempDir dir;
  ::setenv("CUDA_MPS_PIPE_DIRECTORY", "/somewhere/else", 1);
  ControlEnv env{"/usr/bin/env", dir / "pipe", dir / "log"};
  auto ran = run_control(env, {}, {}, 2s);
  ::unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  ASSERT_TRUE(ran) << ran.error();
  EXPECT_NE(ran->out.find("CUDA_MPS_PIPE_DIRECTORY=" + dir / "pipe" + "\n"), std::string::npos);
  EXPECT_NE(ran->out.find("CUDA_MPS_LOG_DIRECTORY=" + dir / "log" + "\n"), std::string::npos);
  EXPECT_EQ(ran->out.find("/somewhere/else"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::node::mps
