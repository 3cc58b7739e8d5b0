"""tile: two splits and the order (x.outer, y.outer, x.inner, y.inner)."""


import tensorlang as tl

from .helpers import (
    anti, assert_computes, assert_refused_with_witness, assert_replays, matmul, matmul_cases,
    run_matmul,
)






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


# ------------------------------------------- the interpreter, the witness, the replay
def test_tile_matches_numpy_and_the_interpreter():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    s[C].tile(*C.op.axis, 4, 3)
    assert_computes(s, [A, B, C], matmul_cases())


def test_tile_that_breaks_a_dependence_is_refused_with_a_witness():
    x, v = anti()            # v[i, j] reads v[i - 1, j + 1]: tiling j runs it too early
    s = tl.create_schedule(v)
    w = assert_refused_with_witness(s, lambda: s[v].tile("i", "j", 2, 2), "tile", "v")
    assert (w.sink["i"] - w.source["i"], w.sink["j"] - w.source["j"]) == (1, -1)
    for point, loops in ((w.source, w.source_loops), (w.sink, w.sink_loops)):
        for d in "ij":
            assert loops[f"{d}.outer"] * 2 + loops[f"{d}.inner"] == point[d], w
    assert s[v].loops == ["i", "j"]


def test_tile_replays():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    s[C].tile(*C.op.axis, 4, 8)
    assert_replays(s, [A, B, C], matmul)
