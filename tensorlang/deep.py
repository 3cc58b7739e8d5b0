"""Deep programs: a retry on a thread with a large stack when Python's recursion runs out.

tensorlang's passes recurse over expression trees (map_expr, the simplifier, the printer, the
code generator). A chain of 3,000 `+ 1.0` is 3,000 levels deep, beyond Python's default
recursion limit of 1,000. Rather than give every pass a hand-made stack, each public entry
point runs through `deep_call`: it calls the function normally and, if that raises
RecursionError, calls it again on a thread with a 1 GiB stack (address space: only the pages
used are committed) and a recursion limit of a million frames; a program deeper than even
that gets a TensorlangError that says so. Entry points are pure up to their result (a
primitive keeps its edit only after its check), so the retry starts from the same state.
"""

from __future__ import annotations

import functools
import sys
import threading
import types

from .errors import TensorlangError

STACK_BYTES = 1 << 30
RECURSION_LIMIT = 1_000_000

_local = threading.local()
_lock = threading.Lock()


def deep_call(fn, *args, **kwargs):
    """`fn(*args, **kwargs)`, retried on a deep stack if it runs out of recursion depth."""
    if getattr(_local, "deep", False):
        return fn(*args, **kwargs)
    try:
        return fn(*args, **kwargs)
    except RecursionError:
        pass
    from .config import debug_print

    debug_print(1, f"{getattr(fn, '__qualname__', fn)}: deep program, again on a "
                   f"{STACK_BYTES >> 20} MiB stack")
    out: dict[str, object] = {}

    def run() -> None:
        _local.deep = True
        try:
            out["value"] = fn(*args, **kwargs)
        except RecursionError:
            out["error"] = TensorlangError(
                f"{getattr(fn, '__name__', 'tensorlang')}: the program is nested more deeply "
                f"than tensorlang can follow ({RECURSION_LIMIT} levels of recursion); split "
                "the expression into several compute stages")
        except BaseException as e:  # noqa: BLE001 (re-raised in the caller's thread)
            out["error"] = e

    with _lock:  # the recursion limit is the interpreter's, not the thread's
        old_stack = threading.stack_size()
        old_limit = sys.getrecursionlimit()
        threading.stack_size(STACK_BYTES)
        sys.setrecursionlimit(max(old_limit, RECURSION_LIMIT))
        try:
            t = threading.Thread(target=run, name="tensorlang-deep")
            t.start()
            t.join()
        finally:
            threading.stack_size(old_stack)
            sys.setrecursionlimit(old_limit)
    if "error" in out:
        raise out["error"]
    return out["value"]


def _without_wrappers(tb):
    """The traceback `tb` without the frames of `deep`'s wrappers and `deep_call` (they
    would fill a user's traceback, one pair per decorated call)."""
    frames = []
    while tb is not None:
        if tb.tb_frame.f_code not in _OWN_CODE:
            frames.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(frames):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def deep(fn):
    """Decorator: `fn` runs through `deep_call`. An exception leaves the outermost
    decorated call with the decorators' own frames taken out of its traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        outer = not getattr(_local, "in_wrapper", False)
        _local.in_wrapper = True
        try:
            return deep_call(fn, *args, **kwargs)
        except BaseException as e:
            if outer:
                raise e.with_traceback(_without_wrappers(e.__traceback__))  # noqa: B904
            raise
        finally:
            if outer:
                _local.in_wrapper = False

    _OWN_CODE.add(wrapper.__code__)
    return wrapper


_OWN_CODE = {deep_call.__code__}
