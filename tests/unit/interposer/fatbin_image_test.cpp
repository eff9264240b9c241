// The fat-binary reader: real nvcc 13 images (tests/e2e/fixtures, built from the .cu files there)
// and hand-built ones; every truncation of a real image is read without going out of bounds.
#include "interposer/fatbin_image.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "interposer/module_image.h"

#if __has_include(<lz4.h>) && GPUSLICE_TEST_LZ4
#include <lz4.h>

#include "../test_units.h"
#endif

namespace gpuslice::interposer::fatbin {
namespace {

using test_units::kGiB;
using test_units::kMiB;

std::vector<unsigned char> fixture(const char* name) {
  std::ifstream in(std::string(GPUSLICE_FIXTURES) + "/" + name, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Three 4 GiB arrays: nvcc 13 writes .nv.global's size as 0 and gives each symbol 4 GiB at offset 0.
TEST(FatbinImage, TheExactSassEntryIsChosenAndItsGlobalsAreSizedFromTheirSymbols) {
  const std::vector<unsigned char> image = fixture("globals_3x4g.fatbin");
  ASSERT_FALSE(image.empty());
  const Globals g = container_globals(image.data(), image.size(), 90);
  ASSERT_TRUE(g.understood);
  EXPECT_EQ(g.arch, 90);
  EXPECT_FALSE(g.jit);
  EXPECT_GE(g.bytes, 12 * kGiB);
  EXPECT_LT(g.bytes, 12 * kGiB + kMiB) << "constant banks are small";
}

TEST(FatbinImage, ALaterMinorRunsTheSassOfItsMajorAndANewerMajorCompilesThePtx) {
  const std::vector<unsigned char> image = fixture("globals_3x4g.fatbin");
  const Globals ampere = container_globals(image.data(), image.size(), 86);
  EXPECT_EQ(ampere.arch, 80);
  EXPECT_FALSE(ampere.jit);
  const Globals blackwell = container_globals(image.data(), image.size(), 100);
  EXPECT_EQ(blackwell.arch, 90);
  EXPECT_TRUE(blackwell.jit);
  EXPECT_EQ(blackwell.bytes, 12 * kGiB) << "the PTX declares the same three arrays";
  const Globals turing = container_globals(image.data(), image.size(), 75);
  EXPECT_TRUE(turing.understood);
  EXPECT_EQ(turing.arch, 0) << "no entry the driver could load";
  EXPECT_EQ(turing.bytes, 0u);
  const Globals unknown = container_globals(image.data(), image.size(), 0);
  EXPECT_GE(unknown.bytes, 12 * kGiB) << "an unknown device: the largest entry";
}

TEST(FatbinImage, InitialisedAndZeroedGlobalsAreBothCounted) {
  const std::vector<unsigned char> image = fixture("globals_3x128m.fatbin");
  const Globals g = container_globals(image.data(), image.size(), 90);
  ASSERT_TRUE(g.understood);
  EXPECT_GE(g.bytes, 384 * kMiB);
  EXPECT_LT(g.bytes, 385 * kMiB);
}

TEST(FatbinImage, AZstdCompressedEntryIsDecompressedFirst) {
  const std::vector<unsigned char> image = fixture("globals_3x4g_zstd.fatbin");
  ASSERT_FALSE(image.empty());
  const Globals g = container_globals(image.data(), image.size(), 90);
  ASSERT_TRUE(g.understood);
#if GPUSLICE_TEST_ZSTD
  EXPECT_FALSE(g.estimated);
  EXPECT_GE(g.bytes, 12 * kGiB);
#else
  EXPECT_TRUE(g.estimated);
#endif
}

TEST(FatbinImage, TheRuntimesWrapperAndAnInMemoryContainerAreFollowed) {
  const std::vector<unsigned char> image = fixture("globals_3x4g.fatbin");
  struct Wrapper {
    std::uint32_t magic;
    std::uint32_t version;
    const unsigned char* data;
    void* unused;
  } wrapper{kWrapperMagic, 1, image.data(), nullptr};
  EXPECT_GE(image_globals(&wrapper, 90).bytes, 12 * kGiB);
  EXPECT_GE(image_globals(image.data(), 90).bytes, 12 * kGiB);
  EXPECT_EQ(container_span(image.data()), image.size());
}

TEST(FatbinImage, EveryTruncationIsReadWithinItsBytes) {
  const std::vector<unsigned char> image = fixture("globals_3x128m.fatbin");
  for (std::size_t n = 0; n < image.size(); ++n) {
    std::vector<unsigned char> cut(image.begin(), image.begin() + static_cast<std::ptrdiff_t>(n));
    const Globals g = container_globals(cut.data(), cut.size(), 90);
    EXPECT_FALSE(g.understood) << "a container cut at " << n << " bytes is not one";
  }
}

// A hand-built cubin: .nv.global NOBITS of size 0, three 4 GiB symbols at offset 0, a constant bank.
std::vector<unsigned char> cubin_with_globals(std::uint64_t section_size, unsigned symbols,
                                              std::uint64_t each) {
  const char names[] = "\0.shstrtab\0.strtab\0.symtab\0.nv.global\0.nv.constant3\0";
  std::vector<unsigned char> out(64, 0);
  auto put = [&](std::size_t at, auto v) { std::memcpy(out.data() + at, &v, sizeof v); };
  out[0] = 0x7f, out[1] = 'E', out[2] = 'L', out[3] = 'F', out[4] = 2, out[5] = 1;
  const std::size_t names_at = out.size();
  out.resize(names_at + sizeof names);
  std::memcpy(out.data() + names_at, names, sizeof names);
  const std::size_t syms_at = out.size();
  out.resize(out.size() + 24 * (symbols + 1), 0);
  for (unsigned i = 1; i <= symbols; ++i) {
    put(syms_at + 24 * i + 4, static_cast<unsigned char>(1));  // STT_OBJECT
    put(syms_at + 24 * i + 6, static_cast<std::uint16_t>(4));  // in .nv.global
    put(syms_at + 24 * i + 16, each);
  }
  const std::size_t shoff = out.size();
  out.resize(out.size() + 6 * 64, 0);
  auto section = [&](unsigned i, std::uint32_t name, std::uint32_t type, std::uint64_t off,
                     std::uint64_t size, std::uint64_t entsize) {
    const std::size_t h = shoff + 64 * i;
    put(h, name), put(h + 4, type), put(h + 0x18, off), put(h + 0x20, size), put(h + 0x38, entsize);
  };
  section(1, 1, 3, names_at, sizeof names, 0);         // .shstrtab
  section(2, 11, 3, names_at, 1, 0);                   // .strtab
  section(3, 19, 2, syms_at, 24 * (symbols + 1), 24);  // .symtab
  section(4, 27, 8, 0, section_size, 0);               // .nv.global
  section(5, 38, 1, names_at, 16, 0);                  // .nv.constant3
  put(0x28, static_cast<std::uint64_t>(shoff));
  put(0x3a, static_cast<std::uint16_t>(64));
  put(0x3c, static_cast<std::uint16_t>(6));
  put(0x3e, static_cast<std::uint16_t>(1));
  return out;
}

TEST(FatbinImage, ACubinsNobitsGlobalsAreTheLargestOfSectionExtentAndSymbols) {
  std::uint64_t bytes = 0;
  const auto zero_section = cubin_with_globals(0, 3, 4 * kGiB);
  ASSERT_TRUE(cubin_globals(zero_section.data(), zero_section.size(), &bytes));
  EXPECT_EQ(bytes, 12 * kGiB + 16);
  const auto big_section = cubin_with_globals(20 * kGiB, 1, kMiB);
  ASSERT_TRUE(cubin_globals(big_section.data(), big_section.size(), &bytes));
  EXPECT_EQ(bytes, 20 * kGiB + 16);
  for (std::size_t n = 0; n < zero_section.size(); ++n)
    EXPECT_FALSE(cubin_globals(zero_section.data(), n, &bytes)) << "cut at " << n;
}

#if GPUSLICE_TEST_LZ4
// CUDA 11.x to 12.7 compressed entries with LZ4's block format (flag 0x2000).
TEST(FatbinImage, AnLz4CompressedEntryIsDecompressedFirst) {
  const auto cubin = cubin_with_globals(0, 2, kGiB);
  std::vector<char> packed(static_cast<std::size_t>(LZ4_compressBound(static_cast<int>(cubin.size()))));
  const int n = LZ4_compress_default(reinterpret_cast<const char*>(cubin.data()), packed.data(),
                                     static_cast<int>(cubin.size()), static_cast<int>(packed.size()));
  ASSERT_GT(n, 0);
  const std::uint64_t stored = (static_cast<std::uint64_t>(n) + 7) & ~7ULL;
  std::vector<unsigned char> image(16 + 64 + stored, 0);
  auto put = [&](std::size_t at, auto v) { std::memcpy(image.data() + at, &v, sizeof v); };
  put(0, kContainerMagic), put(4, static_cast<std::uint16_t>(1)), put(6, static_cast<std::uint16_t>(16));
  put(8, static_cast<std::uint64_t>(64 + stored));
  put(16, static_cast<std::uint16_t>(2)), put(20, static_cast<std::uint32_t>(64)), put(24, stored);
  put(32, static_cast<std::uint32_t>(n)), put(44, static_cast<std::uint32_t>(90));
  put(56, static_cast<std::uint64_t>(0x11 | kFlagLz4)), put(72, static_cast<std::uint64_t>(cubin.size()));
  std::memcpy(image.data() + 80, packed.data(), static_cast<std::size_t>(n));
  const Globals g = container_globals(image.data(), image.size(), 90);
  ASSERT_TRUE(g.understood);
  EXPECT_FALSE(g.estimated);
  EXPECT_EQ(g.bytes, 2 * kGiB + 16);
}
#endif

}  // namespace
}  // namespace gpuslice::interposer::fatbin
