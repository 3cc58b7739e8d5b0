"""Cost-guided graph search with the generated substitutions (TASO's optimizer).

Each shipped rule (`substitutions.load()`) is a pattern over graph nodes in both directions
(a direction whose right side names an input the left does not bind is skipped, as is one
whose left side is a bare input). The cost of a graph is the sum, over the kernels the
executor would run for it (`fusion.fuse`), of each kernel's time measured on this machine
— compiled, run on random inputs, its median kept in a cache (in memory and in
`~/.cache/tensorlang/kernel_times.json`, keyed by the kernel's structure, shapes and the
host CPU). Best-first search: the cheapest graph found so far is expanded by every rule at
every node, each result normalised by the exact default passes (fold, algebra, CSE); a
result is kept when its cost is below alpha times the best cost (TASO's relaxation: a
slightly worse graph may lead to a much better one) and becomes the best when it is
MIN_GAIN cheaper (measurements are noisy), until the budget is spent. `G.search(nodes)`
returns the best graph with what was applied and the predicted and measured times.

Rules are verified on fixed small shapes (`substitutions.verify`); applied here only where
every operand has the rule's rank (2 for the matrix rules, 4 for the convolution rules)
and the rewritten node has the node's shape and dtype.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import pathlib
import time
from dataclasses import dataclass, field

import numpy as np

from ..config import debug_print
from . import substitutions as S
from .node import GraphError, Node, topological_order
from .rewrite import DEFAULT_PASSES, rewrite

ALPHA = 1.05
BATCH_S = 2e-4       # a kernel is timed in batches of calls at least this long
MIN_GAIN = 0.03      # a graph is the new best only when this much cheaper (timing noise)
RANK = {"matrix": 2, "conv": 4}


# ------------------------------------------------------------------------------ patterns
def _matches(term, n: Node, env: dict, rank: int) -> bool:
    """Whether node n has the shape of term, binding the term's inputs in env."""
    if term[0] == "in":
        if n.shape is None or len(n.shape) != rank:
            return False
        bound = env.get(term[1])
        if bound is None:
            env[term[1]] = n
            return True
        return bound is n
    op, args = term[0], term[1:]
    if op in ("add", "mul", "relu", "matmul", "conv2d", "transpose"):
        if n.op != op or len(n.inputs) != len(args):
            return False
        if op == "matmul" and (n.attr("ta") or n.attr("tb")):
            return False
        if op == "transpose" and n.attr("axes") not in (None, (1, 0)):
            return False
        if op == "conv2d" and (n.attr("stride") != 1 or n.attr("padding") != 1):
            return False
    elif op.startswith("concat"):
        if n.op != "concat" or n.attr("axis") != int(op[6]) or len(n.inputs) != 2:
            return False
    elif op.startswith("split"):
        x = n.inputs[0] if n.op == "slice" else None
        if x is None or x.shape is None or n.attr("axis") != int(op[5]):
            return False
        d = x.shape[n.attr("axis")]
        want = (0, d // 2) if op[6] == "a" else (d // 2, d)
        if d % 2 or (n.attr("start"), n.attr("stop")) != want:
            return False
    else:
        return False
    return all(_matches(t, i, env, rank) for t, i in zip(args, n.inputs))


def _build(term, env: dict) -> Node:
    from . import api as G

    if term[0] == "in":
        return env[term[1]]
    op = term[0]
    args = [_build(t, env) for t in term[1:]]
    if op in ("add", "mul", "relu", "transpose"):
        return G.make(op, tuple(args), **({"axes": None} if op == "transpose" else {}))
    if op == "matmul":
        return G.matmul(*args)
    if op == "conv2d":
        return G.conv2d(args[0], args[1], stride=1, padding=1)
    if op.startswith("concat"):
        return G.concat(args, axis=int(op[6]))
    ax = int(op[5])
    d = args[0].shape[ax]
    return G.slice(args[0], ax, 0 if op[6] == "a" else d // 2, d // 2 if op[6] == "a" else d)


@dataclass(frozen=True)
class Pattern:
    name: str            # "lhs => rhs"
    lhs: tuple
    rhs: tuple
    rank: int


def patterns(rules=None) -> list[Pattern]:
    """Both directions of every rule that can be applied as a rewrite."""
    out = []
    for r in rules if rules is not None else S.load():
        a, b = S.parse(r["lhs"]), S.parse(r["rhs"])
        for lhs, rhs in ((a, b), (b, a)):
            if lhs[0] == "in" or not set(S.names(rhs)) <= set(S.names(lhs)):
                continue
            out.append(Pattern(f"{S.text(lhs)} => {S.text(rhs)}", lhs, rhs,
                               RANK[r["domain"]]))
    return out


def rewrites(outputs: list[Node], pats: list[Pattern]):
    """Every graph one pattern application away: (new outputs, pattern, node name)."""
    by_root: dict[str, list[Pattern]] = {}
    for p in pats:
        root = p.lhs[0]
        key = "concat" if root.startswith("concat") else "slice" if root.startswith("split") \
            else root
        by_root.setdefault(key, []).append(p)
    for n in topological_order(outputs):
        for p in by_root.get(n.op, ()):
            env: dict = {}
            if not _matches(p.lhs, n, env, p.rank):
                continue
            try:
                new = _build(p.rhs, env)
            except (GraphError, ValueError):
                continue
            if new.shape != n.shape or new.dtype != n.dtype:
                continue
            out, _ = rewrite(_replace(outputs, n, new), DEFAULT_PASSES)   # normalised
            yield out, p, n.name


def _replace(outputs: list[Node], old: Node, new: Node) -> list[Node]:
    done: dict[int, Node] = {old.id: new}
    for n in topological_order(outputs):
        if n.id in done:
            continue
        ins = tuple(done.get(i.id, i) for i in n.inputs)
        done[n.id] = n if all(x is y for x, y in zip(ins, n.inputs)) else \
            Node(n.op, ins, n.kwargs, n.shape, n.dtype, n.name)
    return [done[o.id] for o in outputs]


def structure(outputs: list[Node]) -> str:
    """A key equal for graphs that compute the same nodes the same way."""
    ids: dict[int, int] = {}
    parts = []
    for n in topological_order(outputs):
        key = ("var", n.name) if n.op == "variable" else \
            ("const", n.id) if n.op == "constant" else \
            (n.op, n.attrs, tuple(ids[i.id] for i in n.inputs))
        ids[n.id] = len(parts)
        parts.append(repr(key))
    return "|".join(parts) + "|" + ",".join(str(ids[o.id]) for o in outputs)


# ---------------------------------------------------------------------------- cost model
class CostModel:
    """`G.search`'s cost of a graph: the measured time of each kernel the executor would
    run for it, on this machine, cached in memory and in the JSON file `path` (default
    ``~/.cache/tensorlang/kernel_times.json``) keyed by the kernel's structure, shapes and
    the host CPU; `runs` calls per median. Pass one to `G.search(..., model=)` to keep the
    times in another file (a temporary one in a test or tutorial)."""

    def __init__(self, path: str | os.PathLike | None = None, runs: int = 5):
        from ..target import Target

        self.path = pathlib.Path(path) if path is not None else \
            pathlib.Path.home() / ".cache" / "tensorlang" / "kernel_times.json"
        self.cpu = Target.parse("llvm").cpu
        self.runs = runs
        self.times: dict[str, float] = {}
        self.measured = 0
        try:
            self.times = json.loads(self.path.read_text()).get(self.cpu, {})
        except (OSError, ValueError):
            self.times = {}

    def save(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            data = {}
            if self.path.exists():
                data = json.loads(self.path.read_text())
            data[self.cpu] = self.times
            self.path.write_text(json.dumps(data))
        except (OSError, ValueError) as e:
            debug_print(1, f"search: the kernel-time cache was not written ({e})")

    def kernel(self, members: tuple, shapes: tuple, dtypes: tuple) -> float:
        from .executor import compile_group

        key = repr((members, shapes, dtypes))
        if key in self.times:
            return self.times[key]
        mod, used = compile_group(members, shapes, dtypes)
        rng = np.random.default_rng(0)
        args = [rng.standard_normal(shapes[k]).astype(dtypes[k]) for k in used]
        out = mod.lowered.args[-1]                 # the group's output tensor
        args.append(np.empty([int(x.value) for x in out.shape], str(out.dtype)))
        mod(*args)
        ptrs = [a.ctypes.data for a in args]

        def call():
            if mod.lowered.params:
                mod(*args)
            else:                        # constant sizes: the executor's call, by pointers
                mod.kernel.cfunc(*ptrs)
        t0 = time.perf_counter()
        call()
        once = max(time.perf_counter() - t0, 1e-7)
        reps = max(1, min(10000, int(BATCH_S / once)))   # batches of >= BATCH_S: no timer noise
        ts = []
        for _ in range(self.runs):
            t0 = time.perf_counter()
            for _ in range(reps):
                call()
            ts.append((time.perf_counter() - t0) / reps)
        self.measured += 1
        self.times[key] = float(np.median(ts))
        return self.times[key]

    def cost(self, outputs: list[Node]) -> float:
        """Seconds per run of the graph: its kernels' measured times, summed."""
        from .executor import _members, _Plan, declared_groups

        shapes, dtypes, groups = declared_groups(outputs, "search")
        total = 0.0
        for g in groups:
            ins = _Plan._inputs(g)
            total += self.kernel(_members(g, ins), tuple(shapes[i.id] for i in ins),
                                 tuple(dtypes[i.id] for i in ins))
        return total


# -------------------------------------------------------------------------------- search
@dataclass
class SearchResult:
    outputs: list[Node]
    applied: list[tuple[str, str]] = field(default_factory=list)   # (pattern, node)
    predicted_before: float = 0.0     # seconds, the cost model's
    predicted_after: float = 0.0
    measured_before: float = 0.0      # seconds, the executor's whole run
    measured_after: float = 0.0
    explored: int = 0
    kernels_measured: int = 0

    def report(self) -> str:
        lines = [f"explored {self.explored} graphs, measured {self.kernels_measured} kernels; "
                 f"predicted {1e3 * self.predicted_before:.3f} -> "
                 f"{1e3 * self.predicted_after:.3f} ms, measured "
                 f"{1e3 * self.measured_before:.3f} -> {1e3 * self.measured_after:.3f} ms"]
        lines += [f"  {p}   at {node}" for p, node in self.applied] or ["  (no rewrite)"]
        return "\n".join(lines)


def search(nodes, budget_s: float = 20.0, alpha: float = ALPHA, max_graphs: int = 200,
           model: CostModel | None = None, rules=None, feed=None) -> SearchResult:
    """The cheapest equivalent graph found (see the module). Every Variable needs a declared
    shape; `feed` (optional) is used for the measured times (random inputs otherwise)."""
    outputs = list(nodes) if isinstance(nodes, (list, tuple)) else [nodes]
    model = model or CostModel()
    pats = patterns(rules)
    t0 = time.perf_counter()
    start = model.cost(outputs)
    best = (start, outputs, [])
    tick = itertools.count()
    heap = [(start, next(tick), outputs, [])]
    seen = {structure(outputs)}
    explored = 0
    while heap and time.perf_counter() - t0 < budget_s and explored < max_graphs:
        cost, _, graph, hist = heapq.heappop(heap)
        explored += 1
        for new, p, where in rewrites(graph, pats):
            key = structure(new)
            if key in seen:
                continue
            seen.add(key)
            c = model.cost(new)
            debug_print(2, f"search: {p.name} at {where}: {1e3 * c:.3f} ms")
            if c < alpha * best[0]:
                h = hist + [(p.name, where)]
                heapq.heappush(heap, (c, next(tick), new, h))
                if c < (1 - MIN_GAIN) * best[0]:
                    best = (c, new, h)
            if time.perf_counter() - t0 >= budget_s:
                break
    model.save()
    result = SearchResult(best[1], best[2], start, best[0], explored=explored,
                          kernels_measured=model.measured)
    result.measured_before = _measure(outputs, feed)
    result.measured_after = _measure(best[1], feed)
    for p, where in result.applied:
        debug_print(1, f"search: applied {p} at {where}")
    return result


def _measure(outputs, feed, runs: int = 10) -> float:
    from .executor import Executor

    ex = Executor(outputs)
    rng = np.random.default_rng(1)
    byname = {k.name: v for k, v in (feed or {}).items()}
    values = {}
    for n in topological_order(outputs):
        if n.op == "variable":
            values[n] = byname.get(n.name, rng.standard_normal(n.shape).astype(n.dtype))
    ex.run(values)
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        ex.run(values)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))
