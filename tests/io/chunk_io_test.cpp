// The pieces of the direct chunk path, on one process: Fletcher32 equals the checksum HDF5's
// filter stores, a file whose skeleton is written through the skeleton driver and then filled with pwrite at the
// chunks' addresses reads back through plain HDF5 (which checks every checksum), and
// chunk_shape keeps every chunk inside one block.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "io/checkpoint_format.h"
#include "io/fletcher32.h"
#include "io/hdf5_handle.h"
#include "io/skeleton_driver.h"

namespace tessera {
namespace {

using checkpoint_io::fletcher32;
using checkpoint_io::fletcher32_trailer;

std::string temp_file(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("tessera_chunk_io_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

struct RemoveTempDir {
  ~RemoveTempDir() {
    std::filesystem::remove_all(std::filesystem::temp_directory_path() /
                                ("tessera_chunk_io_" + std::to_string(::getpid())));
  }
} remove_temp_dir;

// One chunked byte dataset of `data.size()` bytes with Fletcher32, written by HDF5 itself; the
// stored chunk (data then checksum) read back raw.
std::vector<unsigned char> chunk_filtered_by_hdf5(const std::vector<unsigned char>& data) {
  const std::string path = temp_file("filtered.h5");
  H5Handle file = file_handle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "H5Fcreate", path);
  const hsize_t n = data.size();
  H5Handle space = dataspace_handle(H5Screate_simple(1, &n, nullptr), "H5Screate_simple", path);
  H5Handle create = plist_handle(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", path);
  check_h5(H5Pset_chunk(create.get(), 1, &n), "H5Pset_chunk", path);
  check_h5(H5Pset_fletcher32(create.get()), "H5Pset_fletcher32", path);
  H5Handle dataset = dataset_handle(
      H5Dcreate2(file.get(), "d", H5T_NATIVE_UCHAR, space.get(), H5P_DEFAULT, create.get(), H5P_DEFAULT), "H5Dcreate2",
      path);
  check_h5(H5Dwrite(dataset.get(), H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), "H5Dwrite", path);
  const hsize_t origin = 0;
  hsize_t stored = 0;
  check_h5(H5Dget_chunk_storage_size(dataset.get(), &origin, &stored), "H5Dget_chunk_storage_size", path);
  std::vector<unsigned char> chunk(stored);
  std::uint32_t mask = 0;
  check_h5(H5Dread_chunk(dataset.get(), H5P_DEFAULT, &origin, &mask, chunk.data()), "H5Dread_chunk", path);
  return chunk;
}

TEST(Fletcher32, EqualsTheChecksumHdf5StoresForEveryLengthAndPattern) {
  std::mt19937 random(7);
  int checked = 0;
  // Lengths about one and two of the vector blocks (4096, 8192 or 16384 bytes, by the target's
  // vectors) and a word short or past them.
  for (std::size_t n : {1, 2, 3, 4, 5, 719, 720, 721, 4096, 4097, 8191, 16383, 16384, 16385, 16386, 32766, 32768,
                        32771, 65537, 1 << 20, (1 << 20) + 3}) {
    for (int pattern = 0; pattern < 4; ++pattern) {
      std::vector<unsigned char> data(n);
      for (auto& b : data) {
        b = pattern == 0   ? static_cast<unsigned char>(random())
            : pattern == 1 ? 0xff  // every word 0xffff: both sums are multiples of 65535
            : pattern == 2 ? 0
                           : (random() % 97 == 0 ? static_cast<unsigned char>(random()) : 0);
      }
      const auto stored = chunk_filtered_by_hdf5(data);
      ASSERT_EQ(stored.size(), n + 4);
      const auto trailer = fletcher32_trailer(fletcher32(data.data(), n));
      EXPECT_EQ(std::vector<unsigned char>(stored.end() - 4, stored.end()),
                std::vector<unsigned char>(trailer.begin(), trailer.end()))
          << n << " bytes, pattern " << pattern;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 84);
}

TEST(Fletcher32, AllZeroIsZeroAndAllOnesFoldsTo0xffff) {
  std::vector<unsigned char> zeros(1000, 0), ones(1000, 0xff);
  EXPECT_EQ(fletcher32(zeros.data(), zeros.size()), 0u);
  EXPECT_EQ(fletcher32(ones.data(), ones.size()), 0xffffffffu);
}

// Chunks allocated by allocate_chunk (a direct chunk write the skeleton driver drops): exactly
// their stored bytes are dropped, HDF5 records each chunk's size and address, and once owners
// write the bytes and checksums there, HDF5's own filtered read returns them and refuses a
// wrong byte.
TEST(LayoutDriver, AllocatedChunksLeaveSpaceThatOwnersFillAndHdf5Verifies) {
  quiet_hdf5_errors();
  const std::string path = temp_file("laid_out.h5");
  const hsize_t dims[2] = {6, 8}, chunk[2] = {3, 8};  // two chunks of 3 x 8 f32 = 96 bytes
  const std::uint64_t chunk_bytes = 3 * 8 * 4;
  haddr_t address[2] = {HADDR_UNDEF, HADDR_UNDEF};
  unsigned long long dropped = 0;
  {
    H5Handle access = checkpoint_io::skeleton_file_access(path);
    H5Handle file = file_handle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()), "H5Fcreate", path);
    H5Handle space = dataspace_handle(H5Screate_simple(2, dims, nullptr), "H5Screate_simple", path);
    H5Handle create = plist_handle(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", path);
    check_h5(H5Pset_chunk(create.get(), 2, chunk), "H5Pset_chunk", path);
    check_h5(H5Pset_fletcher32(create.get()), "H5Pset_fletcher32", path);
    check_h5(H5Pset_alloc_time(create.get(), H5D_ALLOC_TIME_INCR), "H5Pset_alloc_time", path);
    check_h5(H5Pset_fill_time(create.get(), H5D_FILL_TIME_NEVER), "H5Pset_fill_time", path);
    H5Handle dataset;
    {
      checkpoint_io::DropRawWrites drop;
      dataset = dataset_handle(
          H5Dcreate2(file.get(), "w", H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, create.get(), H5P_DEFAULT),
          "H5Dcreate2", path);
      EXPECT_EQ(drop.dropped_bytes(), 0u);  // nothing allocated, no fill written
      for (int c = 0; c < 2; ++c) {
        checkpoint_io::allocate_chunk(dataset.get(), {static_cast<hsize_t>(3 * c), 0}, chunk_bytes + 4, path);
      }
      dropped = drop.dropped_bytes();
    }
    for (int c = 0; c < 2; ++c) {
      const hsize_t offset[2] = {static_cast<hsize_t>(3 * c), 0};
      unsigned mask = 1;
      hsize_t size = 0;
      check_h5(H5Dget_chunk_info_by_coord(dataset.get(), offset, &mask, &address[c], &size), "chunk info", path);
      EXPECT_EQ(size, chunk_bytes + 4);
      EXPECT_EQ(mask, 0u);
    }
  }
  // The driver dropped exactly the two chunks' stored bytes, and their space is distinct.
  EXPECT_NE(address[0], address[1]);
  EXPECT_EQ(dropped, 2 * (chunk_bytes + 4));
  EXPECT_GE(std::filesystem::file_size(path), std::max(address[0], address[1]) + chunk_bytes + 4);

  std::vector<float> values(6 * 8);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i) - 7.0f;
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  for (int c = 0; c < 2; ++c) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(values.data() + 24 * c);
    const auto trailer = fletcher32_trailer(fletcher32(bytes, chunk_bytes));
    ASSERT_EQ(::pwrite(fd, bytes, chunk_bytes, static_cast<off_t>(address[c])), static_cast<ssize_t>(chunk_bytes));
    ASSERT_EQ(::pwrite(fd, trailer.data(), 4, static_cast<off_t>(address[c] + chunk_bytes)), 4);
  }
  ::close(fd);

  std::vector<float> back(values.size(), 0.0f);
  {
    H5Handle file = file_handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "H5Fopen", path);
    H5Handle dataset = dataset_handle(H5Dopen2(file.get(), "w", H5P_DEFAULT), "H5Dopen2", path);
    check_h5(H5Dread(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()), "H5Dread", path);
    EXPECT_EQ(back, values);
  }  // closed, so the next open reads the file again rather than HDF5's chunk cache

