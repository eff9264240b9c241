// Module and library loading: the globals the image declares for this device (a file is read first)
// are charged before the load and refused past the quota; what the driver's figure grew by beyond
// them across the load is charged (driver_reservations.h). A library's globals are also reserved by
// every context created while it is loaded (library_globals.h). Functions' code loaded lazily
// at first launch is charged by the next reconciliation. Without a memory quota: a branch and a forward.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "interposer/driver_reservations.h"
#include "interposer/hook_prologue.h"
#include "interposer/library_globals.h"

namespace gs = gpuslice::interposer;

namespace {

// A module file's bytes, read so its globals are charged before the driver loads it (a regular
// file, at most 256 MiB, NUL-terminated for PTX text); empty when it cannot be read.
class ImageFile {
 public:
  explicit ImageFile(const char* path) {
    if (path == nullptr || !gs::memory_active()) return;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    constexpr off_t kMaxFile = 256 << 20;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && st.st_size <= kMaxFile) {
      const auto size = static_cast<std::size_t>(st.st_size);
      data_ = static_cast<char*>(std::malloc(size + 1));
      std::size_t got = 0;
      while (data_ != nullptr && got < size) {
        const ssize_t n = read(fd, data_ + got, size - got);
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
      }
      if (data_ != nullptr) data_[got] = '\0';
    }
    close(fd);
  }
  ~ImageFile() { std::free(data_); }
  ImageFile(const ImageFile&) = delete;
  ImageFile& operator=(const ImageFile&) = delete;
  const void* data() const { return data_; }

 private:
  char* data_ = nullptr;
};

// A library is context-independent: beside what its load charges on the current context's device,
// every context created while it is loaded reserves its globals (library_globals.h).
template <class Load>
CUresult load_library(CUlibrary* library, const void* image, Load&& load) {
  if (!gs::memory_active()) return load();
  gs::AllocationInFlight flight;
  gs::LibrarySizes sizes;
  gs::size_library(image, &sizes);
  const gs::ModuleLoad m = gs::begin_module_load(image);
  if (m.refused) return CUDA_ERROR_OUT_OF_MEMORY;
  const int loading_device = m.device != nullptr ? m.device->index : -1;
  if (!gs::reserve_where_contexts_exist(&sizes, loading_device)) {
    gs::end_module_load(m, CUDA_ERROR_OUT_OF_MEMORY);  // nothing loaded: its reservation given back
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult r = load();
  gs::end_module_load(m, r);
  if (r != CUDA_SUCCESS) {
    gs::release_reserved(sizes);
  } else {
    gs::note_library(library != nullptr ? *library : nullptr, sizes, loading_device, m.reserved);
  }
  return r;
}

}  // namespace

GS_EXPORT CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  GS_CUDA_HOOK_PROLOGUE(cuModuleLoad);
  const ImageFile image(fname);
  return gs::load_module(image.data(), [&] { return real(module, fname); });
}

GS_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  GS_CUDA_HOOK_PROLOGUE(cuModuleLoadData);
  return gs::load_module(image, [&] { return real(module, image); });
}

GS_EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                      CUjit_option* options, void** optionValues) {
  GS_CUDA_HOOK_PROLOGUE(cuModuleLoadDataEx);
  return gs::load_module(image, [&] { return real(module, image, numOptions, options, optionValues); });
}

GS_EXPORT CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  GS_CUDA_HOOK_PROLOGUE(cuModuleLoadFatBinary);
  return gs::load_module(fatCubin, [&] { return real(module, fatCubin); });
}

GS_EXPORT CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                     void** jitOptionsValues, unsigned int numJitOptions,
                                     CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                     unsigned int numLibraryOptions) {
  GS_CUDA_HOOK_PROLOGUE(cuLibraryLoadData);
  return load_library(library, code, [&] {
    return real(library, code, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                libraryOptionValues, numLibraryOptions);
  });
}

GS_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option* jitOptions,
                                         void** jitOptionsValues, unsigned int numJitOptions,
                                         CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                         unsigned int numLibraryOptions) {
  GS_CUDA_HOOK_PROLOGUE(cuLibraryLoadFromFile);
  const ImageFile image(fileName);
  return load_library(library, image.data(), [&] {
    return real(library, fileName, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                libraryOptionValues, numLibraryOptions);
  });
}

// Handles may be reused once unloaded: the launch hooks' cached local sizes are forgotten.
GS_EXPORT CUresult cuModuleUnload(CUmodule hmod) {
  GS_CUDA_HOOK_PROLOGUE(cuModuleUnload);
  const CUresult r = real(hmod);
  if (r == CUDA_SUCCESS && gs::memory_active()) gs::forget_functions();
  return r;
}

GS_EXPORT CUresult cuLibraryUnload(CUlibrary library) {
  GS_CUDA_HOOK_PROLOGUE(cuLibraryUnload);
  const CUresult r = real(library);
  if (r == CUDA_SUCCESS && gs::memory_active()) {
    gs::forget_functions();
    gs::forget_library(library);
  }
  return r;
}
