// The loop form of a model's layers and its stacked (scan) form hold the same numbers in
// different places: layer i's "<prefix><i>/<name>" is index i of the stacked "<stacked><name>",
// whose leading `layers` dimension is unsplit. stack_layers turns one into the other, so that
// tests can give both forms the same values (their inits differ: the RNG is keyed by path).
#pragma once

#include <string>

#include "nn/params.h"

namespace tessera::models {

// Collective (gathers each layer's tensor). Every parameter "<layer_prefix><i>/<name>" for
// i < num_layers goes into "<stacked_prefix><name>" at index i, with layer 0's spec and an unsplit
// leading dimension; every other parameter is kept as it is.
nn::ParamTree stack_layers(const nn::ParamTree& loop, const std::string& layer_prefix,
                           const std::string& stacked_prefix, int num_layers, const Mesh& mesh);

}  // namespace tessera::models
