"""Text and URLs from elsewhere (a report's target, a Prometheus URL, a server's error message),
made safe to print: credentials redacted, terminal control sequences and rich markup defused.

- `redact_url`: `user:password@` becomes `***@`, and the values of query parameters that carry
  secrets (api_key, token, password, ...) become `***` (the names stay, so the reader sees what
  was given); anything that is not a URL is redacted as text (`redact_text`).
- `printable`: C0/C1 control characters and ANSI/OSC escape sequences removed (a report's
  `target` could otherwise move the cursor, retitle the terminal or hide lines), long text cut.
- `markup_safe`: `printable`, then `rich.markup.escape`, for text that a rich Console prints as
  markup (`[/]` in a report's target was a traceback: rich read it as a closing tag).
"""
from __future__ import annotations

import re
import urllib.parse

SENSITIVE_PARAMS = frozenset({
    "api_key", "apikey", "api-key", "key", "token", "access_token", "id_token", "refresh_token", "auth", "authorization",
    "password", "passwd", "pwd", "secret", "client_secret", "signature", "sig", "x-amz-signature", "x-amz-credential",
    "x-amz-security-token", "session", "sessionid", "bearer"})
REDACTED = "***"
# ESC [ ... final byte (CSI), ESC ] ... BEL or ESC \ (OSC), ESC and one byte; then single control characters.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?|\x9b[0-?]*[ -/]*[@-~]")
# C0 (tab and newline apart) and C1 controls, line and paragraph separators, bidi marks and overrides.
_CONTROL_SET = r"\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069"
# A lone surrogate (JSON's "\ud800", a non-UTF-8 byte in argv) cannot be encoded: printing it raises.
_SURROGATE_SET = r"\ud800-\udfff"
_CONTROLS = re.compile(f"[{_CONTROL_SET}]")
_SURROGATES = re.compile(f"[{_SURROGATE_SET}]")
_ANY_CONTROL = re.compile(f"[{_SURROGATE_SET}\\t\\n{_CONTROL_SET}]")      # what an error line escapes
_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")
_PARAM = re.compile(r"(?i)([?&;](?:" + "|".join(re.escape(p) for p in sorted(SENSITIVE_PARAMS, key=len, reverse=True))
                    + r")=)[^&#\s]*")


def redact_text(text: str) -> str:
    """Credentials in any URL inside `text`, and sensitive query values, replaced by ***."""
    return _PARAM.sub(lambda m: m.group(1) + REDACTED, _USERINFO.sub(REDACTED + "@", text))


def redact_url(url: str) -> str:
    """The URL with its userinfo and the values of sensitive query parameters redacted."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return redact_text(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    query = "&".join(
        f"{name}={REDACTED}" if name.lower() in SENSITIVE_PARAMS else (f"{name}={value}" if sep else name)
        for name, sep, value in (item.partition("=") for item in parts.query.split("&") if item))
    return redact_text(urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))


def printable(text, limit: int = 300) -> str:
    """One line of plain text: escape sequences and control characters removed, at most `limit` characters."""
    text = _SURROGATES.sub("\ufffd", _CONTROLS.sub("", _ESCAPES.sub("", str(text))))
    return text if len(text) <= limit else text[:limit - 3] + "..."


def markup_safe(text, limit: int = 300) -> str:
    """`printable` and redacted, then escaped for rich markup: prints as the characters it holds."""
    from rich.markup import escape
    return escape(printable(redact_text(str(text)), limit))


def described(value) -> str:
    """What a value read from a file is, never what it says: an error about a file's field names the
    kind (`text of 25 characters`, `a number with a fraction`) so no file content (a secret a user
    pointed the option at by mistake, `/proc/self/environ`) reaches a terminal or a CI log."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "a negative number" if value < 0 else "a whole number"
    if isinstance(value, float):
        return "a number with a fraction" if value == value and abs(value) != float("inf") else "not a finite number"
    if isinstance(value, str):
        if not value.strip():
            return "an empty field"
        return f"text of {len(value):,} character{'s' if len(value) != 1 else ''}"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value):,}"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def control_escaped(text: str) -> str:
    """`text` with every control, line-separator and bidi-override character written as its escape
    (`\\x1b`, `\\n`, `\\u202e`): an error line that quotes a value stays one line and cannot move the
    cursor, retitle the terminal or reorder what the reader sees."""
    return _ANY_CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def nfkc_ascii(value: str) -> str | None:
    """An identifier as Unicode compatibility normalization (NFKC) writes it, when that is ASCII;
    None otherwise. NFKC folds look-alikes (a Kelvin sign U+212A to K, fullwidth Ｌ to L) into the
    letters they stand for, so one name has one spelling; what is still not ASCII after it is no
    Hugging Face id, model key or served name."""
    import unicodedata
    folded = unicodedata.normalize("NFKC", value)
    return folded if folded.isascii() else None
