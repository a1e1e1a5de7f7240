// Global-view sharded tensors: wrap, scatter from a global value, gather back, and draw.
#include "mesh/sharded_tensor.h"

#include <algorithm>
#include <climits>
#include <map>
#include <sstream>

#include "core/checked.h"
#include "core/error.h"
#include "mesh/mpi_check.h"

namespace tessera {

bool is_partial_holder(const Spec& spec, const MeshShape& mesh, const std::vector<int>& coords) {
  for (const auto& axis : spec.partial) {
    if (coords[mesh.axis_index(axis)] != 0) return false;
  }
  return true;
}

ShardedTensor::ShardedTensor(Mesh mesh, Spec spec, Shape global_shape, Tensor local, std::string name)
    : mesh_(std::move(mesh)), global_shape_(std::move(global_shape)), local_(std::move(local)), name_(std::move(name)) {
  validate_spec(spec, mesh_.shape(), global_shape_, name_);
  spec.dims.resize(global_shape_.size());  // padded: validate_spec refused a spec of more dimensions
  spec_ = std::move(spec);
  if (!is_local_shape(local_.shape(), spec_, mesh_.shape(), global_shape_, mesh_.coords())) {
    const Shape expected = local_shape(spec_, mesh_.shape(), global_shape_, mesh_.coords());
    throw ShapeError("sharded tensor '" + name_ + "' " + shape_to_string(global_shape_) + " " + spec_.to_string() +
                     " on " + mesh_.to_string() + ": local block has shape " + shape_to_string(local_.shape()) +
                     ", expected " + shape_to_string(expected));
  }
}

ShardedTensor ShardedTensor::from_global(const Mesh& mesh, const Spec& spec, const Tensor& global, std::string name) {
  return from_block_fn(
      mesh, spec, global.shape(),
      [&](const std::vector<std::int64_t>& offsets, const Shape& block_shape) {
        return extract_block(global, offsets, block_shape);
      },
      std::move(name));
}

ShardedTensor ShardedTensor::zeros(const Mesh& mesh, const Spec& spec, const Shape& global_shape, DType dtype,
                                   std::string name) {
  Spec full = spec.padded(static_cast<int>(global_shape.size()));
  validate_spec(full, mesh.shape(), global_shape, name);
  return ShardedTensor(mesh, full, global_shape, Tensor(local_shape(full, mesh.shape(), global_shape, mesh.coords()), dtype),
                       std::move(name));
}

std::vector<std::int64_t> ShardedTensor::block_offsets() const {
  return tessera::block_offsets(spec_, mesh_.shape(), global_shape_, mesh_.coords());
}

bool ShardedTensor::holds_partial_value() const { return is_partial_holder(spec_, mesh_.shape(), mesh_.coords()); }

Tensor ShardedTensor::to_global() const {
  const MeshShape& shape = mesh_.shape();
  // Only the ranks that differ from this one on the axes the spec uses hold distinct blocks (or,
  // along a partial axis, distinct terms): the gather runs over them alone. Until the
  // forty-fifth session it ran over the whole mesh, so a tensor replicated on every rank took the
  // whole tensor once per rank (a 64 MiB tensor on 8 ranks peaked at 800 MB a rank).
  const Axes axes = spec_.used_axes();
  const Communicator& group = mesh_.axes_comm(axes);
  const int n = group.size();
  // Member g's coordinates (MeshShape::group_member, the order of Mesh::axes_comm); the members
  // visited in the mesh's rank order, as before.
  std::vector<std::pair<int, std::vector<int>>> members;  // (mesh rank, coordinates) by group rank
  for (int g = 0; g < n; ++g) {
    std::vector<int> coords = shape.group_member(mesh_.coords(), axes, g);
    members.emplace_back(shape.rank_of(coords), std::move(coords));
  }
  std::vector<int> order(n);
  for (int g = 0; g < n; ++g) order[g] = g;
  std::sort(order.begin(), order.end(), [&](int x, int y) { return members[x].first < members[y].first; });
  // Blocks travel in buffers of the largest block's shape (the same count on every rank); a
  // short block fills the front of its buffer and is read back with its own shape.
  const Shape max_block = max_local_shape(spec_, shape, global_shape_);
  const bool even = splits_evenly(spec_, shape, global_shape_);
  const std::size_t block_bytes = checked_mul<std::size_t>(static_cast<std::size_t>(numel(max_block)), dtype_size(dtype()),
                                                           "to_global block bytes");
  Tensor padded_block;
  if (!even) {
    padded_block = Tensor(max_block, dtype());
    insert_block(padded_block, local_, std::vector<std::int64_t>(max_block.size(), 0));
  }
  const Tensor& send_block = even ? local_ : padded_block;
  std::vector<std::byte> all(checked_mul<std::size_t>(block_bytes, static_cast<std::size_t>(n), "to_global bytes"));
  // MPI counts are int: a block over 2^31 - 1 bytes goes as units of a larger type (byte_message).
  ByteMessage message = byte_message(static_cast<std::int64_t>(block_bytes), "to_global");
  const int rc = MPI_Allgather(send_block.raw(), message.count, message.type, all.data(), message.count, message.type,
                               group.handle());
  if (message.owned) MPI_Type_free(&message.type);
  check_mpi(rc, "MPI_Allgather (to_global)");
  // A partial bf16 value is summed in f32 in rank order and rounded once (semantics 8, as a
  // reshard's reduction does): adding bf16 blocks one at a time rounded after each add, and lost
  // the small terms (256 + 1 + ... + 1 over 8 ranks read back as 256, where reshard gave 264).
  const bool widen = spec_.is_partial() && dtype() == DType::bf16;
  Tensor global(global_shape_, widen ? DType::f32 : dtype());
  Tensor block(max_block, dtype());
  for (const int g : order) {
    const std::vector<int>& coords = members[g].second;
    if (block_bytes > 0) std::memcpy(block.raw(), all.data() + block_bytes * g, block_bytes);
    Tensor extracted;  // an uneven block, cut from the front of its buffer (an even one is read in place)
    if (!even) {
      extracted = extract_block(block, std::vector<std::int64_t>(max_block.size(), 0),
                                local_shape(spec_, shape, global_shape_, coords));
    }
    const Tensor& own = even ? block : extracted;
    auto offsets = tessera::block_offsets(spec_, shape, global_shape_, coords);
    if (widen) {
      add_block(global, own.astype(DType::f32), offsets);
    } else if (spec_.is_partial()) {
      add_block(global, own, offsets);
    } else {
      insert_block(global, own, offsets);
    }
  }
  return widen ? global.astype(DType::bf16) : global;
}

std::string ShardedTensor::describe() const {
  std::ostringstream out;
  if (!name_.empty()) out << name_ << ": ";
  out << dtype_name(dtype()) << shape_to_string(global_shape_) << ' ' << spec_.to_string();
  return out.str();
}

std::string ShardedTensor::picture() const {
  const MeshShape& shape = mesh_.shape();
  std::ostringstream out;
  out << describe() << " on " << mesh_.to_string() << '\n';
  if (ndim() > 2) {
    out << "(no picture for tensors of " << ndim() << " dimensions)\n";
    return out.str();
  }
  const int rows = ndim() == 2 ? shard_count(spec_, shape, 0) : 1;
  const int cols = ndim() == 0 ? 1 : shard_count(spec_, shape, ndim() - 1);
  std::vector<std::vector<std::string>> cells(rows, std::vector<std::string>(cols));
  // Uneven blocks: each cell also names its block's shape ("0,4 16x3").
  const bool uneven = !splits_evenly(spec_, shape, global_shape_);
  std::vector<std::vector<std::string>> sizes(rows, std::vector<std::string>(cols));
  for (int r = 0; r < shape.size(); ++r) {
    auto coords = shape.coords_of(r);
    int row = ndim() == 2 ? block_index(spec_, shape, 0, coords) : 0;
    int col = ndim() == 0 ? 0 : block_index(spec_, shape, ndim() - 1, coords);
    auto& cell = cells[row][col];
    cell += (cell.empty() ? "" : ",") + std::to_string(r);
    if (uneven && sizes[row][col].empty()) {
      const Shape block = local_shape(spec_, shape, global_shape_, coords);
      for (std::size_t d = 0; d < block.size(); ++d) sizes[row][col] += (d ? "x" : " ") + std::to_string(block[d]);
    }
  }
  for (int row = 0; row < rows; ++row) {
    for (int col = 0; col < cols; ++col) cells[row][col] += sizes[row][col];
  }
  std::size_t width = 5;
  for (const auto& row : cells) {
    for (const auto& c : row) width = std::max(width, c.size() + 2);
  }
  std::string rule = "+";
  for (int c = 0; c < cols; ++c) rule += std::string(width, '-') + "+";
  out << rule << '\n';
  for (const auto& row : cells) {
    out << '|';
    for (const auto& c : row) {
      std::size_t left = (width - c.size()) / 2;
      out << std::string(left, ' ') << c << std::string(width - c.size() - left, ' ') << '|';
    }
    out << '\n' << rule << '\n';
  }
  if (spec_.is_partial()) {
    out << "partial over";
    for (const auto& a : spec_.partial) out << ' ' << a;
    out << ": each cell's value is the sum of its ranks' blocks\n";
  }
  return out.str();
}

}  // namespace tessera
