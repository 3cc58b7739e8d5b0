"""Fusion: which graph nodes run as one kernel, and the kernel's tensor expressions.

`fuse` partitions a graph with concrete shapes into groups, each compiled to one kernel
whose value is its last node's. It is a pass over the graph, run by the executor for every
plan (`ex.kernels` shows the groups it made):

- Elementwise chains: an elementwise node joins the group of its only reader when that
  reader is elementwise of the same shape and reads it once (nothing computed twice); it
  is inlined there (one TE compute).
- Producers of reductions: an elementwise node whose only reader is a reduction reads each
  element once too, so it joins and is inlined (`sum(a * b)` is one kernel).
- Rows (CPU): the statistics of a row and what reads them — a reduction over the last axis
  with kept dimensions (mean, sum, max, min), elementwise nodes of the row's shape or of
  the statistics' shape (R..., 1), even when several members read them — join the group of
  their readers when every reader is in it. Softmax written out, layer norm, and a
  reduction's epilogue become one kernel computed row by row (`cpu_schedules`, kind
  "rows"), each row read from memory once.
- Epilogues: a matmul or conv2d heads the group of its only elementwise reader when that
  group's output is elementwise of the matmul's shape (one per group, none in a row group
  or a reduction's group); its output tile goes through the epilogue (bias, relu, a folded
  batch norm) to memory once.

A node that an output is, or that a node outside the group reads, never joins (one value
leaves a kernel). A group reads at most MAX_INPUTS arrays.
"""

from __future__ import annotations

import tensorlang as tl

from . import shapes as S
from .node import Node
from .ops import OPS

MAX_INPUTS = 64         # arrays one fused kernel reads
ROW_REDUCERS = ("sum", "mean", "max", "min")
ANCHORS = ("matmul", "conv2d")   # kinds that head a group with an elementwise epilogue
INLINE_MAX_NODES = 24   # a member read twice is inlined (recomputed) only when this small


def kind_of(op: str, attrs: tuple, shapes: tuple, dtypes: tuple) -> tuple[str, tuple]:
    """The schedule kind of one op for concrete inputs (its TE definition says it), and
    which inputs its kernel reads (not those it takes for their shape only, as `unreduce`
    and `sum_like` take the tensor they fit)."""
    ins = [tl.placeholder(s, d, name=f"in{k}") for k, (s, d) in enumerate(zip(shapes, dtypes))]
    kw = dict(attrs)
    t, kind = OPS[op].te(ins, list(shapes), tuple(OPS[op].shape(*shapes, **kw)), **kw)
    return kind, tuple(k for k, x in enumerate(ins) if reads_tensor(t, x))


def _row_reduction(n: Node, shapes) -> bool:
    """A reduction over the last axis only, keeping it (shape (R..., 1)), of rank >= 2."""
    if n.op not in ROW_REDUCERS or not n.attr("keepdims"):
        return False
    shp = shapes[n.inputs[0].id]
    return len(shp) >= 2 and S.axes(n.attr("axis"), len(shp)) == (len(shp) - 1,)


