// Attacks on the CLI found by the isolation review: files planted in a profile directory, and
// libraries `gpuslice run` cannot preload. Each test is named after the attack.
#include <elf.h>
#include <sys/stat.h>

#include "cli_fixture.h"

namespace {

using namespace gpuslice::cli_test;

class CliHardeningTest : public CliTest {
 protected:
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ + "/" + name) << text; }

  // `run` with `library` must fail before the command runs: the command would create `marker`.
  void expect_refused(const std::string& library, const std::string& why) {
    std::string marker = dir_ + "/ran";
    Outcome o = run_bounded(
        {"run", "--library", library, "--memory", "1Gi", "--", "sh", "-c", "touch " + marker}, 20);
    EXPECT_EQ(o.status, 1) << o.err;
    EXPECT_FALSE(std::filesystem::exists(marker)) << "the command ran without its limit";
    EXPECT_TRUE(contains(o.err, library)) << o.err;
    EXPECT_TRUE(contains(o.err, why)) << o.err;
  }
};

TEST_F(CliHardeningTest, ProfileDoesNotHangOnAFifo) {
  write("metrics.log", "name:cuInit\ncount:1\nburst:5\n");
  ASSERT_EQ(mkfifo((dir_ + "/timeline.log").c_str(), 0600), 0);
  Outcome o = run_bounded({"profile", dir_}, 10);
  ASSERT_NE(o.status, kTimedOut) << "gpuslice profile blocked on a FIFO";
  EXPECT_EQ(o.status, 1);
  EXPECT_TRUE(contains(o.err, dir_ + "/timeline.log: is a FIFO")) << o.err;
}

TEST_F(CliHardeningTest, ProfileRefusesASymlinkToDevZero) {
  ASSERT_EQ(symlink("/dev/zero", (dir_ + "/timeline.log").c_str()), 0);
  Outcome o = run_bounded({"profile", dir_}, 10, 1ULL << 30);
  ASSERT_NE(o.status, kTimedOut) << "gpuslice profile kept reading /dev/zero";
  EXPECT_EQ(o.status, 1) << "neither a crash for lack of memory nor a summary: " << o.err;
  EXPECT_TRUE(contains(o.err, "symbolic link")) << o.err;
}

TEST_F(CliHardeningTest, ProfileRefusesASymlinkToAnotherFile) {
  write("elsewhere.log", "name:cuInit start:1 burst:5\n");
  ASSERT_EQ(symlink((dir_ + "/elsewhere.log").c_str(), (dir_ + "/timeline.log").c_str()), 0);
  Outcome o = run_bounded({"profile", dir_}, 10);
  EXPECT_EQ(o.status, 1) << o.out;
  EXPECT_TRUE(contains(o.err, "symbolic link")) << o.err;
}

TEST_F(CliHardeningTest, ProfileReportsADirectoryInPlaceOfAFileAsAnError) {
  ASSERT_EQ(mkdir((dir_ + "/timeline.log").c_str(), 0700), 0);
  Outcome o = run_bounded({"profile", dir_}, 10);
  EXPECT_EQ(o.status, 1) << "not '0 calls': " << o.out;
  EXPECT_TRUE(contains(o.err, "is a directory")) << o.err;
}

TEST_F(CliHardeningTest, ProfileOfADirectoryThatIsNotAProfileIsAnError) {
  write("notes.txt", "hello\n");
  Outcome o = run_bounded({"profile", dir_}, 10);
  EXPECT_EQ(o.status, 1) << o.out;
  EXPECT_TRUE(contains(o.err, "not a profile directory")) << o.err;
  Outcome file = run_bounded({"profile", dir_ + "/notes.txt"}, 10);
  EXPECT_EQ(file.status, 1) << file.out;
  EXPECT_TRUE(contains(file.err, "not a directory")) << file.err;
}

