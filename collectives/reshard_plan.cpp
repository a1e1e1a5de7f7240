// The reshard planner: per-axis steps of docs/design.md's table in the order that keeps blocks
// smallest, a small search where the order of a dimension's axes leaves choices, and a general
// redistribute (permute / redistribute) where no sequence of named collectives reaches the target.
#include <algorithm>
#include <map>
#include <unordered_map>

#include "collectives/redistribute.h"
#include "collectives/reshard.h"
#include "core/error.h"
#include "core/text.h"

namespace tessera {

namespace {

// The spec without axes of size 1 (they never move data), padded to `rank` dimensions.
Spec drop_trivial_axes(const Spec& spec, const MeshShape& mesh, int ndim) {
  Spec out = spec.padded(ndim);
  auto trivial = [&](const std::string& a) { return mesh.axis_size(a) == 1; };
  for (auto& d : out.dims) d.erase(std::remove_if(d.begin(), d.end(), trivial), d.end());
  out.partial.erase(std::remove_if(out.partial.begin(), out.partial.end(), trivial), out.partial.end());
  return out;
}

bool is_prefix(const Axes& a, const Axes& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

enum class Role { replicated, partial, split };
Role role_of(const Spec& s, const std::string& axis) {
  if (s.is_partial_on(axis)) return Role::partial;
  return s.dim_of(axis) >= 0 ? Role::split : Role::replicated;
}

struct Problem {
  const MeshShape& mesh;
  Spec target;  // without trivial axes
  Shape global;
  DType dtype;
  bool even = true;  // source and target split every dimension evenly
};

// The bytes of the largest block (every block's, for even splits).
std::int64_t block_bytes(const Problem& p, const Spec& s) {
  return numel(max_local_shape(s, p.mesh, p.global)) * static_cast<std::int64_t>(dtype_size(p.dtype));
}

// The most any rank sends in one step from `before` to `after` (comm_stats.h's convention, on
// each rank's real block: uneven blocks differ from rank to rank).
std::int64_t step_bytes(const Problem& p, CommOp op, const Axes& axes, int dim_to, const Spec& before,
                        const Spec& after) {
  const std::int64_t n = p.mesh.axes_size(axes);
  if (n <= 1) return 0;
  if (splits_evenly(before, p.mesh, p.global) && splits_evenly(after, p.mesh, p.global)) {
    return send_bytes(op, n, block_bytes(p, before));
  }
  const auto elem = static_cast<std::int64_t>(dtype_size(p.dtype));
  std::int64_t most = 0;
  for (int r = 0; r < p.mesh.size(); ++r) {
    const auto coords = p.mesh.coords_of(r);
    const Shape in = local_shape(before, p.mesh, p.global, coords);
    const std::int64_t b = numel(in) * elem;
    std::int64_t sent = 0;
    switch (op) {
      case CommOp::all_gather:
        sent = (n - 1) * b;
        break;
      case CommOp::reduce_scatter:
        sent = b - numel(local_shape(after, p.mesh, p.global, coords)) * elem;
        break;
      case CommOp::all_to_all: {
        Shape kept = in;
        kept[dim_to] = local_shape(after, p.mesh, p.global, coords)[dim_to];
        sent = b - numel(kept) * elem;
        break;
      }
      default:
        sent = send_bytes(op, n, b);
    }
    most = std::max(most, sent);
  }
  return most;
}

// Whether moving dimension d between the split by `fine`'s first `coarse` axes and the split by
// all of `fine` is exact under the block rule (the fine blocks tile the coarse ones), so that the
// step's collective moves whole blocks.
bool nests_on(const Problem& p, int d, const Axes& fine, std::size_t coarse) {
  const Axes outer(fine.begin(), fine.begin() + static_cast<std::ptrdiff_t>(coarse));
  const Axes inner(fine.begin() + static_cast<std::ptrdiff_t>(coarse), fine.end());
  return blocks_nest(p.global[d], p.mesh.axes_size(outer), p.mesh.axes_size(inner));
}

// Whether `step`, taken from `before`, moves whole blocks under the block rule.
bool step_exact(const Problem& p, const Spec& before, const ReshardStep& step) {
  switch (step.op) {
    case CommOp::slice:
    case CommOp::reduce_scatter:
      return nests_on(p, step.dim, step.after.dims[step.dim], before.dims[step.dim].size());
    case CommOp::all_gather:
    case CommOp::pad:
      return nests_on(p, step.dim, before.dims[step.dim], step.after.dims[step.dim].size());
    case CommOp::all_to_all:
      return nests_on(p, step.dim, before.dims[step.dim], step.after.dims[step.dim].size()) &&
             nests_on(p, step.dim_to, step.after.dims[step.dim_to], before.dims[step.dim_to].size());
    default:
      return true;
  }
}

struct Plan {
  std::vector<ReshardStep> steps;
  std::int64_t bytes = 0;
  int redistributions = 0;
};

// Fewer bytes; then fewer general redistributions (the named collectives are what users expect and
// what MPI tunes); then fewer steps.
bool better(const Plan& a, const Plan& b) {
  if (a.bytes != b.bytes) return a.bytes < b.bytes;
  if (a.redistributions != b.redistributions) return a.redistributions < b.redistributions;
  return a.steps.size() < b.steps.size();
}

// One step applied to the planner's state.
class Builder {
 public:
  Builder(const Problem& p, Spec cur, Plan plan) : p_(p), cur_(std::move(cur)), plan_(std::move(plan)) {}
  const Spec& cur() const { return cur_; }
  const Plan& plan() const { return plan_; }

  void slice(int j, const Axes& axes) {
    append(cur_.dims[j], axes);
    push(CommOp::slice, axes, j, -1, 0);
  }
  void reduce_scatter(int j, const Axes& axes) {
    const Spec before = cur_;
    remove_partial(axes);
    append(cur_.dims[j], axes);
    push(CommOp::reduce_scatter, axes, j, -1, step_bytes(p_, CommOp::reduce_scatter, axes, j, before, cur_));
  }
  void all_to_all(int i, int j, const Axes& axes) {
    const Spec before = cur_;
    cur_.dims[i].resize(cur_.dims[i].size() - axes.size());
    append(cur_.dims[j], axes);
    push(CommOp::all_to_all, axes, i, j, step_bytes(p_, CommOp::all_to_all, axes, j, before, cur_));
  }
  void all_reduce(const Axes& axes) {
    const Spec before = cur_;
    remove_partial(axes);
    push(CommOp::all_reduce, axes, -1, -1, step_bytes(p_, CommOp::all_reduce, axes, -1, before, cur_));
  }
  void all_gather(int i, const Axes& axes) {
    const Spec before = cur_;
    cur_.dims[i].resize(cur_.dims[i].size() - axes.size());
    push(CommOp::all_gather, axes, i, -1, step_bytes(p_, CommOp::all_gather, axes, -1, before, cur_));
  }
  void pad(int i, const Axes& axes) {
    cur_.dims[i].resize(cur_.dims[i].size() - axes.size());
    append(cur_.partial, axes);
    push(CommOp::pad, axes, i, -1, 0);
  }
  void zero(const Axes& axes) {
    append(cur_.partial, axes);
    push(CommOp::zero, axes, -1, -1, 0);
  }
  void redistribute(const Spec& to) {
    const Axes axes = detail::redistribute_axes(p_.mesh, cur_, to);
    std::int64_t most = 0;
    const auto matrix = detail::redistribute_matrix(p_.mesh, cur_, to, p_.global);
    for (std::size_t r = 0; r < matrix.size(); ++r) {
      std::int64_t sent = 0;
      for (std::size_t q = 0; q < matrix.size(); ++q) sent += q == r ? 0 : matrix[r][q];
      most = std::max(most, sent * static_cast<std::int64_t>(dtype_size(p_.dtype)));
    }
    // Where every rank sends its whole block to at most one other, the step is a permute.
    std::vector<std::pair<int, int>> pairs;
    const bool permutation = detail::redistribute_is_permutation(p_.mesh, cur_, to, p_.global, &pairs);
    cur_ = to;
    ++plan_.redistributions;
    push(permutation ? CommOp::permute : CommOp::redistribute, axes, -1, -1, most, /*priced=*/true);
    if (permutation) plan_.steps.back().pairs = std::move(pairs);
  }

 private:
  static void append(Axes& to, const Axes& axes) { to.insert(to.end(), axes.begin(), axes.end()); }
  void remove_partial(const Axes& axes) {
    for (const auto& a : axes) cur_.partial.erase(std::find(cur_.partial.begin(), cur_.partial.end(), a));
  }
  // `bytes`: the most any rank sends in the step (step_bytes; permute, redistribute: their own
  // count, priced by send_bytes).
  void push(CommOp op, const Axes& axes, int dim, int dim_to, std::int64_t bytes, bool priced = false) {
    ReshardStep step;
    step.op = op;
    step.axes = axes;
    step.dim = dim;
    step.dim_to = dim_to;
    step.bytes_per_rank = priced ? send_bytes(op, p_.mesh.axes_size(axes), bytes) : bytes;
    step.after = cur_;
    plan_.bytes += step.bytes_per_rank;
    plan_.steps.push_back(std::move(step));
  }

  const Problem& p_;
  Spec cur_;
  Plan plan_;
};

// Moves that put axes in their final place without growing the block: slices, then
// reduce-scatters, then all-to-alls, onto dimensions whose current axes are a prefix of the
// target's.
void forced_moves(const Problem& p, Builder& b) {
  const Spec& t = p.target;
  bool progress = true;
  while (progress) {
    progress = false;
    for (Role wanted : {Role::replicated, Role::partial}) {
      for (int j = 0; j < t.ndim(); ++j) {
        const Axes& now = b.cur().dims[j];
        if (!is_prefix(now, t.dims[j])) continue;
        Axes run;
        for (std::size_t k = now.size(); k < t.dims[j].size() && role_of(b.cur(), t.dims[j][k]) == wanted; ++k) {
          run.push_back(t.dims[j][k]);
        }
        if (run.empty()) continue;
        wanted == Role::replicated ? b.slice(j, run) : b.reduce_scatter(j, run);
        progress = true;
      }
      if (progress) break;
    }
    if (progress) continue;
    for (int j = 0; j < t.ndim() && !progress; ++j) {
      const Axes& now = b.cur().dims[j];
      if (!is_prefix(now, t.dims[j]) || now.size() == t.dims[j].size()) continue;
      const std::string& next = t.dims[j][now.size()];
      const int i = b.cur().dim_of(next);
      if (i < 0 || i == j) continue;
      const Axes& from = b.cur().dims[i];
      const std::size_t pos = std::find(from.begin(), from.end(), next) - from.begin();
      Axes suffix(from.begin() + static_cast<std::ptrdiff_t>(pos), from.end());
      if (now.size() + suffix.size() > t.dims[j].size() ||
          !std::equal(suffix.begin(), suffix.end(), t.dims[j].begin() + static_cast<std::ptrdiff_t>(now.size()))) {
        continue;
      }
      b.all_to_all(i, j, suffix);
      progress = true;
    }
  }
}

// The redistribute target from `cur`: each dimension takes the target's axes up to the first one
// still partial (reduce-scattered later), then keeps its axes bound for partial (padded later).
Spec redistribute_goal(const Problem& p, const Spec& cur) {
  Spec goal = Spec::replicated(p.target.ndim());
  goal.partial = cur.partial;
  for (int j = 0; j < p.target.ndim(); ++j) {
    for (const auto& a : p.target.dims[j]) {
      if (cur.is_partial_on(a)) break;
      goal.dims[j].push_back(a);
    }
    for (const auto& a : cur.dims[j]) {
      if (p.target.is_partial_on(a)) goal.dims[j].push_back(a);
    }
  }
  return goal;
}

// The maximal run of axes at the minor end of `axes` whose target role is `role`.
Axes top_run(const Problem& p, const Axes& axes, Role role) {
  std::size_t k = axes.size();
  while (k > 0 && role_of(p.target, axes[k - 1]) == role && p.target.dim_of(axes[k - 1]) < 0) --k;
  return Axes(axes.begin() + static_cast<std::ptrdiff_t>(k), axes.end());
}

// The best continuation from a state depends only on the state: memoised per plan_reshard call.
using Memo = std::map<std::string, Plan>;

Plan best_from(const Problem& p, const Spec& start, Memo& memo);

// `b` followed by the best continuation from where it stands.
Plan then_best(const Problem& p, const Builder& b, Memo& memo) {
  Plan out = b.plan();
  Plan rest = best_from(p, b.cur(), memo);
  out.bytes += rest.bytes;
  out.redistributions += rest.redistributions;
  out.steps.insert(out.steps.end(), rest.steps.begin(), rest.steps.end());
  return out;
}

Plan best_from(const Problem& p, const Spec& start, Memo& memo) {
  const std::string key = start.to_string();
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  Builder b(p, start, {});
  forced_moves(p, b);
  const Spec& cur = b.cur();
  const Spec& t = p.target;
  Axes reduce;  // partial now, replicated in the target
  for (const auto& a : cur.partial) {
    if (role_of(t, a) == Role::replicated) reduce.push_back(a);
  }
  // all_reduce over axes in mesh order: one call for all of them.
  std::sort(reduce.begin(), reduce.end(),
            [&](const std::string& x, const std::string& y) { return p.mesh.axis_index(x) < p.mesh.axis_index(y); });
  if (cur.dims == t.dims) {
    if (!reduce.empty()) b.all_reduce(reduce);
    Axes zeros;
    for (const auto& a : t.partial) {
      if (!b.cur().is_partial_on(a)) zeros.push_back(a);
    }
    if (!zeros.empty()) b.zero(zeros);
    return memo[key] = b.plan();
  }
  Plan best;
  bool have = false;
  auto consider = [&](const Builder& next) {
    Plan candidate = then_best(p, next, memo);
    if (!have || better(candidate, best)) {
      best = std::move(candidate);
      have = true;
    }
  };
  if (!reduce.empty()) {
    Builder next = b;
    next.all_reduce(reduce);
    consider(next);
  }
  for (int i = 0; i < cur.ndim(); ++i) {
    Axes gather = top_run(p, cur.dims[i], Role::replicated);
    if (!gather.empty()) {
      Builder next = b;
      next.all_gather(i, gather);
      consider(next);
    }
    Axes pad = top_run(p, cur.dims[i], Role::partial);
    if (!pad.empty()) {
      Builder next = b;
      next.pad(i, pad);
      consider(next);
    }
  }
  Spec goal = redistribute_goal(p, cur);
  if (goal.dims != cur.dims) {
    Builder next = b;
    next.redistribute(goal);
    consider(next);
  }
  if (!have) throw Error("reshard planner: no move from " + cur.to_string() + " to " + t.to_string());
  return memo[key] = best;
}

}  // namespace

std::string ReshardStep::to_string() const {
  std::string out = std::string(tessera::to_string(op)) + " over " + parenthesized(axes);
  const std::string bytes = std::to_string(bytes_per_rank) + " bytes per rank";
  switch (op) {
    case CommOp::all_gather:
      out += " on dim " + std::to_string(dim) + ": " + bytes;
      break;
    case CommOp::reduce_scatter:
      out += " onto dim " + std::to_string(dim) + ": " + bytes;
      break;
    case CommOp::all_to_all:
      out += " from dim " + std::to_string(dim) + " to dim " + std::to_string(dim_to) + ": " + bytes;
      break;
    case CommOp::all_reduce:
    case CommOp::broadcast:
      out += ": " + bytes;
      break;
    case CommOp::slice:
      out += " on dim " + std::to_string(dim) + ": local, 0 bytes";
      break;
    case CommOp::pad:
      out += " on dim " + std::to_string(dim) + " into partial: local, 0 bytes";
      break;
    case CommOp::zero:
      out += " into partial: local, 0 bytes (coordinate 0 keeps the value)";
      break;
    case CommOp::permute:
    case CommOp::redistribute:
      out += " to " + after.to_string() + ": " + bytes;
      break;
  }
  if (!note.empty()) out += "; " + note;
  return out;
}

std::int64_t ReshardPlan::bytes_per_rank() const {
  std::int64_t total = 0;
  for (const auto& s : steps) total += s.bytes_per_rank;
  return total;
}

std::string ReshardPlan::to_string() const {
  if (steps.empty()) return "no-op: already " + target.to_string() + ", 0 bytes\n";
  std::string out;
  for (const auto& s : steps) out += s.to_string() + "\n";
  return out;
}

std::int64_t table_bytes(const MeshShape& mesh, const Spec& source, const Spec& target, const Shape& global_shape,
                         DType dtype) {
  const int ndim = static_cast<int>(global_shape.size());
  const Spec s = drop_trivial_axes(source, mesh, ndim), t = drop_trivial_axes(target, mesh, ndim);
  const Problem p{mesh, t, global_shape, dtype};
  // The axes whose place changes: a different role, dimension or axes before them.
  Axes changing;
  for (const auto& a : mesh.names()) {
    if (mesh.axis_size(a) == 1) continue;
    const int ds = s.dim_of(a), dt = t.dim_of(a);
    bool same = role_of(s, a) == role_of(t, a) && ds == dt;
    if (same && ds >= 0) {
      const Axes& x = s.dims[ds];
      const Axes& y = t.dims[dt];
      const auto i = std::find(x.begin(), x.end(), a) - x.begin();
      const auto j = std::find(y.begin(), y.end(), a) - y.begin();
      same = i == j && std::equal(x.begin(), x.begin() + i, y.begin());
    }
    if (!same) changing.push_back(a);
  }
  std::int64_t best = -1;
  std::sort(changing.begin(), changing.end());
  do {
    Spec cur = s;
    std::int64_t bytes = 0;
    bool valid = true;
    for (const auto& a : changing) {
      const std::int64_t n = mesh.axis_size(a), b = block_bytes(p, cur);
      const int i = cur.dim_of(a), j = t.dim_of(a);
      if (i >= 0 && cur.dims[i].back() != a) {
        valid = false;  // only the minor-most axis of a dimension can leave it
        break;
      }
      if (i >= 0) cur.dims[i].pop_back();
      const bool was_partial = cur.is_partial_on(a);
      if (was_partial) cur.partial.erase(std::find(cur.partial.begin(), cur.partial.end(), a));
      if (j >= 0) cur.dims[j].push_back(a);
      if (t.is_partial_on(a)) cur.partial.push_back(a);
      if (i >= 0 && j >= 0) bytes += send_bytes(CommOp::all_to_all, n, b);
      if (i >= 0 && j < 0 && !t.is_partial_on(a)) bytes += send_bytes(CommOp::all_gather, n, b);  // pad: 0
      if (was_partial && j >= 0) bytes += send_bytes(CommOp::reduce_scatter, n, b);
      if (was_partial && j < 0 && !t.is_partial_on(a)) bytes += send_bytes(CommOp::all_reduce, n, b);
    }
    if (valid && cur == t && (best < 0 || bytes < best)) best = bytes;
  } while (std::next_permutation(changing.begin(), changing.end()));
  return best;
}

namespace {

ReshardPlan make_plan(const MeshShape& mesh, const Spec& source, const Spec& target, const Shape& global_shape,
                      DType dtype) {
  const int ndim = static_cast<int>(global_shape.size());
  ReshardPlan out;
  out.source = source.padded(ndim);
  out.target = target.padded(ndim);
  out.table_bytes = table_bytes(mesh, source, target, global_shape, dtype);
  const Problem p{mesh, drop_trivial_axes(target, mesh, ndim), global_shape, dtype,
                  splits_evenly(source.padded(ndim), mesh, global_shape) &&
                      splits_evenly(target.padded(ndim), mesh, global_shape)};
  const Spec start = drop_trivial_axes(source, mesh, ndim);

  // Candidate 1: the per-axis moves in place, searching where the axis order leaves choices.
  Memo memo;
  Plan best = best_from(p, start, memo);
  // Candidate 2: shrink first (every slice and reduce-scatter at once, even onto a dimension
  // whose axes must still change), then the same search; wins when the order of a dimension's
  // axes forces a redistribute anyway and the redistribute moves the smaller block.
  Builder shrink(p, start, {});
  bool differs = false;
  for (Role wanted : {Role::replicated, Role::partial}) {
    for (int j = 0; j < p.target.ndim(); ++j) {
      Axes run;
      for (const auto& a : p.target.dims[j]) {
        if (role_of(shrink.cur(), a) == wanted) run.push_back(a);
      }
      if (run.empty()) continue;
      differs = differs || !is_prefix(shrink.cur().dims[j], p.target.dims[j]);
      wanted == Role::replicated ? shrink.slice(j, run) : shrink.reduce_scatter(j, run);
    }
  }
  // Between even specs every intermediate spec splits evenly too (a slice onto a dimension that
  // still holds other axes may not); with uneven blocks every step must move whole blocks under
  // the block rule (step_exact). Plans that do not are not taken.
  auto valid = [&](const Plan& plan) {
    Spec before = start;
    for (const auto& step : plan.steps) {
      if (p.even ? !splits_evenly(step.after, mesh, global_shape) : !step_exact(p, before, step)) return false;
      before = step.after;
    }
    return true;
  };
  if (differs) {
    Plan second = then_best(p, shrink, memo);
    if (valid(second) && (better(second, best) || !valid(best))) best = std::move(second);
  }
  if (!valid(best)) {
    // Reduce the partial axes in place, then one redistribute straight to the target's blocks,
    // then zero the replicas of the target's partial axes.
    Builder direct(p, start, {});
    if (!direct.cur().partial.empty()) direct.all_reduce(Axes(direct.cur().partial));
    if (direct.cur().dims != p.target.dims) direct.redistribute(p.target.without_partial());
    if (p.target.is_partial()) direct.zero(p.target.partial);
    best = direct.plan();
  }

  out.steps = std::move(best.steps);
  const std::int64_t extra = out.bytes_per_rank() - out.table_bytes;
  const bool relayout = std::any_of(out.steps.begin(), out.steps.end(), [](const ReshardStep& s) {
    return s.op == CommOp::permute || s.op == CommOp::redistribute;
  });
  // Uneven blocks: the table prices the largest block, so only a relayout earns the note.
  if (out.table_bytes < 0 || (extra > 0 && (p.even || relayout))) {
    std::string note = out.table_bytes < 0 ? "axis order change: no order of the per-axis table's steps reaches "
                                             "the target's axis order; every element moves at most once"
                                           : "axis order change: " + std::to_string(extra) +
                                                 " bytes per ndim beyond the per-axis table";
    auto it = std::find_if(out.steps.begin(), out.steps.end(),
                           [](const ReshardStep& s) { return s.op == CommOp::permute || s.op == CommOp::redistribute; });
    (it != out.steps.end() ? *it : out.steps.back()).note = note;
  }
  return out;
}

}  // namespace

namespace {

// The plan cache's key (PlanKey): the specs as written, not padded, so a key met before means
// these very arguments were validated and planned.
std::string plan_key(const MeshShape& mesh, const Spec& source, const Spec& target, const Shape& global_shape,
                     DType dtype) {
  return PlanKey().add(mesh).add(source).add(target).add(global_shape).add(static_cast<std::int64_t>(dtype)).take();
}

}  // namespace

std::shared_ptr<const ReshardPlan> cached_reshard_plan(const MeshShape& mesh, const Spec& source, const Spec& target,
                                                       const Shape& global_shape, DType dtype) {
  // Programs reshard between the same specs every step: plans are cached (per process, so the
  // same on every rank), and the cache is simply emptied when it grows large. A plan is keyed
  // by the source's written order of partial axes, which only affects the order of axes in its
  // all-reduce (mesh order either way).
  static std::unordered_map<std::string, std::shared_ptr<const ReshardPlan>> cache;
  std::string key = plan_key(mesh, source, target, global_shape, dtype);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  validate_spec(source, mesh, global_shape, "source");
  validate_spec(target, mesh, global_shape, "target");
  if (cache.size() >= 4096) cache.clear();
  auto plan = std::make_shared<const ReshardPlan>(make_plan(mesh, source, target, global_shape, dtype));
  cache.emplace(std::move(key), plan);
  return plan;
}

ReshardPlan plan_reshard(const MeshShape& mesh, const Spec& source, const Spec& target, const Shape& global_shape,
                         DType dtype) {
  return *cached_reshard_plan(mesh, source, target, global_shape, dtype);
}

}  // namespace tessera
