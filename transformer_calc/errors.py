"""Errors a user can cause. The CLI prints their message as one line and exits 2."""

from __future__ import annotations

import reprlib

# What a message quotes of a bad value: short, even for a 10 MB string or an alias bomb.
_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60
_short.maxlevel = 2


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]
            if c not in (0x09, 0x0A)}  # (tab and newline kept: callers decide on those)
# a file name's bytes that are not UTF-8 reach Python as lone surrogates U+DC80-U+DCFF
# (PEP 383): shown as the byte they stand for; any other lone surrogate as its code
_CONTROL.update({c: f"\\x{c - 0xDC00:02x}" for c in range(0xDC80, 0xDD00)})
_CONTROL.update({c: f"\\u{c:04x}" for c in range(0xD800, 0xE000) if c not in _CONTROL})


def text_of(name: str) -> str:
    """A name that may come from a file name, as text: bytes that are not UTF-8 (lone
    surrogates) become U+FFFD, so that it can be written to YAML or JSON and read back."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace") \
        if any("\ud800" <= ch <= "\udfff" for ch in name) else name


def runner_safe(text: str) -> str:
    """Text that a CI runner reading the log cannot take for a workflow command: GitHub
    Actions (actions/runner src/Runner.Common/ActionCommand.cs) runs a line that starts,
    after leading white space, with '::' (TryParseV2) and one holding '##[' anywhere
    (TryParse, the legacy form), on stdout and stderr alike. The '#' before '[' and the
    first ':' of such a line are written as \\x23 and \\x3a, as printable writes a control
    character."""
    if "##[" in text:
        text = text.replace("##[", "#\\x23[")
    if "::" not in text:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        bare = line.lstrip()
        if bare.startswith("::"):
            lines[i] = line[:len(line) - len(bare)] + "\\x3a" + bare[1:]
    return "\n".join(lines)


def without_controls(text: str) -> str:
    """Control characters (tab and newline kept) and stray bytes written as \\xNN."""
    return text.translate(_CONTROL)


def printable(text: str, one_line: bool = False) -> str:
    """Text from the user (a file name, a YAML name or key) made safe for a terminal and for
    the CI log that records it: control characters (escape sequences that would colour or
    retitle it) and a file name's stray bytes written as \\xNN, no workflow command
    (runner_safe), and, for a line that must stay one line, newlines as \\n."""
    text = text.translate(_CONTROL)
    return runner_safe(text.replace("\n", "\\n") if one_line else text)


MAX_ERROR_LINE = 500  # characters of an error line; the rest is cut with a note


class TcalcError(Exception):
    """Base class: bad input, not a bug. The message is written for the user.

    ``line`` (1-based), where known, locates the problem in its file (for CI annotations).
    """

    line: int | None = None


class SpecError(TcalcError):
    """An architecture that cannot exist: wrong type, impossible shape, unknown key."""

    def __init__(self, key: str, expected: str, found: object = None, *, source: str | None = None,
                 unknown: bool = False):
        self.unknown = unknown  # the key itself is not known; ``expected`` is a hint
        self.key = key
        self.expected = expected
        self.found = found
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        where = f"{self.source}: " if self.source else ""
        if self.unknown:
            return f"{where}unknown key '{self.key}': {self.expected}"
        found = "" if self.found is None else f", got {_short.repr(self.found)}"
        return f"{where}key '{self.key}': expected {self.expected}{found}"

    def at(self, source: str) -> SpecError:
        """The same error, located in a file (the file is only known to the loader)."""
        return SpecError(self.key, self.expected, self.found, source=source, unknown=self.unknown)


class PresetError(TcalcError):
    """A preset or file that cannot be found or read."""

    def __init__(self, message: str, *, line: int | None = None):
        super().__init__(message)
        self.line = line


def value_error_text(e: ValueError) -> str:
    """A parser's ValueError in user words (Python refuses int literals over 4,300 digits)."""
    if "integer string conversion" in str(e):
        return "a number with more than 4,300 digits"
    return str(e)
