"""The test oracle of the properties split's pairs (store/scan/_properties_split.c through
store.scan.arrow_text.parse_properties): one record's PROPERTIES cut as FORMAT.md §7 says, in
plain Python. Its order is the split's own promise, finer than string2messageProperties' map: the
pieces in the order they stand, of pairs with the same name (byte for byte) only the last, in its
place."""

from __future__ import annotations

from store.format.properties import java_string


def pairs(blob: bytes) -> list[tuple[str, str]]:
    found: list[tuple[bytes, bytes]] = []
    for piece in blob.split(b"\x02"):
        sep = piece.find(b"\x01")
        if sep > 0 and sep + 1 < len(piece):
            found.append((piece[:sep], piece[sep + 1:]))
    last = {name: k for k, (name, _) in enumerate(found)}
    return [(java_string(n), java_string(v)) for k, (n, v) in enumerate(found) if last[n] == k]


def named(blob: bytes, name: str) -> str | None:
    """The value the split picks out for ``name`` (the last pair of that name), or None."""
    return dict(pairs(blob)).get(name)
