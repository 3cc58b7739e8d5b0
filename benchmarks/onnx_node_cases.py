"""ONNX's own operator cases through `tensorlang.onnx.Backend`: the counts (see
`tensorlang/onnx/conformance.py` for what each outcome means).

Usage: python benchmarks/onnx_node_cases.py [--ops Conv,Relu] [--verbose]
"""

from __future__ import annotations

import argparse
import collections
import sys

from tensorlang.onnx.conformance import in_scope_cases, ours, run_case


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", default=None)
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args(argv)
    cases = in_scope_cases(a.ops.split(",") if a.ops else None)
    counts: dict[tuple, int] = collections.Counter()
    for c in cases:
        kind, detail = run_case(c)
        counts[(kind, ours(c))] += 1
        if a.verbose or kind in ("wrong", "crash"):
            print(f"{kind:8s} {c.name}: {detail}", flush=True)
    total_ours = sum(v for (k, o), v in counts.items() if o)
    match_ours = counts[("match", True)]
    print(f"\n{len(cases)} cases in scope: " + ", ".join(
        f"{k} {sum(v for (kk, _), v in counts.items() if kk == k)}"
        for k in ("match", "refused", "wrong", "crash")))
    print(f"in tensorlang's dtypes: {match_ours} of {total_ours} match "
          f"({100 * match_ours / max(total_ours, 1):.1f}%)")
    return 1 if counts[("wrong", True)] + counts[("wrong", False)] + \
        counts[("crash", True)] + counts[("crash", False)] else 0


if __name__ == "__main__":
    sys.exit(main())
