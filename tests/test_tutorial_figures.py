"""benchmarks/tutorial_figures.py reads every timing the tutorials print: the formats of
`tl.testing.benchmark`'s results (made here, so a change of format fails this test) and
tutorial 09's own."""

import importlib.util
import pathlib

import tensorlang as tl

PATH = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "tutorial_figures.py"
spec = importlib.util.spec_from_file_location("tutorial_figures", PATH)
tf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tf)


def test_every_printed_form_of_a_benchmark_is_read_with_its_spread():
    res = tl.testing.BenchmarkResult((0.002, 0.001, 0.004), 10)
    rate = res.rate(2e6)              # 1e9 / 1e9 ... : median 1.0, slowest 0.5, fastest 2.0
    text = (f"step 1: tiles     {rate}, 0.50 x numpy\n"
            f"blur: declared {res}\n"
            "E = D + (A+B)*C     4 kernels   0.412 ms (0.398-0.440) -> 1 kernel   0.210 ms "
            "(0.200-0.260)\n"
            "no figure here: 3 rounds\n"
            "step 2: vectors\n"
            f"   {rate}\n")
    got = tf.figures(text)
    assert got == [("step 1: tiles", 1.0, 0.5, 2.0),
                   ("blur: declared", 2.0, 1.0, 4.0),
                   ("E = D + (A+B)*C     4 kernels [1]", 0.412, 0.398, 0.44),
                   ("E = D + (A+B)*C     4 kernels [2]",
                    0.21, 0.2, 0.26),
                   ("step 2: vectors", 1.0, 0.5, 2.0)]
