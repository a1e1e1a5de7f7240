// The shape of a device mesh without any MPI: axis names and sizes, row-major rank order.
// mesh/Mesh adds the communicators; everything that only needs names and sizes uses this.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera {

class MeshShape {
 public:
  MeshShape() = default;
  // Throws SpecError for an empty or repeated axis name or a size < 1.
  MeshShape(std::vector<std::string> names, std::vector<int> sizes);

  const std::vector<std::string>& names() const { return names_; }
  const std::vector<int>& sizes() const { return sizes_; }
  int ndim() const { return static_cast<int>(names_.size()); }
  // Number of ranks: the product of the axis sizes.
  int size() const;
  bool has_axis(std::string_view name) const;
  // Position of the axis; throws SpecError naming the mesh for an unknown axis.
  int axis_index(std::string_view name) const;
  int axis_size(std::string_view name) const { return sizes_[axis_index(name)]; }
  // Product of the sizes of the given axes; SpecError for an unknown axis or one named twice.
  int axes_size(const std::vector<std::string>& axes) const;

  // Row-major coordinates of a rank and back; MeshError for a rank outside [0, size()) or
  // coordinates that are not a position in the mesh.
  std::vector<int> coords_of(int rank) const;
  int rank_of(const std::vector<int>& coords) const;
  // MeshError unless `coords` has one coordinate per axis, each in [0, that axis's size).
  void check_coords(const std::vector<int>& coords) const;
  // The rank at `position` of a communicator over `axes` that holds the rank at `coords`: its
  // coordinates, those on `axes` set to the mixed-radix digits of `position` (first axis most
  // significant), the others as in `coords`.
  std::vector<int> group_member(std::vector<int> coords, const std::vector<std::string>& axes, int position) const;

  // "data: 2, model: 4"
  std::string to_string() const;
  // Parses "data=2,model=4" or "data: 2, model: 4"; throws SpecError with the offending text.
  static MeshShape parse(std::string_view text);

  bool operator==(const MeshShape&) const = default;

 private:
  std::vector<std::string> names_;
  std::vector<int> sizes_;
};

}  // namespace tessera
