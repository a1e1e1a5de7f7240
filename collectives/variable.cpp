// The collectives on uneven blocks (variable counts): MPI_Allgatherv, an MPI_Alltoallv summed in
// rank order (ordered_reduce.h) and MPI_Alltoallv over blocks packed block-major. Blocks of equal extent take the equal-block
// collectives of all_gather.cpp, reduce_scatter.cpp and all_to_all.cpp instead.
#include <algorithm>
#include <cstring>
#include <string>

#include "collectives/ordered_reduce.h"
#include "collectives/collective_check.h"
#include "core/text.h"
#include "collectives/collectives.h"
#include "collectives/comm_stats.h"
#include "collectives/layout.h"
#include "collectives/node_collectives.h"
#include "core/error.h"
#include "mesh/mpi_check.h"

namespace tessera::detail {

VarLayout var_layout(const Shape& shape, DType dtype, int dim, std::vector<std::int64_t> extents, std::string_view what) {
  const int ndim = static_cast<int>(shape.size());
  if (dim < 0 || dim >= ndim) {
    throw ShapeError(std::string(what) + ": dimension " + std::to_string(dim) + " out of range for a tensor of shape " +
                     shape_to_string(shape));
  }
  VarLayout layout;
  layout.extents = std::move(extents);
  layout.starts.resize(layout.extents.size());
  for (std::size_t k = 0; k < layout.extents.size(); ++k) {
    if (layout.extents[k] < 0) {
      throw ShapeError(std::string(what) + ": negative block extent " + std::to_string(layout.extents[k]));
    }
    layout.starts[k] = layout.total;
    layout.total += layout.extents[k];
  }
  if (layout.total != shape[dim]) {
    throw ShapeError(std::string(what) + ": blocks of extents " + shape_to_string(layout.extents) + " along dimension " +
                     std::to_string(dim) + " do not make up its size " + std::to_string(shape[dim]) + " in shape " +
                     shape_to_string(shape));
  }
  for (int d = 0; d < dim; ++d) layout.outer *= shape[d];
  layout.row = static_cast<std::int64_t>(dtype_size(dtype));
  for (int d = dim + 1; d < ndim; ++d) layout.row *= shape[d];
  return layout;
}

void pack_var(const void* src, void* dst, const VarLayout& layout) {
  auto* in = static_cast<const std::byte*>(src);
  auto* out = static_cast<std::byte*>(dst);
  for (int k = 0; k < layout.n(); ++k) {
    const auto run = static_cast<std::size_t>(layout.extents[k] * layout.row);
    if (run == 0) continue;
    for (std::int64_t o = 0; o < layout.outer; ++o) {
      std::memcpy(out, in + (o * layout.total + layout.starts[k]) * layout.row, run);
      out += run;
    }
  }
}

void unpack_var(const void* src, void* dst, const VarLayout& layout) {
  auto* in = static_cast<const std::byte*>(src);
  auto* out = static_cast<std::byte*>(dst);
  for (int k = 0; k < layout.n(); ++k) {
    const auto run = static_cast<std::size_t>(layout.extents[k] * layout.row);
    if (run == 0) continue;
    for (std::int64_t o = 0; o < layout.outer; ++o) {
      std::memcpy(out + (o * layout.total + layout.starts[k]) * layout.row, in, run);
      in += run;
    }
  }
}

bool all_equal(const std::vector<std::int64_t>& extents) {
  return std::adjacent_find(extents.begin(), extents.end(), std::not_equal_to<>()) == extents.end();
}

namespace {

// Counts and displacements of `units` per block, as MPI ints.
void counts_and_displs(const std::vector<std::int64_t>& units, std::vector<int>* counts, std::vector<int>* displs,
                       std::string_view what) {
  counts->resize(units.size());
  displs->resize(units.size());
  std::int64_t at = 0;
  for (std::size_t k = 0; k < units.size(); ++k) {
    (*counts)[k] = checked_count(units[k], what);
    (*displs)[k] = checked_count(at, what);
    at += units[k];
  }
  checked_count(at, what);
}

void check_my_extent(const Tensor& local, int dim, const std::vector<std::int64_t>& extents, int n, int me,
                     std::string_view what) {
  if (static_cast<int>(extents.size()) != n) {
    throw ShapeError(std::string(what) + ": " + std::to_string(extents.size()) + " block extents for a group of " +
                     std::to_string(n) + " ranks");
  }
  if (dim < 0 || dim >= local.ndim()) {
    throw ShapeError(std::string(what) + ": dimension " + std::to_string(dim) + " out of range for a tensor of shape " +
                     shape_to_string(local.shape()));
  }
  if (local.shape()[dim] != extents[me]) {
    throw ShapeError(std::string(what) + ": this rank's block has extent " + std::to_string(local.shape()[dim]) +
                     " along dimension " + std::to_string(dim) + ", expected " + std::to_string(extents[me]) +
                     " (block extents " + shape_to_string(extents) + ")");
  }
}

}  // namespace

}  // namespace tessera::detail