TEST_F(CliHardeningTest, ProfileSkipsAnEndlessLineWithBoundedMemory) {
  {
    std::ofstream out(dir_ + "/timeline.log");
    out << "name:cuInit start:1 burst:7\nname:";
    std::string chunk(1 << 20, 'A');
    for (int i = 0; i < 64; ++i) out << chunk;  // one 64 MiB line
    out << " start:2 burst:3\nname:cuLaunchKernel start:3 burst:9\n";
  }
  Outcome o = run_bounded({"profile", "--json", dir_}, 30, 512ULL << 20);
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_TRUE(contains(o.err, "timeline.log:2: line longer than 4096 bytes")) << o.err.substr(0, 500);
  EXPECT_TRUE(contains(o.out, "\"cuLaunchKernel\"")) << o.out;
  EXPECT_TRUE(contains(o.out, "\"timeline_calls\":2")) << o.out;
}

TEST_F(CliHardeningTest, ProfileBoundsColumnWidthsAndHidesControlCharacters) {
  std::string long_name = "cu" + std::string(300, 'x');
  write("timeline.log", "name:" + long_name + " start:1 burst:7\nname:cu\x1b[2Jevil start:2 burst:3\n");
  Outcome o = run_bounded({"profile", dir_}, 10);
  ASSERT_EQ(o.status, 0) << o.err;
  std::istringstream lines(o.out);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 120u) << line;
  EXPECT_TRUE(contains(o.out, "...")) << o.out;
  EXPECT_FALSE(contains(o.out, "\x1b")) << "an escape sequence from the file reached the terminal";
}

// U+009B encoded in UTF-8 (C2 9B) is CSI to a terminal that reads UTF-8: a byte filter that only
// knew C0 controls let it through, in the table and in the malformed-line report alike.
TEST_F(CliHardeningTest, ProfileDoesNotPassUtf8EncodedC1Controls) {
  write("timeline.log",
        "name:cu\xc2\x9b"
        "2Jevil start:2 burst:3\nname:cuInit\xc2\x9b"
        "31m start:x burst:1\n");
  write("metrics.log",
        "name:cu\xc2\x9d"
        "0;title\xc2\x9c\ncount:1\nburst:5\n");
  Outcome o = run_bounded({"profile", dir_}, 10);
  ASSERT_EQ(o.status, 0) << o.err;
  for (const std::string& text : {o.out, o.err}) {
    for (const char* c1 : {"\xc2\x9b", "\xc2\x9c", "\xc2\x9d", "\x1b"}) {
      EXPECT_FALSE(contains(text, c1)) << "a C1 control from the file reached the terminal: " << text;
    }
  }
  EXPECT_TRUE(contains(o.out, "cu?2Jevil")) << o.out;
}

TEST_F(CliHardeningTest, StatusAndTopRefuseAFifoStateFileWithoutBlocking) {
  ASSERT_EQ(mkfifo(state_.c_str(), 0600), 0);
  Outcome status = run_bounded({"status", "--file", state_}, 10);
  ASSERT_NE(status.status, kTimedOut) << "gpuslice status blocked on a FIFO";
  EXPECT_EQ(status.status, 1);
  EXPECT_TRUE(contains(status.err, state_)) << status.err;
  Outcome top = run_bounded({"top", "--file", state_, "--iterations", "1"}, 10);
  ASSERT_NE(top.status, kTimedOut) << "gpuslice top blocked on a FIFO";
  EXPECT_EQ(top.status, 1);
}

TEST_F(CliHardeningTest, RunRefusesANonLoadableLibrary) {
  expect_refused("/etc/passwd", "not an ELF file");
  expect_refused(make_empty_file("empty.so"), "too short");
}

TEST_F(CliHardeningTest, RunRefusesATruncatedElf) {
  std::string lib = make_library("libgpuslice.so");
  std::uintmax_t size = std::filesystem::file_size(lib);
  std::filesystem::resize_file(lib, size / 2);
  expect_refused(lib, "truncated");
  std::filesystem::resize_file(lib, 200);  // the header survives, the program headers do not all
  expect_refused(lib, "truncated");
}

