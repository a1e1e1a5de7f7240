// ckpt_damage FILE WHAT [VALUE]: edits a checkpoint file in place the way a corrupt or hostile
// file would look, for the app tests of bad checkpoints (no h5py on these machines):
//   empty-mesh-sizes   mesh_axis_sizes becomes an empty (null) attribute, mesh_axis_names stays
//   count VALUE        /opt_state/count (an i32 scalar) is overwritten with VALUE
//   flip-chunk PATH    one byte in the middle of the first chunk of dataset /PATH is inverted
//   zero-chunk PATH    the first chunk of /PATH and its checksum become zeros (never written)
// Exits 0 when done, 1 on any error (with the message).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "io/checkpoint_format.h"
#include "io/hdf5_handle.h"

int main(int argc, char** argv) {
  namespace format = tessera::checkpoint_format;
  if (argc < 3) {
    std::fprintf(stderr, "usage: ckpt_damage FILE empty-mesh-sizes | count VALUE\n");
    return 1;
  }
  const std::string file = argv[1], what = argv[2];
  try {
    tessera::H5Handle handle =
        tessera::file_handle(H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), "H5Fopen", file);
    if (what == "empty-mesh-sizes") {
      tessera::check_h5(H5Adelete(handle.get(), format::attr_mesh_sizes), "H5Adelete", file);
      format::write_int64_array_attribute(handle.get(), format::attr_mesh_sizes, {}, file);
    } else if (what == "count" && argc == 4) {
      const std::int32_t value = std::stoi(argv[3]);
      tessera::H5Handle dataset =
          tessera::dataset_handle(H5Dopen2(handle.get(), "/opt_state/count", H5P_DEFAULT), "H5Dopen2", file);
      tessera::check_h5(H5Dwrite(dataset.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value), "H5Dwrite",
                        file);
    } else if ((what == "flip-chunk" || what == "zero-chunk") && argc == 4) {
      haddr_t address = 0;
      hsize_t size = 0;
      {
        tessera::H5Handle dataset = tessera::dataset_handle(
            H5Dopen2(handle.get(), (std::string("/") + argv[3]).c_str(), H5P_DEFAULT), "H5Dopen2", file);
        unsigned mask = 0;
        hsize_t offset[H5S_MAX_RANK] = {};
        tessera::check_h5(H5Dget_chunk_info_by_coord(dataset.get(), offset, &mask, &address, &size),
                          "H5Dget_chunk_info_by_coord", file);
      }
      handle.close(file);
      std::FILE* out = std::fopen(file.c_str(), "r+b");
      if (out == nullptr) throw tessera::IoError("cannot open '" + file + "'");
      if (what == "flip-chunk") {
        const long at = static_cast<long>(address + size / 2);
        std::fseek(out, at, SEEK_SET);
        const int c = std::fgetc(out);
        std::fseek(out, at, SEEK_SET);
        std::fputc(c ^ 0xff, out);
      } else {
        std::fseek(out, static_cast<long>(address), SEEK_SET);
        for (hsize_t i = 0; i < size; ++i) std::fputc(0, out);
      }
      std::fclose(out);
      return 0;
    } else {
      std::fprintf(stderr, "ckpt_damage: unknown edit '%s'\n", what.c_str());
      return 1;
    }
    handle.close(file);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt_damage: %s\n", e.what());
    return 1;
  }
  return 0;
}