namespace tessera {

using detail::VarLayout;

Tensor all_gather(const Mesh& mesh, const Tensor& local, const Axes& axes, int dim,
                  const std::vector<std::int64_t>& extents) {
  const detail::CollectiveCheck checked(mesh, [&] {
    return "all_gather over " + parenthesized(axes) + " of " + detail::blocks_text(local) + " along dimension " +
           std::to_string(dim) + " of extents " + shape_to_string(extents);
  });
  const Communicator& comm = mesh.axes_comm(axes);
  const int n = comm.size();
  detail::check_this_rank(mesh, "all_gather",
                          [&] { detail::check_my_extent(local, dim, extents, n, comm.rank(), "all_gather"); });
  if (detail::all_equal(extents)) return all_gather(mesh, local, axes, dim);
  const CommTimer timer;
  Shape out_shape = local.shape();
  out_shape[dim] = 0;
  for (auto e : extents) out_shape[dim] += e;
  const VarLayout layout = detail::var_layout(out_shape, local.dtype(), dim, extents, "all_gather");
  const std::int64_t bytes = static_cast<std::int64_t>(local.nbytes());
  CommStats::global().record({CommOp::all_gather, axes, dim, (n - 1) * bytes});
  Tensor out = Tensor::empty(out_shape, local.dtype());
  if (layout.row == 0 || out.numel() == 0) return out;
  std::vector<std::int64_t> rows(n);
  for (int k = 0; k < n; ++k) rows[k] = layout.outer * extents[k];
  std::vector<int> counts, displs;
  detail::counts_and_displs(rows, &counts, &displs, "all_gather");
  const detail::MpiType row = detail::contiguous_type(layout.row, "all_gather");
  Tensor packed;
  void* recv = out.raw();
  if (!layout.consecutive()) {
    packed = detail::scratch_buffer(static_cast<std::int64_t>(out.nbytes()));
    recv = packed.raw();
  }
  check_mpi(MPI_Allgatherv(local.raw(), counts[comm.rank()], row.get(), recv, counts.data(), displs.data(), row.get(),
                           comm.handle()),
            "MPI_Allgatherv (all_gather)");
  if (!layout.consecutive()) detail::unpack_var(packed.raw(), out.raw(), layout);
  return out;
}

void all_gather_in_place(const Mesh& mesh, Tensor& whole, const Axes& axes, int dim,
                         const std::vector<std::int64_t>& extents) {
  const detail::CollectiveCheck checked(mesh, [&] {
    return "all_gather_in_place over " + parenthesized(axes) + " of " + detail::blocks_text(whole) +
           " along dimension " + std::to_string(dim) + " of extents " + shape_to_string(extents);
  });
  const Communicator& comm = mesh.axes_comm(axes);
  const int n = comm.size();
  const VarLayout layout = detail::var_layout(whole.shape(), whole.dtype(), dim, extents, "all_gather_in_place");
  if (layout.n() != n) {
    throw ShapeError("all_gather_in_place: " + std::to_string(layout.n()) + " block extents for a group of " +
                     std::to_string(n) + " ranks");
  }
  if (!layout.consecutive()) {
    throw ShapeError("all_gather_in_place: dimension " + std::to_string(dim) + " of shape " +
                     shape_to_string(whole.shape()) + " is not outermost (a dimension before it is longer than 1)");
  }
  const CommTimer timer;
  const int me = comm.rank();
  CommStats::global().record({CommOp::all_gather, axes, dim, (n - 1) * extents[me] * layout.row});
  if (n == 1 || layout.row == 0 || whole.numel() == 0) return;
  std::vector<std::int64_t> starts(n), sizes(n);
  for (int k = 0; k < n; ++k) {
    starts[k] = layout.starts[k] * layout.row;
    sizes[k] = extents[k] * layout.row;
  }
  if (detail::node_all_gather_in_place(whole.raw(), starts, sizes, comm)) return;
  std::vector<int> counts, displs;
  detail::counts_and_displs(extents, &counts, &displs, "all_gather_in_place");
  const detail::MpiType row = detail::contiguous_type(layout.row, "all_gather_in_place");
  check_mpi(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, whole.raw(), counts.data(), displs.data(), row.get(),
                           comm.handle()),
            "MPI_Allgatherv (all_gather_in_place)");
}

