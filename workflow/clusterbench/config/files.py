"""Reading a config file: JSON or YAML, as Snakemake reads it, with what YAML lets by refused.

Refused, each naming the line (:class:`ReadError`):

- a key given twice in one mapping: YAML keeps the later value without a word (a run's
  ``epochs: 1`` then ``epochs: 3``; a second ``runs:`` list that drops the first);
- a file larger than :data:`MAX_BYTES`, a list or mapping of more than :data:`MAX_ENTRIES`
  entries, nesting deeper than :data:`MAX_DEPTH` and more than :data:`MAX_VALUES` values in all
  (an alias counts as the values it repeats): reading any file within these takes about a
  second or less, and each is far above what a 10,000-run config needs (config/README.md,
  "Limits");
- an alias inside the value its own anchor marks (a value containing itself), and a value YAML
  reads as a date that is none (``2024-13-01``).

Built from the parser's events by :class:`_Builder` rather than by PyYAML's composer, which
recurses once per level (deep nesting: a ``RecursionError``) and builds the whole document before
anything could be counted. libyaml's parser (PyYAML's C extension) where installed, else
PyYAML's own. What it builds is what ``yaml.safe_load`` builds: the same tags, ``<<`` merge keys
and aliases (one object, shared).

The config files themselves are read by :func:`load_file` (and :func:`check_files`,
:func:`with_config_args`): :class:`~clusterbench.config.errors.ConfigError` naming the file.
Imported by the Snakefile at parse time: the standard library and yaml only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml import events

from clusterbench.config.errors import ConfigError, key_path

#: The largest config file read, bytes. A 10,000-run config with every run key written out
#: (block style) is about 9 MB (50 run keys).
MAX_BYTES = 16 * 1024 * 1024
#: The most entries of one list or mapping (``runs:``, a matrix's values, ``environments:``).
MAX_ENTRIES = 50_000
#: The deepest nesting of lists and mappings (a config needs about 6 levels).
MAX_DEPTH = 64
#: The most values (every scalar, list and mapping; an alias counts as the values it repeats)
#: in one file. A 10,000-run config with every run key written out has about 1,010,000 (50
#: run keys); reading 1,500,000 values takes about a second on a 2-core machine.
MAX_VALUES = 1_500_000

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE = "tag:yaml.org,2002:merge"
_STR = "tag:yaml.org,2002:str"
#: Tags whose values are immutable: one object per distinct text may serve every occurrence.
_PLAIN_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}"
    for name in ("null", "bool", "int", "float", "str", "timestamp", "binary")
)
_LIMITS = "config/README.md, 'Limits'"


class ReadError(ValueError):
    """A config file that is read but refused; ``line`` (1-based) where the problem is, if
    known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


def read(text: str) -> Any:
    """The value of config file text ``text`` (JSON, else YAML), as Snakemake would read it,
    or :class:`ReadError`; a YAML syntax error is PyYAML's ``yaml.YAMLError``."""
    if len(text) > MAX_BYTES:  # characters: at most as many as bytes
        raise ReadError(too_large(len(text.encode("utf-8", "surrogatepass"))))
    duplicate = None
    try:
        _check_json(json.loads(text), (), 0, [0])  # the limits first: fast, in C
        return json.loads(text, object_pairs_hook=_json_mapping)
    except _JSONDuplicate as exc:
        duplicate = exc  # read it as YAML too, for the lines
    except ReadError:
        raise
    except ValueError:
        pass  # no JSON
    except RecursionError:
        raise ReadError(_too_deep(None)) from None
    loader = _Loader(text)
    try:
        value = _Builder(loader).document()
    except yaml.YAMLError as exc:
        if duplicate is not None:
            raise duplicate from None
        if "maximum nesting depth" in str(getattr(exc, "problem", "")):  # libyaml's own limit
            raise ReadError(_too_deep(None), exc.problem_mark.line + 1) from None
        raise
    finally:
        loader.dispose()
    if duplicate is not None:
        raise duplicate
    return value


