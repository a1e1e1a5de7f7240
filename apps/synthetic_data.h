// Synthetic training data for the tutorial MLP: the batch of step s is drawn from the RNG keyed
// by (seed, "data/<s>"), so it is the same global value on every mesh and a resumed run sees the
// batches an uninterrupted one would. With a pool of `examples` inputs (the default), each row
// of a batch is one example drawn from the pool, so a batch-8 run can fit the data in a few
// hundred steps and the loss visibly falls; with examples = 0 every row is fresh. Targets come from a fixed random teacher (one DotReluDot
// keyed by (seed, "teacher/...")): regression targets for mse, argmax class labels for xent.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "models/mlp.h"
#include "nn/train.h"

namespace tessera::apps {

enum class LossKind { sum, mse, xent };
enum class InputKind { ones, random };

struct DataConfig {
  std::int64_t batch = 8;
  std::int64_t width = 1024;  // the model's input and output width (the tutorial's depth)
  LossKind loss = LossKind::mse;
  InputKind input = InputKind::random;
  std::uint64_t seed = 0;
  bool logical = false;
  std::int64_t examples = 64;  // size of the input pool (0: fresh inputs every step)
};

class SyntheticData {
 public:
  // Declares and initializes the teacher on `mesh` (nothing when the loss needs no targets).
  SyntheticData(DataConfig config, const Mesh& mesh, const Rules& rules);
  // The batch of step `step`: inputs sharded like the model's activations (batch over the axes
  // the rules or the tutorial give it), targets or one-hot labels sharded the same way.
  nn::Batch batch(std::int64_t step) const;
  // The spec of inputs and targets.
  const Spec& spec() const { return spec_; }
  // The loss of the model's output on a batch.
  nn::Var loss(const nn::Var& output, const nn::Batch& batch) const;

 private:
  DataConfig config_;
  Mesh mesh_;
  Rules rules_;
  Spec spec_;
  std::optional<models::DotReluDot> teacher_;
  // The teacher's parameters, made once: as_vars copies every tensor, and copying them for every
  // batch took 5-7% of train_mlp's time (depth 1024, one rank).
  nn::VarTree teacher_vars_;
};

// The spec of inputs and targets: the tutorial's (data, None) (replicated when the mesh has no
// data axis), or the logical names (batch, embed) resolved by the rules.
Spec activation_spec(const MeshShape& mesh, const Rules& rules, bool logical);

LossKind parse_loss_kind(const std::string& text);
InputKind parse_input_kind(const std::string& text);

}  // namespace tessera::apps