Tensor reduce_scatter(const Mesh& mesh, const Tensor& local, const Axes& axes, int dim,
                      const std::vector<std::int64_t>& extents) {
  const detail::CollectiveCheck checked(mesh, [&] {
    return "reduce_scatter over " + parenthesized(axes) + " of " + detail::blocks_text(local) + " along dimension " +
           std::to_string(dim) + " into extents " + shape_to_string(extents);
  });
  const Communicator& comm = mesh.axes_comm(axes);
  const int n = comm.size();
  const int me = comm.rank();
  const VarLayout layout = detail::var_layout(local.shape(), local.dtype(), dim, extents, "reduce_scatter");
  if (layout.n() != n) {
    throw ShapeError("reduce_scatter: " + std::to_string(layout.n()) + " block extents for a group of " +
                     std::to_string(n) + " ranks");
  }
  if (detail::all_equal(extents)) return reduce_scatter(mesh, local, axes, dim);
  const CommTimer timer;
  Shape out_shape = local.shape();
  out_shape[dim] = extents[me];
  Tensor out = Tensor::empty(out_shape, local.dtype());
  const std::int64_t bytes = static_cast<std::int64_t>(local.nbytes());
  CommStats::global().record({CommOp::reduce_scatter, axes, dim, bytes - static_cast<std::int64_t>(out.nbytes())});
  if (bytes == 0) return out;
  const void* send = local.raw();
  Tensor packed;
  if (!layout.consecutive()) {
    packed = detail::scratch_buffer(bytes);
    detail::pack_var(local.raw(), packed.raw(), layout);
    send = packed.raw();
  }
  // Element counts (the sum runs over elements).
  const std::int64_t elements_per_row = layout.row / static_cast<std::int64_t>(dtype_size(local.dtype()));
  std::vector<int> counts(n);
  for (int k = 0; k < n; ++k) counts[k] = detail::checked_count(layout.outer * extents[k] * elements_per_row, "reduce_scatter");
  detail::checked_count(local.numel(), "reduce_scatter");
  detail::reduce_scatter_ordered_v(send, out.raw(), counts, local.dtype(), comm);
  return out;
}

Tensor all_to_all(const Mesh& mesh, const Tensor& local, const Axes& axes, int split_dim,
                  const std::vector<std::int64_t>& split_extents, int concat_dim,
                  const std::vector<std::int64_t>& concat_extents) {
  const detail::CollectiveCheck checked(mesh, [&] {
    return "all_to_all over " + parenthesized(axes) + " of " + detail::blocks_text(local) + ", split dimension " +
           std::to_string(split_dim) + " into extents " + shape_to_string(split_extents) + ", concat dimension " +
           std::to_string(concat_dim) + " of extents " + shape_to_string(concat_extents);
  });
  const Communicator& comm = mesh.axes_comm(axes);
  const int n = comm.size();
  const int me = comm.rank();
  const VarLayout send_layout =
      detail::var_layout(local.shape(), local.dtype(), split_dim, split_extents, "all_to_all (split dimension)");
  if (send_layout.n() != n) {
    throw ShapeError("all_to_all: " + std::to_string(send_layout.n()) + " split extents for a group of " +
                     std::to_string(n) + " ranks");
  }
  detail::check_this_rank(mesh, "all_to_all", [&] {
    detail::check_my_extent(local, concat_dim, concat_extents, n, me, "all_to_all (concat dimension)");
  });
  if (split_dim == concat_dim) throw ShapeError("all_to_all: the split and concat dimensions are the same");
  if (detail::all_equal(split_extents) && detail::all_equal(concat_extents)) {
    return all_to_all(mesh, local, axes, split_dim, concat_dim);
  }
  const CommTimer timer;
  Shape out_shape = local.shape();
  out_shape[split_dim] = split_extents[me];
  out_shape[concat_dim] = 0;
  for (auto e : concat_extents) out_shape[concat_dim] += e;
  const VarLayout recv_layout = detail::var_layout(out_shape, local.dtype(), concat_dim, concat_extents, "all_to_all");
  const std::int64_t bytes = static_cast<std::int64_t>(local.nbytes());
  CommStats::global().record({CommOp::all_to_all, axes, split_dim, bytes - send_layout.block_bytes(me)});
  Tensor out = Tensor::empty(out_shape, local.dtype());
  // Counts in elements: a piece's rows differ between sender (split) and receiver (concat).
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(local.dtype()));
  std::vector<std::int64_t> send_units(n), recv_units(n);
  for (int k = 0; k < n; ++k) {
    send_units[k] = send_layout.block_bytes(k) / elem;
    recv_units[k] = recv_layout.block_bytes(k) / elem;
  }
  // A rank's totals differ from another's (its own rows of the split, its own share of the concat).
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
  detail::check_this_rank(mesh, "all_to_all", [&] {
    detail::counts_and_displs(send_units, &send_counts, &send_displs, "all_to_all");
    detail::counts_and_displs(recv_units, &recv_counts, &recv_displs, "all_to_all");
  });
  Tensor send = detail::scratch_buffer(bytes);
  if (bytes > 0) detail::pack_var(local.raw(), send.raw(), send_layout);
  Tensor recv = detail::scratch_buffer(static_cast<std::int64_t>(out.nbytes()));
  const detail::MpiType element = detail::contiguous_type(elem, "all_to_all");
  check_mpi(MPI_Alltoallv(send.raw(), send_counts.data(), send_displs.data(), element.get(), recv.raw(),
                          recv_counts.data(), recv_displs.data(), element.get(), comm.handle()),
            "MPI_Alltoallv (all_to_all)");
  if (out.numel() > 0) detail::unpack_var(recv.raw(), out.raw(), recv_layout);
  return out;
}

}  // namespace tessera
