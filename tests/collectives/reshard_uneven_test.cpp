// Reshard between every pair of valid specs of tensors whose extents divide by some axis
// products but not others (6 = 2 x 3, 12): the planner must never pass through a spec that does
// not divide the shape, and the value must come back exactly.
#include <gtest/gtest.h>

#include "collectives/reshard.h"
#include "core/error.h"
#include "tests/test_meshes.h"

namespace tessera {
namespace {

using testing_support::all_specs;
using testing_support::meshes_of_size;
using testing_support::world_size;

using testing_support::valid_specs;


TEST(ReshardUneven, EveryValidPairRoundTripsExactly) {
  int pairs = 0;
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (const Shape& global : {Shape{4, 6}, Shape{6, 12}, Shape{2, 6, 4}}) {
      Tensor value(global, DType::f32);
      for (std::int64_t i = 0; i < value.numel(); ++i) value.data<float>()[i] = static_cast<float>(i % 97);
      for (const Spec& source : valid_specs(shape, global, true)) {
        ShardedTensor x = ShardedTensor::from_global(mesh, source, value);
        for (const Spec& target : valid_specs(shape, global, false)) {
          ShardedTensor y = reshard(x, target);
          ASSERT_TRUE(y.to_global().bit_equal(value)) << shape.to_string() << " " << source.to_string() << " -> "
                                                       << target.to_string();
          ++pairs;
        }
      }
    }
  }
  if (testing_support::world_rank() == 0) std::printf("uneven reshard pairs checked: %d\n", pairs);
  EXPECT_GT(pairs, 0);
}

}  // namespace
}  // namespace tessera
