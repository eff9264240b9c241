#include "cli/library_check.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cli/loader_trace.h"
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
// Real dynamic sections have a few dozen entries; DT_FLAGS_1 is among the first.
constexpr std::uint64_t kMaxDynamicBytes = std::uint64_t{64} * 1024;

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
  // glibc's loader maps only these and skips anything else with a warning.
  if (header.e_ident[EI_OSABI] != ELFOSABI_SYSV && header.e_ident[EI_OSABI] != ELFOSABI_GNU) {
    return fail("ELF OS ABI " + std::to_string(header.e_ident[EI_OSABI]) +
                ": the dynamic loader does not preload it");
  }
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
  const Elf64_Phdr* dynamic = nullptr;
  for (const Elf64_Phdr& ph : headers) {
    // A program (a PIE is ET_DYN too): the loader refuses to preload it or maps it wrongly.
    if (ph.p_type == PT_INTERP) return fail("not a shared library but a program (it has PT_INTERP)");
    if (ph.p_type == PT_DYNAMIC) dynamic = &ph;
    if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC) continue;
    if (ph.p_type == PT_LOAD) loadable = true;
    if (ph.p_offset > file_size || ph.p_filesz > file_size - ph.p_offset) {
      return fail("truncated (a segment ends past the end of the file, " + std::to_string(file_size) +
                  " bytes)");
    }
  }
  if (!loadable) return fail("no loadable segment");
  if (dynamic == nullptr) return fail("no dynamic section (not a shared library)");
  std::vector<Elf64_Dyn> entries(std::min<std::uint64_t>(dynamic->p_filesz, kMaxDynamicBytes) /
                                 sizeof(Elf64_Dyn));
  if (!read_exact(fd, entries.data(), entries.size() * sizeof(Elf64_Dyn), dynamic->p_offset))
    return fail("cannot read the dynamic section");
  bool ended = false;
  for (const Elf64_Dyn& entry : entries) {
    if (entry.d_tag == DT_NULL) {
      ended = true;
      break;
    }
    if (entry.d_tag == DT_FLAGS_1 && (entry.d_un.d_val & DF_1_PIE) != 0)
      return fail("not a shared library but a position-independent executable (DF_1_PIE)");
    // The dependency check runs the loader with this file as its main program, and the loader loads
    // and starts the audit modules a main program names: code of the candidate's choosing, which a
    // plain preload never runs. Nothing of a library is run to inspect it, so these are refused.
    if (entry.d_tag == DT_AUDIT || entry.d_tag == DT_DEPAUDIT) {
      return fail(std::string("it names audit modules (") +
                  (entry.d_tag == DT_AUDIT ? "DT_AUDIT" : "DT_DEPAUDIT") +
                  "), which the dependency check would load and run");
    }
  }
  // An entry past what was read could be one of those: a section without its end is refused too.
  if (!ended)
    return fail("its dynamic section has no end within " + std::to_string(kMaxDynamicBytes) + " bytes");
  return true;
}

}  // namespace

Result<bool> check_preloadable_library(const std::string& path) {
  // The loader splits LD_PRELOAD at spaces and colons: it would look for the pieces, find none and
  // run the command with no limit.
  if (path.find_first_of(" :") != std::string::npos) {
    return make_error("library " + path +
                      " cannot be preloaded: its path has a space or ':', where LD_PRELOAD is split; "
                      "link or copy it to a path without them");
  }
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
  if (!checked) return checked;
  // Only the loader knows whether it finds every dependency (and what else it refuses): ask it.
  if (auto traced = trace_with_loader(path); !traced) {
    return make_error("library " + path + " cannot be preloaded: " + traced.error());
  }
  return true;
}

}  // namespace gpuslice::cli
