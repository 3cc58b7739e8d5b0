"""A schedule's trace: data (`Call`, `TraceEntry`) whose text is Python that replays."""

import tensorlang as tl

from .primitives.helpers import matmul


def test_trace_prints_and_replays():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    xo, yo, xi, yi = s[C].tile(i, j, 4, 4)
    s[C].parallel(xo)
    assert s.trace_text().splitlines() == ['s["C"].tile("i", "j", 4, 4)',
                                           's["C"].parallel("i.outer")']
    # the trace is data; its text is Python that replays on a fresh schedule
    assert [(t.stage, t.call.prim, t.call.args) for t in s.trace] == \
        [("C", "tile", ("i", "j", 4, 4)), ("C", "parallel", ("i.outer",))]
    A2, B2, C2 = matmul()
    s3 = tl.create_schedule(C2)
    exec(s.trace_text(), {"s": s3})
    assert s3.trace == s.trace
    s2 = s.replay(tl.create_schedule(C2))
    assert str(tl.lower(s2, [A2, B2, C2])) == str(tl.lower(s, [A, B, C]))
