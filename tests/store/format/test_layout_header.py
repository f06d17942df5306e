"""One layout authority: the C passes read the record and IndexFile layout from store/format/_layout.h,
which must say what store/format/constants.py says under the same names (its numbers, and the property
names and separators as strings), and no other C file may declare a layout number, a big-endian read or
a property name of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from store.format import constants

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
HEADER = ROOT / "store" / "format" / "_layout.h"
DEFINE = re.compile(r"^#define\s+([A-Z][A-Z0-9_]*)\s+(0x[0-9A-Fa-f]+|\d+)u?\s*(?:/\*.*)?$", re.MULTILINE)


STRING_DEFINE = re.compile(r'^#define\s+([A-Z][A-Z0-9_]*)\s+"((?:[^"\\]|\\.)*)"\s*(?:/\*.*)?$', re.MULTILINE)
C_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)


def c_text(literal: str) -> str:
    """A C string literal's text (the escapes the C files use: \\xNN, \\N octal, \\n, \\\\, \\")."""
    return re.sub(r"\\(x[0-9A-Fa-f]{1,2}|[0-7]{1,3}|.)",
                  lambda m: chr(int(m.group(1)[1:], 16)) if m.group(1)[0] == "x" else
                  chr(int(m.group(1), 8)) if m.group(1)[0] in "01234567" else
                  {"n": "\n", "t": "\t", "0": "\0"}.get(m.group(1), m.group(1)), literal)


def header_strings() -> dict[str, str]:
    return {name: c_text(value) for name, value in STRING_DEFINE.findall(HEADER.read_text())}


# a position the header works out from the ones before it: (NAME + NAME), (NAME - NAME), (NAME + 8)
DERIVED = re.compile(r"^#define\s+([A-Z][A-Z0-9_]*)\s+\(([A-Z][A-Z0-9_]*) ([+-]) ([A-Z][A-Z0-9_]*|\d+)\)\s*$",
                     re.MULTILINE)


def header_numbers() -> dict[str, int]:
    """The header's numbers, written out or worked out from the ones before them."""
    text = HEADER.read_text()
    numbers = {name: int(value, 0) for name, value in DEFINE.findall(text)}
    for name, left, op, right in DERIVED.findall(text):
        a, b = numbers[left], numbers[right] if right in numbers else int(right)
        numbers[name] = a + b if op == "+" else a - b
    return numbers


def c_sources() -> list[Path]:
    return sorted(p for d in ("store", "ingest") for ext in ("*.c", "*.h") for p in (ROOT / d).rglob(ext))


def test_every_number_of_the_header_is_the_constant_of_its_name() -> None:
    numbers = header_numbers()
    assert len(numbers) >= 30, f"the header's #defines were not found: {sorted(numbers)}"
    differ = {name: (value, getattr(constants, name, None)) for name, value in numbers.items()
              if getattr(constants, name, None) != value}
    assert differ == {}, "header value, constants.py value"


def test_the_header_covers_the_record_layout_of_constants() -> None:
    layout = {name for name in vars(constants)
              if name.startswith(("POS_", "INDEX_ITEM_", "INDEX_HEADER_", "MESSAGE_MAGIC_CODE"))
              or name.endswith(("_V6_FLAG", "_HOST_LENGTH"))}
    assert layout - set(header_numbers()) == set()


def test_no_other_c_file_declares_a_layout_number_or_a_big_endian_read() -> None:
    names = set(header_numbers())
    found = []
    for path in c_sources():
        if path == HEADER:
            continue
        text = path.read_text()
        found += [(path.name, name) for name, _ in DEFINE.findall(text) if name in names]
        found += [(path.name, m) for m in re.findall(r"\b(?:uint16_t|uint32_t|int64_t)\s+(be16|be32|be64)\s*\(", text)]
        found += [(path.name, m) for m in re.findall(r"\b(int64_t\s+record_total|int\s+record_head)\s*\(", text)]
    assert found == []


def test_the_index_files_share_their_slot_and_time_rules() -> None:
    """slot_of and time_diff are written once, in _index_file.h, which the index's checks include and
    its writer reaches through _index_put.h."""
    index = ROOT / "store" / "index"
    defined = [p.name for p in sorted(index.glob("_*.[ch]"))
               if re.search(r"\b(slot_of|time_diff)\s*\([^;{]*\)\s*\{", p.read_text())]
    assert defined == ["_index_file.h"]
    for name in ("_index_check.c", "_index_put.h"):
        assert '#include "_index_file.h"' in (index / name).read_text(), name
    assert '#include "_index_put.h"' in (index / "_index_build.c").read_text()


def test_every_string_of_the_header_is_the_constant_of_its_name() -> None:
    strings = header_strings()
    assert {"PROPERTY_KEYS", "PROPERTY_UNIQ_KEY", "NAME_VALUE_SEPARATOR", "PROPERTY_SEPARATOR"} <= set(strings)
    differ = {name: (value, getattr(constants, name, None)) for name, value in strings.items()
              if getattr(constants, name, None) != value}
    assert differ == {}, "header string, constants.py value"


def test_the_header_names_every_property_the_c_passes_read_or_write() -> None:
    names = {name for name in vars(constants) if name.startswith("PROPERTY_") and name != "PROPERTY_SEPARATOR"}
    read_or_written = {"PROPERTY_TAGS", "PROPERTY_KEYS", "PROPERTY_UNIQ_KEY", "PROPERTY_DELAY", "PROPERTY_CRC32",
                       "PROPERTY_KAFKA_VALUE_NULL", "PROPERTY_KAFKA_VALUE_EMPTY", "PROPERTY_VALUE_TRUE"}
    assert read_or_written <= names and read_or_written <= set(header_strings())


def test_no_c_file_spells_a_property_name_or_separator_itself() -> None:
    """Property names and separators reach the C through the header's names only: no string
    literal outside _layout.h holds a separator byte or a property name, and no character
    literal is a separator."""
    names = {getattr(constants, n) for n in vars(constants) if n.startswith("PROPERTY_") and n != "PROPERTY_SEPARATOR"
             and isinstance(getattr(constants, n), str) and len(getattr(constants, n)) > 2}
    found = []
    for path in c_sources():
        if path == HEADER:
            continue
        code = C_COMMENT.sub(" ", path.read_text())
        for literal in C_STRING.findall(code):
            text = c_text(literal)
            if "\x01" in text or "\x02" in text or any(name in text for name in names):
                found.append((path.name, literal))
        found += [(path.name, m) for m in re.findall(r"'\\(?:x0?[12]|0?0?[12])'", code)]
    assert found == []
