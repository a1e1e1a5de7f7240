// The shape-checking scope: a thread-local stack of name -> global size tables, and the checks of
// global and local shapes against seqax shape strings that read and extend it.

#include "core/shape_scope.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/text.h"

namespace tessera {
namespace {

struct Binding {
  std::int64_t size;
  std::string origin;  // the tensor or argument that bound it, for messages
};

struct Frame {
  std::map<std::string, Binding, std::less<>> bindings;
  bool isolated = false;
};

// Thread-local because checks run inside whatever thread computes the tensor; a scope opened on
// one thread must not see or leak names of another.
thread_local std::vector<Frame> frames;

const Binding* find_binding(std::string_view name) {
  for (auto frame = frames.rbegin(); frame != frames.rend(); ++frame) {
    const auto found = frame->bindings.find(name);
    if (found != frame->bindings.end()) return &found->second;
    if (frame->isolated) break;
  }
  return nullptr;
}

std::string mismatch(std::string_view label, std::int64_t expected, std::int64_t got) {
  return "dimension " + std::string(label) + ": expected " + std::to_string(expected) + ", got " + std::to_string(got);
}

// One check of a shape against a shape string. Bindings are collected as pending and committed
// only when every dimension passed, so a failed check leaves the scope as it was.
class Checker {
 public:
  Checker(const ShapeString& shape, const Shape& sizes, const MeshShape* mesh, bool local, std::string_view what)
      : shape_(shape), sizes_(sizes), mesh_(mesh), local_(local), what_(what) {}

  void run() {
    if (static_cast<int>(sizes_.size()) != shape_.ndim()) {
      fail<ShapeError>("rank " + std::to_string(sizes_.size()) + " does not match the shape string's rank " +
                       std::to_string(shape_.ndim()));
    }
    if (mesh_ != nullptr) check_axes();
    for (int d = 0; d < shape_.ndim(); ++d) check_dim(d);
    if (frames.empty()) return;  // a temporary scope: its bindings vanish right away
    for (auto& [name, size] : pending_) frames.back().bindings.emplace(name, Binding{size, std::string(what_)});
  }

 private:
  template <class E>
  [[noreturn]] void fail(const std::string& message) const {
    std::string where = what_.empty() ? "" : "'" + std::string(what_) + "' ";
    where += "(\"" + shape_.to_string() + "\", " + (local_ ? "local" : "global") + " shape " + shape_to_string(sizes_);
    if (mesh_ != nullptr) where += " on mesh " + mesh_->to_string();
    throw E(where + "): " + message);
  }

  std::string label(int d) const {
    const DimSpec& dim = shape_.dims[d];
    return dim.name.empty() ? std::to_string(d) : dim.name;
  }

  void check_axes() const {
    Axes seen;
    for (int d = 0; d < shape_.ndim(); ++d) {
      for (const std::string& axis : shape_.dims[d].axes) {
        if (!mesh_->has_axis(axis)) {
          fail<SpecError>("mesh axis '" + axis + "' of dimension " + label(d) + " is not in the mesh");
        }
        if (std::find(seen.begin(), seen.end(), axis) != seen.end()) {
          fail<SpecError>("mesh axis '" + axis + "' appears twice");
        }
        seen.push_back(axis);
      }
    }
  }

  void check_dim(int d) {
    const DimSpec& dim = shape_.dims[d];
    const std::int64_t size = sizes_[d];
    const std::int64_t ways = (mesh_ != nullptr && !dim.axes.empty()) ? mesh_->axes_size(dim.axes) : 1;
    const std::int64_t global = local_ ? size * ways : size;

    std::optional<std::int64_t> expected;
    std::string origin;
    if (dim.size.has_value()) {
      expected = dim.size;
    } else if (const auto found = pending_.find(dim.name); found != pending_.end()) {
      expected = found->second;
    } else if (const Binding* binding = find_binding(dim.name)) {
      expected = binding->size;
      origin = binding->origin;
    }
    if (!expected.has_value()) {
      pending_.emplace(dim.name, global);
      return;
    }
    if (*expected == global) return;

    std::string message = mismatch(label(d), *expected, global);
    if (local_ && ways > 1) {
      message += " (local " + std::to_string(size) + " times " + std::to_string(ways) + " over axes " +
                 parenthesized(dim.axes) + ")";
      if (*expected % ways != 0) {
        message += "; " + std::to_string(*expected) + " does not divide over axes " + parenthesized(dim.axes) +
                   " of size " + std::to_string(ways);
      }
    }
    if (!origin.empty()) message += "; " + dim.name + " was bound by '" + origin + "'";
    fail<ShapeError>(message);
  }

  const ShapeString& shape_;
  const Shape& sizes_;
  const MeshShape* mesh_;
  bool local_;
  std::string_view what_;
  std::map<std::string, std::int64_t, std::less<>> pending_;
};

}  // namespace

ShapeScope::ShapeScope(Visibility visibility) : depth_(frames.size()) {
  frames.push_back(Frame{{}, visibility == Visibility::isolated});
}

ShapeScope::~ShapeScope() {
  // resize, not pop_back: a scope closed out of order still takes the ones opened after it along.
  if (frames.size() > depth_) frames.resize(depth_);
}

int shape_scope_depth() { return static_cast<int>(frames.size()); }

std::optional<std::int64_t> bound_size(std::string_view name) {
  if (const Binding* binding = find_binding(name)) return binding->size;
  return std::nullopt;
}

void bind(std::string_view name, std::int64_t size, std::string_view what) {
  const std::string where = what.empty() ? "bind" : "bind '" + std::string(what) + "'";
  if (name.empty()) throw ShapeError(where + ": empty dimension name");
  if (size < 0) throw ShapeError(where + ": " + "dimension " + std::string(name) + " has negative size " + std::to_string(size));
  if (frames.empty()) {
    throw ShapeError(where + ": dimension " + std::string(name) + ": no shape scope is open (open a ShapeScope first)");
  }
  if (const Binding* binding = find_binding(name)) {
    if (binding->size == size) return;
    std::string message = where + ": " + mismatch(name, binding->size, size);
    if (!binding->origin.empty()) message += "; " + std::string(name) + " was bound by '" + binding->origin + "'";
    throw ShapeError(message);
  }
  frames.back().bindings.emplace(std::string(name), Binding{size, std::string(what)});
}

void check_global(const ShapeString& shape, const Shape& global, std::string_view what) {
  Checker(shape, global, nullptr, false, what).run();
}

void check_global(const ShapeString& shape, const Shape& global, const MeshShape& mesh, std::string_view what) {
  Checker(shape, global, &mesh, false, what).run();
}

void check_local(const ShapeString& shape, const Shape& local, const MeshShape& mesh, std::string_view what) {
  Checker(shape, local, &mesh, true, what).run();
}

}  // namespace tessera
