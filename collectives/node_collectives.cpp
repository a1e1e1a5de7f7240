// Collectives through shared memory on one node (node_collectives.h).
#include "collectives/node_collectives.h"

#include <cstring>

#include "collectives/ordered_reduce.h"

namespace tessera::detail {

namespace {

// Blocks up to this size are combined whole by every rank after one barrier; larger ones are
// split among the ranks, each combining its share, and gathered after a second barrier (each
// rank then reads the block about twice, not n times).
constexpr std::int64_t kOneRoundBytes = std::int64_t{16} << 10;

// A reduce-scatter's second half, once this rank's pieces are in its slot: after the barrier,
// recv = the sum over ranks, in rank order, of the `count` elements at `offset` bytes into each
// rank's slot.
void sum_my_piece(NodeChannel& channel, std::int64_t offset, void* recv, std::int64_t count, DType dtype) {
  channel.barrier();
  if (count == 0) return;
  const auto item = static_cast<std::int64_t>(dtype_size(dtype));
  combine_pieces(channel.previous_region() + offset, channel.slot_bytes() / item, recv, count, channel.size(), dtype,
                 ReduceOp::sum);
}

}  // namespace

bool node_all_reduce(const void* send, void* recv, std::int64_t count, DType dtype, const Communicator& comm,
                     ReduceOp op) {
  NodeChannel* channel = comm.node_channel();
  const auto item = static_cast<std::int64_t>(dtype_size(dtype));
  const std::int64_t bytes = count * item;
  if (channel == nullptr || !channel->carries(bytes)) return false;
  const int n = channel->size();
  const std::int64_t stride = channel->slot_bytes() / item;
  std::memcpy(channel->slot(), send, static_cast<std::size_t>(bytes));
  channel->barrier();
  if (bytes <= kOneRoundBytes) {
    combine_pieces(channel->previous_region(), stride, recv, count, n, dtype, op);
    return true;
  }
  // This rank's share of the elements, combined into the next region at the same offset.
  const int me = channel->rank();
  const std::int64_t begin = count * me / n, end = count * (me + 1) / n;
  if (end > begin) {
    combine_pieces(channel->previous_region() + begin * item, stride, channel->region() + begin * item, end - begin,
                   n, dtype, op);
  }
  channel->barrier();
  std::memcpy(recv, channel->previous_region(), static_cast<std::size_t>(bytes));
  return true;
}

bool node_all_gather(const void* send, void* recv, const BlockLayout& layout, const Communicator& comm) {
  NodeChannel* channel = comm.node_channel();
  const std::int64_t bytes = layout.block_bytes();
  if (channel == nullptr || !channel->carries(bytes)) return false;
  // Blocks packed one after another: the region reads as [n][block].
  std::memcpy(channel->region() + channel->rank() * bytes, send, static_cast<std::size_t>(bytes));
  channel->barrier();
  if (layout.consecutive()) {
    std::memcpy(recv, channel->previous_region(), static_cast<std::size_t>(bytes * channel->size()));
  } else {
    unpack_blocks(channel->previous_region(), recv, layout);
  }
  return true;
}

bool node_all_gather_in_place(void* whole, const std::vector<std::int64_t>& starts,
                              const std::vector<std::int64_t>& sizes, const Communicator& comm) {
  NodeChannel* channel = comm.node_channel();
  if (channel == nullptr) return false;
  const int n = channel->size(), me = channel->rank();
  const std::int64_t total = starts[n - 1] + sizes[n - 1];
  // The pieces lie in the region at their offsets in `whole` (the same total on every rank).
  if (total > channel->slot_bytes() * n) return false;
  auto* out = static_cast<std::byte*>(whole);
  std::memcpy(channel->region() + starts[me], out + starts[me], static_cast<std::size_t>(sizes[me]));
  channel->barrier();
  const std::byte* region = channel->previous_region();
  std::memcpy(out, region, static_cast<std::size_t>(starts[me]));
  const std::int64_t after = starts[me] + sizes[me];
  std::memcpy(out + after, region + after, static_cast<std::size_t>(total - after));
  return true;
}

bool node_reduce_scatter(const void* send, void* recv, const std::vector<int>& counts, DType dtype,
                         const Communicator& comm) {
  NodeChannel* channel = comm.node_channel();
  if (channel == nullptr) return false;
  const auto item = static_cast<std::int64_t>(dtype_size(dtype));
  std::int64_t total = 0, offset = 0;
  const int me = channel->rank();
  for (int k = 0; k < static_cast<int>(counts.size()); ++k) {
    if (k == me) offset = total;
    total += counts[k];
  }
  if (!channel->carries(total * item)) return false;
  std::memcpy(channel->slot(), send, static_cast<std::size_t>(total * item));
  sum_my_piece(*channel, offset * item, recv, counts[me], dtype);
  return true;
}

bool node_reduce_scatter_blocks(const void* send, const BlockLayout& layout, void* recv, DType dtype,
                                const Communicator& comm) {
  NodeChannel* channel = comm.node_channel();
  const std::int64_t piece = layout.block_bytes();
  if (channel == nullptr || !channel->carries(piece * layout.n)) return false;
  if (layout.consecutive()) {
    std::memcpy(channel->slot(), send, static_cast<std::size_t>(piece * layout.n));
  } else {
    pack_blocks(send, channel->slot(), layout);
  }
  const auto item = static_cast<std::int64_t>(dtype_size(dtype));
  sum_my_piece(*channel, channel->rank() * piece, recv, piece / item, dtype);
  return true;
}

bool node_all_to_all(const void* send, const BlockLayout& send_layout, void* recv, const BlockLayout& recv_layout,
                     const Communicator& comm) {
  NodeChannel* channel = comm.node_channel();
  const std::int64_t piece = send_layout.block_bytes();
  const int n = send_layout.n;
  if (channel == nullptr || !channel->carries(piece * n)) return false;
  // This rank's pieces, block-major, in its slot.
  if (send_layout.consecutive()) {
    std::memcpy(channel->slot(), send, static_cast<std::size_t>(piece * n));
  } else {
    pack_blocks(send, channel->slot(), send_layout);
  }
  channel->barrier();
  const std::byte* region = channel->previous_region();
  const std::int64_t from_me = channel->rank() * piece;  // where rank k's piece for this rank lies in its slot
  Tensor packed;
  auto* out = static_cast<std::byte*>(recv);
  if (!recv_layout.consecutive()) {
    packed = scratch_buffer(piece * n);
    out = static_cast<std::byte*>(packed.raw());
  }
  for (int k = 0; k < n; ++k) {
    std::memcpy(out + k * piece, region + k * channel->slot_bytes() + from_me, static_cast<std::size_t>(piece));
  }
  if (!recv_layout.consecutive()) unpack_blocks(out, recv, recv_layout);
  return true;
}

}  // namespace tessera::detail
