import os

import numpy as np
import pytest

# a refused default schedule is an error in the tests, not a quiet 200x slower fallback
os.environ.setdefault("TL_STRICT", "1")
# the executor's tuning log (its model-only choices, recorded) in a folder of this run, not
# the user's ~/.cache: each kernel is searched once per run, and never read from an old run
if "TL_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["TL_CACHE_DIR"] = tempfile.mkdtemp(prefix="tensorlang-tests-")
# no kernel cache on disk: tests change the compiler's code (monkeypatch), which no key of
# the cache can see; tests/graph/test_kernel_cache.py turns it on in folders of its own
os.environ.setdefault("TL_KERNEL_CACHE", "0")

import tensorlang as tl

SIZES = (1, 13, 300)


# Tests of several seconds each, run in CI's second step (`pytest -m slow`) with the long
# property runs and large sizes, so that the first step stays within 8 minutes on a 2-core
# machine (`pytest --durations` picks them: each took 3-11 s there).
SLOW_STEP = frozenset({
    "tests/graph/test_fusion.py::test_random_row_graphs_match_numpy",
    "tests/schedule/test_auto.py::test_auto_schedule_matmul_beats_the_declared_nest_and_prints_python",
    "tests/cuda/test_nvptx.py::test_shared_tiles_and_barriers_in_ptx",
    "tests/cuda/test_nvptx.py::test_every_gpu_schedule_compiles_to_ptx[sgemm]",
    "tests/graph/test_executor_schedules.py::test_a_broken_log_line_or_a_record_that_does_not_replay_is_skipped",
    "tests/schedule/test_auto.py::test_tuning_log_round_trips",
    "tests/schedule/test_auto.py::test_sampled_row_sums_keep_one_or_two_vector_chains_and_match_numpy",
    "tests/schedule/test_auto.py::test_an_isl_condition_true_as_an_integer_compiles",
    "tests/test_tutorials.py::test_tutorial_runs[05_fast_matmul]",
    "tests/cuda/test_cuda.py::test_generated_cuda_compiles_with_nvcc[sgemm]",
    "tests/graph/test_executor_cuda.py::test_ops_run_with_gpu_schedules[batched_tb]",
    "tests/schedule/test_auto.py::test_a_parallel_loop_is_never_a_batch_of_one",
    "tests/graph/test_executor.py::test_default_matmul_schedule_is_not_refused[1025-8-1030]",
    "tests/graph/test_mlp_digits.py::test_mlp_reaches_95_percent",
    "tests/graph/test_executor_cuda.py::test_reductions_run_across_the_threads_of_a_block[softmax-shape1]",
    "tests/graph/test_search.py::test_search_with_measured_kernel_times",
    "tests/test_deep.py::test_unbounded_recursion_is_a_clear_error",
    "tests/cuda/test_cuda.py::test_the_race_a_refused_no_sync_names_is_real",
    "tests/schedule/test_auto.py::test_seeds_are_measured_and_the_result_is_never_slower_than_them",
    "tests/graph/test_optimize.py::test_conv_bn_folds_into_weights_and_one_bias[shape2-24]",
    "tests/schedule/test_auto.py::test_cross_target_is_scheduled_by_the_model_alone",
    "tests/graph/test_executor_cuda.py::test_every_gpu_kernel_binds_its_loops",
    "tests/schedule/test_auto.py::test_the_default_executor_is_tuned_and_recorded_under_a_tuning_log",
    "tests/graph/test_executor_schedules.py::test_an_unwritable_cache_folder_runs_without_a_log",
    "tests/cuda/test_reduce_threads.py::test_rows_keeps_a_constant_row_in_shared_memory[64-4096-reverse]",
    "tests/graph/test_executor_schedules.py::test_a_recorded_choice_is_read_back_without_searching",
    "tests/graph/test_executor_schedules.py::test_a_measured_record_wins_over_the_models",
    "tests/graph/test_executor_schedules.py::test_a_column_sum_takes_the_models_schedule_and_records_it",
    "tests/graph/test_schedule_sizes.py::test_the_matmul_tile_stays_in_registers_at_awkward_sizes[True-127-24-4100]",
    "tests/schedule/test_auto.py::test_tune_command_fills_a_log",
    "tests/cuda/test_reduce_threads.py::test_rows_keeps_a_constant_row_in_shared_memory[64-4096-forward]",
    "tests/schedule/test_lower.py::test_a_compute_at_buffer_is_allocated_once_per_iteration_of_its_loop[True]",
    "tests/graph/test_executor.py::test_default_matmul_schedule_is_not_refused[2048-4-2048]",
    "tests/schedule/test_auto.py::test_sampled_candidates_are_legal_and_match_numpy",
    "tests/test_cli.py::test_demo_runs_and_checks",
    "tests/schedule/primitives/test_cache_read_write.py::test_matmul_cache_write_compute_at_and_cache_read[shape1]",
    "tests/graph/test_schedule_sizes.py::test_channel_blocked_conv2d_runs_rows_first_while_its_weights_fit_half_the_l2[4096-7-64-64-True]",
    "tests/graph/test_schedule_sizes.py::test_every_op_kind_gets_its_intended_schedule[1025]",
    "tests/schedule/test_auto.py::test_executor_takes_auto_schedules_through_the_log",
    "tests/graph/test_executor_schedules.py::test_the_model_only_mode_keeps_a_seed_unless_a_candidate_is_predicted_margin_faster[1000000000.0]",
    "tests/graph/test_executor_schedules.py::test_the_model_only_mode_keeps_a_seed_unless_a_candidate_is_predicted_margin_faster[1.0]",
    "tests/schedule/test_auto.py::test_a_stencil_whose_rows_leave_the_l1_gets_time_tiled_candidates[9-300]",
    "tests/schedule/test_auto.py::test_producers_are_never_placed_inside_their_readers_reduction",
    "tests/graph/test_schedule_sizes.py::test_blocked_conv2d_matches_numpy[2-0-5-3-4]",
    "tests/onnx/test_onnx_import.py::test_backend_runs_several_batch_sizes_from_one_prepare",
    "tests/backends/test_nan_ignoring_loops.py::test_nan_ignoring_reductions_and_softmax_build_in_a_child",
    "tests/graph/test_schedule_sizes.py::test_the_matmul_tile_stays_in_registers_at_awkward_sizes[False-127-24-4100]",
    "tests/schedule/test_auto_budget.py::test_a_slow_declared_nest_gives_way_to_a_faster_candidate_within_the_budget",
    "tests/graph/test_schedule_sizes.py::test_b_panels_outermost_match_numpy[37-50-100]",
    "tests/test_tvm_tutorial_ports.py::test_opt_gemm_tutorial_every_stage_matches_numpy",
    "tests/graph/test_executor.py::test_matmul_kernel_on_integers[int32]",
    "tests/cuda/test_cuda.py::test_index_arithmetic_is_32_bit_only_where_the_sizes_allow_it",
    "tests/schedule/test_auto.py::test_a_stencil_whose_rows_leave_the_l1_gets_time_tiled_candidates[20-133]",
    "tests/cuda/test_cuda.py::test_gpu_schedules_run_in_the_interpreter_with_cuda_semantics[sgemm-forward]",
    "tests/schedule/test_lower.py::test_a_compute_at_buffer_is_allocated_once_per_iteration_of_its_loop[False]",
    "tests/graph/test_executor.py::test_batched_matmul_with_broadcast_batches[sa2-sb2]",
    "tests/graph/test_optimize.py::test_merged_qkv_is_one_matmul_and_slices",
    "tests/cuda/test_cuda.py::test_sgemm_tiles_are_fetched_in_rounds_by_the_block",
    "tests/graph/test_executor.py::test_matmul_epilogue_fused[sa3-sb3-True]",
    "tests/schedule/primitives/test_cache_read_write.py::test_a_local_tile_whose_rows_do_not_divide_stays_in_registers[61-tile1]",
    "tests/graph/test_kernel_cache.py::test_a_second_process_compiles_nothing",
    "tests/cuda/test_cuda.py::test_no_sync_is_refused_with_the_racing_threads",
    "tests/cuda/test_cuda.py::test_gpu_schedules_run_in_the_interpreter_with_cuda_semantics[sgemm-reverse]",
    "tests/graph/test_schedule_sizes.py::test_every_op_kind_gets_its_intended_schedule[1000]",
    "tests/backends/test_pool.py::test_workers_sharing_the_launching_threads_core_do_not_slow_it",
    "tests/graph/test_schedule_sizes.py::test_the_matmul_tile_stays_in_registers_at_awkward_sizes[False-127-781-253]",
    "tests/schedule/test_auto.py::test_a_convolution_gets_channel_blocked_tiles_that_match_numpy[20-30]",
    "tests/graph/test_executor.py::test_matmul_epilogue_fused[sa0-sb0-False]",
    "tests/graph/test_schedule_sizes.py::test_channel_blocked_conv2d_with_the_wide_tile_matches_numpy[28-32-32-True-False]",
    "tests/graph/test_ops.py::test_forward_and_reverse_mode_agree[conv2d stride padding]",
    "tests/onnx/test_onnx_gpu.py::test_each_kind_of_kernel_of_the_model_builds_for_cuda_and_compiles_with_nvcc[bert]",
})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid in SLOW_STEP:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True, scope="session")
def _host_described_as():
    """TL_TEST_HOST_AS=NAME describes this machine as the CPU NAME of tensorlang.cpus for the
    whole run (its caches, ways, pipes, bandwidths; code still runs on this CPU): tests of
    named CPUs must pass whatever the host is, and CI runs the cost tests so."""
    name = os.environ.get("TL_TEST_HOST_AS")
    if not name:
        yield
        return
    import tensorlang.target as T

    host = tl.Target.parse("llvm")
    saved = dict(T._HOST_MODEL)
    T._HOST_MODEL.clear()
    T._HOST_MODEL[host.cpu] = tl.cpu_model(name)
    yield
    T._HOST_MODEL.clear()
    T._HOST_MODEL.update(saved)