def fuse(order: list[Node], shapes: dict, dtypes: dict, outputs: list[Node],
         target: str = "llvm") -> list[list[Node]]:
    """The graph's nodes (`order`: topological, `shapes`/`dtypes` by node id) in fused
    groups, in an order that runs each group after its inputs' groups (see the module)."""
    kinds, readers = {}, {}
    for n in order:
        if n.op in ("variable", "constant"):
            continue
        kinds[n.id], read = kind_of(n.op, n.attrs, tuple(shapes[i.id] for i in n.inputs),
                                    tuple(dtypes[i.id] for i in n.inputs))
        for i in dict.fromkeys(n.inputs[k] for k in read):   # a shape alone is no read
            readers.setdefault(i.id, []).append(n)
    g = _Grouping(shapes, kinds, {o.id for o in outputs},
                  target == "llvm" or str(target).startswith("llvm "))
    # readers are decided before their producers (reverse order), so that each group's
    # members and inputs are known when a producer asks to join it
    for n in reversed(order):
        if n.op not in ("variable", "constant"):
            g.place(n, readers.get(n.id, []))
    anchored = set()               # a matmul heads at most one group, as its epilogue
    for n in order:
        rs = readers.get(n.id, [])
        if kinds.get(n.id) in ANCHORS and _joins(n, rs, kinds, shapes, g.keep):
            r = g.root[rs[0].id]
            grown = (g.inputs[r] - {n.id}) | g.inputs[n.id]
            # an epilogue is elementwise of the anchor's shape (the blocked schedule tiles
            # the group's output as the matmul's); a reduction's group that the reader
            # joined as its producer (sum(relu(x @ w), axis=1)) takes no anchor
            epilogue = kinds[r] == "elementwise" and shapes[r] == shapes[n.id]
            if r not in anchored and epilogue and not g.rowwise(r) and \
                    len(grown) <= MAX_INPUTS:
                anchored.add(r)
                del g.inputs[n.id]
                g.root[n.id], g.inputs[r] = r, grown
    members: dict[int, list[Node]] = {}
    for n in order:
        if n.id in g.root:
            members.setdefault(g.root[n.id], []).append(n)
    return [members[n.id] for n in order if n.id in members]


def _joins(n: Node, readers: list[Node], kinds, shapes, keep) -> bool:
    """Whether n can be computed inside the kernel of its only reader: the reader is
    elementwise, reads n once, has n's shape (nothing is computed twice), and n is not an
    output."""
    return (n.id not in keep and len(readers) == 1 and kinds.get(readers[0].id) == "elementwise"
            and sum(i is n for i in readers[0].inputs) == 1
            and shapes[readers[0].id] == shapes[n.id])


class _Grouping:
    """The groups made so far: each node's group (by its output's id), each group's inputs,
    and for row groups their row length."""

    def __init__(self, shapes, kinds, keep, rows: bool):
        self.shapes, self.kinds, self.keep, self.rows = shapes, kinds, keep, rows
        self.root: dict[int, int] = {}
        self.inputs: dict[int, set[int]] = {}
        self.width: dict[int, int] = {}       # row groups: the rows' length
        self.reduces: set[int] = set()        # groups with a member row reduction

    def rowwise(self, r: int) -> bool:
        """Whether group r has members other than an elementwise chain of its shape."""
        return r in self.width and (r in self.reduces or self.width[r] !=
                                    self.shapes[r][-1] or self.kinds[r] != "elementwise")

    def place(self, n: Node, rs: list[Node]) -> None:
        r = self._group_to_join(n, rs)
        if r is not None:
            grown = (self.inputs[r] - {n.id}) | {i.id for i in n.inputs}
            if len(grown) <= MAX_INPUTS:
                self.root[n.id], self.inputs[r] = r, grown
                if _row_reduction(n, self.shapes):
                    self.reduces.add(r)
                    self.width[r] = self.shapes[n.inputs[0].id][-1]
                return
        self.root[n.id], self.inputs[n.id] = n.id, {i.id for i in n.inputs}
        shp = self.shapes[n.id]
        if self.rows and len(shp) >= 2 and self.kinds[n.id] == "elementwise":
            self.width[n.id] = shp[-1]
        elif self.rows and _row_reduction(n, self.shapes):
            self.width[n.id] = self.shapes[n.inputs[0].id][-1]

    def _group_to_join(self, n: Node, rs: list[Node]) -> int | None:
        """The group (its output's id) that n joins, or None (see the module's rules)."""
        shapes, kinds, root = self.shapes, self.kinds, self.root
        kind = kinds[n.id]
        if kind == "elementwise" and _joins(n, rs, kinds, shapes, self.keep):
            return root[rs[0].id]
        if n.id in self.keep or not rs or len({root[x.id] for x in rs}) != 1:
            return None
        r = root[rs[0].id]
        once = len(rs) == 1 and sum(i is n for i in rs[0].inputs) == 1
        if kind == "elementwise" and once and kinds[rs[0].id] == "reduce" and rs[0].id == r:
            return r       # what the group's reduction reduces, each element read once
        if r not in self.width:
            return None
        out, width, mine = shapes[r], self.width[r], shapes[n.id]
        if len(mine) != len(out) or mine[:-1] != out[:-1]:
            return None
        if _row_reduction(n, shapes):
            w = shapes[n.inputs[0].id][-1]
            return r if w == width or width == 1 else None
        if kind != "elementwise":
            return None
        if mine[-1] == 1 and width != 1:
            return r        # per-row values (statistics and functions of them)
        if mine[-1] == width and (r in self.reduces or (once and _row_reduction(rs[0], shapes))):
            return r        # the rows themselves, read by the group's reductions
        return None


