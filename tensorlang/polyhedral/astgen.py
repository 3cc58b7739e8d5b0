"""Statement times from stage states, isl's AST builder, and the AST's translation to loop IR.

Every statement's time is `[stage, b0, l0, b1, l1, ...]`: `stage` orders stages, `l*` are the
stage's loops and `b*` are constants that order statements sharing a loop prefix (a
reduction's init gets b = 0 before the loop that first involves a reduce axis, its update
b = 1). Constant dimensions produce no loops; nor does isl emit a loop that takes one value
(it writes the value into the statements instead), except that a loop bound to a GPU block or
thread index is kept as a loop of extent 1 (`_Translator.dropped_gpu_loops`): the launch
geometry and a block's phases are read from the bound loops, so a dropped one would split
a block's work into separate launches.
"""

from __future__ import annotations

from dataclasses import replace

import islpy as isl

from ..config import debug_print
from ..errors import TensorlangError
from ..ir.dtype import int64
from ..ir.expr import (
    EQ, GT, LT, Add, Const, Expr, FloorDiv, FloorMod, Load, Mul, Var,
    binary, compare,
)
from ..ir.simplify import simplify
from ..ir.stmt import Allocate, For, If, Let, LoopKind, Seq, Stmt, Store, seq
from ..ir.visit import (free_vars, map_children, map_expr, map_stmt, stmt_exprs, substitute,
                        uses_buffer, walk, walk_stmt)
from .affine import affine_str
from .isl_expr import ast_expr, pw_aff_expr, truth
from .model import Loop, StageState, Statement, TimedStatement  # noqa: F401 (astgen's API)
from .placement import PREFIX, Entry
from .transform import dim_range, extent_bound


def depends_on_reduce(state: StageState, d: int) -> bool:
    """Whether loop d's value changes with the reduce axes (for fixed spatial axes)."""
    m = state.sched
    n = m.dim(isl.dim_type.out)
    m = m.project_out(isl.dim_type.out, d + 1, n - d - 1).project_out(isl.dim_type.out, 0, d)
    nred = len(state.axes) - state.n_spatial
    return not m.project_out(isl.dim_type.in_, state.n_spatial, nred).is_single_valued()


def _reduce_cut(state: StageState) -> int:
    """Index of the first loop whose value depends on a reduce axis."""
    for d in range(len(state.loops)):
        if depends_on_reduce(state, d):
            return d
    return len(state.loops)


def _interleave(path: list[int], n_loops: int, name: str = "T") -> isl.Map:
    """{ [l0..l(n-1)] -> [path0, path1, l0, path2, l1, ...] }, padded to the path's length."""
    ls = [f"l{d}" for d in range(n_loops)]
    out = [str(path[0])]
    for d in range(len(path) - 1):
        out.append(str(path[d + 1]))
        out.append(ls[d] if d < n_loops else "0")
    return isl.Map(f"{{ [{', '.join(ls)}] -> {name}[{', '.join(out)}] }}")


def base_entries(states: dict[str, StageState], statements: list[Statement],
                 order: list[str]):
    """Every statement at root: its path (stage position, then 0s; a reduction's update gets
    1 before its first reduce loop) and its loop map."""
    out = []
    position = {sid: k for k, sid in enumerate(order)}
    for st in statements:
        state = states[st.stage]
        pos = position[st.stage]
        sched = state.sched
        loops = state.loops
        if not st.is_init:
            own = sched.intersect_domain(st.domain.set_tuple_name(state.stage))
            own = own.set_tuple_name(isl.dim_type.in_, st.name).reset_tuple_id(isl.dim_type.out)
        if not state.is_reduction:
            out.append(Entry(st, st.name, [pos] + [0] * len(loops), own, loops))
            continue
        cut = _reduce_cut(state)
        if not st.is_init:
            path = [pos] + [1 if d == cut else 0 for d in range(len(loops))]
            out.append(Entry(st, st.name, path, own, loops))
            continue
        # init: the loops before the cut, then the later loops that involve no reduce axis
        nred = len(state.axes) - state.n_spatial
        keep = [d for d in range(len(loops)) if d < cut or not depends_on_reduce(state, d)]
        m = sched
        for d in reversed(range(len(loops))):
            if d not in keep:
                m = m.project_out(isl.dim_type.out, d, 1)
        m = m.project_out(isl.dim_type.in_, state.n_spatial, nred)
        m = m.set_tuple_name(isl.dim_type.in_, st.name).intersect_domain(st.domain)
        m = m.reset_tuple_id(isl.dim_type.out)
        if not m.is_injective():
            raise NotImplementedError(
                f"stage {st.stage}: a loop mixes spatial and reduce axes after the reduction's "
                "first loop, so its initialisation cannot be placed; reorder the spatial loops "
                "outside the reduce loops"
            )
        out.append(Entry(st, st.name, [pos] + [0] * len(keep), m, tuple(loops[d] for d in keep)))
    return out


