// Spec algebra: parse and print both text forms, validate against a mesh, and the block that
// the rank at given mesh coordinates holds.
#include "core/spec.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/text.h"

namespace tessera {

namespace {

const Axes kNoAxes;

std::string axes_text(const Axes& axes) {
  if (axes.empty()) return "None";
  if (axes.size() == 1) return axes[0];
  return parenthesized(axes);
}

// A small tokenizer shared by both text forms, so errors can point at a column.
class Cursor {
 public:
  Cursor(std::string_view text, std::string_view what) : text_(text), what_(what) {}

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool at_end() {
    skip_space();
    return pos_ >= text_.size();
  }
  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool accept(char c) {
    if (peek() == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c, std::string_view expected) {
    if (!accept(c)) fail("expected " + std::string(expected));
  }
  bool peek_word() {
    char c = peek();
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  }
  // An identifier or an integer.
  std::string word(std::string_view expected) {
    skip_space();
    std::size_t b = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
    if (b == pos_) fail("expected " + std::string(expected));
    return std::string(text_.substr(b, pos_ - b));
  }
  std::size_t pos() const { return pos_; }
  void set_pos(std::size_t p) { pos_ = p; }

  [[noreturn]] void fail(const std::string& message) { fail_at(pos_, message); }
  [[noreturn]] void fail_at(std::size_t column, const std::string& message) {
    std::string found = column < text_.size() ? "'" + std::string(1, text_[column]) + "'" : "end of text";
    std::ostringstream out;
    out << what_ << " '" << text_ << "': " << message << ", found " << found << " at column " << column + 1 << "\n  "
        << text_ << "\n  " << std::string(column, ' ') << '^';
    throw SpecError(out.str());
  }

 private:
  std::string_view text_;
  std::string_view what_;
  std::size_t pos_ = 0;
};

// An axis name, a parenthesised tuple of axis names, or None.
Axes parse_axes_item(Cursor& in) {
  if (in.accept('(')) {
    Axes axes;
    if (in.accept(')')) return axes;
    while (true) {
      std::string name = in.word("a mesh axis name");
      if (!is_identifier(name) || name == "None") in.fail_at(in.pos() - name.size(), "expected a mesh axis name");
      axes.push_back(name);
      if (in.accept(')')) break;
      in.expect(',', "',' or ')'");
      if (in.accept(')')) break;  // trailing comma, as in Python tuples
    }
    return axes;
  }
  in.skip_space();
  std::size_t at = in.pos();
  std::string name = in.word("a mesh axis, '(' or None");
  if (name == "None") return {};
  if (!is_identifier(name)) in.fail_at(at, "expected a mesh axis, '(' or None");
  return {name};
}

}  // namespace

const Axes& Spec::axes(int d) const { return d >= 0 && d < ndim() ? dims[d] : kNoAxes; }

Spec Spec::padded(int r) const {
  if (ndim() > r) {
    throw SpecError("spec " + to_string() + " has " + std::to_string(ndim()) + " dimensions, more than rank " +
                    std::to_string(r));
  }
  Spec out = *this;
  out.dims.resize(r);
  return out;
}

bool Spec::is_partial_on(std::string_view axis) const {
  return std::find(partial.begin(), partial.end(), axis) != partial.end();
}

Axes Spec::used_axes() const {
  Axes out;
  for (const auto& d : dims) out.insert(out.end(), d.begin(), d.end());
  out.insert(out.end(), partial.begin(), partial.end());
  return out;
}

int Spec::dim_of(std::string_view axis) const {
  for (int d = 0; d < ndim(); ++d) {
    if (std::find(dims[d].begin(), dims[d].end(), axis) != dims[d].end()) return d;
  }
  return -1;
}

std::string Spec::to_string() const {
  std::string out = "P(";
  for (int d = 0; d < ndim(); ++d) out += (d ? ", " : "") + axes_text(dims[d]);
  if (!partial.empty()) out += "; partial=" + axes_text(partial);
  return out + ")";
}

bool Spec::operator==(const Spec& other) const {
  int r = std::max(ndim(), other.ndim());
  for (int d = 0; d < r; ++d) {
    if (axes(d) != other.axes(d)) return false;
  }
  if (partial == other.partial) return true;  // the common case, without building the sets
  return std::set<std::string>(partial.begin(), partial.end()) ==
         std::set<std::string>(other.partial.begin(), other.partial.end());
}

Spec parse_spec(std::string_view text) {
  Cursor in(text, "spec");
  Spec spec;
  in.skip_space();
  std::size_t at = in.pos();
  if (!in.peek_word() || in.word("'P('") != "P") in.fail_at(at, "expected 'P('");
  in.expect('(', "'(' after P");
  if (!in.accept(')')) {
    if (in.peek() != ';') {
      while (true) {
        spec.dims.push_back(parse_axes_item(in));
        if (in.peek() == ')' || in.peek() == ';') break;
        in.expect(',', "',', ';' or ')'");
      }
    }
    if (in.accept(';')) {
      in.skip_space();
      std::size_t key_at = in.pos();
      if (!in.peek_word() || in.word("'partial='") != "partial") in.fail_at(key_at, "expected 'partial='");
      in.expect('=', "'=' after partial");
      std::size_t axes_at = in.pos();
      spec.partial = parse_axes_item(in);
      if (spec.partial.empty()) in.fail_at(axes_at, "expected at least one partial axis");
    }
    in.expect(')', "')'");
  }
  if (!in.at_end()) in.fail("unexpected text after the spec");
  return spec;
}

void validate_spec(const Spec& spec, const MeshShape& mesh, const Shape& shape, std::string_view name) {
  // Called for every tensor an op makes: the message's text is built only when the spec is refused.
  auto label = [&] { return "spec " + spec.to_string() + (name.empty() ? "" : " of '" + std::string(name) + "'"); };
  // A negative extent gave empty blocks and then misleading failures (an overflowing byte count in
  // to_global, HDF5's dataspace error in a save).
  for (const std::int64_t extent : shape) {
    if (extent < 0) {
      throw ShapeError("shape " + shape_to_string(shape) + (name.empty() ? "" : " of '" + std::string(name) + "'") +
                       " has a negative extent");
    }
  }
  if (spec.ndim() > static_cast<int>(shape.size())) {
    throw SpecError(label() + " has " + std::to_string(spec.ndim()) + " dimensions but the tensor has shape " +
                    shape_to_string(shape));
  }
  // The axes in written order, dimensions first, then partial (list spec.ndim()), each checked
  // against the mesh and against the axes before it, without copying them (every op's result
  // is validated).
  auto list = [&](int d) -> const Axes& { return d < spec.ndim() ? spec.dims[d] : spec.partial; };
  for (int d = 0; d <= spec.ndim(); ++d) {
    const Axes& axes = list(d);
    for (auto axis = axes.begin(); axis != axes.end(); ++axis) {
      if (!mesh.has_axis(*axis)) {
        throw SpecError(label() + ": unknown mesh axis '" + *axis + "' (mesh has " + mesh.to_string() + ")");
      }
      bool before = std::find(axes.begin(), axis, *axis) != axis;
      for (int e = 0; e < d && !before; ++e) before = std::find(list(e).begin(), list(e).end(), *axis) != list(e).end();
      if (before) throw SpecError(label() + ": mesh axis '" + *axis + "' is used more than once");
    }
  }
}

void require_even_split(const Spec& spec, const MeshShape& mesh, const Shape& shape, std::string_view name) {
  for (int d = 0; d < spec.ndim() && d < static_cast<int>(shape.size()); ++d) {
    if (spec.dims[d].empty()) continue;
    const int count = mesh.axes_size(spec.dims[d]);
    if (shape[d] % count != 0) {
      throw SpecError("dimension " + std::to_string(d) + (name.empty() ? "" : " of '" + std::string(name) + "'") +
                      " (size " + std::to_string(shape[d]) + ") does not divide over axes " +
                      parenthesized(spec.dims[d]) + " of size " + std::to_string(count));
    }
  }
}

int shard_count(const Spec& spec, const MeshShape& mesh, int d) { return mesh.axes_size(spec.axes(d)); }

Axes unused_axes(const Spec& spec, const MeshShape& mesh) {
  const Axes used = spec.used_axes();
  Axes out;
  for (const auto& axis : mesh.names()) {
    if (std::find(used.begin(), used.end(), axis) == used.end()) out.push_back(axis);
  }
  return out;
}

// Without n + s - 1, which wraps for an n near 2^63 (a --batch of 2^63 - 1 over two ranks made a
// negative block, and a memory estimate that passed).
std::int64_t block_chunk(std::int64_t n, std::int64_t s) { return s <= 1 ? n : n / s + (n % s != 0 ? 1 : 0); }

std::int64_t block_begin(std::int64_t n, std::int64_t s, std::int64_t i) {
  std::int64_t begin = 0;
  // i * chunk is at most n + s - 1, past int64 only where it is past n anyway.
  if (__builtin_mul_overflow(i, block_chunk(n, s), &begin)) return n;
  return std::min(n, begin);
}

std::int64_t block_extent(std::int64_t n, std::int64_t s, std::int64_t i) {
  return block_begin(n, s, i + 1) - block_begin(n, s, i);
}

std::vector<std::int64_t> block_extents(std::int64_t n, std::int64_t s) {
  // A negative count made a vector of 2^64 - 1 elements (std::length_error).
  if (s < 1) throw SpecError("block_extents: a dimension splits into 1 block or more, not " + std::to_string(s));
  std::vector<std::int64_t> out(static_cast<std::size_t>(s));
  for (std::int64_t i = 0; i < s; ++i) out[static_cast<std::size_t>(i)] = block_extent(n, s, i);
  return out;
}

bool blocks_nest(std::int64_t n, std::int64_t outer, std::int64_t inner) {
  if (inner <= 1 || n % (outer * inner) == 0) return true;
  // Fine blocks are consecutive, so block c of the coarse split is the union of its fine blocks
  // exactly when every coarse block starts where its first fine block starts.
  for (std::int64_t c = 1; c < outer; ++c) {
    if (block_begin(n, outer, c) != block_begin(n, outer * inner, c * inner)) return false;
  }
  return true;
}

bool splits_evenly(const Spec& spec, const MeshShape& mesh, const Shape& global) {
  for (int d = 0; d < static_cast<int>(global.size()); ++d) {
    if (global[d] % shard_count(spec, mesh, d) != 0) return false;
  }
  return true;
}

namespace {

// Dimension d's extent in the block held at `coords` (local_shape's, one dimension).
std::int64_t local_extent(const Spec& spec, const MeshShape& mesh, const Shape& global, const std::vector<int>& coords,
                          int d) {
  return block_extent(global[d], shard_count(spec, mesh, d), block_index(spec, mesh, d, coords));
}

}  // namespace

Shape local_shape(const Spec& spec, const MeshShape& mesh, const Shape& global, const std::vector<int>& coords) {
  Shape out = global;
  for (int d = 0; d < static_cast<int>(global.size()); ++d) out[d] = local_extent(spec, mesh, global, coords, d);
  return out;
}

bool is_local_shape(const Shape& block, const Spec& spec, const MeshShape& mesh, const Shape& global,
                    const std::vector<int>& coords) {
  if (block.size() != global.size()) return false;
  for (int d = 0; d < static_cast<int>(global.size()); ++d) {
    if (block[d] != local_extent(spec, mesh, global, coords, d)) return false;
  }
  return true;
}

Shape max_local_shape(const Spec& spec, const MeshShape& mesh, const Shape& global) {
  Shape out = global;
  for (int d = 0; d < static_cast<int>(global.size()); ++d) out[d] = block_chunk(global[d], shard_count(spec, mesh, d));
  return out;
}

int block_index(const Spec& spec, const MeshShape& mesh, int d, const std::vector<int>& coords) {
  int index = 0;
  for (const auto& axis : spec.axes(d)) {
    int a = mesh.axis_index(axis);
    index = index * mesh.sizes()[a] + coords[a];
  }
  return index;
}

std::vector<std::int64_t> block_offsets(const Spec& spec, const MeshShape& mesh, const Shape& global,
                                        const std::vector<int>& coords) {
  std::vector<std::int64_t> offsets(global.size(), 0);
  for (int d = 0; d < static_cast<int>(global.size()); ++d) {
    offsets[d] = block_begin(global[d], shard_count(spec, mesh, d), block_index(spec, mesh, d, coords));
  }
  return offsets;
}

std::vector<std::int64_t> group_block_extents(const Spec& spec, const MeshShape& mesh, const Shape& global, int d,
                                              const Axes& axes, const std::vector<int>& coords) {
  const int n = mesh.axes_size(axes);
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  const std::int64_t count = shard_count(spec, mesh, d);
  for (int k = 0; k < n; ++k) {
    const std::vector<int> member = mesh.group_member(coords, axes, k);
    out[static_cast<std::size_t>(k)] = block_extent(global[d], count, block_index(spec, mesh, d, member));
  }
  return out;
}

Spec ShapeString::spec() const {
  Spec out;
  for (const auto& d : dims) out.dims.push_back(d.axes);
  return out;
}

std::vector<std::string> ShapeString::names() const {
  std::vector<std::string> out;
  for (const auto& d : dims) out.push_back(d.name);
  return out;
}

std::string ShapeString::to_string() const {
  std::string out;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    out += (i ? " " : "") + (dims[i].size ? std::to_string(*dims[i].size) : dims[i].name);
    for (const auto& a : dims[i].axes) out += "/" + a;
  }
  return out;
}

PlanKey& PlanKey::add(std::int64_t value) {
  key_.append(reinterpret_cast<const char*>(&value), sizeof value);
  return *this;
}

PlanKey& PlanKey::add(std::string_view name) {
  add(static_cast<std::int64_t>(name.size()));
  key_ += name;
  return *this;
}

PlanKey& PlanKey::add(const Axes& axes) {
  add(static_cast<std::int64_t>(axes.size()));
  for (const auto& name : axes) add(std::string_view(name));
  return *this;
}

PlanKey& PlanKey::add(const Spec& spec) {
  add(static_cast<std::int64_t>(spec.ndim()));
  for (const auto& axes : spec.dims) add(axes);
  return add(spec.partial);
}

PlanKey& PlanKey::add(const Shape& shape) {
  add(static_cast<std::int64_t>(shape.size()));
  for (std::int64_t extent : shape) add(extent);
  return *this;
}

PlanKey& PlanKey::add(const MeshShape& mesh) {
  add(mesh.names());
  for (int size : mesh.sizes()) add(static_cast<std::int64_t>(size));
  return *this;
}

ShapeString parse_shape_string(std::string_view text) {
  Cursor in(text, "shape string");
  ShapeString out;
  while (!in.at_end()) {
    DimSpec dim;
    std::size_t at = in.pos();
    std::string head = in.word("a dimension name or size");
    if (std::isdigit(static_cast<unsigned char>(head[0]))) {
      if (!std::all_of(head.begin(), head.end(), ::isdigit) || head.size() > 18) {
        in.fail_at(at, "expected a dimension name or size");
      }
      dim.size = std::stoll(head);
    } else {
      dim.name = head;
    }
    // Axes follow with '/' and no spaces: "batch/data/model".
    while (in.pos() < text.size() && text[in.pos()] == '/') {
      in.set_pos(in.pos() + 1);
      std::size_t axis_at = in.pos();
      if (axis_at >= text.size() || std::isspace(static_cast<unsigned char>(text[axis_at]))) {
        in.fail_at(axis_at, "expected a mesh axis name after '/'");
      }
      std::string axis = in.word("a mesh axis name after '/'");
      if (!is_identifier(axis)) in.fail_at(axis_at, "expected a mesh axis name after '/'");
      dim.axes.push_back(axis);
    }
    if (in.pos() < text.size() && !std::isspace(static_cast<unsigned char>(text[in.pos()]))) {
      in.fail("expected a space, '/' or the end");
    }
    out.dims.push_back(std::move(dim));
  }
  return out;
}

}  // namespace tessera
