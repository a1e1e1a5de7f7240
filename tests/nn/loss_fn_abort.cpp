// loss_fn_abort some|every|infer|grad|backward|backward_every: train_step with a loss function that
// throws on the last rank only (some), or on every rank (every); infer_step with an apply function
// that throws on the last rank only (infer), while the others go on to a barrier; value_and_grad
// with a loss function that throws on the last rank only (grad), while the others wait in its
// all-reduce of the loss; train_step with an op of the user's (make_result) whose backward throws
// on the last rank only (backward) or on every rank (backward_every).
// - some: the other ranks go on into the step's collective on the loss, which the last rank never
//   joins, so they can never leave it: the job must end within seconds with the error and exit
//   code 2 (tests/nn/CMakeLists.txt checks both through tests/apps/expect_error.sh).
// - every, backward_every: each rank catches its own error, the next step runs on every rank, and
//   rank 0 prints the error and that step's loss; every rank exits 2.
#include <mpi.h>

#include <iostream>
#include <string>

#include "core/error.h"
#include "core/spec.h"
#include "mesh/environment.h"
#include "mesh/mesh.h"
#include "nn/ops.h"
#include "nn/optim.h"
#include "nn/train.h"

int main(int argc, char** argv) {
  tessera::Environment env(argc, argv);
  using namespace tessera;
  using namespace tessera::nn;
  const std::string mode = argc > 1 ? argv[1] : "some";
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Mesh mesh = Mesh::world(MeshShape({"model"}, {size}));
  ParamTree params;
  params.emplace("w", ShardedTensor::zeros(mesh, parse_spec("P(model, None)"), {2 * size, 3}, DType::f32, "w"));
  const Optimizer opt = adam(0.1);
  TrainState state = create_train_state(params, opt);
  bool fail = true;
  const bool in_backward = mode == "backward" || mode == "backward_every";
  const bool on_every_rank = mode == "every" || mode == "backward_every";
  const auto fails_here = [&] { return fail && (on_every_rank || mesh.rank() == size - 1); };
  // The identity, as an op of the user's whose backward checks something of its rank's.
  const auto fragile = [&](const Var& w) {
    return make_result("fragile", w.value(), {w}, [&](ShardedTensor& g, GradSink& sink) {
      if (fails_here()) throw ShapeError("the op's backward failed on rank " + std::to_string(mesh.rank()));
      sink.add(0, std::move(g));
    });
  };
  const LossFn loss_fn = [&](const VarTree& p, const Batch&) {
    if (in_backward) return sum(fragile(p.at("w")));
    if (fails_here()) throw ShapeError("the loss function's check failed on rank " + std::to_string(mesh.rank()));
    return sum(p.at("w"));
  };
  const Batch batch{ShardedTensor::zeros(mesh, parse_spec("P()"), {1}, DType::f32, "x")};
  if (mode == "infer") {
    const ApplyFn apply = [&](const VarTree& p, const Var&) {
      if (fails_here()) throw ShapeError("the apply function's check failed on rank " + std::to_string(mesh.rank()));
      return p.at("w");
    };
    (void)infer_step(state.params, apply, batch.x);
    MPI_Barrier(MPI_COMM_WORLD);  // never left: the last rank threw, and ends the job
    std::cerr << "loss_fn_abort: rank " << mesh.rank() << ": the apply function's error was lost" << std::endl;
    return 1;
  }
  if (mode == "grad") {
    (void)value_and_grad(state.params, loss_fn, batch);
    std::cerr << "loss_fn_abort: rank " << mesh.rank() << ": the loss function's error was lost" << std::endl;
    return 1;
  }
  try {
    train_step(state, opt, loss_fn, batch);
  } catch (const ShapeError& e) {
    fail = false;
    const double loss = train_step(state, opt, loss_fn, batch);
    if (mesh.rank() == 0) std::cerr << "loss_fn_abort: " << e.what() << "; the next step's loss " << loss << std::endl;
    return 2;
  }
  std::cerr << "loss_fn_abort: rank " << mesh.rank() << ": the loss function's error was lost" << std::endl;
  return 1;
}
