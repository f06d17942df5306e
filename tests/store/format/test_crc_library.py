"""BODYCRC in the C passes: libdeflate's CRC-32 when the machine has the library, else the table
(store/format/_crc32.h). Either way zlib's value, the one RocketMQ's UtilAll.crc32 masks to 31 bits."""

from __future__ import annotations

import random
import zlib

import pytest

from store.scan import _record_check

pytestmark = pytest.mark.unit


@pytest.fixture
def record_check():  # noqa: ANN201
    return _record_check


@pytest.mark.parametrize("table", [True, False], ids=["table", "as-the-checks-take-it"])
def test_the_c_passes_crc_is_zlibs_at_every_length_and_alignment(record_check, table: bool) -> None:
    rng = random.Random(20261126)
    data = rng.randbytes(1 << 16)
    for n in [*range(0, 70), 100, 255, 1000, 1024, 4095, 4097, 16384, 65000]:
        for start in (0, 1, 3, 8):
            piece = data[start:start + n]
            assert record_check.crc32(piece, table) == zlib.crc32(piece), (n, start)


def test_it_says_which_crc_computes_bodycrc(record_check) -> None:
    assert record_check.crc_source() in ("libdeflate", "table")
