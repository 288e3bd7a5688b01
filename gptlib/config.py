"""Configuration as dataclasses, and the command-line flags generated from their fields.

One base for `GPTConfig`, `DataConfig` and `TrainConfig`.

Hand-written plumbing, not generated from a notebook: it teaches nothing about GPTs. A config class is a
dataclass that inherits `Config` and declares each field with `opt(default, help, ...)`; it then gets:

- field validation on construction, from the type annotations and the bounds given to `opt` (wrong
  types, NaN and infinity, values out of range and unknown choices raise `gptlib.errors.ConfigError`
  naming the field), plus the class's own cross-field rules in `check()`;
- `to_dict()` / `from_dict()` (JSON-able, unknown keys refused) and `preset(name, **overrides)` over the
  class's `PRESETS`;
- `add_arguments(parser)` / `from_args(args)`: a `--flag` per field, its help the field's description. A flag
  parses its text with `parse_bool`, `parse_path` or `parse_text` by the field's type; the last two refuse
  an empty value, which is most often an unset shell variable (`--out "$RUN"`) and would otherwise mean the
  current folder.
"""

from __future__ import annotations

import argparse
import inspect
import math
import numbers
import types
import typing
from dataclasses import MISSING, asdict, field, fields
from pathlib import Path
from typing import Any, ClassVar

from .errors import ConfigError

__all__ = ["opt", "Config", "ConfigError", "checked_int", "parse_bool", "parse_path", "parse_text"]


def opt(
    default,
    help: str,
    *,
    low=None,
    high=None,
    below=None,
    choices=None,
    positive: bool = False,
    resumable: bool = False,
    compared: bool = True,
):
    """A config field: its default, a one-line description (the help of its flag), and optional bounds:
    `low <= value <= high`, `value < below`, `value > 0` (`positive`), or one of `choices`. Two classes, each
    declared here once: `resumable` marks a field that may change when a saved run is continued (where and
    how it runs, not what it computes), `compared=False` one that does not decide what a run's curves look
    like (where it writes, how often it logs: `gptlib.expected` leaves it out of a band's recipe); the class
    that owns the field decides what that allows."""
    return field(
        default=default,
        metadata={
            "help": help,
            "low": low,
            "high": high,
            "below": below,
            "choices": choices,
            "positive": positive,
            "resumable": resumable,
            "compared": compared,
        },
    )


def checked_int(value, name: str, *, low: int | None = None, high: int | None = None) -> int:
    """`value` as a plain int (a numpy integer is one; a bool or a float is not), at least `low` and at most
    `high` when given; otherwise a `ConfigError` naming `name`. The one check behind every int field and
    argument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{name} must be an int, got {value!r}")
    if low is not None and value < low:
        raise ConfigError(f"{name} must be at least {low}, got {value!r}")
    if high is not None and value > high:
        raise ConfigError(f"{name} must be at most {high}, got {value!r}")
    return int(value)


def parse_bool(text: str) -> bool:
    "A flag's `true`/`false` (also 1/0, yes/no, on/off); anything else is a usage error."
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def parse_text(text: str) -> str:
    """A flag's text, refused when empty: `--device "$DEVICE"` with the variable unset is a mistake, not a
    value."""
    if not text:
        raise argparse.ArgumentTypeError("an empty value (an unset shell variable?)")
    return text


def parse_path(text: str) -> Path:
    """A flag's path, refused when empty: `Path("")` is the current folder, so an unset shell variable would
    otherwise write a tokenizer, shards or a run into whatever folder the command runs in."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (an unset shell variable?)")
    return Path(text)


# a field declared without `opt` has `opt`'s defaults
_MARKS = {
    k: p.default for k, p in inspect.signature(opt).parameters.items() if k in ("resumable", "compared")
}
_PARSERS = {bool: parse_bool, Path: parse_path, str: parse_text}  # other kinds (int, float) parse themselves


def _kind(annotation) -> tuple[type, bool]:
    "The base type of a field annotation (int, float, bool, str or Path) and whether None is allowed."
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        (base,) = [a for a in args if a is not type(None)]
        return base, True
    return annotation, False


def _group_of(cls, name: str) -> tuple[str, str | None]:
    """The heading of field `name`'s flag group, from the first line of the docstring of the class in `cls`'s
    ancestry that declares the field (a config made of groups, as `TrainConfig` is, shows them). A line that
    opens with a one-word name and a colon ("data: the shards, ...") gives the title and the description;
    any other line is the description of a group titled with the class's name."""
    owner = next(k for k in reversed(cls.__mro__) if name in inspect.get_annotations(k))  # its own fields
    line = (owner.__doc__ or "").strip().splitlines()[0] if owner.__doc__ else ""
    title, colon, description = line.partition(": ")
    if colon and title.isidentifier():
        return title, description
    return owner.__name__, line or None


