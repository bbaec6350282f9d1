"""YAML for files people write (stack files, profiles, model configs, lengths files): what a
reader sees is what the program gets, and no document can make the loader hang or blow up.

PyYAML's SafeLoader (6.0.3) is YAML 1.1 and expands aliases, so:
- a 1 KB "billion laughs" of nested aliases becomes 10^9 references that every later walk
  (validation, the non-finite check) visits: refused here, any anchor or alias at all
  (no stack or profile needs one; write the value out);
- YAML 1.1 reads `1:30` as 90 (base 60), `010` as 8 (octal), `yes/no/on/off/y/n` as booleans,
  `1_000` as 1000 and `2001-12-14` as a date. These follow the YAML 1.2 core schema here
  (yaml.org/spec/1.2.2 section 10.3.2): only `true/false` are booleans, `1:30`, `yes`, `1_000`
  and dates are strings (so a number field refuses them by name), and an integer with a
  leading zero is refused, since 1.1 and 1.2 disagree on it (8 or 10);
- a key given twice keeps the last one silently (YAML 1.2 forbids it): refused;
- `!!set`, `!!binary`, `!!timestamp`, `!!python/...` and other tags build types no setting
  takes (or tracebacks): only the core schema's str, int, float, bool, null, seq and map;
- a 5,000-digit integer is a traceback in `int()` (Python's 4,300-digit limit): refused
  above MAX_INT_DIGITS;
- deep nesting recurses: refused above MAX_DEPTH levels.

The pure-Python loader on purpose: libyaml's composer (CSafeLoader) recurses in C and crashes
the process on 100,000 nested `[` (a segfault, measured with PyYAML 6.0.3).
"""
from __future__ import annotations

import re

import yaml

from .errors import InputError

MAX_INT_DIGITS = 32      # any real setting fits in 20; well under Python's 4,300-digit int() limit
MAX_DEPTH = 64           # nesting levels; no stack, profile or model config comes near
CORE_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map"))
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"

# The YAML 1.2 core schema's plain-scalar rules (spec 1.2.2, 10.3.2, "Tag Resolution").
_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
_LEADING_ZERO = re.compile(r"^[-+]?0[0-9]+$")


class _Resolver(yaml.resolver.BaseResolver):
    yaml_implicit_resolvers: dict = {}


for _tag, _regexp, _first in (
        ("tag:yaml.org,2002:bool", _BOOL, list("tTfF")),
        (_INT_TAG, _INT, list("-+0123456789")),
        (_FLOAT_TAG, _FLOAT, list("-+0123456789.")),
        ("tag:yaml.org,2002:null", _NULL, ["~", "n", "N", ""])):
    _Resolver.add_implicit_resolver(_tag, _regexp, _first)


class _Loader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, yaml.composer.Composer,
              yaml.constructor.SafeConstructor, _Resolver):
    def __init__(self, stream):
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        _Resolver.__init__(self)
        self._depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused(event.start_mark, "anchors and aliases (&name, *name) are not read; write the value out")
        tag = getattr(event, "tag", None)
        if tag not in (None, "!") and tag not in CORE_TAGS:
            shown = tag.replace("tag:yaml.org,2002:", "!!")[:60]
            raise _Refused(event.start_mark, f"tag {shown} is not read; only plain YAML values (no ! tags)")
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(event.start_mark, f"nested more than {MAX_DEPTH} levels deep")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                raise _Refused(key_node.start_mark, "a key is a list or map; keys are names") from None
            if duplicate:
                raise _Refused(key_node.start_mark, f"key '{str(key)[:60]}' appears twice; keep one")
        return super().construct_mapping(node, deep)


def _construct_int(loader: _Loader, node):
    text = loader.construct_scalar(node)
    digits = text.lstrip("+-")
    if len(digits) > MAX_INT_DIGITS:
        raise _Refused(node.start_mark, f"an integer of {len(digits):,} digits; numbers here have at most "
                                        f"{MAX_INT_DIGITS}")
    if _LEADING_ZERO.match(text):
        raise _Refused(node.start_mark, f"{text}: a leading zero is octal in YAML 1.1 ({int(text, 8)}) and decimal "
                                        f"in 1.2 ({int(text)}); write {int(text)} without it")
    if not _INT.match(text):
        raise _Refused(node.start_mark, f"'{text[:40]}' is not an integer")
    return int(text, 0) if digits.startswith(("0o", "0x")) else int(text)


def _construct_float(loader: _Loader, node):
    text = loader.construct_scalar(node)
    if not _FLOAT.match(text):
        raise _Refused(node.start_mark, f"'{text[:40]}' is not a number")
    lowered = text.lower()
    if lowered.endswith((".inf", ".nan")):       # YAML's spellings; Python's float() wants inf and nan
        return float(lowered.replace(".", ""))
    return float(text)


_Loader.add_constructor(_INT_TAG, _construct_int)
_Loader.add_constructor(_FLOAT_TAG, _construct_float)


class _Refused(yaml.YAMLError):
    def __init__(self, mark, problem: str):
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


def load(text: str, source: str):
    """The document in `text`, or InputError: `<source>: not valid YAML at line N: <problem>`."""
    try:
        return yaml.load(text, Loader=_Loader)     # noqa: S506 (a safe constructor, see above)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc.__class__.__name__
        raise InputError(f"{source}: not valid YAML{at}: {problem}") from None
    except RecursionError:
        raise InputError(f"{source}: nested too deeply (at most {MAX_DEPTH} levels)") from None
    except ValueError as exc:      # a conversion PyYAML does not wrap
        raise InputError(f"{source}: not valid YAML: {str(exc)[:120]}") from None
