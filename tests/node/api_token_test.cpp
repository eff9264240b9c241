// The API token read from a file as the daemon is configured (--token-file): a rotated token
// replaces the old one without a restart, and a file that appears after the start is picked up.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "node/api/http_api.h"
#include "node/node_view/collector.h"
#include "node/serve_mode.h"
#include "test_util.h"

namespace gpuslice::node {
namespace {

class ApiTokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    collector_ = std::make_unique<Collector>(layout_, nullptr, clock_);
    collector_->refresh();
  }

  // Parses the flags as gpuslice-node serve does and starts the API with them.
  void start(const std::string& token_file) {
    ServeOptions options;
    auto parsed = parse_serve_options(
        {"--listen", "127.0.0.1:0", "--token-file", token_file},
        [](const char*) -> const char* { return nullptr; }, options);
    ASSERT_EQ(parsed.message, "");
    server_ = std::make_unique<ApiServer>(options.api, layout_, *collector_);
    auto port = server_->start();
    ASSERT_TRUE(port.ok()) << port.error();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
  }

  int status_with(const std::string& token) {
    auto res = client_->Get("/api/v1/status", {{"Authorization", "Bearer " + token}});
    return res ? res->status : -1;
  }

  // As the kubelet updates a Secret volume: a new file renamed over the old one.
  void replace_file(const std::string& path, const std::string& content) {
    test::write_file(path + ".new", content);
    ASSERT_EQ(std::rename((path + ".new").c_str(), path.c_str()), 0);
  }

  test::TempDir dir_;
  HostLayout layout_{dir_ / "root"};
  test::FakeClock clock_;
  std::unique_ptr<Collector> collector_;
  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ApiTokenFileTest, RotatedTokenReplacesTheOldOne) {
  const std::string file = dir_ / "token";
  test::write_file(file, "first-token\n");
  start(file);
  EXPECT_EQ(status_with("first-token"), 200);

  replace_file(file, "second-token\n");
  EXPECT_EQ(status_with("first-token"), 401);
  EXPECT_EQ(status_with("second-token"), 200);

  // Rewritten in place (a different length) works as well.
  test::write_file(file, "third-token-longer");
  EXPECT_EQ(status_with("second-token"), 401);
  EXPECT_EQ(status_with("third-token-longer"), 200);

  // A removed token file closes the API rather than keeping the last token.
  ASSERT_EQ(::unlink(file.c_str()), 0);
  EXPECT_EQ(status_with("third-token-longer"), 401);
}

// Rotation by an in-place rewrite of the same size that puts the old mtime back (a tool that
// preserves times, or an attacker hiding the change): only the ctime says the file changed.
TEST_F(ApiTokenFileTest, SameSizeRewriteKeepingTheMtimeStillRotatesTheToken) {
  const std::string file = dir_ / "token";
  test::write_file(file, "token-aaaa\n");
  struct stat before {};
  ASSERT_EQ(::stat(file.c_str(), &before), 0);
  start(file);
  EXPECT_EQ(status_with("token-aaaa"), 200);

  {
    std::FILE* f = std::fopen(file.c_str(), "r+");
    ASSERT_NE(f, nullptr);
    std::fputs("token-bbbb\n", f);
    std::fclose(f);
  }
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0);
  struct stat after {};
  ASSERT_EQ(::stat(file.c_str(), &after), 0);
  ASSERT_EQ(after.st_size, before.st_size);
  ASSERT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  ASSERT_EQ(after.st_ino, before.st_ino);

  EXPECT_EQ(status_with("token-aaaa"), 401) << "the old token kept working after the rotation";
  EXPECT_EQ(status_with("token-bbbb"), 200);
}

TEST_F(ApiTokenFileTest, TokenFileCreatedAfterStartIsPickedUp) {
  const std::string file = dir_ / "later";
  start(file);
  EXPECT_EQ(status_with("late-token"), 401);
  EXPECT_EQ(status_with(""), 401);
  test::write_file(file, "  late-token \n");
  EXPECT_EQ(status_with("late-token"), 200);
  test::write_file(file, "\n");  // an empty file is no token at all
  EXPECT_EQ(status_with(""), 401);
}

}  // namespace
}  // namespace gpuslice::node
