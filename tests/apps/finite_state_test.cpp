// check_state_finite, the check train_mlp and train_lm run before they save: a nan or an
// infinity in a parameter or in either Adam moment, on any one rank's block, stops every rank.
// (A gradient whose square overflows leaves the second moment infinite and the parameter finite:
// its updates are 0 from then on, a run that stalls without a word.)
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "apps/run_support.h"
#include "core/error.h"
#include "nn/optim.h"
#include "tests/test_meshes.h"

namespace tessera::apps {
namespace {

using testing_support::world_rank;
using testing_support::world_size;

TEST(FiniteState, ANonFiniteValueOnOneRankStopsEveryRank) {
  const int n = world_size();
  Mesh mesh = Mesh::world(MeshShape({"model"}, {n}));
  nn::ParamTree params;
  params.emplace("w", ShardedTensor::zeros(mesh, parse_spec("P(model)"), {2 * n}, DType::f32, "w"));
  const nn::TrainState clean = nn::create_train_state(params, nn::adam(0.1));
  EXPECT_NO_THROW(check_state_finite(clean));
  for (const char* tree : {"params", "mu", "nu"}) {
    for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      nn::TrainState state = clean;
      nn::ParamTree& values = std::string(tree) == "params" ? state.params
                              : std::string(tree) == "mu"   ? state.opt_state.mu
                                                            : state.opt_state.nu;
      if (world_rank() == n - 1) values.at("w").local().data<float>()[1] = bad;
      EXPECT_THROW(check_state_finite(state), UsageError) << tree << " holding " << bad << " on the last rank";
    }
  }
}

}  // namespace
}  // namespace tessera::apps
