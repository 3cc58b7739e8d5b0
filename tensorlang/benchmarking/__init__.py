"""The benchmark harness of `tensorlang bench` (`bench`) and its peers' kernels (`peers`,
run by the worker processes of TVM and Halide, which may be another interpreter: it imports
nothing of tensorlang)."""
