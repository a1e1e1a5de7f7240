// Helpers for nn suites: the one-rank reference mesh (MPI_COMM_SELF), deterministic inputs and
// relative comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/tensor.h"
#include "mesh/mesh.h"
#include "nn/params.h"

namespace tessera::nn::testing_util {

// A 1-rank mesh with the given axis names (all of size 1): every rank computes the reference.
inline Mesh self_mesh(std::vector<std::string> names = {"data", "model"}) {
  std::vector<int> ones(names.size(), 1);
  return Mesh(MeshShape(std::move(names), std::move(ones)), Communicator(MPI_COMM_SELF, false));
}

// Deterministic values in [-1, 1) (or [0.5, 1.5) when positive), different per seed.
inline Tensor test_values(const Shape& shape, int seed, DType dtype = DType::f64, bool positive = false) {
  Tensor t(shape, DType::f64);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    std::uint64_t h = (static_cast<std::uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(seed) << 32);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    double u = static_cast<double>(h >> 11) / 9007199254740992.0;  // [0, 1)
    t.data<double>()[i] = positive ? 0.5 + u : 2 * u - 1;
  }
  return t.astype(dtype);
}

// max |a - b| / max(max |b|, floor)
inline double max_relative_error(const Tensor& a, const Tensor& b, double floor = 1e-30) {
  EXPECT_EQ(a.shape(), b.shape());
  double diff = 0, scale = floor;
  for (std::int64_t i = 0; i < a.numel() && i < b.numel(); ++i) {
    diff = std::max(diff, std::abs(a.at(i) - b.at(i)));
    scale = std::max(scale, std::abs(b.at(i)));
  }
  return diff / scale;
}

// Every parameter of `want` in `got`, and no other, each within `tolerance` (max_relative_error).
inline void expect_trees_near(const ParamTree& got, const ParamTree& want, double tolerance, const std::string& label) {
  ASSERT_EQ(got.size(), want.size()) << label;
  for (const auto& [path, w] : want) {
    ASSERT_TRUE(got.count(path)) << label << " " << path;
    EXPECT_LT(max_relative_error(got.at(path).to_global(), w.to_global()), tolerance) << label << " " << path;
  }
}

}  // namespace tessera::nn::testing_util
