// Shared by the io suites: a model-like checkpoint state whose global values are known from the
// array path and element index alone (so any mesh can check any restore), specs chosen per mesh,
// and a per-test temporary directory under the build tree that rank 0 creates and removes.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "mesh/mesh.h"
#include "mesh/sharded_tensor.h"
#include "tests/test_meshes.h"

namespace tessera::io_testing {

struct ArrayDef {
  std::string path;
  Shape shape;
  DType dtype;
  std::vector<std::string> logical_names;
};

// A small MLP-shaped state: two DotReluDot layers, a stacked 3-D parameter, Adam's moments of
// each and the step count (a scalar), in f32, f64, bf16 and i32.
inline std::vector<ArrayDef> model_arrays() {
  std::vector<ArrayDef> params = {
      {"MLP_0/DotReluDot_0/W1", {8, 16}, DType::f32, {"embed", "hidden"}},
      {"MLP_0/DotReluDot_0/W2", {16, 8}, DType::f32, {"hidden", "embed"}},
      {"MLP_0/DotReluDot_1/W1", {8, 16}, DType::f32, {"embed", "hidden"}},
      {"MLP_0/DotReluDot_1/W2", {16, 8}, DType::f32, {"hidden", "embed"}},
      {"MLP_0/bias", {16}, DType::f64, {"hidden"}},
      {"Stacked_0/W", {8, 8, 16}, DType::f64, {"layer", "embed", "hidden"}},
      {"MLP_0/Embed_bf16", {8, 16}, DType::bf16, {"embed", "hidden"}},
  };
  std::vector<ArrayDef> out;
  for (const char* prefix : {"params/", "opt_state/mu/", "opt_state/nu/"}) {
    for (auto def : params) {
      def.path = prefix + def.path;
      out.push_back(def);
    }
  }
  out.push_back({"opt_state/count", {}, DType::i32, {}});
  return out;
}

// A value for every (path, index), different for every element, exact in its dtype; f64 values
// are not representable in f32 so a lossy round trip would show.
inline Tensor reference_value(const ArrayDef& def) {
  const std::size_t salt = std::hash<std::string>{}(def.path) % 9973;
  Tensor t(def.shape, def.dtype);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const std::int64_t k = (i * 7919 + static_cast<std::int64_t>(salt) * 31) % 1000003;
    dispatch_dtype(def.dtype, [&](auto zero) {
      using T = decltype(zero);
      if constexpr (std::is_same_v<T, double>) {
        t.data<T>()[i] = static_cast<double>(k) / 3.0 - 17.25;
      } else if constexpr (std::is_same_v<T, float>) {
        t.data<T>()[i] = static_cast<float>(k) / 64.0f - 3.5f;
      } else if constexpr (std::is_same_v<T, bfloat16>) {
        t.data<T>()[i] = bfloat16(static_cast<float>(k % 4093) / 16.0f - 100.0f);
      } else {
        t.data<T>()[i] = static_cast<T>(k) + 42;
      }
    });
  }
  return t;
}


inline constexpr std::int64_t reference_step = 1234;
inline constexpr std::uint64_t reference_seed = 0xC0FFEE1234ULL;
inline const char* reference_config = R"({"batch": 8, "layers": 4, "depth": 1024, "mesh": "data=2,model=4"})";

// A state on `mesh` where array i gets spec choose(def, i).
template <class Choose>
CheckpointState make_state(const Mesh& mesh, const std::vector<ArrayDef>& defs, Choose&& choose, bool with_values) {
  CheckpointState state;
  state.step = reference_step;
  state.seed = reference_seed;
  state.config = reference_config;
  for (std::size_t i = 0; i < defs.size(); ++i) {
    const Spec spec = choose(defs[i], i);
    ShardedTensor value = with_values ? ShardedTensor::from_global(mesh, spec, reference_value(defs[i]), defs[i].path)
                                      : ShardedTensor::zeros(mesh, spec, defs[i].shape, defs[i].dtype, defs[i].path);
    state.arrays.push_back({defs[i].path, std::move(value), defs[i].logical_names});
  }
  return state;
}

// The k-th valid spec (cyclically) for array i: many different specs over a few restores.
inline CheckpointState varied_state(const Mesh& mesh, const std::vector<ArrayDef>& defs, int k, bool with_values) {
  return make_state(
      mesh, defs,
      [&](const ArrayDef& def, std::size_t i) {
        auto specs = testing_support::valid_specs(mesh.shape(), def.shape, false);
        return specs[(static_cast<std::size_t>(k) * 5 + i * 3) % specs.size()];
      },
      with_values);
}

// Every array of `restored` equals its reference value bit for bit, and step/seed/config match.
inline void expect_state_equals_reference(const CheckpointState& restored, const std::vector<ArrayDef>& defs,
                                          const std::string& where) {
  EXPECT_EQ(restored.step, reference_step) << where;
  EXPECT_EQ(restored.seed, reference_seed) << where;
  EXPECT_EQ(restored.config, reference_config) << where;
  ASSERT_EQ(restored.arrays.size(), defs.size()) << where;
  for (std::size_t i = 0; i < defs.size(); ++i) {
    const auto& array = restored.arrays[i];
    EXPECT_EQ(array.path, defs[i].path) << where;
    EXPECT_TRUE(array.value.to_global().bit_equal(reference_value(defs[i])))
        << where << ": " << array.path << " restored as " << array.value.describe();
  }
}

// A fresh directory under the build tree for one test (collective): rank 0 creates and removes.
class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::string(TESSERA_IO_TEST_TMP) + "/" + info->test_suite_name() + "." + info->name() + "." + name + "." +
            std::to_string(testing_support::world_size()) + "ranks";
    if (testing_support::world_rank() == 0) {
      std::filesystem::remove_all(path_);
      std::filesystem::create_directories(path_);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (testing_support::world_rank() == 0) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The message of the IoError that `f` throws on this rank ("" when it throws none; the test
// fails on another exception type).
template <class F>
std::string io_error_of(F&& f) {
  try {
    f();
  } catch (const IoError& e) {
    return e.what();
  }
  return {};
}

// True when every rank passed the same string.
inline bool same_on_every_rank(const std::string& value) {
  int length = static_cast<int>(value.size());
  int max_length = 0, min_length = 0;
  MPI_Allreduce(&length, &max_length, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&length, &min_length, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (max_length != min_length) return false;
  std::string root = value;
  MPI_Bcast(root.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  int same = root == value ? 1 : 0, all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

}  // namespace tessera::io_testing
