#include "apps/synthetic_data.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"
#include "nn/ops.h"

namespace tessera::apps {

Spec activation_spec(const MeshShape& mesh, const Rules& rules, bool logical) {
  if (logical) return logical_to_mesh_axes({"batch", "embed"}, rules, "x");
  const auto& names = mesh.names();
  if (std::find(names.begin(), names.end(), "data") == names.end()) return Spec::replicated(2);
  return parse_spec("P(data, None)");
}

LossKind parse_loss_kind(const std::string& text) {
  if (text == "sum") return LossKind::sum;
  if (text == "mse") return LossKind::mse;
  if (text == "xent") return LossKind::xent;
  throw UsageError("unknown loss '" + text + "' (expected sum, mse or xent)");
}

InputKind parse_input_kind(const std::string& text) {
  if (text == "ones") return InputKind::ones;
  if (text == "random") return InputKind::random;
  throw UsageError("unknown input '" + text + "' (expected ones or random)");
}

SyntheticData::SyntheticData(DataConfig config, const Mesh& mesh, const Rules& rules)
    : config_(config), mesh_(mesh), rules_(rules), spec_(activation_spec(mesh.shape(), rules, config.logical)) {
  validate_spec(spec_, mesh.shape(), {config.batch, config.width}, "x");
  // xent's labels are the one-hot argmax of each row, which a rank finds locally only when the
  // class dimension (embed) is unsplit.
  if (config.loss == LossKind::xent && !spec_.padded(2).dims[1].empty()) {
    throw UsageError("--loss xent needs the embed dimension unsplit, got " + spec_.to_string());
  }
  if (config.loss == LossKind::sum) return;
  teacher_ = models::DotReluDot{config.width, initializers::xavier_normal(), config.logical};
  nn::ParamDecl decl(mesh.shape(), rules);
  teacher_->declare(decl.child("teacher"), {config.batch, config.width});
  teacher_vars_ = nn::as_vars(nn::init_params(decl.infos(), mesh, config.seed), false);
}

nn::Batch SyntheticData::batch(std::int64_t step) const {
  const Shape shape = {config_.batch, config_.width};
  const RngKey key = rng_key(config_.seed, "data/" + std::to_string(step));
  const RngKey pool_key = rng_key(config_.seed, "data/examples");
  const std::int64_t pool = config_.examples;
  ShardedTensor x = ShardedTensor::from_block_fn(
      mesh_, spec_, shape,
      [&](const std::vector<std::int64_t>& offsets, const Shape& block) {
        if (config_.input == InputKind::ones) return init_block(initializers::ones(), key, shape, offsets, block);
        if (pool == 0) return init_block(initializers::normal(1.0), key, shape, offsets, block);
        // Row r of the batch is pool example e(step, r); element (r, c) is the pool's (e, c).
        Tensor t(block, DType::f32);
        float* out = t.data<float>();
        for (std::int64_t r = 0; r < block[0]; ++r) {
          // One 32-bit word of the draw for a pool of at most 2^32 examples, two beyond (until the
          // forty-fifth session one word for every pool: no example past 2^32 was ever drawn).
          const auto bits = random_bits(key, static_cast<std::uint64_t>(offsets[0] + r));
          const std::uint64_t draw = pool > (std::int64_t{1} << 32)
                                         ? (static_cast<std::uint64_t>(bits[1]) << 32) | static_cast<std::uint64_t>(bits[0])
                                         : static_cast<std::uint64_t>(bits[0]);
          const std::uint64_t example = draw % static_cast<std::uint64_t>(pool);
          for (std::int64_t c = 0; c < block[1]; ++c) {
            const auto index = example * static_cast<std::uint64_t>(shape[1]) + static_cast<std::uint64_t>(offsets[1] + c);
            out[r * block[1] + c] = static_cast<float>(normal(pool_key, index));
          }
        }
        return t;
      },
      "x");
  if (!teacher_) return {std::move(x), std::nullopt};
  models::ApplyContext ctx{rules_};
  ShardedTensor z = teacher_->apply(nn::ParamView(teacher_vars_, "teacher"), ctx, nn::Var(x)).value();
  if (!(z.spec() == spec_)) z = nn::reshard(nn::Var(z), spec_).value();
  z.set_name("y");
  if (config_.loss == LossKind::xent) {
    // One-hot labels of the teacher's argmax. The class dimension is unsplit in spec_ (the
    // embed dimension: checked when the data was made), so each rank holds whole rows and the
    // argmax is local.
    Tensor& t = z.local();
    const std::int64_t rows = t.shape()[0], cols = t.shape()[1];
    float* v = t.data<float>();
    for (std::int64_t r = 0; r < rows; ++r) {
      float* row = v + r * cols;
      const std::int64_t best = std::max_element(row, row + cols) - row;
      std::fill(row, row + cols, 0.0f);
      row[best] = 1.0f;
    }
  }
  return {std::move(x), std::move(z)};
}

nn::Var SyntheticData::loss(const nn::Var& output, const nn::Batch& batch) const {
  switch (config_.loss) {
    case LossKind::sum:
      return nn::sum_loss(output);
    case LossKind::mse:
      return nn::mse_loss(output, nn::Var(*batch.y));
    case LossKind::xent:
      return nn::softmax_cross_entropy(output, nn::Var(*batch.y));
  }
  throw UsageError("unknown loss kind");
}

}  // namespace tessera::apps
