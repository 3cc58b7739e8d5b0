# %% [markdown]
# # 10 — The auto-scheduler: legal by construction, printed as code
#
# `tl.auto_schedule(C)` samples schedules from sketches (register tiles, vector loops,
# producers inlined or placed per tile, parallel outer loops), applies every primitive
# through isl's exact legality check — a refused primitive is left out, so no candidate is
# ever illegal — ranks the candidates with a cost model built on isl's counts (trip
# counts, footprints per cache level, dependences) and the target's vector width,
# registers, caches and cores, measures the best few on this machine and mutates the
# fastest. The result is an ordinary schedule: `trace_text()` prints it as Python to paste
# and edit, `tl.analyze` counts its data movement exactly, and a tuning log keeps it for
# the next run. Here: a matmul (beside tutorial 05's hand schedule), a 3x3 blur, and the
# graph executor, which schedules its kernels with the model-only mode by default.
#
# Every time is `tl.testing.benchmark`'s (the median round, with the slowest and fastest),
# as in tutorial 05, so that one kernel has one figure in both: tutorial 05's last schedule
# is timed here as there.
#
# Run: python tutorials/10_auto_schedule.py

# %%
import os
import pathlib
import runpy
import tempfile

import numpy as np

import tensorlang as tl

N = int(os.environ.get("TL_TUTORIAL_N", "512"))
BUDGET = 30.0 if N >= 256 else 3.0
rng = np.random.default_rng(0)
HOST = tl.Target.parse("llvm")
print(f"on {HOST.cpu} ({HOST.cores} threads)", flush=True)


def timed(f, *arrays, repeat=5):
    """The kernel's benchmark (one warm-up call, then `repeat` rounds)."""
    return tl.testing.benchmark(f, *arrays, repeat=repeat)


# %% [markdown]
# ## 1. A matmul
# The search's choice, as code; its time beside tutorial 05's last schedule (packed B in
# L2-sized blocks of panels, the target's register tile, parallel blocks) and the declared
# loop nest.

