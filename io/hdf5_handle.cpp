// HDF5 identifiers as RAII handles, and the HDF5 error stack read into IoError messages.
#include "io/hdf5_handle.h"

#include <vector>

#include "core/error.h"

namespace tessera {

void quiet_hdf5_errors() {
  static const bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

namespace {

herr_t collect_entry(unsigned /*n*/, const H5E_error2_t* entry, void* data) {
  auto* lines = static_cast<std::vector<std::string>*>(data);
  std::string line = entry->func_name ? entry->func_name : "?";
  line += ": ";
  line += entry->desc ? entry->desc : "";
  // The minor message says what kind of failure it was ("checksum verification failed").
  char minor[128] = {0};
  if (H5Eget_msg(entry->min_num, nullptr, minor, sizeof minor) > 0) {
    line += std::string(" (") + minor + ")";
  }
  for (const auto& seen : *lines) {
    if (seen == line) return 0;
  }
  lines->push_back(std::move(line));
  return 0;
}

}  // namespace

std::string take_hdf5_error_stack() {
  std::vector<std::string> lines;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_entry, &lines);
  H5Eclear2(H5E_DEFAULT);
  std::string out;
  // The outermost few entries name the API call and the innermost one the cause; keep both ends.
  const std::size_t keep_front = 2, keep_back = 3;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i >= keep_front && i + keep_back < lines.size()) {
      if (i == keep_front) out += "; ...";
      continue;
    }
    if (!out.empty()) out += "; ";
    out += lines[i];
  }
  return out;
}

void H5Handle::reset() noexcept {
  if (id_ >= 0 && closer_ != nullptr) {
    closer_(id_);
    H5Eclear2(H5E_DEFAULT);
  }
  id_ = H5I_INVALID_HID;
}

void H5Handle::close(std::string_view what) {
  if (id_ < 0) return;
  herr_t status = closer_(id_);
  id_ = H5I_INVALID_HID;
  check_h5(status, "close", what);
}

bool is_hdf5_file(const std::string& path, std::string_view context) {
  quiet_hdf5_errors();
  const htri_t found = H5Fis_hdf5(path.c_str());
  check_h5(found, "H5Fis_hdf5", context);
  return found > 0;
}

void check_h5(herr_t status, std::string_view call, std::string_view context) {
  if (status >= 0) return;
  std::string stack = take_hdf5_error_stack();
  std::string message = std::string(context) + ": " + std::string(call) + " failed";
  // A metadata block whose checksum does not match ("incorrect metadata checksum after all read
  // attempts") is a damaged file: an IntegrityError (exit code 3), whose message carries the
  // phrase that raises it again as one after an agreement (io/io_errors.h). Until the forty-fifth
  // session it was an IoError (exit code 2), as for a file that is not a checkpoint at all.
  if (stack.find("checksum") != std::string::npos) {
    throw IntegrityError(message + " (the file is corrupt: a checksum of its metadata does not match): " + stack);
  }
  if (!stack.empty()) message += ": " + stack;
  throw IoError(message);
}

H5Handle check_id(hid_t id, H5Handle::Closer closer, std::string_view call, std::string_view context) {
  if (id < 0) check_h5(-1, call, context);
  return H5Handle(id, closer);
}

}  // namespace tessera
