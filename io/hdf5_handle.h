// RAII for HDF5 identifiers and HDF5 failures turned into IoError. Every hid_t tessera opens
// lives in an H5Handle whose destructor closes it and never throws; every HDF5 call's result
// goes through check_h5 / check_id, which read the HDF5 error stack (automatic printing is off)
// into the message, so a failure names the call, the file and the dataset.
#pragma once

#include <hdf5.h>

#include <string>
#include <string_view>
#include <utility>

namespace tessera {

// Turns off HDF5's automatic error printing for this process (idempotent). Every public io
// entry point calls it first, so HDF5 failures reach the user only as IoError messages.
void quiet_hdf5_errors();

// The current HDF5 error stack as one line ("H5Dread: ...; H5Z: Fletcher32 checksum ..."), and
// the stack cleared. Empty when the stack is empty.
std::string take_hdf5_error_stack();

class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Handle() = default;
  H5Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  H5Handle(H5Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}
  H5Handle& operator=(H5Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
      closer_ = other.closer_;
    }
    return *this;
  }
  ~H5Handle() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; a failure to close is reported as IoError (unlike the destructor, which cannot).
  void close(std::string_view what);
  // Closes, ignoring errors (destructors, error paths).
  void reset() noexcept;

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Throws IoError("<context>: <call> failed: <error stack>") when status < 0.
void check_h5(herr_t status, std::string_view call, std::string_view context);
// Wraps a new identifier, or throws as check_h5 when it is invalid.
H5Handle check_id(hid_t id, H5Handle::Closer closer, std::string_view call, std::string_view context);

// Whether HDF5 finds its signature in the file `path`: at its start, or after a user block (at
// 512, 1024, ... bytes), as HDF5's own open looks for it. For a regular file only (check it
// first with core/files.h regular_file_problem): HDF5 opens it by name, and the open of a FIFO
// waits for a writer. Throws IoError as check_h5 ("<context>: H5Fis_hdf5 failed: ...") when HDF5
// cannot read it.
bool is_hdf5_file(const std::string& path, std::string_view context);

// Typed wrappers for the kinds tessera uses.
inline H5Handle file_handle(hid_t id, std::string_view call, std::string_view context) {
  return check_id(id, H5Fclose, call, context);
}
inline H5Handle group_handle(hid_t id, std::string_view call, std::string_view context) {
  return check_id(id, H5Gclose, call, context);
}
inline H5Handle dataset_handle(hid_t id, std::string_view call, std::string_view context) {
  return check_id(id, H5Dclose, call, context);
}
inline H5Handle dataspace_handle(hid_t id, std::string_view call, std::string_view context) {
  return check_id(id, H5Sclose, call, context);
}
inline H5Handle attribute_handle(hid_t id, std::string_view call, std::string_view context) {
  return check_id(id, H5Aclose, call, context);
}
inline H5Handle type_handle(hid_t id, std::string_view call, std::string_view context) {
  return check_id(id, H5Tclose, call, context);
}
inline H5Handle plist_handle(hid_t id, std::string_view call, std::string_view context) {
  return check_id(id, H5Pclose, call, context);
}

}  // namespace tessera
