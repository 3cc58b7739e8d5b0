"""The auto-scheduler's tuning log: JSON lines, one record each, like TVM's records.

A record is `{"key": str, "target": str, "time": seconds | null, "mode": "measured" |
"model", "predicted": seconds, "trace": [[stage, [prim, args, kwargs]], ...]}`: the key
hashes the program and target (`auto.program_key`), the time is the measured seconds a
call (null for the model-only mode's choice), the trace replays the schedule.

The log is a cache, shared by processes and edited by hand, so nothing in it may stop a
run: a line that is not UTF-8, not JSON, nested too deeply for the parser, not an object,
or whose fields have the wrong types (a time that is not a finite positive number, a trace
entry that is not `[stage, [prim, args, kwargs]]`) is skipped, and TL_DEBUG=1 names the
first few and counts the rest. A log that cannot be written is said once before the search
(`log_problem`, a `TuningLogWarning`); the search's result is returned all the same.
"""

from __future__ import annotations

import json
import math
import os
import warnings

from ..config import debug_print
from ..errors import TuningLogWarning

NAMED_SKIPS = 3          # skipped lines named one by one at TL_DEBUG=1; the rest counted
ARG_DEPTH = 4            # lists in a primitive's arguments nest this deep at most (reorder
                         # takes a list of names: 2)


def _seconds(v, none_ok: bool, zero_ok: bool = False) -> bool:
    """Whether `v` is a finite positive number of seconds (an int or a float, not a bool;
    None where `none_ok`, 0 where `zero_ok`)."""
    if v is None:
        return none_ok
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    try:
        f = float(v)
    except OverflowError:                       # an int of a thousand digits
        return False
    return math.isfinite(f) and (f > 0 or zero_ok and f == 0)


def _arg_problem(v, depth: int = 0) -> str | None:
    """Why `v` is not a primitive's argument as `Call.to_json` writes it (a name, a number,
    a list of them), or None."""
    if isinstance(v, list):
        if depth >= ARG_DEPTH:
            return f"arguments nested over {ARG_DEPTH} lists deep"
        return next((p for p in (_arg_problem(x, depth + 1) for x in v) if p), None)
    if isinstance(v, float) and not math.isfinite(v):
        return f"argument {v!r}"
    if v is None or isinstance(v, str | int | float):
        return None
    return f"argument of type {type(v).__name__}"


def _entry_problem(e) -> str | None:
    """Why `e` is not a trace entry `[stage, [prim, args, kwargs]]`, or None."""
    if not (isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)):
        return "a trace entry is not [stage, call]"
    call = e[1]
    if not (isinstance(call, list) and len(call) == 3):
        return "a trace entry's call is not [primitive, args, kwargs]"
    prim, args, kwargs = call
    # replay calls the method of this name: a primitive's, never a private one
    if not (isinstance(prim, str) and prim.isidentifier() and not prim.startswith("_")):
        return f"primitive name {prim!r}"
    if not isinstance(args, list):
        return f"{prim}'s arguments are not a list"
    if not (isinstance(kwargs, dict) and all(isinstance(k, str) and k.isidentifier()
                                             for k in kwargs)):
        return f"{prim}'s keyword arguments are not an object of names"
    return next((p for p in map(_arg_problem, [*args, *kwargs.values()]) if p), None)


def record_problem(rec) -> str | None:
    """Why `rec` (a parsed line) is not a record the auto-scheduler can use, or None: a
    JSON object with a str `key`, a str `target` and `mode` where present, a `time` that is
    null or a finite positive number (a negative, zero or NaN time must never win), a
    `predicted` that is null or a finite number >= 0, and a list of well-formed trace
    entries. Whether the trace replays is the reader's to find out (`auto.recorded`)."""
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__}, not an object"
    if not isinstance(rec.get("key"), str):
        return "no str key"
    for name in ("target", "mode"):
        if name in rec and not isinstance(rec[name], str):
            return f"{name} {rec[name]!r} is not a str"
    if not _seconds(rec.get("time"), none_ok=True):
        return f"time {rec.get('time')!r} is not a finite positive number of seconds"
    if not _seconds(rec.get("predicted"), none_ok=True, zero_ok=True):
        return f"predicted {rec.get('predicted')!r} is not a finite number >= 0"
    if not isinstance(rec.get("trace"), list):
        return "no trace list"
    return next((p for p in map(_entry_problem, rec["trace"]) if p), None)


