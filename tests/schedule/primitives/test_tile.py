"""tile: two splits and the order (x.outer, y.outer, x.inner, y.inner)."""


import tensorlang as tl

from .helpers import matmul, run_matmul


def test_tile_matmul():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    xo, yo, xi, yi = s[C].tile(i, j, 4, 8)
    assert s[C].loops == ["i.outer", "j.outer", "i.inner", "j.inner", "k"]
    run_matmul(s, A, B, C)


def test_tile_constant_sizes_nest():
    A, B, C = matmul(6, 5)
    s = tl.create_schedule(C)
    i, j = C.op.axis
    s[C].tile(i, j, 4, 4)
    text = str(tl.lower(s, [A, B, C]))
    assert text.index("i_outer") < text.index("j_outer") < text.index("i_inner")
    run_matmul(s, A, B, C, sizes=((6, 5),))
