"""The isl facts of placed statements (autoschedule/placed.py): a buffer's extents are read
by type — a `Const` is a size, any other expression is symbolic — never by catching what
fails."""

import tensorlang as tl
from tensorlang.autoschedule import placed
from tensorlang.autoschedule.placed import SYMBOLIC_EXTENT, placed_statements
from tensorlang.ir.dtype import float32
from tensorlang.ir.expr import Var, const
from tensorlang.ir.stmt import Buffer


def test_a_constant_extent_is_its_size_and_a_symbolic_one_is_none():
    n = Var("n", const(0).dtype)
    assert placed._extent(const(12)) == 12
    assert placed._extent(n) is None
    assert placed._extent(n * 4) is None


def test_strides_count_a_symbolic_extent_as_symbolic_extent_elements():
    n = Var("n", const(0).dtype)
    assert placed._strides(Buffer("A", (const(8), const(32)), float32)) == (128, 4)
    assert placed._strides(Buffer("A", (const(8), n), float32)) == (SYMBOLIC_EXTENT * 4, 4)
    assert placed._strides(Buffer("A", (n, const(5), n), float32)) == \
        (5 * SYMBOLIC_EXTENT * 4, SYMBOLIC_EXTENT * 4, 4)


def test_a_statements_strides_with_a_symbolic_row_length():
    n = tl.var("n")
    X = tl.placeholder((8, n), "float32", name="X")
    Y = tl.compute((8, n), lambda i, j: X[i, j] + 1.0, name="Y")
    (st,) = placed_statements(tl.create_schedule(Y))
    assert st.strides and all(s == (SYMBOLIC_EXTENT * 4, 4) for s in st.strides)


def _producer_at_rows(cols):
    n = tl.var("n")
    X = tl.placeholder((n, cols(n)), "float32", name="X")
    P = tl.compute((n, cols(n)), lambda i, j: X[i, j] * 2.0, name="P")
    Y = tl.compute((n, cols(n)), lambda i, j: P[i, j] + 1.0, name="Y")
    s = tl.create_schedule(Y)
    s[P].compute_at(s[Y], Y.op.axis[0])
    return {st.e.orig: st for st in placed_statements(s)}


def test_a_local_buffer_of_constant_size_counts_its_elements():
    sts = _producer_at_rows(lambda n: 64)
    assert sts["P"].local_elems == {"P": (64, 1)} == sts["Y"].local_elems


def test_a_local_buffer_of_symbolic_size_has_no_element_count():
    """(A row of n elements: its size depends on the parameters, so the cost model cannot
    keep it in registers, `cost._promoted`.)"""
    sts = _producer_at_rows(lambda n: n)
    assert sts["P"].local_elems == {} == sts["Y"].local_elems
