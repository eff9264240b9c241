// Bad state files: every kind of damage is refused with its own message naming the file.
#include "shared_state/layout.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "shared_state/ledger.h"
#include "test_util.h"

namespace gpuslice::shm {
namespace {

using layout::Header;
using testing::TempDir;

class LayoutTest : public ::testing::Test {
 protected:
  // A valid state file, created through the API and closed again.
  std::string make_valid_file() {
    std::string path = dir_.file("state");
    auto ledger = Ledger::open(path, Ledger::Mode::Process);
    EXPECT_TRUE(ledger.ok()) << ledger.error();
    return path;
  }

  static void write_bytes(const std::string& path, off_t offset, const void* data, std::size_t size) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, data, size, offset), static_cast<ssize_t>(size));
    close(fd);
  }

  static void read_header(const std::string& path, Header& h) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(pread(fd, static_cast<void*>(&h), sizeof h, 0), static_cast<ssize_t>(sizeof h));
    close(fd);
  }

  // Rewrites the header's version and a checksum that matches it, as a real other build would.
  void rewrite_version(const std::string& path, std::uint32_t version) {
    Header h;
    read_header(path, h);
    h.version = version;
    h.checksum = layout::header_checksum(h);
    write_bytes(path, 0, &h, offsetof(Header, slot_high_water));
  }

  static std::string open_error(const std::string& path, Ledger::Mode mode = Ledger::Mode::Process) {
    auto ledger = Ledger::open(path, mode);
    EXPECT_FALSE(ledger.ok());
    return ledger.ok() ? std::string() : ledger.error();
  }

  TempDir dir_;
};

TEST_F(LayoutTest, FreshFileIsValidAndReopens) {
  std::string path = make_valid_file();
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), layout::kFileSize);
  Header h;
  read_header(path, h);
  EXPECT_EQ(std::memcmp(h.magic, "GPUSLICE", 8), 0);
  EXPECT_EQ(h.version, layout::kLayoutVersion);
  EXPECT_EQ(h.checksum, layout::header_checksum(h));
  EXPECT_TRUE(Ledger::open(path, Ledger::Mode::Observer).ok());
  EXPECT_TRUE(Ledger::open(path, Ledger::Mode::Process).ok());
}

TEST_F(LayoutTest, CreatesMissingDirectories) {
  std::string path = dir_.path() + "/a/b/state";
  auto ledger = Ledger::open(path, Ledger::Mode::Process);
  ASSERT_TRUE(ledger.ok()) << ledger.error();
  EXPECT_EQ(access(path.c_str(), R_OK | W_OK), 0);
}

TEST_F(LayoutTest, EmptyFileIsTruncated) {
  std::string path = dir_.file("state");
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  close(fd);
  std::string error = open_error(path);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("empty"), std::string::npos) << error;
}

TEST_F(LayoutTest, FileShorterThanHeaderIsTruncated) {
  std::string path = make_valid_file();
  ASSERT_EQ(truncate(path.c_str(), 40), 0);
  std::string error = open_error(path);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
  EXPECT_NE(error.find("header"), std::string::npos) << error;
}

TEST_F(LayoutTest, FileShorterThanDeclaredIsTruncated) {
  std::string path = make_valid_file();
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(layout::kFileSize - 4096)), 0);
  std::string error = open_error(path, Ledger::Mode::Observer);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
  EXPECT_NE(error.find(std::to_string(layout::kFileSize)), std::string::npos) << error;
}

TEST_F(LayoutTest, LongerFileHasWrongSize) {
  std::string path = make_valid_file();
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(layout::kFileSize + 4096)), 0);
  std::string error = open_error(path);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("wrong size"), std::string::npos) << error;
}

TEST_F(LayoutTest, ForeignFileIsRejected) {
  std::string path = dir_.file("state");
  std::string text(layout::kFileSize, 'x');
  std::memcpy(text.data(), "#!/bin/sh\n", 10);
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  std::string error = open_error(path);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("not a gpuslice state file"), std::string::npos) << error;
}

TEST_F(LayoutTest, TinyForeignFileIsForeignNotTruncated) {
  std::string path = dir_.file("state");
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "hi\n", 3), 3);
  close(fd);
  EXPECT_NE(open_error(path).find("not a gpuslice state file"), std::string::npos);
}

