"""The properties string and Java string rules (FORMAT §1, §7, §12)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from store.format.constants import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR


def java_utf8(s: str) -> bytes:
    """Java ``String.getBytes(UTF_8)``: an unpaired surrogate becomes '?', a surrogate pair held as
    two code points (possible in a Python str) is encoded as the one character it stands for."""
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        # Join surrogate pairs first (Java sees UTF-16, where a pair is one character).
        joined = s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        return joined.encode("utf-8", "replace")


def java_string(b: bytes | bytearray | memoryview) -> str:
    """Java ``new String(bytes, UTF_8)``: malformed input becomes U+FFFD."""
    return bytes(b).decode("utf-8", "replace")


def utf16_length(s: str) -> int:
    """Java ``String.length()``: UTF-16 code units."""
    if s.isascii():
        return len(s)
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def utf16_sort_key(s: str) -> bytes:
    """Orders strings like Java ``String.compareTo`` (by UTF-16 code unit), e.g. a TreeMap."""
    return s.encode("utf-16-be", "surrogatepass")


def properties_to_string(props: Mapping[str, str]) -> str:
    """``MessageDecoder.messageProperties2String``: name \\x01 value \\x02 for each non-null value."""
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items() if v is not None)


def string_to_properties(s: str) -> dict[str, str]:
    """``MessageDecoder.string2messageProperties``: split on \\x02 (a last piece without it still
    counts); the key ends at the first \\x01; pieces without \\x01, with an empty key or an empty
    value are dropped; a later duplicate overwrites."""
    props: dict[str, str] = {}
    if not s:
        return props
    for piece in s.split(PROPERTY_SEPARATOR):
        k, sep, v = piece.partition(NAME_VALUE_SEPARATOR)
        if sep and k and v:
            props[k] = v
    return props


def delete_property(s: str, name: str) -> str:
    """``MessageUtils.deleteProperty``: remove every ``name\\x01...\\x02`` pair that starts the
    string or follows a \\x02. A matching last pair without its \\x02 is cut with everything after it."""
    if name not in s:
        return s
    out: list[str] = []
    idx0 = 0
    n = len(name)
    while True:
        start = idx0
        while True:
            idx1 = s.find(name, start)
            if idx1 == -1:
                break
            start = idx1 + n
            if (idx1 == 0 or s[idx1 - 1] == PROPERTY_SEPARATOR) and len(s) > idx1 + n \
                    and s[idx1 + n] == NAME_VALUE_SEPARATOR:
                break
        if idx1 == -1:
            out.append(s[idx0:])
            break
        out.append(s[idx0:idx1])
        idx2 = s.find(PROPERTY_SEPARATOR, idx1 + n + 1)
        if idx2 == -1:
            break
        idx0 = idx2 + 1
    return "".join(out)


_JAVA_INT = re.compile(r"[+-]?\d+")


def java_parse_int(s: str | None) -> int | None:
    """Java ``Integer.parseInt``: an optional sign and digits, within int32; None where Java throws."""
    if s is None or not _JAVA_INT.fullmatch(s):
        return None
    v = int(s)
    return v if -2**31 <= v < 2**31 else None


def tags_code(tags: str | None) -> int:
    """Java ``String.hashCode`` over UTF-16 code units (h = 31h + c, 32-bit), sign-extended to
    int64; 0 when there is no tag."""
    if not tags:
        return 0
    if tags.isascii():
        units: bytes | list[int] = tags.encode("ascii")
    else:
        raw = tags.encode("utf-16-be", "surrogatepass")
        units = [(raw[i] << 8) | raw[i + 1] for i in range(0, len(raw), 2)]
    h = 0
    for c in units:
        h = (31 * h + c) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def parse_delay_property(value: str | None) -> int:
    """The DELAY property as a level; a missing or non-numeric value means no delay."""
    if not value:
        return 0
    try:
        return int(value)
    except ValueError:
        return 0
