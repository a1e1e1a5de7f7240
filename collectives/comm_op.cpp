// Names and the byte cost of each CommOp (collectives/comm_op.h).
#include "collectives/comm_op.h"

#include <ostream>

namespace tessera {

std::string_view to_string(CommOp op) {
  switch (op) {
    case CommOp::slice: return "slice";
    case CommOp::zero: return "zero";
    case CommOp::pad: return "pad";
    case CommOp::all_gather: return "all_gather";
    case CommOp::reduce_scatter: return "reduce_scatter";
    case CommOp::all_to_all: return "all_to_all";
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::broadcast: return "broadcast";
    case CommOp::permute: return "permute";
    case CommOp::redistribute: return "redistribute";
  }
  return "?";
}

std::optional<CommOp> comm_op_from_string(std::string_view name) {
  for (CommOp op : {CommOp::slice, CommOp::zero, CommOp::pad, CommOp::all_gather, CommOp::reduce_scatter,
                    CommOp::all_to_all, CommOp::all_reduce, CommOp::broadcast, CommOp::permute,
                    CommOp::redistribute}) {
    if (to_string(op) == name) return op;
  }
  return std::nullopt;
}

std::ostream& operator<<(std::ostream& os, CommOp op) { return os << to_string(op); }

bool communicates(CommOp op) {
  switch (op) {
    case CommOp::slice:
    case CommOp::zero:
    case CommOp::pad:
      return false;
    case CommOp::all_gather:
    case CommOp::reduce_scatter:
    case CommOp::all_to_all:
    case CommOp::all_reduce:
    case CommOp::broadcast:
    case CommOp::permute:
    case CommOp::redistribute:
      return true;
  }
  return true;
}

std::int64_t send_bytes(CommOp op, std::int64_t group, std::int64_t block_bytes) {
  const std::int64_t n = group, b = block_bytes;
  if (n <= 1) return 0;
  switch (op) {
    case CommOp::slice:
    case CommOp::zero:
    case CommOp::pad:
      return 0;
    case CommOp::all_gather:
      return (n - 1) * b;  // my block to each of the others
    case CommOp::reduce_scatter:
    case CommOp::all_to_all:
      return (n - 1) * (b / n);  // every block but my own share
    case CommOp::all_reduce:
      return 2 * (n - 1) * b / n;  // a reduce-scatter then an all-gather, rounded down
    case CommOp::broadcast:
      return b;  // a pipelined chain forwards the whole message
    case CommOp::permute:
    case CommOp::redistribute:
      return b;  // the caller's count of what leaves this rank
  }
  return 0;
}

}  // namespace tessera