def reads_tensor(t: tl.Tensor, x: tl.Tensor) -> bool:
    """Whether computing `t` reads `x`, directly or through other computes."""
    seen, todo = set(), [t]
    while todo:
        y = todo.pop()
        if y is x:
            return True
        if id(y.op) not in seen:
            seen.add(id(y.op))
            todo.extend(getattr(y.op, "input_tensors", ()))
    return False


def _computes(tensors: list) -> list:
    """Every compute the members' tensors are made of (a mean's sum and scaling, softmax's
    stages), in an order that puts each after the computes it reads."""
    seen, order = set(), []

    def visit(t):
        if id(t.op) in seen or not hasattr(t.op, "body"):
            return
        seen.add(id(t.op))
        for x in t.op.input_tensors:
            visit(x)
        order.append(t)
    for t in tensors:
        visit(t)
    return order


def _dims(t) -> tuple[int, ...]:
    return tuple(int(x.value) for x in t.shape)


def inline_members(tensors: list, keep) -> list:
    """Give each compute of the group the bodies of the members it reads substituted in, as
    compute_inline would, but at the TE level and in time linear in the members' sizes: a
    member read at its own axes contributes its expression as it is (not a copy), so a
    chain of 10,000 elementwise nodes fuses in one pass, with no schedule and dependence
    analysis per member. Staying computes of their own: the last tensor, `keep` (a matmul
    heading the group), reductions, the stages inside one op (softmax's), per-row values
    (last axis 1 in a group whose rows are longer) and members read several times whose
    bodies are not small (row groups schedule those per row). Returns the members (not the
    last) that stay."""
    from ..ir.expr import Load, Var
    from ..ir.visit import map_expr, substitute, walk

    out = tensors[-1]
    members = {id(t) for t in tensors}
    order = _computes(tensors)
    width = max((_dims(t)[-1] for t in order if t.shape), default=1)
    uses: dict[int, int] = {}
    for t in order:
        for x in walk(t.op.body):
            if isinstance(x, Load) and isinstance(x.buffer, tl.Tensor):
                uses[id(x.buffer)] = uses.get(id(x.buffer), 0) + 1
    inlined: dict[int, tuple[list[str], object]] = {}
    kept = []
    for t in order:
        def fn(e):
            if isinstance(e, Load) and id(e.buffer) in inlined:
                axis, value = inlined[id(e.buffer)]
                if all(isinstance(x, Var) and x.name == a for x, a in zip(e.indices, axis)):
                    return value
                return substitute(value, dict(zip(axis, e.indices)))
            return None

        body = map_expr(t.op.body, fn)
        per_row = len(t.shape) >= 2 and _dims(t)[-1] == 1 < width
        stays = t is out or t is keep or id(t) not in members or \
            bool(t.op.reduce_axis) or per_row or \
            (uses.get(id(t), 0) > 1 and sum(1 for _ in walk(body)) > INLINE_MAX_NODES)
        if stays:
            if body is not t.op.body:
                t.op.set_body(body)
            if id(t) in members and t is not out and t is not keep:
                kept.append(t)
        else:
            inlined[id(t)] = ([a.name for a in t.op.axis], body)
    return kept
