"""One layout authority: the C passes read the record and IndexFile layout from store/format/_layout.h,
which must say what store/format/constants.py says under the same names, and no other C file may
declare a layout number or a big-endian read of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from store.format import constants

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "store" / "format" / "_layout.h"
DEFINE = re.compile(r"^#define\s+([A-Z][A-Z0-9_]*)\s+(0x[0-9A-Fa-f]+|\d+)u?\s*(?:/\*.*)?$", re.MULTILINE)


def header_numbers() -> dict[str, int]:
    return {name: int(value, 0) for name, value in DEFINE.findall(HEADER.read_text())}


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
