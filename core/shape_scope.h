// Shape checking against seqax shape strings ("batch/data embed 8"): the first time a dimension
// name is seen in a scope it binds its GLOBAL size, every later use must agree. Scopes nest on a
// thread-local stack, so a layer can bind its own names without leaking them to its caller.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/mesh_shape.h"
#include "core/shape.h"
#include "core/spec.h"

namespace tessera {

// Opens a shape-checking scope for its lifetime (RAII). Lookups see the bindings of every enclosing
// scope; new bindings go to the innermost scope and vanish when it closes. An `isolated` scope hides
// the enclosing bindings (seqax's `Scope()`), so a callee may reuse names that mean something else
// to its caller. Scopes are per thread and must close in reverse order of opening, which stack
// (automatic) objects guarantee; the class can be neither copied nor moved for that reason.
class ShapeScope {
 public:
  enum class Visibility { nested, isolated };

  explicit ShapeScope(Visibility visibility = Visibility::nested);
  ~ShapeScope();
  ShapeScope(const ShapeScope&) = delete;
  ShapeScope& operator=(const ShapeScope&) = delete;

 private:
  std::size_t depth_;  // the stack size this scope leaves behind when it closes
};

// The number of scopes open on this thread.
int shape_scope_depth();

// The size bound to `name` in the visible scopes, or nullopt.
std::optional<std::int64_t> bound_size(std::string_view name);

// Binds `name` to `size` in the innermost scope, or checks it when the name is already visible
// (ShapeError "dimension batch: expected 8, got 16" on a mismatch). Throws ShapeError when no scope
// is open (the binding would vanish at once) or the name is empty or the size negative.
void bind(std::string_view name, std::int64_t size, std::string_view what = "");

// Checks a GLOBAL shape: same rank as `shape`, explicit sizes equal, named dimensions bound or
// consistent with their bindings. Mesh axes in `shape` are not looked at. `what` names the tensor or
// argument in messages. A check is all or nothing: when it throws, it has bound nothing. Without an
// open scope the check runs in a temporary scope, so it only checks the shape against itself
// (explicit sizes, a name used twice).
void check_global(const ShapeString& shape, const Shape& global, std::string_view what = "");

// As above, and the mesh axes must exist and appear once (SpecError). Any size is valid: a
// dimension its axes do not divide splits by the block rule of core/spec.h.
void check_global(const ShapeString& shape, const Shape& global, const MeshShape& mesh, std::string_view what = "");

// Checks the LOCAL shard of a tensor whose blocks all have one shape (shard_map's bodies): a
// dimension `name/a/b` of local size n has global size n * size(a) * size(b), which is what gets
// bound or compared. When the expected global size does
// not divide over the axes, the message says so. Unknown or repeated axes: SpecError.
void check_local(const ShapeString& shape, const Shape& local, const MeshShape& mesh, std::string_view what = "");

}  // namespace tessera
