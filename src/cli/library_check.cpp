#include "cli/library_check.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/errno_text.h"

namespace gpuslice::cli {
namespace {

#if defined(__x86_64__)
constexpr unsigned kMachine = EM_X86_64;
constexpr const char* kMachineName = "x86-64";
#elif defined(__aarch64__)
constexpr unsigned kMachine = EM_AARCH64;
constexpr const char* kMachineName = "AArch64";
#else
#error "gpuslice run: unknown target machine for the library check"
#endif

static_assert(sizeof(void*) == 8, "the library check assumes a 64-bit build");

constexpr std::size_t kMaxProgramHeaders = 4096;

bool read_exact(int fd, void* out, std::size_t size, std::uint64_t offset) {
  auto* p = static_cast<char*>(out);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return true;
}

Result<bool> check_open(int fd, std::uint64_t file_size, const std::string& path) {
  auto fail = [&](const std::string& why) -> Result<bool> {
    return make_error("library " + path + " cannot be preloaded: " + why);
  };
  Elf64_Ehdr header{};
  if (file_size < sizeof header || !read_exact(fd, &header, sizeof header, 0)) {
    return fail("too short for an ELF header");
  }
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) return fail("not an ELF file");
  if (header.e_ident[EI_CLASS] != ELFCLASS64) return fail("not a 64-bit ELF object");
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (header.e_ident[EI_DATA] != ELFDATA2LSB) return fail("big-endian ELF object");
#else
  if (header.e_ident[EI_DATA] != ELFDATA2MSB) return fail("little-endian ELF object");
#endif
  if (header.e_ident[EI_VERSION] != EV_CURRENT) return fail("unknown ELF version");
  if (header.e_type != ET_DYN)
    return fail("not a shared object (ELF type " + std::to_string(header.e_type) + ")");
  if (header.e_machine != kMachine) {
    return fail(std::string("built for another machine (e_machine ") + std::to_string(header.e_machine) +
                ", this build is " + kMachineName + ")");
  }
  if (header.e_phentsize != sizeof(Elf64_Phdr)) return fail("unexpected program header size");
  if (header.e_phnum == 0 || header.e_phnum > kMaxProgramHeaders) return fail("no usable program headers");
  const std::uint64_t table_bytes = static_cast<std::uint64_t>(header.e_phnum) * sizeof(Elf64_Phdr);
  if (header.e_phoff > file_size || table_bytes > file_size - header.e_phoff) {
    return fail("truncated (program headers end past the end of the file)");
  }
  std::vector<Elf64_Phdr> headers(header.e_phnum);
  if (!read_exact(fd, headers.data(), table_bytes, header.e_phoff))
    return fail("cannot read the program headers");
  bool loadable = false;
  bool dynamic = false;
  for (const Elf64_Phdr& ph : headers) {
    if (ph.p_type == PT_DYNAMIC) dynamic = true;
    if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC) continue;
    if (ph.p_type == PT_LOAD) loadable = true;
    if (ph.p_offset > file_size || ph.p_filesz > file_size - ph.p_offset) {
      return fail("truncated (a segment ends past the end of the file, " + std::to_string(file_size) +
                  " bytes)");
    }
  }
  if (!loadable) return fail("no loadable segment");
  if (!dynamic) return fail("no dynamic section (not a shared library)");
  return true;
}

}  // namespace

Result<bool> check_preloadable_library(const std::string& path) {
  // The operator names this path, so a symlink is fine (libraries are often reached through one);
  // what it points to must be a regular file, opened without blocking on a FIFO.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return make_error("library " + path + " cannot be opened: " + fs::errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error("library " + path + " is not a regular file");
  }
  auto checked = check_open(fd, static_cast<std::uint64_t>(st.st_size), path);
  ::close(fd);
  return checked;
}

}  // namespace gpuslice::cli
