// Stacking per-layer parameters along a new leading dimension.
#include "models/stacking.h"

#include <map>
#include <vector>

#include "core/error.h"

namespace tessera::models {

nn::ParamTree stack_layers(const nn::ParamTree& loop, const std::string& layer_prefix,
                           const std::string& stacked_prefix, int num_layers, const Mesh& mesh) {
  nn::ParamTree out;
  // Names of layer 0's parameters (every layer has the same ones).
  const std::string first = layer_prefix + "0/";
  std::vector<std::string> names;
  for (const auto& [path, value] : loop) {
    if (path.rfind(first, 0) == 0) names.push_back(path.substr(first.size()));
  }
  for (const auto& [path, value] : loop) {
    bool per_layer = false;
    for (int i = 0; i < num_layers && !per_layer; ++i) per_layer = path.rfind(layer_prefix + std::to_string(i) + "/", 0) == 0;
    if (!per_layer) out.emplace(path, value);
  }
  for (const auto& name : names) {
    std::vector<Tensor> layers;
    Spec layer_spec;
    for (int i = 0; i < num_layers; ++i) {
      const std::string path = layer_prefix + std::to_string(i) + "/" + name;
      const auto it = loop.find(path);
      if (it == loop.end()) throw Error("stack_layers: no parameter '" + path + "'");
      layers.push_back(it->second.to_global());
      layer_spec = it->second.spec();
    }
    Shape shape = layers[0].shape();
    shape.insert(shape.begin(), num_layers);
    Tensor global(shape, layers[0].dtype());
    for (int i = 0; i < num_layers; ++i) {
      Shape one = layers[i].shape();
      one.insert(one.begin(), 1);
      std::vector<std::int64_t> at(shape.size(), 0);
      at[0] = i;
      insert_block(global, layers[i].reshaped(one), at);
    }
    Spec spec = layer_spec.padded(static_cast<int>(shape.size()) - 1);
    spec.dims.insert(spec.dims.begin(), Axes{});
    const std::string stacked_path = stacked_prefix + name;
    out.emplace(stacked_path, ShardedTensor::from_global(mesh, spec, global, stacked_path));
  }
  return out;
}

}  // namespace tessera::models