def _too_deep(where: str | None) -> str:
    """The message of nesting too deep at key path ``where`` (None: not known)."""
    message = f"lists or mappings nested more than {MAX_DEPTH} deep ({_LIMITS})"
    if where is None:
        return message[0].upper() + message[1:]
    return f"{where if len(where) <= 60 else where[:40] + '...'}: {message}"


def too_large(size: int) -> str:
    return (
        f"{size} bytes, more than the {MAX_BYTES} bytes a config file may hold ({_LIMITS}); "
        "write a long sweep as an experiment (a matrix) rather than run by run"
    )


class _JSONDuplicate(ReadError):
    pass


def _json_mapping(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) < len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _JSONDuplicate(f"key {key!r} is given twice in one object: keep one")
    return mapping


def _check_json(value: Any, path: tuple[Any, ...], depth: int, count: list[int]) -> None:
    """The limits of :func:`read` on a JSON value, counting its values as YAML's are (a key is
    one); JSON has no aliases. No line is known."""
    count[0] += 1 if not path or isinstance(path[-1], int) else 2
    if count[0] > MAX_VALUES:
        raise ReadError(f"more than {MAX_VALUES} values in all, the limit of a config ({_LIMITS})")
    if not isinstance(value, dict | list):
        return
    if depth >= MAX_DEPTH:
        raise ReadError(_too_deep(key_path(path)))
    if len(value) > MAX_ENTRIES:
        raise ReadError(_too_many(key_path(path)))
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, sub in items:
        _check_json(sub, (*path, key), depth + 1, count)


def _too_many(where: str) -> str:
    return (
        f"{where} has more than {MAX_ENTRIES} entries, the most a list or mapping of a config "
        f"may hold ({_LIMITS})"
    )


@dataclass
class _Open:
    """A list or mapping being built: where it is (its key or index in its parent), the event
    that began it, the anchor to register once it is complete and the value count when it began;
    a mapping's pending key, the event of each key, and its ``<<`` merges."""

    value: Any
    part: Any
    event: events.Event | None
    anchor: str | None
    start: int
    key: Any = None
    has_key: bool = False
    keys: dict[Any, events.Event] = field(default_factory=dict)  # each key's event
    merges: list[tuple[Any, events.Event]] = field(default_factory=list)


class _MergeKey:
    """The ``<<`` key of a mapping: the mappings it names are merged under its own keys."""

    def __repr__(self) -> str:
        return "'<<'"


_MERGE_KEY = _MergeKey()


def _line(event: events.Event) -> int:
    return event.start_mark.line + 1


