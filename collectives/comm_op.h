// The one vocabulary of data movement: every way tessera moves a block, the local steps of a
// reshard plan and the collectives, as one enum. The collectives record it (CommRecord), the
// planner plans with it and prices it with send_bytes below (ReshardStep), explain and the byte
// tables print it, tests compare it. Adding a kind means one new enumerator: every switch over
// CommOp has no default, and the build turns a missing case into an error (-Werror=switch).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string_view>

namespace tessera {

enum class CommOp : std::uint8_t {
  // Local steps of a reshard plan: no communication, 0 bytes.
  slice,  // replicated -> split: keep this rank's block
  zero,   // replicated -> partial: coordinate 0 keeps the value, the others hold zeros
  pad,    // split -> partial: the block zero-padded to the whole dimension
  // Collectives over mesh axes (collectives/collectives.h).
  all_gather,
  reduce_scatter,
  all_to_all,
  all_reduce,
  broadcast,
  permute,       // one block to at most one other rank (jax.lax.ppermute)
  redistribute,  // reshard's general relayout: every element moves at most once
};

// "all_gather", ..., the names the byte records, explain and the metrics print.
std::string_view to_string(CommOp op);
// The inverse of to_string; nullopt for any other text.
std::optional<CommOp> comm_op_from_string(std::string_view name);
std::ostream& operator<<(std::ostream& os, CommOp op);

// True for the collectives, false for the local steps.
bool communicates(CommOp op);

// The bytes one rank sends, by the convention of collectives/comm_stats.h: `group` is the
// product of the sizes of the collective's axes, `block_bytes` the bytes of this rank's input
// block (permute, redistribute: the bytes this rank sends to other ranks, which only the caller
// knows). 0 for the local steps and for a group of one.
std::int64_t send_bytes(CommOp op, std::int64_t group, std::int64_t block_bytes);

}  // namespace tessera
