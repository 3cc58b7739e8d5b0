"""A schedule's trace as data: each applied primitive (`Call`) and the stage it was applied
to (`TraceEntry`), with their Python text and JSON form."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Call:
    """One primitive as data: its name and arguments — loop, stage and tensor names as
    strings, numbers, lists of names — as `replay` applies it and an auto-scheduler samples
    and mutates it. `str()` is the short form of messages (`split(i, factor=4)`)."""

    prim: str
    args: tuple = ()
    kwargs: tuple = ()        # (name, value) pairs

    def __str__(self) -> str:
        def short(v):
            if isinstance(v, (list, tuple)):
                return "[" + ", ".join(short(x) for x in v) + "]"
            return str(v)
        parts = [short(a) for a in self.args] + [f"{k}={short(v)}" for k, v in self.kwargs]
        return f"{self.prim}({', '.join(parts)})"

    def python(self) -> str:
        """The call as Python source (names quoted: primitives take loop names)."""
        parts = [repr(_plain(a)) for a in self.args] + \
            [f"{k}={_plain(v)!r}" for k, v in self.kwargs]
        return f"{self.prim}({', '.join(parts)})"

    def to_json(self) -> list:
        return [self.prim, [_plain(a) for a in self.args], {k: _plain(v) for k, v in self.kwargs}]

    @staticmethod
    def from_json(data) -> Call:
        prim, args, kwargs = data
        return Call(prim, tuple(_frozen(a) for a in args),
                    tuple((k, _frozen(v)) for k, v in kwargs.items()))


def _plain(v):
    return [_plain(x) for x in v] if isinstance(v, (list, tuple)) else v


def _frozen(v):
    return tuple(_frozen(x) for x in v) if isinstance(v, list) else v


@dataclass(frozen=True)
class TraceEntry:
    """One applied primitive: `s[stage].call` (stage "" for a schedule-level one such as
    cache_write), replayable by loop names."""

    stage: str
    call: Call

    def __str__(self) -> str:
        """As Python: `s["C"].split("i", factor=4)`, `s.cache_write("C", "local")`."""
        return f"s[{self.stage!r}].{self.call.python()}".replace("'", '"') if self.stage \
            else f"s.{self.call.python()}".replace("'", '"')

    def to_json(self) -> list:
        return [self.stage, self.call.to_json()]

    @staticmethod
    def from_json(data) -> TraceEntry:
        return TraceEntry(data[0], Call.from_json(data[1]))
