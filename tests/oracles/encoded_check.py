"""The test oracle of the encoded-record checks (store/scan/_record_check.c's check, used by
store.scan.encoded_check): the fields gathered with numpy (store.scan.record_check.first_bad) and
each body's CRC one call. Patched over encoded_check._records, every check_encoded test runs it too."""

from __future__ import annotations

import numpy as np

from store.format.codec import CodecConfig
from store.format.layout import be_ints
from store.scan.fields import ScanColumns
from store.scan.record_check import first_bad


def records(values: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> tuple[int, ScanColumns]:
    """(index of the first record that fails, or len(starts); the fields of those before it)."""
    framed = np.flatnonzero(be_ints(values, starts, 4) != sizes)
    n = int(framed[0]) if len(framed) else len(starts)
    first, cols = first_bad(values, memoryview(values), starts[:n], sizes[:n], 0, CodecConfig(), columns=True,
                            placed=False)
    assert cols is not None
    return first, cols
