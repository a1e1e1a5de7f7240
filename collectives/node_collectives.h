// Collectives through a communicator's node channel (mesh/node_channel.h): one or two barriers
// instead of MPI's rounds of messages, for blocks up to the channel's slot_bytes() when every rank
// of the communicator runs on one node. Each function returns false, having done nothing, when
// the communicator has no channel or the block is larger than it carries; the answer is the same
// on every rank (the channel and the block sizes are). Reductions sum in rank order, the same
// bits as ordered_reduce.h. Internal to the collectives layer.
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/layout.h"
#include "mesh/communicator.h"

namespace tessera::detail {

// recv = the combination over ranks, in rank order, of every rank's `count` elements at send
// (send may equal recv).
bool node_all_reduce(const void* send, void* recv, std::int64_t count, DType dtype, const Communicator& comm,
                     ReduceOp op);
// recv (laid out as `layout`: n blocks of layout.block_bytes()) receives every rank's block.
bool node_all_gather(const void* send, void* recv, const BlockLayout& layout, const Communicator& comm);
// `whole` holds n pieces one after another, rank k's `sizes[k]` bytes at `starts[k]` (starts
// increasing, the pieces adjacent); this rank's is in place: every other rank's is copied in.
bool node_all_gather_in_place(void* whole, const std::vector<std::int64_t>& starts,
                              const std::vector<std::int64_t>& sizes, const Communicator& comm);
// send is piece k (counts[k] elements) for rank k, consecutively; recv = the sum over ranks, in
// rank order, of their piece for this rank.
bool node_reduce_scatter(const void* send, void* recv, const std::vector<int>& counts, DType dtype,
                         const Communicator& comm);
// send is laid out as `layout` (n blocks; packed straight into this rank's slot when they are not
// consecutive, with no buffer between); recv = the sum over ranks, in rank order, of their block
// for this rank.
bool node_reduce_scatter_blocks(const void* send, const BlockLayout& layout, void* recv, DType dtype,
                                const Communicator& comm);
// send is laid out as send_layout (n blocks), recv as recv_layout (n blocks of the same bytes):
// block k of send goes to rank k, and block k of recv comes from rank k.
bool node_all_to_all(const void* send, const BlockLayout& send_layout, void* recv, const BlockLayout& recv_layout,
                     const Communicator& comm);

}  // namespace tessera::detail
