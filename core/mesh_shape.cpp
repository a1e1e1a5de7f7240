// Mesh axis names and sizes, row-major coordinates, and the "data=2,model=4" text form.
#include "core/mesh_shape.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdint>
#include <sstream>

#include "core/checked.h"
#include "core/error.h"
#include "core/text.h"

namespace tessera {

namespace {

}  // namespace

MeshShape::MeshShape(std::vector<std::string> names, std::vector<int> sizes)
    : names_(std::move(names)), sizes_(std::move(sizes)) {
  if (names_.size() != sizes_.size()) {
    throw MeshError("mesh: " + std::to_string(names_.size()) + " axis names but " + std::to_string(sizes_.size()) +
                    " sizes");
  }
  for (std::size_t i = 0; i < names_.size(); ++i) {
    if (!is_identifier(names_[i]) || names_[i] == "None") {
      throw MeshError("mesh: axis name '" + names_[i] + "' is not an identifier");
    }
    if (sizes_[i] < 1) {
      throw MeshError("mesh: axis '" + names_[i] + "' has size " + std::to_string(sizes_[i]) + " (must be >= 1)");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (names_[j] == names_[i]) throw MeshError("mesh: axis name '" + names_[i] + "' appears twice");
    }
  }
  // size() is an int (an MPI communicator's size); a product past it would wrap.
  std::int64_t total = 1;
  for (int s : sizes_) {
    total *= s;
    if (total > INT_MAX) {
      throw MeshError("mesh: the axis sizes multiply to more than " + std::to_string(INT_MAX) + " ranks");
    }
  }
}

int MeshShape::size() const {
  int n = 1;
  for (int s : sizes_) n = checked_mul(n, s, "mesh size");
  return n;
}

bool MeshShape::has_axis(std::string_view name) const {
  return std::find(names_.begin(), names_.end(), name) != names_.end();
}

int MeshShape::axis_index(std::string_view name) const {
  auto it = std::find(names_.begin(), names_.end(), name);
  if (it == names_.end()) {
    throw SpecError("unknown mesh axis '" + std::string(name) + "' (mesh has " + to_string() + ")");
  }
  return static_cast<int>(it - names_.begin());
}

int MeshShape::axes_size(const std::vector<std::string>& axes) const {
  int n = 1;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (axes[i] == axes[j]) throw SpecError("mesh axes: axis '" + axes[i] + "' appears twice");
    }
    n = checked_mul(n, axis_size(axes[i]), "mesh axes size");
  }
  return n;
}

std::vector<int> MeshShape::coords_of(int rank) const {
  if (rank < 0 || rank >= size()) {
    throw MeshError("mesh (" + to_string() + "): rank " + std::to_string(rank) + " is not in [0, " + std::to_string(size()) + ")");
  }
  std::vector<int> coords(names_.size(), 0);
  for (int i = ndim() - 1; i >= 0; --i) {
    coords[i] = rank % sizes_[i];
    rank /= sizes_[i];
  }
  return coords;
}

std::vector<int> MeshShape::group_member(std::vector<int> coords, const std::vector<std::string>& axes,
                                        int position) const {
  check_coords(coords);
  const int members = axes_size(axes);
  if (position < 0 || position >= members) {
    throw MeshError("mesh (" + to_string() + "): position " + std::to_string(position) + " is not in [0, " +
                    std::to_string(members) + ") of a group over " + std::to_string(axes.size()) + " axes");
  }
  for (int i = static_cast<int>(axes.size()) - 1; i >= 0; --i) {
    const int a = axis_index(axes[i]);
    coords[a] = position % sizes_[a];
    position /= sizes_[a];
  }
  return coords;
}

void MeshShape::check_coords(const std::vector<int>& coords) const {
  bool fits = coords.size() == sizes_.size();
  for (std::size_t i = 0; fits && i < coords.size(); ++i) fits = coords[i] >= 0 && coords[i] < sizes_[i];
  if (!fits) {
    std::string text;
    for (const int c : coords) text += (text.empty() ? "" : ", ") + std::to_string(c);
    throw MeshError("mesh (" + to_string() + "): coordinates (" + text + ") are not a position in it");
  }
}

int MeshShape::rank_of(const std::vector<int>& coords) const {
  check_coords(coords);
  int rank = 0;
  for (int i = 0; i < ndim(); ++i) rank = rank * sizes_[i] + coords[i];
  return rank;
}

std::string MeshShape::to_string() const {
  std::ostringstream out;
  for (int i = 0; i < ndim(); ++i) out << (i ? ", " : "") << names_[i] << ": " << sizes_[i];
  return out.str();
}

MeshShape MeshShape::parse(std::string_view text) {
  std::vector<std::string> names;
  std::vector<int> sizes;
  std::string all(text);
  std::size_t start = 0;
  while (start <= all.size()) {
    std::size_t comma = all.find(',', start);
    if (comma == std::string::npos) comma = all.size();
    std::string item(trim(std::string_view(all).substr(start, comma - start)));
    std::size_t sep = item.find_first_of("=:");
    if (sep == std::string::npos) {
      throw MeshError("mesh '" + all + "': expected name=size, got '" + item + "'");
    }
    std::string name(trim(std::string_view(item).substr(0, sep)));
    std::string size_text(trim(std::string_view(item).substr(sep + 1)));
    if (size_text.empty() || !std::all_of(size_text.begin(), size_text.end(), ::isdigit)) {
      throw MeshError("mesh '" + all + "': size of axis '" + name + "' is not a positive integer: '" + size_text + "'");
    }
    // Leading zeros are the number's (as the programs' integer flags read them): until the
    // forty-fifth session "data=0000001" was refused as past 999999.
    const std::size_t digits = std::max<std::size_t>(1, size_text.size() - std::min(size_text.find_first_not_of('0'), size_text.size()));
    size_text = size_text.substr(size_text.size() - digits);
    if (size_text.size() > 6) {  // a positive integer all the same, which the message said it was not
      throw MeshError("mesh '" + all + "': size of axis '" + name + "' is " + size_text +
                      ", past the 999999 ranks an axis may have");
    }
    names.push_back(name);
    sizes.push_back(std::stoi(size_text));
    start = comma + 1;
  }
  try {
    return MeshShape(std::move(names), std::move(sizes));
  } catch (const MeshError& e) {
    throw MeshError("mesh '" + all + "': " + std::string(e.what()).substr(6));
  }
}

}  // namespace tessera
