"""The CUDA target's first kernels against torch on the same GPU, side by side in one run.

E = D + (A + B) * C over 2^26 float32 (one fused kernel: 1 thread per element, blocks of
256), in GB/s of the 5 arrays moved, against torch eager. SGEMM is `sgemm.py`, which also
imports this file's timing helpers. Median of 10 timed calls after a warm-up, CUDA events
around the launches only (the copies in and out are outside: tensorlang's call copies numpy
arrays, so its kernels are timed on device buffers through the module's launch list).
Usage: python benchmarks/gpu/first_kernels.py
"""

import statistics

import numpy as np

import tensorlang as tl


def launch_time(f, arrays, env, reps=10):
    import pycuda.driver as drv

    k = f.cuda
    mod = k._compiled(k.wide(env))
    dev = [drv.to_device(a) for a in arrays]
    by_buf = {id(b): d for b, d in zip(k.buffers, dev)}
    calls = []
    for launch in k.launches:
        fn = mod.get_function(launch.name)
        grid = tuple(int(tl.backends.cuda.module._eval(x, env)) if x is not None else 1
                     for x in launch.grid)
        block = tuple(int(tl.backends.cuda.module._eval(x, env)) if x is not None else 1
                      for x in launch.block)
        args = [by_buf[id(b)] for b in launch.buffers] + [np.int64(env[p.name])
                                                          for p in launch.params]
        calls.append((fn, args, grid, block))
    times = []
    for rep in range(reps + 2):
        start, stop = drv.Event(), drv.Event()
        start.record()
        for fn, args, grid, block in calls:
            fn(*args, grid=grid, block=block)
        stop.record()
        stop.synchronize()
        if rep >= 2:
            times.append(start.time_till(stop) * 1e-3)
    return statistics.median(times), dev


def fetch(alloc, like):
    import pycuda.driver as drv

    out = np.empty_like(like)
    drv.memcpy_dtoh(out, alloc)
    return out


def torch_time(fn, reps=10):
    import torch

    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e-3)
    return statistics.median(times)


def main() -> None:
    import pycuda.autoinit  # noqa: F401
    import torch

    print(f"device: {torch.cuda.get_device_name()}")
    n = tl.var("n")
    A, B, C, D = (tl.placeholder((n,), name=x) for x in "ABCD")
    E = tl.compute((n,), lambda i: D[i] + (A[i] + B[i]) * C[i], name="E")
    s = tl.create_schedule(E)
    bo, bi = s[E].split(E.op.axis[0], factor=256)
    s[E].bind(bo, "blockIdx.x")
    s[E].bind(bi, "threadIdx.x")
    f = tl.build(s, [A, B, C, D, E], target="cuda")
    size = 1 << 26
    arrays = [np.random.rand(size).astype(np.float32) for _ in range(4)] + \
        [np.zeros(size, np.float32)]
    t, dev = launch_time(f, arrays, {"n": size})
    got = fetch(dev[4], arrays[4])
    np.testing.assert_allclose(got, arrays[3] + (arrays[0] + arrays[1]) * arrays[2],
                               rtol=1e-6)
    ta, tb, tc, td = (torch.from_numpy(a).cuda() for a in arrays[:4])
    tt = torch_time(lambda: td + (ta + tb) * tc)
    gb = 5 * 4 * size / 1e9
    print(f"E = D + (A+B)*C, 2^26 float32: tensorlang {gb / t:7.0f} GB/s   torch (eager, "
          f"3 kernels) {gb / tt:7.0f} GB/s")


if __name__ == "__main__":
    main()