class _Builder:
    """The value of one YAML document, built from the parser's events (see the module). Lines
    are worked out only for a message: this runs at every parse of the Snakefile."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        #: the open lists and mappings, innermost last, under a holder of the document's value
        self.stack = [_Open(value=[], part=None, event=None, anchor=None, start=0)]
        self.anchors: dict[str, tuple[Any, int]] = {}  # anchor -> (value, its value count)
        self.values = 0
        self.scalars: dict[tuple[Any, ...], Any] = {}  # (tag, implicit, text) -> value

    def document(self) -> Any:
        """The single document's value (None for a file of only comments)."""
        get = self.loader.get_event
        get()  # StreamStartEvent
        if self.loader.check_event(events.StreamEndEvent):
            return None
        get()  # DocumentStartEvent
        handle = {
            events.ScalarEvent: self.scalar,
            events.SequenceStartEvent: self.open,
            events.MappingStartEvent: self.open,
            events.SequenceEndEvent: self.close,
            events.MappingEndEvent: self.close,
            events.AliasEvent: self.alias,
        }
        while True:
            event = get()
            if type(event) is events.DocumentEndEvent:
                break
            handle[type(event)](event)
        if not self.loader.check_event(events.StreamEndEvent):
            raise ReadError("a second YAML document ('---'): a config file holds one", _line(get()))
        return self.stack[0].value[0]

    def count(self, values: int, event: events.Event) -> None:
        self.values += values
        if self.values > MAX_VALUES:
            raise ReadError(
                f"more than {MAX_VALUES} values in all (an alias counts as the values it "
                f"repeats), the limit of a config ({_LIMITS})",
                _line(event),
            )

    def parts(self, *more: Any) -> str:
        """Where the innermost open list or mapping is (with ``more`` parts under it)."""
        return key_path([*(frame.part for frame in self.stack[2:]), *more])

    def scalar(self, event: events.ScalarEvent) -> None:
        self.values += 1
        if self.values > MAX_VALUES:
            self.count(0, event)
        try:
            value = self.scalars[(event.tag, event.implicit, event.value)]
        except KeyError:
            value = self.construct(event)
        if event.anchor is not None:
            self.anchors[event.anchor] = (value, 1)
        self.add(value, event)

    def construct(self, event: events.ScalarEvent) -> Any:
        """The value of a scalar, typed as ``yaml.safe_load`` types it."""
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(yaml.ScalarNode, event.value, event.implicit)
        if tag == _STR:  # most are text: no node to construct
            self.scalars[(event.tag, event.implicit, event.value)] = event.value
            return event.value
        if tag == _MERGE:
            return _MERGE_KEY
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        try:
            value = self.loader.construct_object(node)
        except (ValueError, OverflowError) as exc:  # e.g. a date that is none: 2024-13-01
            raise ReadError(
                f"YAML reads {event.value!r} as a {tag.rsplit(':', 1)[-1]}, which it is not "
                f"({exc}); quote it if it is text",
                _line(event),
            ) from None
        if tag in _PLAIN_TAGS:
            self.scalars[(event.tag, event.implicit, event.value)] = value
        return value

    def add(self, value: Any, event: events.Event) -> None:
        """Put ``value`` into the innermost open list or mapping (as its key, or its value)."""
        top = self.stack[-1]
        container = top.value
        if type(container) is list:
            if len(container) >= MAX_ENTRIES or value is _MERGE_KEY:
                self.refuse(value, event)
            container.append(value)
        elif not top.has_key:
            self.take_key(top, value, event)
        elif top.key is _MERGE_KEY:
            top.has_key = False
            top.merges.append((value, event))
        else:
            if len(container) >= MAX_ENTRIES or value is _MERGE_KEY:
                self.refuse(value, event)
            top.has_key = False
            container[top.key] = value

    def refuse(self, value: Any, event: events.Event) -> None:
        if value is _MERGE_KEY:
            raise ReadError("'<<' (YAML's merge key) stands for a value; quote it", _line(event))
        raise ReadError(_too_many(self.parts()), _line(event))

    def take_key(self, top: _Open, key: Any, event: events.Event) -> None:
        try:
            first = top.keys.get(key)
        except TypeError:  # a list or mapping as a key
            raise ReadError(
                f"{self.parts()}: a key must be a single value, not a {type(key).__name__}",
                _line(event),
            ) from None
        if first is not None:
            raise ReadError(
                f"{self.parts(key)} is given twice (lines {_line(first)} and {_line(event)}): "
                "YAML would keep the later value and drop the first without a word; keep one",
                _line(event),
            )
        top.keys[key] = event
        top.key, top.has_key = key, True

    def open(self, event: events.CollectionStartEvent) -> None:
        if len(self.stack) > MAX_DEPTH:
            raise ReadError(_too_deep(self.parts()), _line(event))
        top = self.stack[-1]
        part = len(top.value) if type(top.value) is list else top.key
        start = self.values
        self.count(1, event)
        value: Any = [] if type(event) is events.SequenceStartEvent else {}
        self.add(value, event)
        self.stack.append(_Open(value, part, event, event.anchor, start))

    def close(self, event: events.CollectionEndEvent) -> None:
        top = self.stack.pop()
        if top.merges:
            self.merge(top)
        if top.anchor is not None:
            self.anchors[top.anchor] = (top.value, self.values - top.start)

    def merge(self, top: _Open) -> None:
        """Apply a mapping's ``<<`` as YAML says (and ``yaml.safe_load`` orders the keys): the
        mapping's own keys win, then the first of the merged mappings that has the key."""
        merged: dict[Any, Any] = {}
        for value, event in top.merges:
            sources = value if isinstance(value, list) else [value]
            if not all(isinstance(source, dict) for source in sources):
                raise ReadError(
                    f"{self.parts(top.part)}: '<<' merges a mapping or a list of mappings",
                    _line(event),
                )
            for source in sources:
                merged.update((k, v) for k, v in source.items() if k not in merged)
        own = dict(top.value)
        top.value.clear()
        top.value.update(merged)
        top.value.update(own)
        if len(top.value) > MAX_ENTRIES:
            raise ReadError(_too_many(self.parts(top.part)), _line(top.event))

    def alias(self, event: events.AliasEvent) -> None:
        anchor = event.anchor
        if anchor not in self.anchors:
            if any(frame.anchor == anchor for frame in self.stack):
                raise ReadError(
                    f"*{anchor} stands inside the value its anchor &{anchor} marks: a value "
                    "cannot hold itself",
                    _line(event),
                )
            raise ReadError(f"*{anchor}: no anchor &{anchor} before it", _line(event))
        value, size = self.anchors[anchor]
        self.count(size, event)
        self.add(value, event)


