// The meshes of docs/design.md's correctness rule, and enumeration of specs over a mesh's axes,
// shared by the MPI suites. A suite run on N ranks tests the meshes of N ranks.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/mesh_shape.h"
#include "core/spec.h"

namespace tessera::testing_support {

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Axis names: one axis "data"; two axes "data", "model"; three axes "x", "y", "z".
inline MeshShape mesh_shape_of(const std::vector<int>& sizes) {
  if (sizes.size() == 1) return MeshShape({"data"}, sizes);
  if (sizes.size() == 2) return MeshShape({"data", "model"}, sizes);
  return MeshShape({"x", "y", "z"}, sizes);
}

// 1, 2, 1x2, 2x1, 2x2, 4, 2x4, 4x2, 8, 2x2x2 (and 1x4, 4x1, 1x8, 8x1 with `wide`), those of n ranks.
inline std::vector<MeshShape> meshes_of_size(int n, bool wide = false) {
  std::vector<std::vector<int>> all = {{1}, {2}, {1, 2}, {2, 1}, {2, 2}, {4}, {2, 4}, {4, 2}, {8}, {2, 2, 2}};
  if (wide) all.insert(all.end(), {{1, 4}, {4, 1}, {1, 8}, {8, 1}});
  std::vector<MeshShape> out;
  for (const auto& sizes : all) {
    int size = 1;
    for (int s : sizes) size *= s;
    if (size == n) out.push_back(mesh_shape_of(sizes));
  }
  return out;
}

// Every way to give each dimension of an `ndim`-dimensional tensor an ordered list of distinct axes
// (each axis used at most once), optionally with every subset of the remaining axes partial.
inline std::vector<Spec> all_specs(const MeshShape& mesh, int ndim, bool with_partial) {
  std::vector<Spec> out;
  const int k = mesh.ndim();
  // Assign each axis a slot: -1 unused, -2 partial, or a dimension; then every order of the
  // axes within a dimension.
  std::vector<int> slot(k, -1);
  const int choices = ndim + (with_partial ? 2 : 1);
  int total = 1;
  for (int i = 0; i < k; ++i) total *= choices;
  for (int code = 0; code < total; ++code) {
    int c = code;
    for (int i = 0; i < k; ++i) {
      slot[i] = c % choices - (with_partial ? 2 : 1);
      c /= choices;
    }
    std::vector<std::vector<int>> per_dim(ndim);
    Spec base = Spec::replicated(ndim);
    for (int i = 0; i < k; ++i) {
      if (slot[i] >= 0) per_dim[slot[i]].push_back(i);
      if (slot[i] == -2) base.partial.push_back(mesh.names()[i]);
    }
    // All orderings of each dimension's axes.
    std::vector<Spec> specs = {base};
    for (int d = 0; d < ndim; ++d) {
      std::vector<Spec> next;
      std::vector<int> axes = per_dim[d];
      std::sort(axes.begin(), axes.end());
      do {
        for (auto s : specs) {
          for (int a : axes) s.dims[d].push_back(mesh.names()[a]);
          next.push_back(s);
        }
      } while (std::next_permutation(axes.begin(), axes.end()));
      specs = std::move(next);
    }
    out.insert(out.end(), specs.begin(), specs.end());
  }
  return out;
}

// The 2-D meshes (axes data, model) of n ranks, wide ones included; 1x1 on one rank.
inline std::vector<MeshShape> meshes_2d_of_size(int n) {
  std::vector<MeshShape> out;
  for (const auto& m : meshes_of_size(n, true)) {
    if (m.ndim() == 2) out.push_back(m);
  }
  if (n == 1) out.push_back(MeshShape({"data", "model"}, {1, 1}));
  return out;
}

// all_specs that are valid for `shape` (every one whose axes exist; uneven splits included).
inline std::vector<Spec> valid_specs(const MeshShape& mesh, const Shape& shape, bool with_partial) {
  std::vector<Spec> out;
  for (const Spec& s : all_specs(mesh, static_cast<int>(shape.size()), with_partial)) {
    try {
      validate_spec(s, mesh, shape);
      out.push_back(s);
    } catch (const SpecError&) {
    }
  }
  return out;
}

}  // namespace tessera::testing_support
