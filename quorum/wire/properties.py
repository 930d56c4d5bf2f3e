"""java.util.Properties text, read and written by Java's rules: Kafka's config files and meta.properties.

Continuation lines, `=`/`:`/whitespace separators, `#`/`!` comments and backslash escapes
(including `\\uXXXX` and surrogate pairs) are handled as `Properties.load` does, so a file written
for Apache Kafka loads unchanged.
"""

from __future__ import annotations


class PropertiesError(ValueError):
    """Text that java.util.Properties would also refuse: a malformed escape."""


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATORS = "=:"
_WHITESPACE = " \t\f"


def _logical_lines(text: str) -> list[str]:
    """Join continued lines (an odd number of trailing backslashes), dropping comments and blanks."""
    lines: list[str] = []
    pending: str | None = None
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = raw.lstrip(_WHITESPACE)
        if pending is None:
            if not line or line[0] in "#!":
                continue
        else:
            line = pending + line
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending = line[:-1]
            continue
        pending = None
        lines.append(line)
    if pending is not None:
        lines.append(pending)
    return lines


def _unescape(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        i += 1
        if char != "\\" or i == len(text):
            out.append(char)
            continue
        char = text[i]
        i += 1
        if char == "u":
            digits = text[i : i + 4]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise PropertiesError(f"malformed unicode escape {text[i - 2 : i + 4]!r}")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(char, char))
    # Java writes characters beyond the BMP as two \u escapes (a surrogate pair): join them.
    try:
        return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeError:
        raise PropertiesError(f"unpaired surrogate in the escapes of {text!r}") from None


def parse_properties(text: str) -> dict[str, str]:
    """Parse a Java properties file (java.util.Properties.load's rules)."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        i = 0
        while i < len(line) and not (line[i] in _SEPARATORS or line[i] in _WHITESPACE):
            i += 2 if line[i] == "\\" else 1
        key = line[: min(i, len(line))]
        rest = line[min(i, len(line)) :].lstrip(_WHITESPACE)
        if rest[:1] and rest[0] in _SEPARATORS:
            rest = rest[1:].lstrip(_WHITESPACE)
        props[_unescape(key)] = _unescape(rest)
    return props


def _escape(text: str, is_key: bool) -> str:
    out = []
    for position, char in enumerate(text):
        if char == " " and (is_key or position == 0):
            out.append("\\ ")
        elif char in "\\=:#!":
            out.append("\\" + char)
        elif char in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return "".join(out)


def format_properties(props: dict[str, str], comment: str | None = None) -> str:
    """Properties text as java.util.Properties.store(Writer) writes it (comment lines first):
    non-ASCII stays as it is (the file is UTF-8), control characters are escaped."""
    lines = [f"#{line}" for line in comment.split("\n")] if comment is not None else []
    lines += [f"{_escape(key, True)}={_escape(value, False)}" for key, value in props.items()]
    return "\n".join(lines) + "\n"
