"""ONNX's own operator cases (`onnx.backend.test.case.node`) through `tensorlang.onnx.Backend`.

Every case whose operators all have a converter runs; each ends as one of
- match: every output equal to ONNX's expected one (its rtol/atol, the types declared),
- refused: a clear `tl.TensorlangError` or `NotImplementedError` (an unsupported attribute,
  type or form),
- wrong: a result that differs (a bug),
- crash: any other exception (a bug).
"In tensorlang's dtypes": the case's inputs and outputs are float32, float64, bool or
integers that int64 holds (not uint64). `benchmarks/onnx_node_cases.py` prints the
counts; the tests run them.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..errors import TensorlangError
from .backend import Backend
from .converters import CONVERTERS

OUR_KINDS = "fiub"


def in_scope_cases(ops=None):
    """ONNX's node cases whose operators all have a converter (`ops`: only these types)."""
    import onnx.backend.test.case.node as N

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = N.collect_testcases(None)
    out = []
    for c in cases:
        types = {n.op_type for n in c.model.graph.node}
        if types <= set(CONVERTERS) and (ops is None or types & set(ops)):
            out.append(c)
    return out


def ours(case) -> bool:
    """Whether the case's data are in dtypes tensorlang computes."""
    for inputs, outputs in case.data_sets:
        for a in list(inputs) + list(outputs):
            a = np.asarray(a)
            if a.dtype.kind not in OUR_KINDS or a.dtype.kind == "f" and a.dtype.itemsize < 4 \
                    or a.dtype == np.uint64:
                return False
    return True


def run_case(case) -> tuple[str, str]:
    """('match' | 'refused' | 'wrong' | 'crash', detail)."""
    try:
        rep = Backend.prepare(case.model)
        for inputs, outputs in case.data_sets:
            got = rep.run(list(inputs))
            if len(got) != len(outputs):
                return "wrong", f"{len(got)} outputs, expected {len(outputs)}"
            for g, want in zip(got, outputs):
                want = np.asarray(want)
                if g.shape != want.shape:
                    return "wrong", f"shape {g.shape}, expected {want.shape}"
                if want.dtype.kind == "f":
                    np.testing.assert_allclose(g, want, rtol=case.rtol, atol=case.atol)
                else:
                    np.testing.assert_array_equal(g, want)
        return "match", ""
    except AssertionError as e:
        return "wrong", str(e).strip().splitlines()[-1][:200] if str(e).strip() else "mismatch"
    except (TensorlangError, NotImplementedError) as e:
        return "refused", f"{type(e).__name__}: {str(e)[:200]}"
    except Exception as e:  # noqa: BLE001 (counted: a crash is a bug to fix)
        return "crash", f"{type(e).__name__}: {str(e)[:200]}"