class Config:
    "The base of gptlib's config dataclasses (see the module docstring)."

    PRESETS: ClassVar[dict] = {}  # name -> a dict of fields, or an instance

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        "Check (and normalise: numpy ints to ints, strings to paths) every field, then `check()`."
        hints = typing.get_type_hints(type(self))
        for f in fields(self):
            setattr(self, f.name, self._checked(f, *_kind(hints[f.name]), getattr(self, f.name)))
        self.check()

    def _checked(self, f, kind, optional: bool, value):
        where = f"{type(self).__name__}.{f.name}"
        if value is None and optional:
            return None
        if kind is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{where} must be true or false, got {value!r}")
        elif kind is int:
            value = checked_int(value, where)  # numpy integers become plain ints (JSON-able)
        elif kind is float:
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ConfigError(f"{where} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ConfigError(f"{where} must be a finite number, got {value!r}")
            value = float(value)  # numpy floats become plain floats (JSON-able)
        elif kind is str:
            if not isinstance(value, str):
                raise ConfigError(f"{where} must be a string, got {value!r}")
        elif kind is Path:
            if not isinstance(value, (str, Path)):
                raise ConfigError(f"{where} must be a path, got {value!r}")
            value = Path(value)
        meta = f.metadata
        if meta.get("choices") is not None and value not in meta["choices"]:
            raise ConfigError(f"{where} must be one of {', '.join(map(str, meta['choices']))}, got {value!r}")
        if meta.get("positive") and not value > 0:
            raise ConfigError(f"{where} must be positive, got {value!r}")
        if meta.get("low") is not None and value < meta["low"]:
            raise ConfigError(f"{where} must be at least {meta['low']}, got {value!r}")
        if meta.get("high") is not None and value > meta["high"]:
            raise ConfigError(f"{where} must be at most {meta['high']}, got {value!r}")
        if meta.get("below") is not None and not value < meta["below"]:
            raise ConfigError(f"{where} must be below {meta['below']}, got {value!r}")
        return value

    def check(self) -> None:
        "Rules between fields; subclasses raise `ConfigError` naming the fields."

    # --- dicts and presets ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        "The fields as a JSON-able dict (paths as strings)."
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict):
        "The inverse of `to_dict`: unknown keys are an error, missing ones take the defaults."
        if not isinstance(d, dict):
            raise ConfigError(f"expected a dict of {cls.__name__} fields, got {type(d).__name__}")
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise ConfigError(f"unknown {cls.__name__} fields {unknown}; known fields: {known}")
        return cls(**d)

    @classmethod
    def preset(cls, name: str, **overrides):
        "The preset `name` with some fields replaced."
        if name not in cls.PRESETS:
            raise ConfigError(f"unknown {cls.__name__} preset {name!r}; choose one of {sorted(cls.PRESETS)}")
        base = cls.PRESETS[name]
        return cls.from_dict({**(base.to_dict() if isinstance(base, Config) else base), **overrides})

    @classmethod
    def describe(cls, name: str) -> str:
        "The one-line description of field `name`."
        return next(f.metadata["help"] for f in fields(cls) if f.name == name)

    @classmethod
    def names(cls, **marks) -> tuple[str, ...]:
        "The fields whose marks (`opt`'s `resumable`, `compared`) have the given values, in order."
        return tuple(
            f.name for f in fields(cls) if all(f.metadata.get(k, _MARKS[k]) == v for k, v in marks.items())
        )

    # --- the command line ------------------------------------------------------------------------------
    @classmethod
    def add_arguments(
        cls, parser: argparse.ArgumentParser, *, skip=(), required=(), show_defaults: bool = True
    ):
        """A `--field-name` flag per field (but those in `skip`), typed from its annotation, with the field's
        description as help, under its group's heading (`_group_of`: the class that declares it).
        Unset flags parse as None: `from_args` then keeps the default (or a preset's)."""
        hints, groups = typing.get_type_hints(cls), {}
        for f in fields(cls):
            if f.name in skip:
                continue
            kind, _ = _kind(hints[f.name])
            text = f.metadata.get("help", "")
            if show_defaults and f.default is not MISSING and f.name not in required:
                text += f" (default: {f.default})"
            title, about = _group_of(cls, f.name)
            if title not in groups:
                groups[title] = parser.add_argument_group(title, about)
            groups[title].add_argument(
                "--" + f.name.replace("_", "-"),
                dest=f.name,
                default=None,
                type=_PARSERS.get(kind, kind),
                required=f.name in required,
                metavar=kind.__name__.upper(),
                help=text,
            )
        return parser

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, preset: str | None = None, **values):
        "The config of the flags `add_arguments` parsed (over `values`, over the preset or the defaults)."
        chosen = {
            f.name: getattr(args, f.name) for f in fields(cls) if getattr(args, f.name, None) is not None
        }
        if preset is None:
            return cls.from_dict({**values, **chosen})
        return cls.preset(preset, **values, **chosen)
