// The skeleton driver (see skeleton_driver.h): HDF5's virtual file driver interface over POSIX
// pread/pwrite, with raw-data writes dropped while a DropRawWrites guard is alive.
#include "io/skeleton_driver.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <H5FDpublic.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <cstring>
#include <string>

#include "core/error.h"

namespace tessera::checkpoint_io {

namespace {

struct SkeletonFile {
  H5FD_t pub;  // first: HDF5 sees a SkeletonFile* as an H5FD_t*
  int fd;
  haddr_t eoa;  // end of the address space HDF5 allocated
  haddr_t eof;  // end of the bytes on disk
  dev_t device;
  ino_t inode;
};

constexpr haddr_t max_address = (haddr_t{1} << (8 * sizeof(off_t) - 1)) - 1;

int drop_depth = 0;
unsigned long long dropped_total = 0;
int defer_depth = 0;
std::string deferred_failure;  // the first failure recorded while a DeferWriteFailures is alive

// A failure of `function`: recorded while failures are deferred (0), else pushed (-1).
herr_t fail(const char* function, H5E_minor_t minor, const std::string& message);

SkeletonFile* as_file(H5FD_t* file) { return reinterpret_cast<SkeletonFile*>(file); }
const SkeletonFile* as_file(const H5FD_t* file) { return reinterpret_cast<const SkeletonFile*>(file); }

void push_error(const char* function, H5E_minor_t minor, const std::string& message) {
  H5Epush2(H5E_DEFAULT, __FILE__, function, __LINE__, H5E_ERR_CLS, H5E_VFL, minor, "%s", message.c_str());
}

herr_t fail(const char* function, H5E_minor_t minor, const std::string& message) {
  if (defer_depth > 0) {
    if (deferred_failure.empty()) deferred_failure = message;
    return 0;
  }
  push_error(function, minor, message);
  return -1;
}

H5FD_t* skeleton_open(const char* name, unsigned flags, hid_t, haddr_t maxaddr) {
  if (maxaddr == 0 || maxaddr == HADDR_UNDEF || maxaddr > max_address) {
    push_error("skeleton_open", H5E_BADVALUE, "bad maximum address");
    return nullptr;
  }
  int open_flags = (flags & H5F_ACC_RDWR) != 0 ? O_RDWR : O_RDONLY;
  if ((flags & H5F_ACC_TRUNC) != 0) open_flags |= O_TRUNC;
  if ((flags & H5F_ACC_CREAT) != 0) open_flags |= O_CREAT;
  if ((flags & H5F_ACC_EXCL) != 0) open_flags |= O_EXCL;
  const int fd = ::open(name, open_flags | O_CLOEXEC | O_NOFOLLOW, 0666);  // never through a symlink
  if (fd < 0) {
    push_error("skeleton_open", H5E_CANTOPENFILE, std::string("cannot open '") + name + "': " + std::strerror(errno));
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    push_error("skeleton_open", H5E_BADFILE, std::string("cannot stat '") + name + "': " + std::strerror(errno));
    ::close(fd);
    return nullptr;
  }
  auto* file = new SkeletonFile{};
  file->fd = fd;
  file->eof = static_cast<haddr_t>(st.st_size);
  file->device = st.st_dev;
  file->inode = st.st_ino;
  return &file->pub;
}

herr_t skeleton_close(H5FD_t* file) {
  SkeletonFile* f = as_file(file);
  const int status = ::close(f->fd);
  delete f;
  if (status != 0) return fail("skeleton_close", H5E_CANTCLOSEFILE, std::string("close failed: ") + std::strerror(errno));
  return 0;
}

int skeleton_cmp(const H5FD_t* a, const H5FD_t* b) {
  const SkeletonFile* f = as_file(a);
  const SkeletonFile* g = as_file(b);
  if (f->device != g->device) return f->device < g->device ? -1 : 1;
  if (f->inode != g->inode) return f->inode < g->inode ? -1 : 1;
  return 0;
}

herr_t skeleton_query(const H5FD_t*, unsigned long* flags) {
  if (flags != nullptr) {
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_AGGREGATE_SMALLDATA |
             H5FD_FEAT_POSIX_COMPAT_HANDLE;
  }
  return 0;
}

haddr_t skeleton_get_eoa(const H5FD_t* file, H5FD_mem_t) { return as_file(file)->eoa; }

herr_t skeleton_set_eoa(H5FD_t* file, H5FD_mem_t, haddr_t address) {
  as_file(file)->eoa = address;
  return 0;
}

haddr_t skeleton_get_eof(const H5FD_t* file, H5FD_mem_t) { return as_file(file)->eof; }

herr_t skeleton_get_handle(H5FD_t* file, hid_t, void** handle) {
  if (handle == nullptr) return -1;
  *handle = &as_file(file)->fd;
  return 0;
}

herr_t skeleton_read(H5FD_t* file, H5FD_mem_t, hid_t, haddr_t address, size_t size, void* buffer) {
  SkeletonFile* f = as_file(file);
  if (address + size > f->eoa) {
    push_error("skeleton_read", H5E_OVERFLOW, "read past the end of the allocated space");
    return -1;
  }
  auto* out = static_cast<char*>(buffer);
  while (size > 0) {
    const ssize_t n = ::pread(f->fd, out, size, static_cast<off_t>(address));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      push_error("skeleton_read", H5E_READERROR, std::string("pread failed: ") + std::strerror(errno));
      return -1;
    }
    if (n == 0) {  // past the end of the file: HDF5 expects zeros, as from sec2
      std::memset(out, 0, size);
      break;
    }
    out += n;
    address += static_cast<haddr_t>(n);
    size -= static_cast<size_t>(n);
  }
  return 0;
}

herr_t skeleton_write(H5FD_t* file, H5FD_mem_t type, hid_t, haddr_t address, size_t size, const void* buffer) {
  SkeletonFile* f = as_file(file);
  if (address + size > f->eoa) {
    push_error("skeleton_write", H5E_OVERFLOW, "write past the end of the allocated space");
    return -1;
  }
  if (type == H5FD_MEM_DRAW && drop_depth > 0) {
    dropped_total += size;
    return 0;
  }
  if (defer_depth > 0 && !deferred_failure.empty()) return 0;  // the file is lost already
  const auto* in = static_cast<const char*>(buffer);
  while (size > 0) {
    const ssize_t n = ::pwrite(f->fd, in, size, static_cast<off_t>(address));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return fail("skeleton_write", H5E_WRITEERROR,
                  std::string("pwrite failed: ") + (n == 0 ? "no bytes written" : std::strerror(errno)));
    }
    in += n;
    address += static_cast<haddr_t>(n);
    size -= static_cast<size_t>(n);
  }
  if (address > f->eof) f->eof = address;
  return 0;
}