def timed_statements(entries) -> list[TimedStatement]:
    """Time maps of placed entries, all of one width."""
    width = max((len(e.path) for e in entries), default=1)
    out = []
    for e in entries:
        path = e.padded(width)
        time = e.lmap.apply_range(_interleave(path, len(e.loops)))
        out.append(TimedStatement(e.stmt, time, _placed_bounds(time, e.stmt, e.loops),
                                  tuple(path)))
    return out


def placed_loop_bound(img: isl.Set, li: int) -> int | None:
    """The most iterations loop `li` of a placed statement makes for fixed outer loops;
    `img` is the statement's image under its time map (None: grows with the sizes)."""
    return extent_bound(dim_range(img, 2 + 2 * li))   # time dim of loop li


def _placed_bounds(time: isl.Map, stmt: Statement, loops: tuple[Loop, ...]) -> tuple[Loop, ...]:
    """Vector and unrolled loops with the trip-count bound of the placed statement.

    A stage's own state bounds its loops over its whole domain; placed under a compute_at
    prefix, a loop may run fewer times (an `i` loop of 127 inside tiles of 4 runs at most 4),
    and the full vector/unrolled case is taken only when the extent equals this bound.
    """
    img = None
    out = list(loops)
    for li, lp in enumerate(loops):
        if lp.kind not in (LoopKind.VECTORIZED, LoopKind.UNROLLED) or lp.max_extent is None:
            continue
        if img is None:
            img = time.intersect_domain(stmt.domain).range()
        bound = placed_loop_bound(img, li)
        if bound and bound < lp.max_extent:
            out[li] = replace(lp, max_extent=bound)
    return tuple(out)


