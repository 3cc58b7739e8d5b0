"""Graph rewrites: rules as small match functions, rule sets as data, and a driver that
records which rule fired where (`G.optimize`, `rewrite`).

A rule takes one node (whose inputs are already rewritten) and returns the node that
replaces it, or None. The driver walks the graph inputs-first, applies the rules of the
chosen passes to each node until none fires, merges structurally equal nodes (CSE) and
keeps only what the outputs need (DCE: unreachable nodes are never rebuilt).
`TL_DEBUG=1` prints every rule that fires.

Every default rule is exact in IEEE arithmetic, for every input including ±0, ±inf and NaN:

- `fold`: an op whose inputs are all constants becomes a constant (numpy's reference of
  the op; results up to `FOLD_MAX_ELEMENTS` elements, so that a broadcast is not
  materialised).
- `algebra`: x * 1, x / 1, x ** 1, x - (+0.0), x + (-0.0) → x (same shape and dtype only:
  a neutral element that broadcasts x is kept); for int64 also x + 0 → x and the absorbing
  x * 0 → zeros_like(x); -(-x) → x; relu(relu(x)) → relu(x); x + x → 2 * x and
  2 * x + x → 3 * x (exact: doubling is exact, and 3x is rounded once either way);
  transpose of transpose → one transpose (or none); reshape of reshape → one reshape;
  matmul(transpose(a), b) → matmul(a, b, ta=True) (the same products summed in the same
  order); broadcast minimisation (an elementwise op of broadcast values runs before the
  broadcast: exp(broadcast_to(x)) → broadcast_to(exp(x))). Not done for floats, because
  they are not exact there: x + 0.0 → x (-0.0 + 0.0 is +0.0) and x * 0 → 0 (inf * 0 and
  NaN * 0 are NaN).
- `cse`: nodes with the same op, inputs and attributes (constants: the same bytes; default
  attributes spelled out: sum(x) of a matrix is sum(x, axis=(0, 1))) are one. There are no
  random or impure ops in the graph layer to keep apart.

Opt-in, since it changes rounding: `reassociate` (the lecture's constant propagation,
c1 + (x + c2) → x + (c1 + c2)) and `factor` (a common factor hoisted: a*b + a*c →
a*(b + c)); pass them explicitly. Opt-in too: `merge_matmul`
(merged QKV: matmuls of one input by constant weights become one matmul and slices; the
same sums in the same order, up to 1 ulp where fused multiply-adds differ, see
`merge_matmuls`), and `conv_bn` (inference batch norm after a convolution with constant
weights and statistics folds into the weights and one bias per channel: conv2d(x, W *
scale) + shift, the rounding of a few products changed), and `batch_matmul` (a weight
gradient summed over a batch of matmuls becomes one matmul over the merged batch and row
axes).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

from ..config import debug_print
from .node import GraphError, Node, topological_order
from .ops import OPS

FOLD_MAX_ELEMENTS = 1 << 16
MAX_REWRITES_PER_NODE = 32
# readers of each node of the graph being rewritten (by the id of the node as rewritten; of
# the most read copy where CSE merged copies), for rules that must not duplicate a shared
# node; set by `rewrite`
_READERS: ContextVar[dict[int, int] | None] = ContextVar("readers", default=None)


def _shared(n: Node) -> bool:
    """Whether `n` has other readers than the node being rewritten (unknown: yes)."""
    readers = _READERS.get()
    return readers is None or readers.get(n.id, 2) > 1


@dataclass(frozen=True)
class Fired:
    """One application of a rule: to which node, and what replaced it."""

    rule: str
    node: str
    into: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.node} -> {self.into}"


# ------------------------------------------------------------------------------ helpers
def _const(n: Node) -> np.ndarray | None:
    return n.attr("value").array if n.op == "constant" else None


def _all(n: Node, value: float) -> bool:
    """A constant whose every element is `value` (the sign of zero included)."""
    a = _const(n)
    if a is None or a.size == 0:
        return False
    return bool(np.all(a == value) and np.all(np.signbit(a) == np.signbit(value)))


def _same_type(x: Node, like: Node) -> bool:
    return x.shape == like.shape and x.dtype == like.dtype


def _make(op: str, inputs, like: Node | None = None, **attrs) -> Node:
    from .api import make

    out = make(op, inputs, **attrs)
    if like is not None and (out.shape != like.shape or out.dtype != like.dtype):
        raise GraphError(f"internal: rewrite of {like.name} changed its type")
    return out


def _constant(array: np.ndarray, dtype: str, name: str) -> Node:
    from .api import constant

    return constant(np.asarray(array).astype(dtype), dtype, name=name)


# -------------------------------------------------------------------------------- rules
def rule_fold_constants(n: Node) -> Node | None:
    if n.op in ("variable", "constant") or not n.inputs or OPS[n.op].reference is None:
        return None
    arrays = [_const(i) for i in n.inputs]
    if any(a is None for a in arrays) or n.shape is None:
        return None
    if int(np.prod(n.shape, dtype=np.int64)) > FOLD_MAX_ELEMENTS:
        return None
    with np.errstate(all="ignore"):
        value = OPS[n.op].reference(*arrays, **n.kwargs)
    return _constant(value, n.dtype, f"{n.name}_folded")


def rule_neutral_element(n: Node) -> Node | None:
    if len(n.inputs) != 2:
        return None
    a, b = n.inputs
    if n.op == "mul":
        for x, c in ((a, b), (b, a)):
            if _all(c, 1.0) and _same_type(x, n):
                return x
    if n.op in ("div", "power") and _all(b, 1.0) and _same_type(a, n):
        return a
    if n.op == "sub" and _all(b, 0.0) and _same_type(a, n):
        return a                                     # x - (+0.0) == x, -0.0 included
    integer = np.dtype(n.dtype).kind in "iu"
    if n.op == "add":
        for x, c in ((a, b), (b, a)):
            if (_all(c, -0.0) or integer and _all(c, 0)) and _same_type(x, n):
                return x                 # x + (-0.0) == x; not x + (+0.0) unless integers
    if n.op == "mul" and integer:        # absorbing: x * 0 == 0 for integers only
        for x, c in ((a, b), (b, a)):
            if _all(c, 0) and n.shape is not None and _const(x) is None:
                return _make("zeros_like", (x,), n) if _same_type(x, n) else None
    return None


def rule_double_negation(n: Node) -> Node | None:
    if n.op == "neg" and n.inputs[0].op == "neg":
        return n.inputs[0].inputs[0]
    if n.op == "relu" and n.inputs[0].op == "relu":
        return n.inputs[0]                           # relu is idempotent
    return None


def rule_add_self(n: Node) -> Node | None:
    """x + x -> 2 * x; 2 * x + x (or x + 2 * x) -> 3 * x."""
    if n.op != "add":
        return None
    a, b = n.inputs
    if a is b and _same_type(a, n):
        return _make("mul", (_constant(2.0, n.dtype, f"{n.name}_two"), a), n)
    for m, x in ((a, b), (b, a)):
        if m.op == "mul" and _same_type(x, n) and _same_type(m, n):
            c, y = m.inputs
            if y is x and _all(c, 2.0) and c.shape == ():
                return _make("mul", (_constant(3.0, n.dtype, f"{n.name}_three"), x), n)
    return None


def rule_transpose_transpose(n: Node) -> Node | None:
    if n.op != "transpose" or n.inputs[0].op != "transpose":
        return None
    inner = n.inputs[0]
    x = inner.inputs[0]
    nd = len(x.shape)
    p1 = inner.attr("axes") or tuple(reversed(range(nd)))
    p2 = n.attr("axes") or tuple(reversed(range(nd)))
    p = tuple(p1[k] for k in p2)
    if p == tuple(range(nd)):
        return x
    return _make("transpose", (x,), n, axes=p)


def rule_reshape_reshape(n: Node) -> Node | None:
    if n.op == "reshape" and n.inputs[0].op == "reshape":
        return _make("reshape", (n.inputs[0].inputs[0],), n, shape=n.shape)
    return None


def rule_matmul_transposed_operand(n: Node) -> Node | None:
    """matmul(transpose(a), b): the matmul reads a transposed (ta=True) instead."""
    if n.op != "matmul":
        return None
    a, b = n.inputs
    for k, (t, flag) in enumerate(((a, "ta"), (b, "tb"))):
        if t.op != "transpose" or t.shape is None:
            continue
        nd = len(t.shape)
        axes = t.attr("axes") or tuple(reversed(range(nd)))
        if nd < 2 or tuple(axes) != tuple(range(nd - 2)) + (nd - 1, nd - 2):
            continue        # only a swap of the last two axes is a transposed operand
        ins = [a, b]
        ins[k] = t.inputs[0]
        attrs = n.kwargs
        attrs[flag] = not attrs.get(flag, False)
        return _make("matmul", tuple(ins), n, **attrs)
    return None


def rule_hoist_common_factor(n: Node) -> Node | None:
    """a*b + a*c -> a*(b + c) (and with -): one multiply fewer, NOT exact in floating point
    (the products round separately on one side): opt-in, the `factor` pass. Only products
    are factored — never a division (x/a + y/a is not (x + y)/a in integer arithmetic)."""
    if n.op not in ("add", "sub") or any(i.op != "mul" for i in n.inputs):
        return None
    (p, q) = n.inputs
    for a in dict.fromkeys(p.inputs):
        if a not in q.inputs:
            continue
        b = p.inputs[1] if p.inputs[0] is a else p.inputs[0]
        c = q.inputs[1] if q.inputs[0] is a else q.inputs[0]
        out = _make("mul", (a, _make(n.op, (b, c))))
        return out if _same_type(out, n) else None
    return None


UNARY_ELEMENTWISE = ("neg", "exp", "log", "sin", "cos", "tanh", "sqrt", "sigmoid", "relu")
BINARY_ELEMENTWISE = ("add", "sub", "mul", "div", "power")


def rule_broadcast_late(n: Node) -> Node | None:
    """Broadcast minimisation: an elementwise op of broadcast values runs on the values
    before the broadcast — f(broadcast_to(x)) -> broadcast_to(f(x)), and f(broadcast_to(x),
    broadcast_to(y)) (or a scalar constant for one side) -> broadcast_to(f(x, y)). Exact:
    the same values are computed, fewer times. Only when a broadcast it reads goes away
    with it (no other reader): otherwise the graph would gain a broadcast."""
    if n.shape is None or not n.inputs:
        return None
    if not any(i.op == "broadcast_to" and not _shared(i) for i in n.inputs):
        return None
    if n.op in UNARY_ELEMENTWISE and n.inputs[0].op == "broadcast_to":
        x = n.inputs[0].inputs[0]
        inner = _make(n.op, (x,), **n.kwargs)
    elif n.op in BINARY_ELEMENTWISE and len(n.inputs) == 2 and \
            any(i.op == "broadcast_to" for i in n.inputs):
        ins = []
        for i in n.inputs:
            c = _const(i)
            if i.op == "broadcast_to":
                ins.append(i.inputs[0])
            elif c is not None and c.size == 1:
                ins.append(i)
            else:
                return None
        inner = _make(n.op, tuple(ins), **n.kwargs)
    else:
        return None
    if inner.dtype != n.dtype or inner.shape is None or inner.shape == n.shape:
        return None
    out = _make("broadcast_to", (inner,), shape=n.shape)
    return out if _same_type(out, n) else None


def rule_batched_weight_gradient(n: Node) -> Node | None:
    """sum over the batch of a[b]^T c[b] (the weight gradient of a batched input times a
    matrix, as autodiff writes it: sum_like(matmul(a, c, ta=True), W)) -> one matmul of
    the operands with their batch and row axes merged, (B*K, P)^T (B*K, Q). The same
    products, summed in another order: opt-in (the `batch_matmul` pass)."""
    if n.op != "sum_like" or n.shape is None or len(n.shape) != 2:
        return None
    m = n.inputs[0]
    if m.op != "matmul" or not m.attr("ta") or m.attr("tb") or m.shape is None:
        return None
    a, c = m.inputs
    if a.shape is None or c.shape is None or len(a.shape) < 3 or \
            a.shape[:-2] != c.shape[:-2] or tuple(m.shape[-2:]) != tuple(n.shape):
        return None
    rows = int(np.prod(a.shape[:-1]))
    a2 = _make("reshape", (a,), shape=(rows, a.shape[-1]))
    c2 = _make("reshape", (c,), shape=(rows, c.shape[-1]))
    out = _make("matmul", (a2, c2), ta=True, tb=False)
    return out if _same_type(out, n) else None


def rule_reassociate_constants(n: Node) -> Node | None:
    """c1 + (x + c2) -> x + (c1 + c2): NOT exact in floating point (opt-in)."""
    if n.op != "add":
        return None
    for c1, inner in (n.inputs, tuple(reversed(n.inputs))):
        if _const(c1) is None or inner.op != "add":
            continue
        for x, c2 in (inner.inputs, tuple(reversed(inner.inputs))):
            if _const(c2) is not None and _const(x) is None:
                folded = _constant(_const(c1) + _const(c2), n.dtype, f"{n.name}_c")
                out = _make("add", (x, folded))
                return out if _same_type(out, n) else None
    return None


def _channel_vector(c: np.ndarray | None, conv: Node) -> np.ndarray | None:
    """A constant that varies at most along the conv's output channels (shape (1, C, 1, 1),
    (C, 1, 1), or one value): those values per channel, else None."""
    if c is None or conv.shape is None or c.ndim > 4:
        return None
    oc = conv.shape[1]
    full = c.reshape((1,) * (4 - c.ndim) + c.shape)
    if full.shape[0] != 1 or full.shape[2:] != (1, 1) or full.shape[1] not in (1, oc):
        return None
    return np.broadcast_to(full.reshape(-1), (oc,))


def _conv_const_weight(x: Node) -> bool:
    return x.op == "conv2d" and _const(x.inputs[1]) is not None and x.shape is not None


def rule_conv_scale(n: Node) -> Node | None:
    """conv2d(x, W) * c, c constant per output channel -> conv2d(x, W * c) (scales the
    weights once; the products round differently: opt-in, the `conv_bn` pass)."""
    if n.op != "mul":
        return None
    for conv, c in (n.inputs, tuple(reversed(n.inputs))):
        v = _channel_vector(_const(c), conv) if _conv_const_weight(conv) else None
        if v is None:
            continue
        w = _const(conv.inputs[1]) * v.reshape(-1, 1, 1, 1)
        out = _make("conv2d", (conv.inputs[0], _constant(w, conv.dtype, f"{conv.name}_w")),
                    **conv.kwargs)
        return out if _same_type(out, n) else None
    return None


def rule_conv_shift(n: Node) -> Node | None:
    """(conv2d(x, W) + b) * c -> conv2d(x, W) * c + b * c, and conv2d(...) - b ->
    conv2d(...) + (-b), for constants per output channel (batch norm's affine map, which
    `rule_conv_scale` and `rule_reassociate_constants` then fold into the weights and one
    bias): the `conv_bn` pass."""
    if n.op == "sub" and _conv_const_weight(n.inputs[0]) and \
            _channel_vector(_const(n.inputs[1]), n.inputs[0]) is not None:
        b = _const(n.inputs[1])
        out = _make("add", (n.inputs[0], _constant(-b, b.dtype, f"{n.name}_neg")))
        return out if _same_type(out, n) else None
    if n.op != "mul":
        return None
    for inner, c in (n.inputs, tuple(reversed(n.inputs))):
        if inner.op != "add" or _const(c) is None:
            continue
        for conv, b in (inner.inputs, tuple(reversed(inner.inputs))):
            if not _conv_const_weight(conv) or _channel_vector(_const(c), conv) is None or \
                    _channel_vector(_const(b), conv) is None:
                continue
            scaled = _make("mul", (conv, c))
            scaled = rule_conv_scale(scaled) or scaled
            bc = _const(b) * _const(c)
            out = _make("add", (scaled, _constant(bc, bc.dtype, f"{n.name}_b")))
            return out if _same_type(out, n) else None
    return None


def merge_matmuls(outputs: list[Node]) -> tuple[list[Node], list[Fired]]:
    """Matmuls that read one input with different constant weights of one row count
    (attention's Q, K and V projections) become one matmul on the weights concatenated
    along their columns, and a slice of its columns each. Each output element is still
    the same k-sum in the same order in tensorlang's kernels, but not always the same
    bits: where a column moves between a full vector and a vector tail, one multiply-add
    may be rounded separately instead of fused (1 ulp). Hence opt-in."""
    order = topological_order(outputs)
    groups: dict[tuple, list[Node]] = {}
    for n in order:
        if n.op != "matmul" or n.shape is None or n.attr("tb") or len(n.inputs) != 2:
            continue
        a, w = n.inputs
        if _const(w) is None or _const(w).ndim != 2:
            continue
        groups.setdefault((a.id, bool(n.attr("ta")), w.shape[0], n.dtype), []).append(n)
    merged: dict[int, tuple[list[Node], int]] = {}
    for members in groups.values():
        if len(members) > 1:
            for k, m in enumerate(members):
                merged[m.id] = (members, k)
    fired: list[Fired] = []
    new: dict[int, Node] = {}
    built: dict[int, Node] = {}
    for n in order:
        if n.id in merged:
            members, k = merged[n.id]
            key = members[0].id
            if key not in built:
                w = np.concatenate([_const(m.inputs[1]) for m in members], axis=1)
                a = new[members[0].inputs[0].id]
                built[key] = _make("matmul", (a, _constant(w, n.dtype, f"{n.name}_wcat")),
                                   ta=bool(n.attr("ta")), tb=False)
            off = sum(m.shape[-1] for m in members[:k])
            out = _make("slice", (built[key],), n, axis=len(n.shape) - 1, start=off,
                        stop=off + n.shape[-1])
            fired.append(Fired("merge_matmul", n.name, out.name))
            new[n.id] = out
            continue
        ins = tuple(new[i.id] for i in n.inputs)
        new[n.id] = n if all(x is y for x, y in zip(ins, n.inputs)) else \
            Node(n.op, ins, n.kwargs, n.shape, n.dtype, n.name)
    return [new[o.id] for o in outputs], fired


PASSES: dict[str, tuple[Callable[[Node], Node | None], ...]] = {
    "fold": (rule_fold_constants,),
    "algebra": (rule_neutral_element, rule_double_negation, rule_add_self,
                rule_transpose_transpose, rule_reshape_reshape,
                rule_matmul_transposed_operand, rule_broadcast_late),
    "cse": (),                  # the driver's table of structural keys
    "reassociate": (rule_reassociate_constants,),
    "merge_matmul": (),         # a whole-graph pass: merge_matmuls
    "conv_bn": (rule_conv_shift, rule_conv_scale, rule_reassociate_constants),
    "batch_matmul": (rule_batched_weight_gradient,),
    "factor": (rule_hoist_common_factor,),
}
DEFAULT_PASSES = ("fold", "algebra", "cse")


# ------------------------------------------------------------------------------- driver
def _key(n: Node):
    if n.op == "variable":
        return ("variable", n.id)             # two variables are never one
    return (n.op, tuple(i.id for i in n.inputs), _normal_attrs(n), n.shape, n.dtype)


def _normal_attrs(n: Node) -> tuple:
    """The attributes with their defaults spelled out, so that CSE sees sum(x) and
    sum(x, axis=(0, 1)) of a matrix, or transpose(m) and transpose(m, (1, 0)), as one."""
    from . import shapes as S

    attrs = dict(n.attrs)
    shp = n.inputs[0].shape if n.inputs else None
    if shp is not None:
        try:
            if n.op in ("sum", "mean", "max") and "axis" in attrs:
                attrs["axis"] = S.axes(attrs["axis"], len(shp))
            elif n.op == "transpose":
                attrs["axes"] = tuple(S.permutation(attrs.get("axes"), len(shp)))
            elif n.op in ("concat", "slice", "unslice", "softmax", "log_softmax") and \
                    "axis" in attrs:
                attrs["axis"] = attrs["axis"] % max(1, len(shp))
        except (ValueError, TypeError):
            pass
    return tuple(sorted(attrs.items()))


def rewrite(outputs, passes=DEFAULT_PASSES) -> tuple[list[Node], list[Fired]]:
    """`G.optimize` with its record: the outputs after the passes' rules (see the module doc)
    and the list of rules that fired, each a `Fired(rule, node, into)` that prints as
    ``rule: node -> into``. `outputs` a list of nodes; `passes` names from `PASSES`.

        outs, fired = G.rewrite([G.exp(a) * b, G.exp(a) + c])
        for f in fired: print(f)       # cse: exp_3 -> exp_1  (one exp is kept)
    """
    if isinstance(outputs, Node):
        raise GraphError("rewrite: outputs must be a list of nodes, got one node; write "
                         "G.rewrite([node]) (or G.optimize(node) for the node alone)")
    outputs = list(outputs)
    bad = [o for o in outputs if not isinstance(o, Node)]
    if bad:
        raise GraphError(f"rewrite: outputs must be graph nodes, got {type(bad[0]).__name__}")
    if isinstance(passes, str):
        raise GraphError(f"rewrite: passes must be a list of pass names, got the string "
                         f"{passes!r}; write [{passes!r}]")
    unknown = [p for p in passes if p not in PASSES]
    if unknown:
        raise GraphError(f"optimize: unknown passes {unknown}; the passes are "
                         f"{sorted(PASSES)}")
    rules = [r for p in passes for r in PASSES[p]]
    cse = "cse" in passes
    fired: list[Fired] = []
    if "merge_matmul" in passes:
        outputs, fired = merge_matmuls(outputs)
    new: dict[int, Node] = {}
    table: dict[object, Node] = {}
    order = topological_order(outputs)
    readers: dict[int, int] = {}
    for n in order:
        for i in n.inputs:
            readers[i.id] = readers.get(i.id, 0) + 1
    for o in outputs:
        readers[o.id] = readers.get(o.id, 0) + 1
    uses: dict[int, int] = {}          # the same, by the id of each node as rewritten
    token = _READERS.set(uses)
    try:
        _rewrite_nodes(order, rules, cse, new, table, fired, readers, uses)
    finally:
        _READERS.reset(token)
    for f in fired:
        debug_print(1, f"optimize: {f}")
    return [new[o.id] for o in outputs], fired


def _rewrite_nodes(order, rules, cse, new, table, fired, readers, uses) -> None:
    for n in order:
        ins = tuple(new[i.id] for i in n.inputs)
        m = n if all(x is y for x, y in zip(ins, n.inputs)) else \
            Node(n.op, ins, n.kwargs, n.shape, n.dtype, n.name)
        for _ in range(MAX_REWRITES_PER_NODE):
            for rule in rules:
                r = rule(m)
                if r is not None and r is not m:
                    fired.append(Fired(rule.__name__.removeprefix("rule_"), m.name, r.name))
                    m = r
                    break
            else:
                break
        if cse:
            k = _key(m)
            if k in table and table[k] is not m:
                fired.append(Fired("cse", m.name, table[k].name))
                m = table[k]
            else:
                table[k] = m
        new[n.id] = m
        # a node that CSE found twice counts the readers of one of its copies: the copies
        # were separate nodes of the graph, each its own broadcast to move
        uses[m.id] = max(uses.get(m.id, 0), readers.get(n.id, 0))


def optimize(nodes, passes=None):
    """Equivalent nodes after graph rewrites (`passes`: names from `PASSES`; default the
    exact ones, DEFAULT_PASSES). A node gives a node, a list or tuple a list."""
    single = isinstance(nodes, Node)
    outs, _ = rewrite([nodes] if single else list(nodes),
                      DEFAULT_PASSES if passes is None else tuple(passes))
    return outs[0] if single else outs

