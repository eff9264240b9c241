// safe_file refuses what a hostile writer of a shared directory could plant: symlinks, FIFOs,
// device nodes, oversized files, and directories that someone else controls.
#include "common/safe_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/errno_text.h"
#include "temp_dir.h"

namespace gpuslice::fs {
namespace {

using gpuslice::test::TempDir;

void write_file(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

std::string read_plain(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ErrnoText, NamesTheDescriptionAndTheSymbol) {
  EXPECT_EQ(errno_text(ENOENT), "No such file or directory (ENOENT)");
  EXPECT_STREQ(errno_name(EACCES), "EACCES");
  EXPECT_NE(errno_text(99999).find("99999"), std::string::npos);
}

TEST(SafeFile, ReadsASmallRegularFile) {
  TempDir dir;
  write_file(dir.file("a"), "hello");
  auto data = read_small_file(dir.file("a"), 100, DirTrust::OwnerOnly);
  ASSERT_TRUE(data) << data.error();
  EXPECT_EQ(*data, "hello");
}

TEST(SafeFile, SymlinkInTheLastComponentIsRefused) {
  TempDir dir;
  write_file(dir.file("target"), "secret");
  ASSERT_EQ(symlink(dir.file("target").c_str(), dir.file("link").c_str()), 0);
  auto data = read_small_file(dir.file("link"), 100);
  ASSERT_FALSE(data);
  EXPECT_NE(data.error().find("symbolic link"), std::string::npos) << data.error();
}

TEST(SafeFile, CreatingThroughADanglingSymlinkIsRefusedAndCreatesNothing) {
  TempDir dir;
  ASSERT_EQ(symlink(dir.file("victim").c_str(), dir.file("link").c_str()), 0);
  auto dirfd = open_dir(dir.path(), DirTrust::OwnerOnly);
  ASSERT_TRUE(dirfd) << dirfd.error();
  UniqueFd guard(*dirfd);
  auto fd = open_in_dir(*dirfd, "link", O_RDWR | O_CREAT | O_TRUNC, 0600);
  EXPECT_FALSE(fd);
  EXPECT_FALSE(std::filesystem::exists(dir.file("victim")));
}

TEST(SafeFile, TruncatingThroughASymlinkLeavesTheTargetIntact) {
  TempDir dir;
  write_file(dir.file("victim"), "keep me");
  ASSERT_EQ(symlink(dir.file("victim").c_str(), dir.file("link").c_str()), 0);
  auto dirfd = open_dir(dir.path(), DirTrust::OwnerOnly);
  ASSERT_TRUE(dirfd);
  UniqueFd guard(*dirfd);
  EXPECT_FALSE(open_in_dir(*dirfd, "link", O_WRONLY | O_CREAT | O_TRUNC, 0600));
  EXPECT_EQ(read_plain(dir.file("victim")), "keep me");
}

TEST(SafeFile, FifoIsRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(mkfifo(dir.file("fifo").c_str(), 0600), 0);
  auto start = std::chrono::steady_clock::now();
  auto data = read_small_file(dir.file("fifo"), 100);
  ASSERT_FALSE(data);
  EXPECT_NE(data.error().find("FIFO"), std::string::npos) << data.error();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  // Also for writers, which open(2) would block until a reader appears.
  auto dirfd = open_dir(dir.path(), DirTrust::OwnerOnly);
  ASSERT_TRUE(dirfd);
  UniqueFd guard(*dirfd);
  EXPECT_FALSE(open_in_dir(*dirfd, "fifo", O_WRONLY));
}

TEST(SafeFile, DeviceNodeIsRefused) {
  auto data = read_small_file("/dev/null", 100);
  ASSERT_FALSE(data);
  EXPECT_NE(data.error().find("character device"), std::string::npos) << data.error();
  auto zero = read_small_file("/dev/zero", 100);
  EXPECT_FALSE(zero);
}

TEST(SafeFile, DirectoryIsRefusedAsAFile) {
  TempDir dir;
  ASSERT_EQ(mkdir(dir.file("sub").c_str(), 0700), 0);
  EXPECT_FALSE(read_small_file(dir.file("sub"), 100));
}

TEST(SafeFile, OversizedFileIsRefused) {
  TempDir dir;
  write_file(dir.file("big"), std::string(101, 'x'));
  auto data = read_small_file(dir.file("big"), 100);
  ASSERT_FALSE(data);
  EXPECT_NE(data.error().find("more than the 100"), std::string::npos) << data.error();
}

TEST(SafeFile, ReadIsBoundedAtExactlyTheLimit) {
  TempDir dir;
  write_file(dir.file("exact"), std::string(100, 'y'));
  auto data = read_small_file(dir.file("exact"), 100);
  ASSERT_TRUE(data) << data.error();
  EXPECT_EQ(data->size(), 100U);
  write_file(dir.file("empty"), "");
  auto empty = read_small_file(dir.file("empty"), 100);
  ASSERT_TRUE(empty) << empty.error();
  EXPECT_TRUE(empty->empty());
}

TEST(SafeFile, FileNameWithASlashIsRefused) {
  TempDir dir;
  auto dirfd = open_dir(dir.path(), DirTrust::Any);
  ASSERT_TRUE(dirfd);
  UniqueFd guard(*dirfd);
  EXPECT_FALSE(open_in_dir(*dirfd, "../etc", O_RDONLY));
  EXPECT_FALSE(open_in_dir(*dirfd, "..", O_RDONLY));
  EXPECT_FALSE(open_in_dir(*dirfd, "", O_RDONLY));
}

TEST(SafeFile, SymlinkedDirectoryIsRefused) {
  TempDir dir;
  ASSERT_EQ(mkdir(dir.file("real").c_str(), 0700), 0);
  ASSERT_EQ(symlink(dir.file("real").c_str(), dir.file("alias").c_str()), 0);
  EXPECT_FALSE(open_dir(dir.file("alias"), DirTrust::Any));
}

TEST(SafeFile, DirectoryOwnedByAnotherUidIsRefusedForOwnerOnly) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another uid";
  TempDir dir;
  ASSERT_EQ(chown(dir.path().c_str(), 65534, 65534), 0);
  auto fd = open_dir(dir.path(), DirTrust::OwnerOnly);
  ASSERT_FALSE(fd);
  EXPECT_NE(fd.error().find("uid 65534"), std::string::npos) << fd.error();
  EXPECT_FALSE(open_dir(dir.path(), DirTrust::SharedSticky));
  auto any = open_dir(dir.path(), DirTrust::Any);
  ASSERT_TRUE(any);
  close(*any);
}

TEST(SafeFile, GroupWritableDirectoryIsRefusedForOwnerOnly) {
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0770), 0);
  EXPECT_FALSE(open_dir(dir.path(), DirTrust::OwnerOnly));
}