def read_log(path, key: str | None = None) -> list[dict]:
    """The log's usable records (of `key` only, when given: other keys' records are not
    checked). A line that is not one (see the module) is skipped: the log is a cache,
    and one bad line must not stop a run. TL_DEBUG=1 names the first NAMED_SKIPS skipped
    lines and counts the others. A log that cannot be read is a `TuningLogWarning` and no
    records."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    except OSError as e:
        warnings.warn(f"auto_schedule: cannot read the tuning log {path} ({e}); searching "
                      f"without it (TL_TUNE_LOG names the log)", TuningLogWarning,
                      stacklevel=2)
        return []
    out, skipped = [], []
    for k, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        problem = None
        try:
            rec = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            problem = f"not UTF-8 (byte {e.start})"
        except RecursionError:
            problem = "nested too deeply to parse"
        except ValueError as e:                 # json's JSONDecodeError among them
            problem = f"not JSON ({e})"
        if problem is None and key is not None and isinstance(rec, dict) and \
                rec.get("key") != key:
            continue
        problem = problem or record_problem(rec)
        if problem is not None:
            skipped.append((k, problem))
            continue
        out.append(rec)
    for k, problem in skipped[:NAMED_SKIPS]:
        debug_print(1, f"auto_schedule: line {k} of the tuning log {path} is not a record "
                       f"({problem[:200]}); skipped")
    if len(skipped) > NAMED_SKIPS:
        debug_print(1, f"auto_schedule: {len(skipped) - NAMED_SKIPS} more lines of the tuning "
                       f"log {path} are not records; skipped")
    return out


def ranked_records(path, key: str, model: bool = False) -> list[dict]:
    """The records of `key` the auto-scheduler would use, best first: the measured ones,
    fastest first; then, with `model`, the model-only mode's choices (no time), latest
    first. The caller takes the first that replays. One read of the log."""
    recs = read_log(path, key)
    timed = sorted((r for r in recs if r.get("time") is not None), key=lambda r: r["time"])
    untimed = [r for r in reversed(recs) if r.get("time") is None] if model else []
    return timed + untimed


def best_record(path, key: str, model: bool = False) -> dict | None:
    """The fastest measured record for a key; without one, with `model`, the model-only
    mode's latest choice (a record without a time)."""
    return next(iter(ranked_records(path, key, model)), None)


def log_problem(path) -> str | None:
    """Why a record cannot be appended to the log at `path`, or None: asked before a search,
    so that its result is not lost to a log that refuses it. An existing log is opened for
    appending (nothing written); for a new one its folder must exist and be writable (a
    probe file there could race with another process's first record)."""
    try:
        if os.path.isdir(path):
            return "it is a folder"
        if os.path.exists(path):
            with open(path, "ab"):
                pass
            return None
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            return f"its folder {folder} does not exist"
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"its folder {folder} is not writable"
    except OSError as e:
        return str(e)
    return None


def warn_unwritable(path, problem: str, after: bool = False) -> None:
    """The `TuningLogWarning` of a log that cannot be written (`after`: the search's)."""
    when = "the search's result is returned but not recorded" if after else \
        "the search runs and its result is returned, but not recorded"
    warnings.warn(f"auto_schedule: the tuning log {path} cannot be written ({problem}): "
                  f"{when}. Point TL_TUNE_LOG (or auto_schedule's log=) at a writable file",
                  TuningLogWarning, stacklevel=3)


def append_record(path, rec: dict) -> bool:
    """Append `rec` as one line, in one write (a log appended by several processes at once
    keeps whole lines); False, with a `TuningLogWarning`, when the log refuses it, and
    False, said at TL_DEBUG=1, for a record `read_log` would skip (never written: it
    would only be skipped by every later run)."""
    problem = record_problem(rec)
    if problem is not None:
        debug_print(1, f"auto_schedule: no record written to {path}: {problem}")
        return False
    line = (json.dumps(rec, allow_nan=False) + "\n").encode()
    try:
        with open(path, "ab", buffering=0) as f:
            f.write(line)
    except OSError as e:
        warn_unwritable(path, str(e), after=True)
        return False
    return True
