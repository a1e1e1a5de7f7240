// The general redistribution between two specs with the same partial axes: box intersections of blocks,
// one MPI_Alltoallv of the boxes.
#include "collectives/redistribute.h"

#include <algorithm>
#include <cstring>

#include "collectives/collective_check.h"
#include "collectives/comm_stats.h"
#include "collectives/layout.h"
#include "mesh/mpi_check.h"

namespace tessera::detail {

std::int64_t Box::numel() const { return tessera::numel(shape); }

Axes redistribute_axes(const MeshShape& mesh, const Spec& from, const Spec& to) {
  Axes out;
  for (const auto& axis : mesh.names()) {
    if (from.dim_of(axis) >= 0 || to.dim_of(axis) >= 0) out.push_back(axis);
  }
  return out;
}

namespace {

// The intersection of two boxes; false when empty.
bool intersect(const std::vector<std::int64_t>& a_off, const Shape& a_shape, const std::vector<std::int64_t>& b_off,
               const Shape& b_shape, std::vector<std::int64_t>* lo, Shape* extent) {
  const std::size_t r = a_off.size();
  lo->assign(r, 0);
  extent->assign(r, 0);
  for (std::size_t d = 0; d < r; ++d) {
    std::int64_t begin = std::max(a_off[d], b_off[d]);
    std::int64_t end = std::min(a_off[d] + a_shape[d], b_off[d] + b_shape[d]);
    if (begin >= end) return false;
    (*lo)[d] = begin;
    (*extent)[d] = end - begin;
  }
  return true;
}

std::vector<std::int64_t> minus(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
  std::vector<std::int64_t> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] - b[i];
  return out;
}

}  // namespace

RedistributeBoxes redistribute_boxes(const MeshShape& mesh, const Spec& from, const Spec& to, const Shape& global,
                               const std::vector<int>& coords) {
  const Axes axes = redistribute_axes(mesh, from, to);
  std::vector<int> from_replicated;  // mesh indices of redistribute axes that `from` does not split
  for (const auto& a : axes) {
    if (from.dim_of(a) < 0) from_replicated.push_back(mesh.axis_index(a));
  }
  const int group = mesh.axes_size(axes);
  const Shape from_shape = local_shape(from, mesh, global, coords);
  const Shape to_shape = local_shape(to, mesh, global, coords);
  const auto my_from = block_offsets(from, mesh, global, coords);
  const auto my_to = block_offsets(to, mesh, global, coords);
  RedistributeBoxes out;
  std::vector<std::int64_t> lo;
  Shape extent;
  for (int p = 0; p < group; ++p) {
    const std::vector<int> peer = mesh.group_member(coords, axes, p);
    // The holder of a box agrees with its receiver on the axes `from` replicates; the
    // condition is symmetric, so it decides both directions.
    bool holder = true;
    for (int a : from_replicated) holder = holder && peer[a] == coords[a];
    if (!holder) continue;
    const auto peer_to = block_offsets(to, mesh, global, peer);
    if (intersect(my_from, from_shape, peer_to, local_shape(to, mesh, global, peer), &lo, &extent)) {
      out.sends.push_back({p, minus(lo, my_from), minus(lo, peer_to), extent});
    }
    const auto peer_from = block_offsets(from, mesh, global, peer);
    if (intersect(peer_from, local_shape(from, mesh, global, peer), my_to, to_shape, &lo, &extent)) {
      out.receives.push_back({p, minus(lo, peer_from), minus(lo, my_to), extent});
    }
  }
  return out;
}

std::vector<std::vector<std::int64_t>> redistribute_matrix(const MeshShape& mesh, const Spec& from, const Spec& to,
                                                       const Shape& global) {
  const Axes axes = redistribute_axes(mesh, from, to);
  const int group = mesh.axes_size(axes);
  std::vector<int> from_replicated;
  for (const auto& a : axes) {
    if (from.dim_of(a) < 0) from_replicated.push_back(mesh.axis_index(a));
  }
  std::vector<std::vector<int>> coords(group);
  std::vector<std::vector<std::int64_t>> from_at(group), to_at(group);
  std::vector<Shape> from_shape(group), to_shape(group);
  for (int p = 0; p < group; ++p) {
    coords[p] = mesh.group_member(std::vector<int>(mesh.ndim(), 0), axes, p);
    from_at[p] = block_offsets(from, mesh, global, coords[p]);
    to_at[p] = block_offsets(to, mesh, global, coords[p]);
    from_shape[p] = local_shape(from, mesh, global, coords[p]);
    to_shape[p] = local_shape(to, mesh, global, coords[p]);
  }
  std::vector<std::vector<std::int64_t>> out(group, std::vector<std::int64_t>(group, 0));
  std::vector<std::int64_t> lo;
  Shape extent;
  for (int s = 0; s < group; ++s) {
    for (int q = 0; q < group; ++q) {
      bool holder = true;
      for (int a : from_replicated) holder = holder && coords[s][a] == coords[q][a];
      if (holder && intersect(from_at[s], from_shape[s], to_at[q], to_shape[q], &lo, &extent)) out[s][q] = numel(extent);
    }
  }
  return out;
}