def set_host_caches(monkeypatch, l1: int, l2: int, l3: int) -> None:
    """Describe this machine (the ``host`` target) as having caches of `l1`, `l2` and `l3`
    bytes for the rest of a test, whatever it has."""
    import tensorlang.target as T

    host = tl.Target.parse("llvm")
    model = host.cpu_model.replace(l1_bytes=l1, l2_bytes=l2, l3_bytes=l3)
    monkeypatch.setattr(T, "_HOST_MODEL", {host.cpu: model})  # one, a prime, a larger size


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def cast_kernel(src, dst, target, lanes):
    """B[i] = A[i].astype(dst) over a symbolic n, `lanes` at a time (1: scalar)."""
    n = tl.var("n")
    A = tl.placeholder((n,), src, name="A")
    B = tl.compute((n,), lambda i: A[i].astype(dst), name="B")
    s = tl.create_schedule(B)
    if lanes > 1:
        _, inner = s[B].split(B.op.axis[0], factor=lanes)
        s[B].vectorize(inner)
    return tl.build(s, [A, B], target=target)


def random_array(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -100), min(info.max, 100)
        return rng.integers(lo, hi + 1, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


# the host's CPU, baseline x86-64 (SSE2: no AVX, no F16C) and x86-64-v3 (AVX2, FMA, F16C):
# an operation that needs an instruction the CPU lacks must still work (issue: float16
# conversions became calls that the JIT could not resolve, on CPUs without AVX512-FP16)
CPU_TARGETS = ("llvm", "llvm -mcpu=x86-64", "llvm -mcpu=x86-64-v3")


@pytest.fixture(params=CPU_TARGETS, ids=("host", "x86-64", "x86-64-v3"))
def cpu_target(request):
    """Each CPU level this machine can run (others skip)."""
    t = tl.Target.parse(request.param)
    if not t.is_host:
        pytest.skip(f"this machine cannot run code for {request.param}")
    return t


def every_cpu_level(module_name: str):
    """An autouse fixture that runs each test of `module_name` once per CPU level, with the
    module's `build` bound to that target."""

    @pytest.fixture(autouse=True)
    def _levels(cpu_target, monkeypatch):
        import functools
        import sys

        monkeypatch.setattr(sys.modules[module_name], "build",
                            functools.partial(build, target=cpu_target))

    return _levels


def build(outputs, args, target="llvm"):
    return tl.build(tl.create_schedule(outputs), args, target=target)


def pytest_addoption(parser):
    parser.addoption("--legality-examples", type=int, default=1000,
                     help="examples of the legality-vs-brute-force property test")
    parser.addoption("--fuzz-examples", type=int, default=1000,
                     help="examples of the whole-pipeline differential fuzzer")
    parser.addoption("--fuzz-random", action="store_true",
                     help="draw the fuzzer's examples at random (default: a fixed sequence, "
                          "so that CI is reproducible)")
