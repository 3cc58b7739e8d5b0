"""The tutorials use the public API only: what they import, and every attribute they read
through a tensorlang module, is public.

Public, concretely:
- a module is public when it is in PUBLIC_MODULES (the modules docs/api documents);
- a name of a public module is public when it does not start with `_`, is in the module's
  `__all__` where the module defines one, and is not itself a module outside
  PUBLIC_MODULES (`tensorlang.graph.executor` is reachable as `G.executor`, but private).
Attributes of public classes and functions (methods, fields) are public unless their name
starts with `_`.
"""

import ast
import importlib
import pathlib
import types

import pytest

ROOT = pathlib.Path(__file__).parent.parent
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9]*.py"))

PUBLIC_MODULES = frozenset({
    "tensorlang",                       # import tensorlang as tl
    "tensorlang.graph",                 # import tensorlang.graph as G
    "tensorlang.graph.substitutions",   # the generated rules (docs/api/graph.md)
    "tensorlang.onnx",
    "tensorlang.testing",               # tl.testing.benchmark
    "tensorlang.aot",
    "tensorlang.schedule.gpu",          # GPU schedule helpers (docs/api/gpu.md)
    "tensorlang.autoschedule.cost",     # the cost model's estimate (docs/api/schedules.md)
    "tensorlang.intrin",                # tl.intrin: declared instructions (docs/api/schedules.md)
    "tensorlang.intrin.x86",
    "tensorlang.intrin.arm",
    "tensorlang.schedule.dot_products",  # matmul and conv2d on declared instructions
})


def _private_name(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _member(module: str, name: str):
    """(the object, why it is private or None) for `module.name`."""
    mod = importlib.import_module(module)
    if _private_name(name):
        return None, f"{module}.{name} starts with '_'"
    public = getattr(mod, "__all__", None)
    if public is not None and name not in public:
        return None, f"{module}.{name} is not in {module}.__all__"
    if hasattr(mod, name):
        obj = getattr(mod, name)
    else:
        try:
            obj = importlib.import_module(f"{module}.{name}")
        except ImportError:
            return None, f"{module} has no name {name}"
    if isinstance(obj, types.ModuleType) and obj.__name__ not in PUBLIC_MODULES:
        return obj, f"{obj.__name__} is a private module"
    return obj, None


def private_uses(source: str, filename: str = "<tutorial>") -> list[str]:
    """Each private module or name that `source` imports or reads through a tensorlang
    module, as 'line N: why'."""
    tree = ast.parse(source, filename)
    aliases: dict[str, str] = {}        # a local name bound to a tensorlang module
    found: list[str] = []

    def bad(node, why):
        found.append(f"line {node.lineno}: {why}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != "tensorlang":
                    continue
                if a.name not in PUBLIC_MODULES:
                    bad(node, f"import {a.name}: a private module")
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    aliases["tensorlang"] = "tensorlang"
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level or mod.split(".")[0] != "tensorlang":
                continue
            for a in node.names:
                if f"{mod}.{a.name}" in PUBLIC_MODULES:       # from tensorlang.x import gpu
                    aliases[a.asname or a.name] = f"{mod}.{a.name}"
                    continue
                if mod not in PUBLIC_MODULES:
                    bad(node, f"from {mod} import {a.name}: {mod} is a private module")
                    continue
                if a.name == "*":
                    bad(node, f"from {mod} import *: name what the tutorial uses")
                    continue
                obj, why = _member(mod, a.name)
                if why:
                    bad(node, f"from {mod} import {a.name}: {why}")
                elif isinstance(obj, types.ModuleType):
                    aliases[a.asname or a.name] = obj.__name__
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain, root = [], node
        while isinstance(root, ast.Attribute):
            chain.append(root.attr)
            root = root.value
        if not isinstance(root, ast.Name) or root.id not in aliases:
            continue
        chain.reverse()
        module, obj = aliases[root.id], None
        for attr in chain:
            if module is None:                  # past the modules: a class's or object's
                if _private_name(attr):
                    bad(node, f"{root.id}.{'.'.join(chain)}: {attr} starts with '_'")
                    break
                continue
            obj, why = _member(module, attr)
            if why:
                bad(node, f"{root.id}.{'.'.join(chain)}: {why}")
                break
            module = obj.__name__ if isinstance(obj, types.ModuleType) else None
    return sorted(set(found))


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_uses_public_api_only(path):
    assert private_uses(path.read_text(), str(path)) == []


@pytest.mark.parametrize("source, why", [
    ("from tensorlang.graph.executor import register_tile",
     "tensorlang.graph.executor is a private module"),
    ("from tensorlang.ir.interp import run_lowered", "tensorlang.ir.interp is a private"),
    ("from tensorlang.schedule import lower", "tensorlang.schedule is a private module"),
    ("from tensorlang.graph import rule_search", "tensorlang.graph.rule_search is a private"),
    ("from tensorlang.graph import executor as E\nE.default_schedules([])",
     "tensorlang.graph.executor is a private module"),
    ("import tensorlang.graph.node", "import tensorlang.graph.node: a private module"),
    ("import tensorlang as tl\ntl.schedule.gpu.rows", "tensorlang.schedule is a private"),
    ("import tensorlang as tl\ntl.Target._host", "_host starts with '_'"),
    ("import tensorlang.graph as G\nG.fusion.fuse", "tensorlang.graph.fusion is a private"),
    ("from tensorlang.graph.substitutions import enumerate_terms",
     "not in tensorlang.graph.substitutions.__all__"),
    ("from tensorlang import no_such_name", "tensorlang has no name no_such_name"),
])
def test_the_check_finds_private_uses(source, why):
    """The old tutorials' imports (and other private uses) are found: the check can fail."""
    found = private_uses(source)
    assert found and why in found[0], found


@pytest.mark.parametrize("source", [
    "import tensorlang as tl\ntl.testing.benchmark\ntl.Target.parse('llvm').register_tile",
    "import tensorlang.schedule.gpu as gpu\ngpu.rows",
    "from tensorlang.schedule import gpu",
    "import tensorlang.graph as G\nG.rewrite, G.topological_order, G.substitutions.parse",
    "from tensorlang.autoschedule import cost\ncost.estimate",
    "import numpy as np\nnp.linalg._umath_linalg",     # not tensorlang: not checked
])
def test_public_uses_pass(source):
    assert private_uses(source) == []