  // A wrong byte in the second chunk: HDF5's own filter refuses it.
  const int fd2 = ::open(path.c_str(), O_WRONLY);
  const unsigned char bad = static_cast<unsigned char>(reinterpret_cast<const unsigned char*>(values.data())[24 * 4 + 10] ^ 0x5a);
  ASSERT_EQ(::pwrite(fd2, &bad, 1, static_cast<off_t>(address[1] + 10)), 1);
  ::close(fd2);
  H5Handle reopened = file_handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "H5Fopen", path);
  H5Handle again = dataset_handle(H5Dopen2(reopened.get(), "w", H5P_DEFAULT), "H5Dopen2", path);
  EXPECT_LT(H5Dread(again.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()), 0);
  EXPECT_NE(take_hdf5_error_stack().find("Fletcher32"), std::string::npos);
}

TEST(ChunkShape, CutsLeadingDimensionsByPrimeFactorsSoChunksStayInsideBlocks) {
  using checkpoint_format::chunk_shape;
  EXPECT_EQ(chunk_shape({8, 16}, DType::f32), (std::vector<hsize_t>{8, 16}));
  EXPECT_EQ(chunk_shape({6, 10}, DType::f32, 120), (std::vector<hsize_t>{3, 10}));
  EXPECT_EQ(chunk_shape({6, 10}, DType::f32, 119), (std::vector<hsize_t>{1, 10}));
  EXPECT_EQ(chunk_shape({1, 9, 4}, DType::f64, 100), (std::vector<hsize_t>{1, 3, 4}));
  EXPECT_EQ(chunk_shape({7, 7}, DType::f32, 4), (std::vector<hsize_t>{1, 1}));
  // A block of 2^31 f64 (16 GiB) in one dimension: halved until under 4 GiB.
  EXPECT_EQ(chunk_shape({std::int64_t{1} << 31}, DType::f64), (std::vector<hsize_t>{std::uint64_t{1} << 28}));
}

}  // namespace
}  // namespace tessera