# %%
A = tl.placeholder((N, N), "float32", name="A")
B = tl.placeholder((N, N), "float32", name="B")
k = tl.reduce_axis((0, N), name="k")
C = tl.compute((N, N), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
with tempfile.TemporaryDirectory() as tmp:
    log = pathlib.Path(tmp) / "tuning.jsonl"
    print(f"searching schedules for the {N}^3 matmul (budget {BUDGET:.0f} s)...", flush=True)
    s = tl.auto_schedule(C, budget_s=BUDGET, log=log, progress=True)
    print("chosen schedule:")
    print(s.trace_text())
    res = s.auto
    rho = "—" if res.spearman is None else f"{res.spearman:.2f}"
    print(f"\n{len(res.candidates)} candidates, "
          f"{sum(c.measured is not None for c in res.candidates)} measured; "
          f"model/measurement rank correlation {rho}")
    again = tl.auto_schedule(C, budget_s=BUDGET, log=log)     # from the log, no search
    assert again.auto.from_log and again.trace_text() == s.trace_text()

a = rng.standard_normal((N, N), dtype=np.float32)
b = rng.standard_normal((N, N), dtype=np.float32)
c = np.zeros((N, N), np.float32)
f_auto = tl.build(s, [A, B, C], name="mm_auto")
f_auto(a, b, c)
np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
t05 = runpy.run_path(str(pathlib.Path(__file__).parent / "05_fast_matmul.py")
                     if "__file__" in globals() else "tutorials/05_fast_matmul.py",
                     run_name="tutorial05")
hs, hargs = t05["blocked"]()
f_hand = tl.build(hs, hargs, name="mm_hand")
f_naive = tl.build(tl.create_schedule(C), [A, B, C], name="mm_naive")
flop = 2 * N ** 3
for label, f, rounds in (("declared", f_naive, 2), ("tutorial 05's last step", f_hand, 5),
                         ("auto-scheduled", f_auto, 5)):
    print(f"{label:24s}", end="", flush=True)
    print(timed(f, a, b, c, repeat=rounds).rate(flop), flush=True)

# %% [markdown]
# ## 1b. Why the model ranks it first
# `cost.estimate` prints, per statement, its register block as a formula (blocks x
# cycles: arithmetic, loads, stores, the accumulators' latency chain, vector lanes), the
# bytes it moves into L1, into L2 and from DRAM, and what bounds it. The declared nest's
# accumulator goes through memory in a scalar chain; the chosen one keeps a tile of
# accumulators in registers. The same model runs for a target this machine is not.

# %%
from tensorlang.autoschedule import cost  # noqa: E402

for label, sch in (("declared", tl.create_schedule(C)), ("auto", s)):
    print(f"--- {label}\n{cost.estimate(sch, 'llvm')}")
print(f"--- auto, modelled for aarch64 (4 cores, 128-bit vectors): "
      f"{cost.estimate(s, 'aarch64').seconds * 1e3:.3f} ms")

# %% [markdown]
# ## 2. What it moves, exactly
# `tl.analyze` at a small size: the auto schedule and the declared one, elements of B
# moved into a cache at each loop level of the stage that reads it.

# %%
n = 64
A2 = tl.placeholder((n, n), "float32", name="A")
B2 = tl.placeholder((n, n), "float32", name="B")
k2 = tl.reduce_axis((0, n), name="k")
C2 = tl.compute((n, n), lambda i, j: tl.sum(A2[i, k2] * B2[k2, j], axis=k2), name="C")
print(f"searching at {n}^3 (budget {min(BUDGET, 6.0):.0f} s)...", flush=True)
small = tl.auto_schedule(C2, budget_s=min(BUDGET, 6.0), progress=True)
for label, sch in (("declared", tl.create_schedule(C2)), ("auto", small)):
    rep = tl.analyze(sch, [A2, B2, C2])
    for st in rep.stages:
        if st.levels:
            moved = ", ".join(f"{lv.loop}: {lv.moved.get('B', lv.moved.get('B_packed', 0))}"
                              for lv in st.levels)
            print(f"{label:9s} stage {st.name}: B moved per level  {moved}")

# %% [markdown]
# ## 3. A blur pipeline
# Two stages: the horizontal sum `bx` is inlined or computed per tile of its reader —
# the search decides, and isl checks the placement.

# %%
H = max(N, 64)
X = tl.placeholder((H + 2, H + 2), "float32", name="X")
bx = tl.compute((H + 2, H), lambda i, j: (X[i, j] + X[i, j + 1] + X[i, j + 2]) / 3, name="bx")
by = tl.compute((H, H), lambda i, j: (bx[i, j] + bx[i + 1, j] + bx[i + 2, j]) / 3, name="by")
print(f"searching schedules for the blur (budget {BUDGET / 2:.0f} s)...", flush=True)
sb = tl.auto_schedule(by, budget_s=BUDGET / 2, progress=True)
print(sb.trace_text())
x = rng.standard_normal((H + 2, H + 2), dtype=np.float32)
y = np.zeros((H, H), np.float32)
fb = tl.build(sb, [X, by], name="blur_auto")
fb(x, y)
t = x[:, :-2] + x[:, 1:-1] + x[:, 2:]
np.testing.assert_allclose(y, (t[:-2] + t[1:-1] + t[2:]) / 9, rtol=1e-4, atol=1e-4)
fn = tl.build(tl.create_schedule(by), [X, by], name="blur_naive")
print(f"blur {H}x{H}: declared {timed(fn, x, y)}\n{'':12s}auto {timed(fb, x, y)}")

# %% [markdown]
# ## 4. The graph executor schedules with it
# `G.Executor` takes each new CPU kernel's schedule from the model-only mode: the
# hand-written schedule is the seed, a few candidates join it, and the model's choice —
# the seed unless a candidate is predicted 1.25x faster — is recorded in the tuning log
# (TL_CACHE_DIR, here a temporary folder) for the next run. A sum down the columns is one
# where the hand schedule (a vector reduction per column) loses to a schedule that keeps
# rows in vectors; `schedules="hand"` shows the seed.

# %%
import tensorlang.graph as G  # noqa: E402

os.environ["TL_CACHE_DIR"] = tempfile.mkdtemp()
xs = G.Variable("x", (1024, 1280))
col = G.sum(xs, axis=0)
for mode in ("hand", "default"):
    ((_, sch),) = G.default_schedules([col], schedules=mode)
    print(f"--- executor, schedules={mode!r}:\n{sch.trace_text()}")
xv = rng.standard_normal((1024, 1280), dtype=np.float32)
runs = {mode: G.Executor([col], schedules=mode) for mode in ("hand", "default")}
for mode, ex in runs.items():
    np.testing.assert_allclose(ex.run({xs: xv})[0], xv.sum(axis=0), rtol=1e-4, atol=1e-3)
    print(f"column sum 1024x1280, schedules={mode!r}: {timed(ex.run, {xs: xv})}")
log = pathlib.Path(os.environ["TL_CACHE_DIR"], "tuning.jsonl").read_text()
print(f"the tuning log ({len(log.splitlines())} record): {log[:100]}...")

# %% [markdown]
# ## 5. Halide's autoschedulers
# When the `halide` wheel is installed, its Adams2019 and Mullapudi2016 plugins can be
# compared in `benchmarks/autoschedule.py`; not installed here, they are skipped.

# %%
try:
    import halide  # noqa: F401
    print("halide is installed: see benchmarks/autoschedule.py for the comparison")
except ImportError:
    print("halide is not installed: no comparison with its autoschedulers here")
print("OK")
