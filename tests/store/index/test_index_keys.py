"""The index keys of a batch found in its bytes (tests/oracles/index_keys.py, the numpy oracle of the
C key finder) are the keys store.index.keys gives each decoded message (RocketMQ's rule), hashed
alike, in the same order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from store.format.batch_codec import encode_messages
from store.format.codec import CodecConfig, Message
from store.format.constants import TRANSACTION_ROLLBACK_TYPE
from store.scan.fields import record_fields
from tests.oracles.index_keys import batch_keys
from tests.helpers.index_stores import expected


def found(messages: list[Message]) -> tuple[list[int], list[int]]:
    batch = encode_messages(messages, CodecConfig())
    fields = record_fields(batch.data, batch.offsets, batch.sizes)
    keys = batch_keys(batch.data, fields)
    return keys.record.tolist(), keys.key_hash.tolist()


def test_uniq_key_then_each_keys_token_in_order():
    msgs = [Message("T", b"x", properties="KEYS\x01a  b c\x02UNIQ_KEY\x01U1\x02"),
            Message("T", b"x", properties="TAGS\x01t\x02KEYS\x01solo"),
            Message("Other", b"x", properties="UNIQ_KEY\x01U2\x02")]
    assert found(msgs) == expected(msgs)
    assert found(msgs)[0] == [0, 0, 0, 0, 1, 2]


def test_what_is_not_indexed():
    msgs = [Message("T", b"x", properties="UNIQ_KEY\x01U\x02", sys_flag=TRANSACTION_ROLLBACK_TYPE),
            Message("T", b"x", properties="KEYS\x01\x02UNIQ_KEY\x01\x02"),      # empty values are no pairs
            Message("T", b"x", properties="MYKEYS\x01k\x02XUNIQ_KEY\x01u\x02"),  # names that end in ours
            Message("T", b"KEYS\x01body\x02", properties="")]
    assert found(msgs) == expected(msgs) == ([], [])


def test_rare_records_take_the_slow_way_and_agree():
    msgs = [Message("T", b"x", properties="KEYS\x01first\x02KEYS\x01second\x02"),     # the later one wins
            Message("Tópico", b"x", properties="KEYS\x01clé ключ\x02UNIQ_KEY\x01ü\x02"),
            Message("T", b"x", properties="KEYS\x01" + "k" * 600 + " tail\x02"),
            Message("T", b"x", properties="A\x01" + "v" * 5000 + "\x02KEYS\x01big\x02"),
            Message("T", b"x", properties="A\x01xKEYS\x01inside\x02KEYS\x01real\x02")]
    assert found(msgs) == expected(msgs)


_text = st.lists(st.sampled_from(list("ab \x01\x02Ué#") + ["KEYS", "UNIQ_KEY", "KEYS\x01", "UNIQ_KEY\x01"]),
                 max_size=8).map("".join)
_name = st.one_of(st.sampled_from(["KEYS", "UNIQ_KEY", "TAGS"]), _text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["T", "topic-b", "Tö"]), st.lists(st.tuples(_name, _text), max_size=5),
                          st.sampled_from([0, 4, TRANSACTION_ROLLBACK_TYPE, 8])), min_size=1, max_size=20))
def test_any_properties_agree(rows):
    msgs = [Message(topic, b"body", properties="".join(f"{k}\x01{v}\x02" for k, v in pairs), sys_flag=flag)
            for topic, pairs, flag in rows]
    assert found(msgs) == expected(msgs)


def test_a_batch_at_the_end_of_its_buffer():
    msgs = [Message("T", b"", properties=f"UNIQ_KEY\x01{i:032X}\x02KEYS\x01k{i}") for i in range(50)]
    rec, hashes = found(msgs)
    assert (rec, hashes) == expected(msgs)
    assert np.bincount(rec).tolist() == [2] * 50


def test_non_ascii_values_among_ascii_ones_keep_their_place_and_java_hash():
    msgs = [Message("T", b"x", properties=f"UNIQ_KEY\x01U{i}\x02KEYS\x01" + ("user-é k" if i % 3 else f"user-{i} k")
                    + "\x02") for i in range(30)]
    msgs.append(Message("T", b"x", properties="UNIQ_KEY\x01ü-\U0001F600\x02KEYS\x01\u6771\u4eac  x\x02"))  # a surrogate pair
    assert found(msgs) == expected(msgs)
    assert found(msgs)[0][-4:] == [29, 30, 30, 30]