# -------------------------------------------------------------------------- AST -> IR
_GPU = (LoopKind.GPU_BLOCK, LoopKind.GPU_THREAD)
class _Translator:
    def __init__(self, timed: list[TimedStatement], params: dict[str, Var], locals_=()):
        self.by_name = {t.stmt.name: t for t in timed}
        self.params = params
        self.env: dict[str, Var] = {}  # isl iterator -> loop variable
        self.images: dict[str, isl.Set] = {}   # statement -> its time image
        self.loop_images: dict[tuple, isl.Set] = {}   # ... on the loops emitted around it
        # a strided loop's iterator (isl: every step-th value) -> its counter k, its first
        # value and its step (`node`: v = first + step * k), while its body is made
        self.strided: dict[str, tuple[Var, Expr, int]] = {}
        self.locals = list(locals_)
        # time dims of GPU-bound loops isl did not emit, kept as loops of extent 1 around
        # the node being translated (see `dropped_gpu_loops`), and their variables' names
        self.gpu = any(lp.kind in _GPU for t in timed for lp in t.loops)
        self.kept: set[int] = set()
        self.kept_names: set[str] = set()

    def allocate_locals(self, k: int, body: Stmt, parallel: bool) -> Stmt:
        """A compute_at buffer lives in each iteration of its loop (time dim k), and of any
        parallel loop outside it, so that iterations never share it."""
        for L in self.locals:
            if L.threads and k != L.time_dim:
                continue   # a block's shared tile: one per block, declared where it lives
            # at a parallel loop outside its own loop only when that loop was not emitted
            # (one iteration): a second allocation around the first made the codegen
            # count the inner loop's copies of a register tile as its code, over the
            # unroll budget, and left the tile in memory (a matmul's, a store after every FMA)
            if (k == L.time_dim and uses_buffer(body, L.buffer)) or \
                    (parallel and k < L.time_dim and _free_use(body, L.buffer)):
                body = Allocate(L.buffer, body)
        return body

    def expr(self, e: isl.AstExpr) -> Expr:
        return ast_expr(e, self.env, self.params)

    def image(self, ts: TimedStatement) -> isl.Set:
        """The statement's instances in time (its time map's image)."""
        if ts.stmt.name not in self.images:
            self.images[ts.stmt.name] = ts.time.intersect_domain(ts.stmt.domain).range()
        return self.images[ts.stmt.name]

    def users(self, node: isl.AstNode) -> list[TimedStatement]:
        found: list[TimedStatement] = []

        def visit(n: isl.AstNode) -> bool:
            if n.get_type() == isl.ast_node_type.user:
                found.append(self.by_name[n.user_get_expr().get_op_arg(0).get_id().get_name()])
                return False
            return True

        node.foreach_descendant_top_down(visit)
        return found

    def extent_bound(self, k_dim: int, body: isl.AstNode, extent: Expr) -> int | None:
        """A constant bound on the trip count of the loop over time dim `k_dim` whose body
        is `body` and whose emitted extent is `extent`, or None. The statements' images
        (the union of their ranges) bound the values with work in them; isl's loop may run
        over more — a value whose statements are all switched off by a guard inside it (a
        modulo test after a fuse): the largest value of `extent` itself over the values of
        the loops around it counts too (a guarded unroll covers [init, init + bound))."""
        img = None
        for ts in self.users(body):
            r = self.image(ts)
            img = r if img is None else img.union(r)
        if img is None:
            return None
        bound = extent_bound(dim_range(img, k_dim))
        text = affine_str(extent)
        if bound is None or text is None:
            return None
        outer = img.project_out(isl.dim_type.set, k_dim, img.dim(isl.dim_type.set) - k_dim)
        names = []
        for j in range(k_dim):
            v = self.env.get(f"t{j}")
            names.append(v.name if v is not None else f"__t{j}")
            outer = outer.set_dim_name(isl.dim_type.set, j, names[-1])
        params = [outer.get_dim_name(isl.dim_type.param, j)
                  for j in range(outer.dim(isl.dim_type.param))]
        used = free_vars(extent) - set(names) - set(params)
        if used:            # a variable isl does not know here (a Let): no constant bound
            return None
        pa = isl.PwAff(f"[{', '.join(params)}] -> {{ [{', '.join(names)}] -> [({text})] }}")
        # the maximum over the range of the map: isl_pw_aff_max_val refused some of these
        # pieces ("expecting integer affine expression": a 2 x 7 tile of a fused loop)
        widest = isl.Map.from_pw_aff(pa.intersect_domain(outer)).range().dim_max_val(0)
        if not widest.is_int():
            return None
        return max(bound, widest.to_python())

    def first_user(self, node: isl.AstNode) -> TimedStatement | None:
        found: list[TimedStatement] = []

        def visit(n: isl.AstNode) -> bool:
            if found:
                return False
            if n.get_type() == isl.ast_node_type.user:
                name = n.user_get_expr().get_op_arg(0).get_id().get_name()
                found.append(self.by_name[name])
                return False
            return True

        node.foreach_descendant_top_down(visit)
        return found[0] if found else None

    def loop_info(self, iterator: str, body: isl.AstNode) -> Loop:
        k = int(iterator[1:])  # "t<k>": time dim k; loop dims are at even k >= 2
        ts = self.first_user(body)
        li = k // 2 - 1
        if ts is None or k % 2 or li >= len(ts.loops):
            return Loop(f"c{k}")
        return ts.loops[li]

    def bind_prefix(self, ts: TimedStatement, mapping: dict) -> None:
        """Loop values named by compute_at buffer offsets (tl__p<j>: the statement's loop j)
        -> the enclosing loop variables, or isl's expression when the loop was not emitted."""
        wanted = set()
        for x in walk_stmt(ts.stmt.body):
            for e in stmt_exprs(x):
                wanted |= {n for n in free_vars(e) if n.startswith(PREFIX)}
        for name in wanted - set(mapping):
            j = int(name[len(PREFIX):])
            it = f"t{2 + 2 * j}"
            if it in self.env:
                mapping[name] = self.env[it]
            else:
                pa = isl.PwMultiAff.from_map(ts.time).get_pw_aff(2 + 2 * j)
                dims = {d: mapping[d] for d in ts.stmt.dims}
                mapping[name] = pw_aff_expr(pa.gist(ts.stmt.domain), dims, self.params,
                                            names=list(ts.stmt.dims))

    def plain_local_indices(self, ts: TimedStatement, body: Stmt) -> Stmt:
        """`body` with each index into a local buffer that isl's loop expressions left with
        divisions replaced by the affine function of the loop variables it equals over
        the statement's instances, where there is one (isl's affine hull). A tile that
        does not divide its rows, under a loop fused with the batch loop, is copied out
        at row `127 - (120 f + 131 i + 127) mod 132 - 12 (f mod 11)` of the tile — which
        is `i`: written so, the tile's every index is a constant once unrolled and the
        tile stays in registers (a batched matmul's 12 x 32 tiles, which otherwise stay in
        memory, a store to them after every FMA)."""
        bufs = {id(L.buffer) for L in self.locals}

        def index(e: Expr) -> Expr:
            if not any(isinstance(x, (FloorDiv, FloorMod)) for x in walk(e)):
                return e
            plain = self.plain_index(ts, e)
            return e if plain is None else plain

        def load(y):
            if isinstance(y, Load) and id(y.buffer) in bufs:
                return Load(y.buffer, tuple(index(i) for i in y.indices))
            return None

        def go(x: Stmt) -> Stmt:
            x = map_children(x, go)
            if isinstance(x, Store) and id(x.buffer) in bufs:
                return Store(x.buffer, tuple(index(i) for i in x.indices), x.value,
                             x.atomic)
            return x

        return map_stmt(go(body), lambda e: map_expr(e, load))

    def plain_index(self, ts: TimedStatement, e: Expr) -> Expr | None:
        """The affine function of the enclosing loops' variables that `e` (an index over
        them, with divisions) equals on every instance of `ts`, or None. A strided loop's
        counter is one of those variables (a stage at a loop fused with another, its rows
        64 values apart: its buffer's row is the counter, `(v - ...) // 60 - ...` in v)."""
        names = {v.name: it for it, v in self.env.items()}
        used = free_vars(e)
        if not used <= set(names) | set(self.params):
            return None
        to_iters = {n: Var(it, int64) for n, it in names.items()}
        iters = sorted(self.env, key=lambda it: int(it[1:]))
        counters, ties = [], []
        for it in iters:
            if it in self.strided and self.env[it].name in used:
                # the strided loop's value in its counter's terms, so that isl's hull
                # finds the index in the counter (not a division of the value)
                k, first, step = self.strided[it]
                first = substitute(first, to_iters)
                first_text = affine_str(first)
                if first_text is None:
                    continue
                counters.append(f"k{it[1:]}")
                ties.append(f"{it} = {first_text} + {step} * k{it[1:]}")
                to_iters[self.env[it].name] = binary(Add, first, binary(
                    Mul, Var(counters[-1], int64), Const(step, int64)))
        text = affine_str(substitute(e, {n: x for n, x in to_iters.items() if n in used}))
        if text is None:
            return None
        key = (ts.stmt.name, tuple(iters))
        dom = self.loop_images.get(key)
        if dom is None:
            dom = self.image(ts)
            n = dom.dim(isl.dim_type.set)
            for k in reversed(range(n)):
                if f"t{k}" not in self.env:
                    dom = dom.project_out(isl.dim_type.set, k, 1)
            self.loop_images[key] = dom
        params = [dom.get_dim_name(isl.dim_type.param, k)
                  for k in range(dom.dim(isl.dim_type.param))]
        extra = sorted(v for v in used if v in self.params and v not in params)
        try:
            m = isl.Map(f"[{', '.join(params + extra)}] -> {{ [{', '.join(iters + counters)}]"
                        f" -> [x] : {' and '.join([f'x = {text}'] + ties)} }}")
            if counters:
                dom = dom.add_dims(isl.dim_type.set, len(counters))
            m = m.intersect_domain(dom.align_params(m.get_space().domain()))
            names_in = iters + counters
            for c in reversed(counters):        # the strided values: their counters say it
                at = names_in.index(f"t{c[1:]}")
                m = m.project_out(isl.dim_type.in_, at, 1)
                del names_in[at]
            hull = m.affine_hull()
            pa = isl.PwMultiAff.from_map(isl.Map.from_basic_map(hull)).get_pw_aff(0)
        except isl.Error:
            return None
        if pa.n_piece() != 1 or any(a.dim(isl.dim_type.div) for _, a in pa.get_pieces()):
            return None
        dims = dict(self.env)
        dims.update({c: self.strided[f"t{c[1:]}"][0] for c in counters})
        return pw_aff_expr(pa, dims, self.params, names=names_in)

    def unique(self, name: str) -> str:
        used = {v.name for v in self.env.values()} | self.kept_names
        if name not in used and name not in self.params:
            return name
        n = 1
        while f"{name}_{n}" in used or f"{name}_{n}" in self.params:
            n += 1
        return f"{name}_{n}"

    def dropped_gpu_loops(self, n: isl.AstNode) -> list[tuple[int, Loop, tuple[int, ...]]]:
        """The GPU-bound loops (time dim, loop, path before it) that isl did not emit (they
        take one value there) and that belong around node `n`: every statement below `n`
        has that loop (the same loop after the same path: not a loop of another stage that
        has the same name), no loop above `n` or already kept stands for it, and every loop
        isl emits below `n` is inner to it (otherwise it belongs further down)."""
        users: list[TimedStatement] = []
        fors: list[int] = []

        def visit(x: isl.AstNode) -> bool:
            kind = x.get_type()
            if kind == isl.ast_node_type.user:
                name = x.user_get_expr().get_op_arg(0).get_id().get_name()
                users.append(self.by_name[name])
                return False
            if kind == isl.ast_node_type.for_:
                fors.append(int(x.for_get_iterator().get_id().get_name()[1:]))
            return True

        n.foreach_descendant_top_down(visit)
        if not users:
            return []
        inner = min(fors, default=None)
        out = []
        for li, lp in enumerate(users[0].loops):
            d = 2 + 2 * li
            if lp.kind not in _GPU or d in self.kept or f"t{d}" in self.env or \
                    (inner is not None and d >= inner):
                continue
            path = users[0].path[:li + 2]
            if all(li < len(ts.loops) and ts.loops[li] == lp and ts.path[:li + 2] == path
                   for ts in users[1:]):
                out.append((d, lp, path))
        return out

    def node(self, n: isl.AstNode) -> Stmt:
        """The loop IR of one AST node (see `nodes`)."""
        return seq(self.nodes([n]))

    def nodes(self, kids: list[isl.AstNode]) -> list[Stmt]:
        """The loop IR of consecutive AST nodes, each inside the GPU-bound loops that isl
        did not emit there (`dropped_gpu_loops`), as loops of extent 1: the block or thread
        index is 0 in that dimension (other phases of the block may run more threads: a
        guard keeps the others out). A loop's variable is not read: isl wrote its value into
        the statements. Consecutive nodes share the loops they have in common: isl writes
        a stage's statements (an init and an update, a shared tile's copy and its readers)
        one after the other when every loop around them takes one value, and they must
        stay one kernel, one block."""
        out: list[Stmt] = []
        i = 0
        while i < len(kids):
            lost = self.dropped_gpu_loops(kids[i]) if self.gpu else []
            run, losts = [kids[i]], [lost]
            for k in kids[i + 1:] if lost else ():
                other = self.dropped_gpu_loops(k)
                if other[:1] != lost[:1]:
                    break
                run.append(k)
                losts.append(other)
            i += len(run)
            if not lost:
                out.append(self.translate(run[0]))
                continue
            common = lost
            for other in losts[1:]:
                j = 0
                while j < min(len(common), len(other)) and common[j] == other[j]:
                    j += 1
                common = common[:j]
            out.append(self.kept_loops(common, run))
        return out

    def kept_loops(self, loops: list[tuple[int, Loop, tuple[int, ...]]],
                   run: list[isl.AstNode]) -> Stmt:
        """`run` (AST nodes) inside the dropped GPU-bound `loops`, outer first."""
        names = [self.unique(lp.name.replace(".", "_")) for _, lp, _ in loops]
        dims = {d for d, _, _ in loops}
        self.kept |= dims
        self.kept_names |= set(names)
        try:
            body = seq(self.nodes(run)) if len(run) > 1 else self.translate(run[0])
        finally:
            self.kept -= dims
            self.kept_names -= set(names)
        for (d, lp, _), name in reversed(list(zip(loops, names))):
            # the buffers computed at the loop live in it, as in an emitted one
            body = self.allocate_locals(d, body, True)
            body = For(Var(name, int64), Const(0, int64), Const(1, int64), body, lp.kind,
                       lp.thread_tag)
        return body

    def translate(self, n: isl.AstNode) -> Stmt:
        t = n.get_type()
        if t == isl.ast_node_type.block:
            return seq(self.nodes(_block_children(n)))
        if t == isl.ast_node_type.for_:
            it = n.for_get_iterator().get_id().get_name()
            k_dim = int(it[1:])
            info = self.loop_info(it, n.for_get_body())
            v = Var(self.unique(info.name.replace(".", "_")), int64)
            init = self.expr(n.for_get_init())
            saved = self.env.get(it)
            self.env[it] = v
            try:
                if n.for_is_degenerate():
                    body = self.allocate_locals(k_dim, self.node(n.for_get_body()),
                                                info.kind in _GPU)
                    if info.kind in _GPU:     # bound: one iteration, on index 0
                        return For(v, simplify(init), Const(1, int64), body, info.kind,
                                   info.thread_tag)
                    return Let(v, simplify(init), body)
                inc = n.for_get_inc()
                if inc.get_type() != isl.ast_expr_type.int:
                    raise TensorlangError("internal: isl produced a loop with a symbolic stride")
                step = inc.get_val().to_python()
                cond = n.for_get_cond()
                op = cond.get_op_type()
                ub = self.expr(cond.get_op_arg(1))
                extent = ub - init + 1 if op == isl.ast_expr_op_type.le else ub - init
                if step != 1:
                    k = Var(self.unique(f"{v.name}_k"), int64)
                    self.strided[it] = (k, simplify(init), step)
                body = self.node(n.for_get_body())
                body = self.allocate_locals(
                    k_dim, body, info.kind in (LoopKind.PARALLEL, LoopKind.GPU_BLOCK,
                                               LoopKind.GPU_THREAD))
                init, extent = simplify(init), simplify(extent)
                if step == 1:
                    bound = None if isinstance(extent, Const) else \
                        self.extent_bound(k_dim, n.for_get_body(), extent)
                    return _loop(v, init, extent, body, info, bound)
                # a strided loop (isl found that only every step-th value has points): count
                # its iterations with k and let v = init + step * k
                trips = simplify((extent + (step - 1)) // step)
                body = Let(v, simplify(init + k * step), body)
                return _loop(k, Const(0, int64), trips, body, info)
            finally:
                self.strided.pop(it, None)
                if saved is None:
                    del self.env[it]
                else:
                    self.env[it] = saved
        if t == isl.ast_node_type.if_:
            cond = simplify(truth(self.expr(n.if_get_cond())))
            then = self.node(n.if_get_then_node())
            other = self.node(n.if_get_else_node()) if n.if_has_else_node() else None
            return If(cond, then, other)
        if t == isl.ast_node_type.user:
            call = n.user_get_expr()
            ts = self.by_name[call.get_op_arg(0).get_id().get_name()]
            args = [self.expr(call.get_op_arg(i + 1)) for i in range(call.get_op_n_arg() - 1)]
            mapping = dict(zip(ts.stmt.dims, args))
            mapping.update({p: v for p, v in self.params.items() if p not in mapping})
            self.bind_prefix(ts, mapping)
            body = map_stmt(ts.stmt.body, lambda e: simplify(substitute(e, mapping)))
            return self.plain_local_indices(ts, body) if self.locals else body
        raise TensorlangError(f"internal: unsupported isl AST node {t}")


def _block_children(n: isl.AstNode) -> list[isl.AstNode]:
    """The statements of a block node in order, those of nested blocks in their place (isl
    nests the blocks of a sequence: [[[a, b], c], d])."""
    kids = n.block_get_children()
    out: list[isl.AstNode] = []
    for i in range(kids.n_ast_node()):
        k = kids.get_at(i)
        out.extend(_block_children(k) if k.get_type() == isl.ast_node_type.block else [k])
    return out


def _loop(v: Var, init: Expr, extent: Expr, body: Stmt, info: Loop,
          bound: int | None = None) -> Stmt:
    """A loop; a vector or unrolled one whose extent varies is split into the full case
    (extent == its constant bound: vector/unrolled) and the rest (serial). `bound`: isl's
    constant bound on the extent, if any."""
    wide = info.kind in (LoopKind.VECTORIZED, LoopKind.UNROLLED)
    if isinstance(extent, Const):
        bound = None
    if not wide or isinstance(extent, Const) or info.max_extent is None:
        return For(v, init, extent, body, info.kind, info.thread_tag, bound)
    # the placed statement's loop takes at most info.max_extent values for fixed outer
    # loops, but isl's loop can run over more when it did not emit one of those outer loops
    # (its value follows from this one's: a stage's rows fused with its column tiles,
    # computed at a tile of the next that straddles two of them — lanes 6, 7 of one tile
    # and 0, 1 of the next in one loop over 0..7). `bound` is isl's bound on this loop's
    # extent: the full case is that wide; without a bound, an extent past it runs serially
    widest = info.max_extent if bound is None else max(info.max_extent, bound)
    full = Const(widest, extent.dtype)
    zero = Const(0, extent.dtype)
    if info.kind is LoopKind.VECTORIZED:
        # the tail of a vector loop is a vector loop too, its lanes past the extent masked
        # off: a register tile is then accessed by whole vectors only (a scalar tail's
        # dynamic index kept the whole tile in memory at sizes like 1000)
        masked = For(v, init, full, If(compare(LT, v, init + extent), body), info.kind)
        if bound is None:
            debug_print(2, f"astgen: vector loop {v.name}: isl gives no constant bound on its "
                           f"extent; an extent past {widest} runs serially")
            tail = If(compare(GT, extent, full), For(v, init, extent, body, LoopKind.SERIAL),
                      If(compare(GT, extent, zero), masked))
        else:
            tail = If(compare(GT, extent, zero), masked)
    else:   # an unrolled loop's tail keeps its bound: the backends unroll it with guards
        tail = For(v, init, extent, body, LoopKind.SERIAL, "",
                   None if bound is None else widest)
    return If(compare(EQ, extent, full), For(v, init, full, body, info.kind), tail)


def generate_loops(timed: list[TimedStatement], context: isl.Set,
                   params: dict[str, Var], locals_=()) -> Stmt:
    """Build the loop nest of all statements with isl's AST builder and translate it."""
    if not timed:
        return seq([])
    union = isl.UnionMap.from_map(timed[0].time)
    for ts in timed[1:]:
        union = union.union(isl.UnionMap.from_map(ts.time))
    width = timed[0].time.dim(isl.dim_type.out)
    ids = isl.IdList.alloc(context.get_ctx(), width)
    for k in range(width):
        ids = ids.add(isl.Id(f"t{k}"))
    build = isl.AstBuild.from_context(context).set_iterators(ids)
    executed: list[isl.UnionSet] = []

    def at_domain(node, leaf):          # the instances each statement call runs
        executed.append(leaf.get_schedule().domain())
        return node
    build, _keep = build.set_at_each_domain(at_domain)
    root = build.node_from_schedule_map(union)
    _check_coverage(union.domain().intersect_params(context), executed)
    body = _Translator(timed, params, locals_).node(root)
    return _allocate_rest(body, locals_)


def _check_coverage(want: isl.UnionSet, executed: list[isl.UnionSet]) -> None:
    """Every statement instance must be run by some call in isl's AST. islpy 2026.2.2's isl
    drops instances of a loop whose values are strided with an offset that is a floor of
    an outer loop ({ S[p, i] -> [p, 2i + floor(p/4)] : 0 <= p < 8, 0 <= i < 2 } gives
    S(p, 0) alone: a producer's fused loop split by 4 and computed at its consumer's
    column loop computed half its rows, and the consumer read the rest uninitialised);
    2026.2.1 and earlier are right there, and pyproject.toml excludes it. Those versions
    (2026.2.1, 2025.2.5) drop instances elsewhere: a local tile of 2 x 16 channels x 8
    columns of an int8 conv computed at its reader's column tile, its channels split by 16
    (`o.outer` from `2 * floor(f / 16)`) and its input channels by 4, misses the tile of the
    second half of the channels (tests/schedule/test_auto_tensorize.py). A wrong loop nest
    is never emitted: the missing instances are an error (the auto-scheduler drops such a
    candidate)."""
    got = want.empty(want.get_space())
    for e in executed:
        got = got.union(e)
    missing = want.subtract(got)
    if missing.is_empty():
        return
    point = missing.sample_point()
    raise TensorlangError(
        f"internal: isl's AST generator (islpy {getattr(isl, '__version__', '?')}) left "
        f"out statement instances, e.g. {point}; the loop nest would be wrong, so the "
        "schedule is refused. islpy 2026.2.2 drops the instances of strided loops whose "
        "offset is a floor of an outer loop (pip install 'islpy!=2026.2.2'); every version "
        "drops some of a loop whose bounds are floors of an outer loop split again: change "
        "a split factor or the loop order")


def _free_use(s: Stmt, buf) -> bool:
    """Whether `s` uses `buf` outside every allocation of it inside `s`."""
    if isinstance(s, Allocate) and s.buffer is buf:
        return False
    if isinstance(s, (For, Let, Allocate)):
        return _free_use(s.body, buf)
    if isinstance(s, Seq):
        return any(_free_use(x, buf) for x in s.stmts)
    if isinstance(s, If):
        return _free_use(s.then_body, buf) or (
            s.else_body is not None and _free_use(s.else_body, buf)) or \
            uses_buffer(If(s.cond, Seq(())), buf)
    return uses_buffer(s, buf)


def _allocate_rest(body: Stmt, locals_) -> Stmt:
    """Local buffers whose loop isl did not emit (one iteration): at the innermost statement
    that encloses every use not already inside an allocation of the buffer. A buffer stored
    outside the loop it is computed at (store_at, store_root) keeps its values from one
    iteration of the loops inside its store level to the next: it goes outside every loop
    (its store loop, when isl emits it, allocated it already: `allocate_locals`)."""
    into_loops = True

    def wrap(s: Stmt, buf) -> Stmt:
        if isinstance(s, (For, Let)) and not uses_buffer(_head(s), buf) and \
                (into_loops or isinstance(s, Let)):
            return _with_body(s, wrap(s.body, buf))
        if isinstance(s, Allocate):
            return Allocate(s.buffer, wrap(s.body, buf))
        if isinstance(s, Seq):
            users = [i for i, x in enumerate(s.stmts) if _free_use(x, buf)]
            if len(users) == 1:
                i = users[0]
                return Seq(s.stmts[:i] + (wrap(s.stmts[i], buf),) + s.stmts[i + 1:])
            a, b = users[0], users[-1] + 1
            return Seq(s.stmts[:a] + (Allocate(buf, seq(s.stmts[a:b])),) + s.stmts[b:])
        if isinstance(s, If) and not uses_buffer(If(s.cond, Seq(())), buf):
            t = _free_use(s.then_body, buf)
            f = s.else_body is not None and _free_use(s.else_body, buf)
            if t and not f:
                return If(s.cond, wrap(s.then_body, buf), s.else_body)
            if f and not t:
                return If(s.cond, s.then_body, wrap(s.else_body, buf))
        return Allocate(buf, s)

    for L in locals_:
        if _free_use(body, L.buffer):
            into_loops = not L.stored_outside
            body = wrap(body, L.buffer)
    return body


def _head(s: Stmt) -> Stmt:
    """A For or Let without its body (for use checks of its own expressions)."""
    if isinstance(s, For):
        return For(s.var, s.min, s.extent, Seq(()), s.kind, s.thread_tag)
    return Let(s.var, s.value, Seq(()))


def _with_body(s: Stmt, body: Stmt) -> Stmt:
    if isinstance(s, For):
        return For(s.var, s.min, s.extent, body, s.kind, s.thread_tag, s.max_extent)
    return Let(s.var, s.value, body)