TEST(SafeFile, NonStickyWorldWritableDirectoryIsRefusedForSharedSticky) {
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0777), 0);
  auto fd = open_dir(dir.path(), DirTrust::SharedSticky);
  ASSERT_FALSE(fd);
  EXPECT_NE(fd.error().find("sticky"), std::string::npos) << fd.error();
  ASSERT_EQ(chmod(dir.path().c_str(), 01777), 0);
  auto sticky = open_dir(dir.path(), DirTrust::SharedSticky);
  ASSERT_TRUE(sticky) << sticky.error();
  close(*sticky);
  EXPECT_FALSE(open_dir(dir.path(), DirTrust::OwnerOnly));
}

TEST(SafeFile, CreatesWithTheRequestedModeAndClearsNonBlock) {
  TempDir dir;
  auto dirfd = open_dir(dir.path(), DirTrust::OwnerOnly);
  ASSERT_TRUE(dirfd);
  UniqueFd guard(*dirfd);
  mode_t old = umask(0);
  auto fd = open_in_dir(*dirfd, "new", O_RDWR | O_CREAT | O_EXCL, 0640);
  umask(old);
  ASSERT_TRUE(fd) << fd.error();
  UniqueFd file(*fd);
  struct stat st {};
  ASSERT_EQ(fstat(*fd, &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640U);
  EXPECT_EQ(fcntl(*fd, F_GETFL) & O_NONBLOCK, 0);
  EXPECT_NE(fcntl(*fd, F_GETFD) & FD_CLOEXEC, 0);
}

// Callers treat ENOENT as "no such file, fine" (an optional profile file, a state file not created
// yet): a planted symlink or FIFO must never pass for a missing file through a stale errno.
TEST(SafeFile, OnlyAMissingFileLeavesEnoent) {
  TempDir dir;
  ASSERT_EQ(symlink("/etc/passwd", dir.file("link").c_str()), 0);
  ASSERT_EQ(mkfifo(dir.file("fifo").c_str(), 0600), 0);
  for (const char* planted : {"link", "fifo"}) {
    errno = ENOENT;  // as left by an earlier lookup of a missing file
    auto opened = open_for_reading(dir.file(planted));
    ASSERT_FALSE(opened) << planted;
    EXPECT_NE(errno, ENOENT) << planted << ": " << opened.error();
    EXPECT_NE(opened.error().find(dir.file(planted)), std::string::npos) << opened.error();
  }
  errno = 0;
  auto missing = open_for_reading(dir.file("absent"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(errno, ENOENT) << missing.error();
  errno = 0;
  auto no_dir = open_for_reading(dir.file("absent-dir/file"));
  ASSERT_FALSE(no_dir);
  EXPECT_EQ(errno, ENOENT) << no_dir.error();
}

TEST(SafeFile, PreadExactReportsAShortFile) {
  TempDir dir;
  write_file(dir.file("short"), "abc");
  int fd = open(dir.file("short").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  char buffer[8];
  EXPECT_TRUE(pread_exact(fd, buffer, 3, 0));
  EXPECT_FALSE(pread_exact(fd, buffer, 8, 0));
  close(fd);
}

}  // namespace
}  // namespace gpuslice::fs