// Sets the file's length to the allocated space, so the chunks whose writes were dropped lie
// inside the file (as holes) for their owners to fill.
herr_t skeleton_truncate(H5FD_t* file, hid_t, hbool_t) {
  SkeletonFile* f = as_file(file);
  if (f->eoa == f->eof) return 0;
  if (defer_depth > 0 && !deferred_failure.empty()) return 0;
  if (::ftruncate(f->fd, static_cast<off_t>(f->eoa)) != 0) {
    return fail("skeleton_truncate", H5E_SEEKERROR, std::string("ftruncate failed: ") + std::strerror(errno));
  }
  f->eof = f->eoa;
  return 0;
}

H5FD_class_t make_class() {
  H5FD_class_t c{};
  c.name = "tessera_skeleton";
  c.maxaddr = max_address;
  c.fc_degree = H5F_CLOSE_WEAK;
  c.open = skeleton_open;
  c.close = skeleton_close;
  c.cmp = skeleton_cmp;
  c.query = skeleton_query;
  c.get_eoa = skeleton_get_eoa;
  c.set_eoa = skeleton_set_eoa;
  c.get_eof = skeleton_get_eof;
  c.get_handle = skeleton_get_handle;
  c.read = skeleton_read;
  c.write = skeleton_write;
  c.truncate = skeleton_truncate;
  const H5FD_mem_t free_lists[H5FD_MEM_NTYPES] = H5FD_FLMAP_DICHOTOMY;  // metadata and raw data apart, as sec2
  std::copy(std::begin(free_lists), std::end(free_lists), std::begin(c.fl_map));
  return c;
}

const H5FD_class_t skeleton_class = make_class();

hid_t skeleton_driver_id(std::string_view context) {
  static hid_t id = H5I_INVALID_HID;
  if (id < 0 || H5Iis_valid(id) <= 0) id = H5FDregister(&skeleton_class);
  if (id < 0) check_h5(-1, "H5FDregister", context);
  return id;
}

}  // namespace

H5Handle skeleton_file_access(std::string_view context, std::uint64_t metadata_bytes) {
  H5Handle fapl = plist_handle(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", context);
  check_h5(H5Pset_driver(fapl.get(), skeleton_driver_id(context), nullptr), "H5Pset_driver", context);
  check_h5(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST), "H5Pset_libver_bounds", context);
  if (metadata_bytes > 0) check_h5(H5Pset_meta_block_size(fapl.get(), metadata_bytes), "H5Pset_meta_block_size", context);
  return fapl;
}

void allocate_chunk(hid_t dataset, const std::vector<hsize_t>& offset, std::uint64_t stored_bytes,
                    std::string_view context) {
  const std::string where(context);
  if (stored_bytes > std::uint64_t{0xffffffff}) throw IoError(where + ": a chunk of " + std::to_string(stored_bytes) + " bytes is past HDF5's limit");
  // The buffer HDF5 hands to the driver, which drops it unread: an untouched read-only mapping
  // costs neither memory nor page faults.
  void* zeros = ::mmap(nullptr, stored_bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (zeros == MAP_FAILED) throw IoError(where + ": mmap of " + std::to_string(stored_bytes) + " bytes failed: " + std::strerror(errno));
  herr_t status = 0;
  unsigned long long dropped = 0;
  {
    DropRawWrites drop;
    status = H5Dwrite_chunk(dataset, H5P_DEFAULT, 0, offset.data(), static_cast<std::size_t>(stored_bytes), zeros);
    dropped = drop.dropped_bytes();
  }
  ::munmap(zeros, stored_bytes);
  check_h5(status, "H5Dwrite_chunk", context);
  if (dropped != stored_bytes) {
    throw IoError(where + ": internal error: allocating a chunk of " + std::to_string(stored_bytes) +
                  " bytes dropped " + std::to_string(dropped) + " bytes of raw writes (the skeleton driver is not in use?)");
  }
}

DeferWriteFailures::DeferWriteFailures() {
  if (defer_depth++ == 0) deferred_failure.clear();
}
DeferWriteFailures::~DeferWriteFailures() { --defer_depth; }
void DeferWriteFailures::check(std::string_view context) const {
  if (!deferred_failure.empty()) throw IoError(std::string(context) + ": " + deferred_failure);
}

DropRawWrites::DropRawWrites() : start_(dropped_total) { ++drop_depth; }
DropRawWrites::~DropRawWrites() { --drop_depth; }
unsigned long long DropRawWrites::dropped_bytes() const { return dropped_total - start_; }

}  // namespace tessera::checkpoint_io