bool redistribute_is_permutation(const MeshShape& mesh, const Spec& from, const Spec& to, const Shape& global,
                             std::vector<std::pair<int, int>>* pairs) {
  // Uneven blocks differ in shape from rank to rank: a whole-block exchange is a permutation only
  // between blocks of one shape, which even splits guarantee.
  if (!splits_evenly(from, mesh, global) || !splits_evenly(to, mesh, global)) return false;
  const Shape from_shape = max_local_shape(from, mesh, global);
  if (from_shape != max_local_shape(to, mesh, global)) return false;
  const std::int64_t whole = numel(from_shape);
  const auto matrix = redistribute_matrix(mesh, from, to, global);
  const int group = static_cast<int>(matrix.size());
  pairs->clear();
  std::vector<int> sources(group, 0);
  for (int s = 0; s < group; ++s) {
    int destinations = 0;
    for (int q = 0; q < group; ++q) {
      if (matrix[s][q] == 0) continue;
      if (matrix[s][q] != whole) return false;
      ++destinations;
      ++sources[q];
      pairs->emplace_back(s, q);
    }
    if (destinations > 1) return false;
  }
  return std::all_of(sources.begin(), sources.end(), [](int n) { return n == 1; });
}

Tensor redistribute(const Mesh& mesh, const Spec& from, const Spec& to, const Shape& global, const Tensor& local) {
  const detail::CollectiveCheck checked(mesh, [&] {
    return "redistribute of " + std::string(dtype_name(local.dtype())) + shape_to_string(global) + " from " + from.to_string() +
           " to " + to.to_string();
  });
  const CommTimer timer;  // this rank's time inside collectives (CommStats::seconds)
  const Axes axes = redistribute_axes(mesh.shape(), from, to);
  const Communicator& comm = mesh.axes_comm(axes);
  const int group = comm.size();
  const int me = comm.rank();
  const auto boxes = redistribute_boxes(mesh.shape(), from, to, global, mesh.coords());
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(local.dtype()));
  Tensor out = Tensor::empty(local_shape(to, mesh.shape(), global, mesh.coords()), local.dtype());

  // Counts and displacements are in elements (a contiguous type of one element's bytes), so a
  // rank may send and receive up to 2^31 - 1 elements in all, not 2^31 - 1 bytes.
  // Each rank's boxes are its own: the count checks may fail on some ranks only (check_this_rank).
  std::vector<int> send_counts(group, 0), send_displs(group, 0), recv_counts(group, 0), recv_displs(group, 0);
  std::int64_t send_total = 0, recv_total = 0;  // elements
  check_this_rank(mesh, "reshard (redistribute)", [&] {
    for (const auto& box : boxes.sends) {
      if (box.peer == me) continue;
      send_counts[box.peer] = checked_count(box.numel(), "reshard (redistribute)");
      send_total += box.numel();
    }
    for (const auto& box : boxes.receives) {
      if (box.peer == me) continue;
      recv_counts[box.peer] = checked_count(box.numel(), "reshard (redistribute)");
      recv_total += box.numel();
    }
    checked_count(std::max(send_total, recv_total), "reshard (redistribute)");
  });
  for (int p = 1; p < group; ++p) {
    send_displs[p] = send_displs[p - 1] + send_counts[p - 1];
    recv_displs[p] = recv_displs[p - 1] + recv_counts[p - 1];
  }
  CommStats::global().record({CommOp::redistribute, axes, -1, send_bytes(CommOp::redistribute, group, send_total * elem)});

  Tensor send_buffer = scratch_buffer(send_total * elem);
  Tensor recv_buffer = scratch_buffer(recv_total * elem);
  for (const auto& box : boxes.sends) {
    Tensor data = extract_block(local, box.at_from, box.shape);
    if (box.peer == me) {
      // My own box: the receive list has its place in my new block.
      insert_block(out, data, box.at_to);
    } else {
      std::memcpy(static_cast<std::byte*>(send_buffer.raw()) + send_displs[box.peer] * elem, data.raw(), data.nbytes());
    }
  }
  const MpiType element = contiguous_type(elem, "reshard (redistribute)");
  check_mpi(MPI_Alltoallv(send_buffer.raw(), send_counts.data(), send_displs.data(), element.get(), recv_buffer.raw(),
                          recv_counts.data(), recv_displs.data(), element.get(), comm.handle()),
            "MPI_Alltoallv (reshard redistribute)");
  for (const auto& box : boxes.receives) {
    if (box.peer == me) continue;
    Tensor data = Tensor::empty(box.shape, local.dtype());
    std::memcpy(data.raw(), static_cast<const std::byte*>(recv_buffer.raw()) + recv_displs[box.peer] * elem,
                data.nbytes());
    insert_block(out, data, box.at_to);
  }
  return out;
}

}  // namespace tessera::detail