TEST_F(LayoutTest, CorruptedHeaderFailsChecksum) {
  std::string path = make_valid_file();
  Header h;
  read_header(path, h);
  h.created_realtime_ns ^= 0x10;
  write_bytes(path, 0, &h, offsetof(Header, slot_high_water));
  std::string error = open_error(path);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("checksum"), std::string::npos) << error;
  EXPECT_NE(error.find("corrupted"), std::string::npos) << error;
}

TEST_F(LayoutTest, OlderVersionIsRefused) {
  std::string path = make_valid_file();
  rewrite_version(path, layout::kLayoutVersion - 1);
  std::string error = open_error(path);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("older layout version " + std::to_string(layout::kLayoutVersion - 1)),
            std::string::npos)
      << error;
}

TEST_F(LayoutTest, NewerVersionIsRefused) {
  std::string path = make_valid_file();
  rewrite_version(path, layout::kLayoutVersion + 1);
  std::string error = open_error(path, Ledger::Mode::Observer);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("newer layout version " + std::to_string(layout::kLayoutVersion + 1)),
            std::string::npos)
      << error;
}

TEST_F(LayoutTest, DeclaredGeometryMismatchIsWrongSize) {
  std::string path = make_valid_file();
  Header h;
  read_header(path, h);
  h.max_slots = 7;
  h.checksum = layout::header_checksum(h);
  write_bytes(path, 0, &h, offsetof(Header, slot_high_water));
  std::string error = open_error(path);
  EXPECT_NE(error.find("wrong size"), std::string::npos) << error;
}

TEST_F(LayoutTest, DirectoryIsNotAStateFile) {
  std::string error = open_error(dir_.path());
  EXPECT_NE(error.find(dir_.path()), std::string::npos) << error;
}

TEST_F(LayoutTest, ObserverNeverCreatesAFile) {
  std::string path = dir_.file("state");
  std::string error = open_error(path, Ledger::Mode::Observer);
  EXPECT_NE(error.find("no state file"), std::string::npos) << error;
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

TEST_F(LayoutTest, EachDamageHasItsOwnMessage) {
  // The messages above must stay distinguishable for the user: compare them pairwise.
  std::vector<std::string> errors;
  auto add = [&](const std::function<void(const std::string&)>& damage) {
    std::string path = make_valid_file();
    damage(path);
    errors.push_back(open_error(path));
    unlink(path.c_str());
  };
  add([](const std::string& p) { ASSERT_EQ(truncate(p.c_str(), 0), 0); });
  add([](const std::string& p) { ASSERT_EQ(truncate(p.c_str(), 20), 0); });
  add([](const std::string& p) { write_bytes(p, 0, "FOREIGN!", 8); });
  add([](const std::string& p) { write_bytes(p, 40, "\x01", 1); });
  add([this](const std::string& p) { rewrite_version(p, 0); });
  add([this](const std::string& p) { rewrite_version(p, 9); });
  add([](const std::string& p) {
    ASSERT_EQ(truncate(p.c_str(), static_cast<off_t>(layout::kFileSize + 1)), 0);
  });
  for (std::size_t i = 0; i < errors.size(); ++i) {
    EXPECT_FALSE(errors[i].empty());
    for (std::size_t j = i + 1; j < errors.size(); ++j) EXPECT_NE(errors[i], errors[j]);
  }
}

TEST(ValidateHeaderBytes, NeverReadsPastWhatIsAvailable) {
  // A fuzzer-style sweep: every prefix length of a valid header is judged without a crash.
  Header h;
  std::memset(static_cast<void*>(&h), 0, sizeof h);
  std::memcpy(h.magic, layout::kMagic, 8);
  h.version = layout::kLayoutVersion;
  h.header_size = layout::kHeaderBytes;
  h.file_size = layout::kFileSize;
  h.max_devices = layout::kMaxDeviceRecords;
  h.max_slots = layout::kMaxSlots;
  h.device_record_size = sizeof(layout::DeviceRecord);
  h.slot_size = sizeof(layout::Slot);
  h.devices_offset = layout::kDevicesOffset;
  h.slots_offset = layout::kSlotsOffset;
  h.checksum = layout::header_checksum(h);
  EXPECT_TRUE(validate_header_bytes(&h, sizeof h, layout::kFileSize, "x").ok());
  for (std::size_t n = 0; n < offsetof(Header, slot_high_water); ++n) {
    EXPECT_FALSE(validate_header_bytes(&h, n, n, "x").ok()) << n;
  }
}

}  // namespace
}  // namespace gpuslice::shm