TEST_F(CliHardeningTest, RunRefusesALibraryOfAnotherClassOrMachine) {
  std::string lib = make_library("libgpuslice.so");
  auto patch = [&](std::size_t offset, const void* bytes, std::size_t n) {
    std::fstream f(lib, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
  };
  unsigned char class32 = ELFCLASS32;
  patch(EI_CLASS, &class32, 1);
  expect_refused(lib, "not a 64-bit");
  std::filesystem::remove(lib);
  lib = make_library("libgpuslice.so");
  std::uint16_t machine = EM_RISCV;
  patch(offsetof(Elf64_Ehdr, e_machine), &machine, sizeof machine);
  expect_refused(lib, "another machine");
  std::filesystem::remove(lib);
  lib = make_library("libgpuslice.so");
  std::uint16_t type = ET_EXEC;
  patch(offsetof(Elf64_Ehdr, e_type), &type, sizeof type);
  expect_refused(lib, "not a shared object");
}

TEST_F(CliHardeningTest, RunRefusesAFifoAsLibraryWithoutBlocking) {
  std::string fifo = dir_ + "/lib.so";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  Outcome o = run_bounded({"run", "--library", fifo, "--", "true"}, 10);
  ASSERT_NE(o.status, kTimedOut);
  EXPECT_EQ(o.status, 1);
  EXPECT_TRUE(contains(o.err, "not a regular file")) << o.err;
}

// A PIE is ET_DYN with loadable segments and a dynamic section, like a library, but ld.so
// refuses to preload it ("cannot be preloaded ... ignored") and runs the command with no limit.
TEST_F(CliHardeningTest, RunRefusesAnExecutableAsLibrary) {
  expect_refused(GPUSLICE_CLI_PATH, "not a shared library");
  expect_refused("/bin/true", "not a shared library");
}

// A file every static check accepts but ld.so skips (here: an OS ABI it does not know): only
// asking the loader itself shows that the command would run with no limit.
TEST_F(CliHardeningTest, RunRefusesALibraryTheLoaderIgnores) {
  std::string lib = make_library("libgpuslice.so");
  {
    std::fstream f(lib, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(EI_OSABI);
    f.put(static_cast<char>(0x42));
  }
  expect_refused(lib, "the dynamic loader does not preload it");
}

TEST_F(CliHardeningTest, RunRefusesALibraryWhoseDependencyIsMissing) {
  std::string lib = dir_ + "/libgpuslice.so";
  std::filesystem::copy_file(GPUSLICE_TEST_NEEDS_MISSING_LIBRARY, lib);
  expect_refused(lib, "libcli_test_missing_dep.so not found");
}

// LD_PRELOAD splits at spaces and colons: the loader would look for two files, find neither and
// run the command with no limit.
TEST_F(CliHardeningTest, RunRefusesALibraryPathTheLoaderWouldSplit) {
  std::filesystem::create_directories(dir_ + "/my libs");
  std::string spaced = make_library("my libs/libgpuslice.so");
  expect_refused(spaced, "LD_PRELOAD");
  std::filesystem::create_directories(dir_ + "/a:b");
  expect_refused(make_library("a:b/libgpuslice.so"), "LD_PRELOAD");
}

// A library naming an audit module: the dependency check ran the loader with the library as its
// main program, and the loader loaded and started the module (code a plain preload never runs).
TEST_F(CliHardeningTest, RunRefusesALibraryWithAnAuditModuleWithoutRunningIt) {
  for (const char* library : {GPUSLICE_TEST_AUDITED_LIBRARY, GPUSLICE_TEST_DEP_AUDITED_LIBRARY}) {
    std::filesystem::remove(GPUSLICE_TEST_AUDIT_MARKER);
    expect_refused(library, "audit module");
    EXPECT_FALSE(std::filesystem::exists(GPUSLICE_TEST_AUDIT_MARKER))
        << "the audit module of " << library << " ran";
  }
}

TEST_F(CliHardeningTest, RunAcceptsARealSharedLibrary) {
  std::string lib = make_library("libgpuslice.so");
  Outcome o = run_bounded({"run", "--library", lib, "--", "sh", "-c", "echo \"$LD_PRELOAD\""}, 20);
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(o.out, lib + "\n");
}

}  // namespace
