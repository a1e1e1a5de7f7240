// Local-view SPMD (JAX's shard_map, seqax's typed_shard_map): global-view Vars go in, `body`
// runs on every rank with this rank's blocks, and its local results come back as global-view
// Vars. Inside the body a block is a Var on a one-rank "local" mesh (the mesh's axis names, all
// of size 1, on MPI_COMM_SELF), so every nn op works on it unchanged; communication is written
// by hand with the collectives of nn/spmd_collectives.h, which name axes of the real mesh.
//
//   inputs     resharded to in_specs first (a taped reshard, counted like any other)
//   outputs    the block of a result with out_spec s has the global shape block * shard counts;
//              a mesh axis s does not mention asserts the result is the same on every rank along
//              it. A result that varies over such an axis (computed from blocks split over it and
//              not reduced by psum / pmax) is an error, found from the body's tape without
//              communication (the body is always recorded whole for this, then pruned to what
//              gradients need). Values the tape cannot see vary (a constant made from
//              axis_index) pass that check; ShardMapOptions::check_replication compares the
//              values themselves across the axis (two all-reduces per result and axis).
//              A partial axis in s is allowed: the global value is the sum of the blocks.
//              Every rank's results are compared with rank 0's in count, dtype and block shape
//              (one 32-byte all-reduce per call): a body whose results differ from rank to rank
//              is a ShapeError on every rank, naming rank 0's results and the first other rank's.
//              A body that throws a tessera::Error on some ranks only is that error on every rank
//              (its type; the message prefixed "rank R: ", R the first rank that threw); where
//              every rank's body throws, each rank's own error stands. A body that throws while
//              other ranks are inside one of its collectives (which they cannot leave) ends the
//              job: the rank that threw waits 3 s for the others, then prints its error
//              ("tessera: rank R: shard_map: the body threw on this rank and ...") and calls
//              MPI_Abort with code 2 (3 for an IntegrityError), as the programs' exit codes.
//   gradients  shard_map is one taped op: its backward runs the body's tape with the output
//              cotangent's block as seed. Collectives transpose as in spmd_collectives.h. The
//              body's tape is typed as in JAX: a value varies over the axes its inputs are split
//              on, psum / pmax make it invariant again; where an op meets an operand invariant
//              over an axis with one that varies over it (JAX's implicit pbroadcast), the
//              backward all-reduces that operand's cotangent over the axis (pbroadcast's
//              transpose, psum). That is where Megatron's backward all-reduces come from.
// Everything checked before communication (counts, meshes, dtypes, shapes) throws the same error
// on every rank.
#pragma once

#include <functional>
#include <vector>

#include "nn/signature.h"
#include "nn/spmd_collectives.h"
#include "nn/var.h"

namespace tessera::nn {

using ShardMapBody = std::function<std::vector<Var>(const std::vector<Var>& blocks)>;

struct ShardMapOptions {
  // Compare each result across every mesh axis its out_spec leaves unmentioned (ShapeError on
  // every rank naming the result and the axis when the blocks differ). Off by default, as in
  // JAX's check_rep=False; the environment variable TESSERA_SHARD_MAP_CHECK=1 turns it on too.
  bool check_replication = false;
};

// The one-rank mesh with `mesh`'s axis names (cached per list of names).
const Mesh& local_mesh(const Mesh& mesh);

std::vector<Var> shard_map(const Mesh& mesh, const ShardMapBody& body, const std::vector<Spec>& in_specs,
                           const std::vector<Spec>& out_specs, const std::vector<Var>& args,
                           const ShardMapOptions& options = {});

// Typed: specs from the signature; every argument's dtype and global shape, and every result's
// dtype and local shape, are checked in an isolated shape scope (open while the body runs, so it
// may check its own intermediates with check_local). ShapeError names the argument, the dimension
// and both sizes.
std::vector<Var> shard_map(const Mesh& mesh, const Signature& signature, const ShardMapBody& body,
                           const std::vector<Var>& args, const ShardMapOptions& options = {});
std::vector<Var> shard_map(const Mesh& mesh, std::string_view signature, const ShardMapBody& body,
                           const std::vector<Var>& args, const ShardMapOptions& options = {});

}  // namespace tessera::nn