# ------------------------------------------------------------------------------------------
# a config file read as the workflow reads it


def load_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The config file ``path`` as a mapping, read as Snakemake reads it (JSON, else YAML);
    :class:`ConfigError` naming the file (and the line, and for a YAML syntax error the column)
    when it is no UTF-8 text or no mapping, gives a key twice, or is larger, longer or deeper
    than a config may be (:mod:`clusterbench.config.files`)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        size = max(len(data), path.stat().st_size)
        raise ConfigError(f"{path}: {too_large(size)}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}, line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); "
            "save the config file as UTF-8"
        ) from None
    try:
        loaded = read(text)
    except ReadError as exc:
        where = "" if exc.line is None else f", line {exc.line}"
        raise ConfigError(f"{path}{where}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context", None)
        raise ConfigError(
            f"{path}{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")
        ) from None
    if not isinstance(loaded, dict):
        raise ConfigError(
            f"{path}: a config file must be a YAML mapping of keys, got {type(loaded).__name__}"
        )
    return loaded


def check_files(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Read each config file of ``paths`` as :func:`load_file` does: :class:`ConfigError` for
    the first it refuses. For the files Snakemake was given (the workflow's ``configfile:``,
    ``--configfile``): it reads them with its own loader, which keeps the later of two equal
    keys without a word and has no limits, so the workflow reads them again."""
    for path in paths:
        if os.path.exists(path):  # a missing one: Snakemake says so
            load_file(path)


def with_config_args(config: Mapping[str, Any], config_args: Iterable[str] | None) -> dict:
    """``config`` with each list or mapping given by Snakemake's ``--config KEY=VALUE``
    (``config_args``: the ``KEY=VALUE`` texts) read as YAML, as it would be in a config file.

    Snakemake reads such a value with YAML's base loader, which keeps every value in it as text
    (``run_defaults={epochs: 2}`` gives ``{"epochs": "2"}``, refused as no integer); a plain
    value it types itself (``--config site=x``). The value read again is merged over
    ``config`` as Snakemake merged its own, so it replaces exactly what Snakemake's did; a key
    given twice in it is refused (:class:`ConfigError`)."""
    resolved = dict(config)
    for entry in config_args or ():
        key, sep, text = entry.partition("=")
        if not sep:
            continue
        try:
            value = read(text)
        except ReadError as exc:
            raise ConfigError(f"--config {key}=...: {exc}") from None
        except yaml.YAMLError:
            continue  # no YAML: Snakemake kept it as text
        if isinstance(value, dict | list):
            resolved[key] = _merged(resolved.get(key), value)
    return resolved


def _merged(base: Any, over: Any) -> Any:
    """``over`` merged over ``base`` as Snakemake merges config (mappings key by key)."""
    if isinstance(over, Mapping) and isinstance(base, Mapping):
        return {**base, **{key: _merged(base.get(key), sub) for key, sub in over.items()}}
    return over
