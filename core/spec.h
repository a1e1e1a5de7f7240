// Sharding specs: for each tensor dimension the ordered mesh axes that split it (major to minor),
// plus the set of partial axes over which the global value is the SUM of the local shards.
// Two text forms round-trip exactly:
//   JAX style   P((data, model), None; partial=model)
//   seqax style "batch/data embed/model"   (a dimension is a name or a size, then /axis...)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/mesh_shape.h"
#include "core/shape.h"

namespace tessera {

using Axes = std::vector<std::string>;

struct Spec {
  std::vector<Axes> dims;  // one entry per tensor dimension; empty = not split (replicated)
  Axes partial;            // partial axes in written order; compared as a set

  Spec() = default;
  explicit Spec(std::vector<Axes> dims, Axes partial = {}) : dims(std::move(dims)), partial(std::move(partial)) {}

  // A spec of `ndim` unsplit dimensions.
  static Spec replicated(int ndim = 0) { return Spec(std::vector<Axes>(ndim)); }

  int ndim() const { return static_cast<int>(dims.size()); }
  // The axes of dimension d, or none when d is past the written dimensions (padding).
  const Axes& axes(int d) const;
  // The spec padded with unsplit dimensions to `ndim` dimensions; throws SpecError if longer.
  Spec padded(int ndim) const;
  bool is_partial() const { return !partial.empty(); }
  bool is_partial_on(std::string_view axis) const;
  // Every mesh axis the spec mentions, dimensions first then partial, in written order.
  Axes used_axes() const;
  // The dimension an axis splits, or -1 (also -1 when it is partial or unused).
  int dim_of(std::string_view axis) const;
  // The same spec without partial axes.
  Spec without_partial() const { return Spec(dims); }

  // "P(data, None)"; "P((data, model), None; partial=model)"; "P()" for a scalar.
  std::string to_string() const;
  // Equal after padding both to the same ndim and comparing partial axes as a set.
  bool operator==(const Spec& other) const;
};

// Parses the JAX-style text; throws SpecError that quotes the text and points at the token.
Spec parse_spec(std::string_view text);

// Throws SpecError unless every axis exists in `mesh` and appears at most once (dimensions and
// partial together) and the spec has no more dimensions than `shape`. A dimension need not
// divide by its axes (see the block rule below). `name` names the tensor in messages.
void validate_spec(const Spec& spec, const MeshShape& mesh, const Shape& shape, std::string_view name = "");

// For code whose blocks must all have one shape (shard_map's bodies, the transformer's heads and
// sequence): SpecError "dimension d of 'name' (size n) does not divide over axes (...) of size k"
// for the first split dimension the axes do not divide.
void require_even_split(const Spec& spec, const MeshShape& mesh, const Shape& shape, std::string_view name);

// The block rule (JAX's and torch.chunk's): a dimension of size n split s ways gives block i the
// range [i*c, min(n, (i+1)*c)) with c = ceil(n/s). Trailing blocks may be short or empty; block 0
// is the largest. Nothing is padded: a rank's local tensor has exactly its block's extent.
std::int64_t block_chunk(std::int64_t n, std::int64_t s);
std::int64_t block_begin(std::int64_t n, std::int64_t s, std::int64_t i);
std::int64_t block_extent(std::int64_t n, std::int64_t s, std::int64_t i);
// The extents of all s blocks.
std::vector<std::int64_t> block_extents(std::int64_t n, std::int64_t s);
// Whether the blocks of n split outer*inner ways tile the blocks of n split outer ways: block c
// of the coarse split is the union of fine blocks c*inner .. c*inner+inner-1. Then a collective
// over the inner axes (gather, scatter, all-to-all) moves between the two splits exactly. Always
// true when outer*inner divides n.
bool blocks_nest(std::int64_t n, std::int64_t outer, std::int64_t inner);

// The number of blocks dimension d is split into.
int shard_count(const Spec& spec, const MeshShape& mesh, int d);
// The mesh axes the spec does not use (neither splitting a dimension nor partial), in mesh order:
// ranks that differ only on them hold the same block.
Axes unused_axes(const Spec& spec, const MeshShape& mesh);
// Whether every split dimension divides by its axes (all blocks have the same shape).
bool splits_evenly(const Spec& spec, const MeshShape& mesh, const Shape& global);
// The shape of the block held at `coords`. Assumes a valid spec.
Shape local_shape(const Spec& spec, const MeshShape& mesh, const Shape& global, const std::vector<int>& coords);
// Whether `block` is that shape (local_shape(...) == block, without building it).
bool is_local_shape(const Shape& block, const Spec& spec, const MeshShape& mesh, const Shape& global,
                    const std::vector<int>& coords);
// The shape of the largest block (block 0 of every dimension): what buffers sized for any
// rank's block use. Equal to every block's shape when splits_evenly.
Shape max_local_shape(const Spec& spec, const MeshShape& mesh, const Shape& global);
// Block index along dimension d for the rank at `coords`: mixed radix of its coordinates on the
// dimension's axes, first axis most significant.
int block_index(const Spec& spec, const MeshShape& mesh, int d, const std::vector<int>& coords);
// Offsets into the global tensor of the block held at `coords`.
std::vector<std::int64_t> block_offsets(const Spec& spec, const MeshShape& mesh, const Shape& global,
                                        const std::vector<int>& coords);
// The extents along dimension d of the blocks held by the ranks that differ from `coords` only on
// `axes`, in the order of a communicator over those axes (mixed radix, first axis most
// significant): the block extents a collective over `axes` moves.
std::vector<std::int64_t> group_block_extents(const Spec& spec, const MeshShape& mesh, const Shape& global, int d,
                                              const Axes& axes, const std::vector<int>& coords);

// The key of a cache of plans made from specs, shapes and meshes (reshard plans, contraction
// plans), in one string with one allocation: every number in 8 bytes and each name preceded by
// its length, so that no two argument lists give one key. Specs go in as written, not padded.
class PlanKey {
 public:
  PlanKey() { key_.reserve(256); }
  PlanKey& add(std::int64_t value);
  PlanKey& add(std::string_view name);
  PlanKey& add(const Axes& axes);
  PlanKey& add(const Spec& spec);
  PlanKey& add(const Shape& shape);
  PlanKey& add(const MeshShape& mesh);
  std::string take() { return std::move(key_); }

 private:
  std::string key_;
};

// One dimension of a seqax shape string: a name (bound by shape checking) or an explicit size,
// then the mesh axes that split it.
struct DimSpec {
  std::string name;                  // empty when the dimension is given by size
  std::optional<std::int64_t> size;  // set when the dimension is an integer
  Axes axes;
  bool operator==(const DimSpec&) const = default;
};

struct ShapeString {
  std::vector<DimSpec> dims;
  int ndim() const { return static_cast<int>(dims.size()); }
  Spec spec() const;
  // The logical names of the dimensions (empty for integer dimensions).
  std::vector<std::string> names() const;
  // "batch/data embed/model 8"
  std::string to_string() const;
  bool operator==(const ShapeString&) const = default;
};

// Parses "batch/data embed/model"; throws SpecError pointing at the offending token.
ShapeString parse_shape_string(std::string_view text);

}  // namespace tessera
