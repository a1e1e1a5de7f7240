// Helper of checkpoint_atomic_test, run under mpiexec by that test:
//   checkpoint_crash_helper save DIR STEP       saves the reference state at STEP (keep 3)
//   checkpoint_crash_helper restore DIR STEP    restores DIR's latest and checks it is STEP's,
//                                               every array bit-identical to its reference
// Exit codes: 0 ok, 1 wrong values, 3 IoError. TESSERA_CHECKPOINT_TEST_KILL makes one rank
// kill itself during the save (io/checkpoint_dir.h).
#include <cstdio>
#include <string>

#include "mesh/environment.h"
#include "tests/io/io_test_support.h"

int main(int argc, char** argv) {
  using namespace tessera;
  Environment env(argc, argv);
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s save|restore DIR STEP\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  const std::int64_t step = std::stoll(argv[3]);
  const int rank = testing_support::world_rank();
  Mesh mesh = Mesh::world(testing_support::meshes_of_size(testing_support::world_size()).back());
  const auto defs = io_testing::model_arrays();
  try {
    if (mode == "save") {
      CheckpointState state = io_testing::varied_state(mesh, defs, 0, true);
      state.step = step;
      const std::string file = save_checkpoint(state, dir, SaveOptions{.keep = 3});
      if (rank == 0) std::printf("saved %s\n", file.c_str());
      return 0;
    }
    CheckpointState restored = restore_checkpoint(dir, io_testing::varied_state(mesh, defs, 1, false));
    int bad = restored.step == step ? 0 : 1;
    for (std::size_t i = 0; i < defs.size(); ++i) {
      if (!restored.arrays[i].value.to_global().bit_equal(io_testing::reference_value(defs[i]))) bad = 1;
    }
    if (rank == 0) std::printf("restored step %lld: %s\n", static_cast<long long>(restored.step), bad ? "WRONG" : "ok");
    return bad;
  } catch (const IoError& e) {
    if (rank == 0) std::fprintf(stderr, "IoError: %s\n", e.what());
    return 3;
  }
}
