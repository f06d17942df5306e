/* One CommitLog record written from a Kafka record's parts, for ingest/encode/_direct_encode.c's two
 * walkers (a fetch's record batches, Arrow columns of Kafka rows): the refusal reasons, the text checks
 * the mapping makes (UTF-8, no separator), Java's String.hashCode, the call's buffers and state (Job),
 * job_holds (the buffers checked against each other before the walk) and write_record, which lays a
 * record out as store.format.batch_codec lays out ingest.encode.mapping's mapping.
 * Everything is static: the one module that includes it uses all of it.
 */
#ifndef COMMITLOG_DIRECT_RECORD_H
#define COMMITLOG_DIRECT_RECORD_H

#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Why a record was handed back, or (FB_CORRUPT, FB_CAPACITY) a whole call refused; mirrored by
 * FALLBACK_REASONS in ingest/encode/direct_encode.py. */
enum {
    FB_CORRUPT = 1,        /* does not parse: the whole fetch goes the general way, which reports it */
    FB_KEY = 2,            /* key not UTF-8 text, or holds a property separator */
    FB_HEADER_NAME = 3,    /* header name empty, not UTF-8 text, or holds a separator */
    FB_HEADER_VALUE = 4,   /* header value null, empty, not UTF-8 text, or holds a separator */
    FB_SPECIAL_HEADER = 5, /* the born-host header or DELAY */
    FB_LIMIT = 6,          /* body, properties or record over its limit: a dead letter */
    FB_CAPACITY = 7,       /* the output buffers are too small (a caller bug): the whole call */
    FB_HEADER_KEPT = 8,    /* a header name of ours or repeated: the record keeps its headers as KAFKA_HEADERS */
    FB_ROW = 9,            /* encode_rows: a row the caller marked for the general way (a reason of its own, a null field) */
};

/* RocketMQ has no empty body: a null or 0-byte Kafka value is stored as this byte and a property */
static const uint8_t EMPTY_VALUE_BODY = 0x00;
enum { VALUE_IN_BODY = 0, VALUE_NULL = 1, VALUE_EMPTY = 2 };   /* sink/batch.py's value_kind */

/* the pieces the mapping writes whole: a tombstone's and a 0-byte value's flag, and what starts UNIQ_KEY */
#define VALUE_NULL_PIECE PAIR(PROPERTY_KAFKA_VALUE_NULL) PROPERTY_VALUE_TRUE PROPERTY_SEPARATOR
#define VALUE_EMPTY_PIECE PAIR(PROPERTY_KAFKA_VALUE_EMPTY) PROPERTY_VALUE_TRUE PROPERTY_SEPARATOR
#define UNIQ_KEY_PIECE_START PROPERTY_SEPARATOR PAIR(PROPERTY_UNIQ_KEY)

#define MAX_HEADERS 32     /* more headers than this in one record: handed back (repeats are checked pairwise) */

#include "../../store/format/_crc32.h"     /* crc_init, crc32_of */
#include "../../store/format/_layout.h"    /* POS_BODYCRC, POS_QUEUEID, POS_BORNTIMESTAMP, POS_BODYLENGTH_V4, the names */
#include "../../store/format/_text.h"      /* utf8_next, hash_text: UTF-8 and String.hashCode as Java has them */

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

static void put64(uint8_t *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* 1 unless the bytes are UTF-8 text with no PROPERTY_SEPARATOR (and no NAME_VALUE_SEPARATOR when strict):
 * what a property holds as it is. */
static int odd_bytes(const uint8_t *p, Py_ssize_t n, int strict) {
    Py_ssize_t i = 0;
    while (i < n) {
        const uint8_t b = p[i];
        if (b < 0x80) {
            if (b == (uint8_t)PROPERTY_SEPARATOR[0] || (strict && b == (uint8_t)NAME_VALUE_SEPARATOR[0]))
                return 1;
            i++;
            continue;
        }
        uint32_t cp;
        const int len = utf8_next(p + i, n - i, &cp);
        if (!len)
            return 1;
        i += len;
    }
    return 0;
}

static int same(const uint8_t *p, Py_ssize_t n, const char *s, Py_ssize_t m) {
    return n == m && memcmp(p, s, (size_t)n) == 0;
}

/* Is the name one of the NUL-separated names in ``list``? */
static int listed(const uint8_t *p, Py_ssize_t n, const uint8_t *list, Py_ssize_t len) {
    Py_ssize_t i = 0;
    while (i < len) {
        Py_ssize_t j = i;
        while (j < len && list[j])
            j++;
        if (j - i == n && memcmp(list + i, p, (size_t)n) == 0)
            return 1;
        i = j + 1;
    }
    return 0;
}

/* Java String.hashCode of UTF-8 text odd_bytes passed (hash_text, int32 arithmetic) */
static int32_t java_hash(const uint8_t *p, Py_ssize_t n) {
    uint32_t h = 0;
    hash_text(p, n, n, &h);
    return (int32_t)h;
}

static const char HEX[] = "0123456789ABCDEF";

typedef struct {
    Py_buffer records, out, starts, queue_ids, tags_codes, kafka_offsets, timestamps, value_kinds, back;
    Py_buffer head, topic_part, coords_prefix, uniq_prefix, reserved, born_header;
} Buffers;

static void release(Buffers *b) {
    Py_buffer *all[] = {&b->records, &b->out, &b->starts, &b->queue_ids, &b->tags_codes, &b->kafka_offsets,
                        &b->timestamps, &b->value_kinds, &b->back, &b->head, &b->topic_part, &b->coords_prefix, &b->uniq_prefix,
                        &b->reserved, &b->born_header};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->obj)
            PyBuffer_Release(all[i]);
}

#define NEED(n) do { if (o + (Py_ssize_t)(n) > out_end) { status = FB_CAPACITY; goto done; } } while (0)

typedef struct {
    Buffers b;
    Py_ssize_t out_pos, row, nback, max_body, max_record, max_props;
    Py_ssize_t crc_reserve;     /* bytes left zero after the properties for the caller's property CRC, or 0 */
    long long lo, hi;
    int queue_id, key_hash_queues;
    /* the section (one Kafka record batch) being encoded: its bytes in records, its batch fields */
    Py_ssize_t section, sec_start, sec_end, count;
    long long base_offset, first_ts, max_ts;
    int log_append_time;
} Job;

/* Does any header before ``h`` have this name? */
static int repeated(const uint8_t *const *names, const Py_ssize_t *lens, int64_t h, const uint8_t *name,
                    Py_ssize_t len) {
    for (int64_t k = 0; k < h; k++)
        if (same(names[k], lens[k], (const char *)name, len))
            return 1;
    return 0;
}

/* One record as a walker finds it: its key, value and headers where they lie (a length of -1: null),
 * its Kafka offset and its timestamp (milliseconds, and the microseconds the row carries). The
 * headers are only read when there are at most MAX_HEADERS of them. */
typedef struct {
    const uint8_t *key, *value;
    Py_ssize_t key_len, val_len;
    int64_t header_count, offset, ts_ms, raw_ts;
    const uint8_t *names[MAX_HEADERS], *vals[MAX_HEADERS];
    Py_ssize_t name_lens[MAX_HEADERS], val_lens[MAX_HEADERS];
} Rec;

/* 1 when the row arrays hold as many rows as starts does and the head template holds a record's head
 * up to BODYLENGTH (write_record relies on both), else 0 with a ValueError naming what does not */
static int job_holds(const Job *j, const char *who) {
    const Py_ssize_t rows = j->b.starts.len / 8;
    const struct { const char *name; Py_ssize_t len, width; } arrays[] = {
        {"queue_ids", j->b.queue_ids.len, 4}, {"tags_codes", j->b.tags_codes.len, 8},
        {"kafka_offsets", j->b.kafka_offsets.len, 8}, {"timestamps", j->b.timestamps.len, 8},
        {"value_kinds", j->b.value_kinds.len, 1},
    };
    for (size_t k = 0; k < sizeof arrays / sizeof arrays[0]; k++)
        if (arrays[k].len / arrays[k].width < rows) {
            PyErr_Format(PyExc_ValueError, "%s: %s holds %zd rows, starts %zd", who, arrays[k].name,
                         arrays[k].len / arrays[k].width, rows);
            return 0;
        }
    if (j->b.head.len < POS_BODYLENGTH_V4 + 4) {
        PyErr_Format(PyExc_ValueError, "%s: head of %zd bytes, a record's head up to BODYLENGTH takes %d at least", who,
                     j->b.head.len, POS_BODYLENGTH_V4 + 4);
        return 0;
    }
    return 1;
}

/* Writes one record at j->out_pos and its row, or leaves the output as it was and sets *reason to
 * why the record is handed back. Returns FB_CAPACITY when the output buffers are too small, else 0.
 * job_holds passed: every row array holds rows_cap rows, the head its fixed fields. */
static int write_record(Job *j, const Rec *r, int *reason) {
    uint8_t *out = j->b.out.buf;
    const Py_ssize_t out_end = j->b.out.len, head_len = j->b.head.len, start = j->out_pos;
    const Py_ssize_t rows_cap = j->b.starts.len / 8;
    int status = 0;
    Py_ssize_t o = start;
    *reason = 0;
    if (j->row >= rows_cap) { status = FB_CAPACITY; goto done; }
    const uint8_t *value = r->val_len > 0 ? r->value : &EMPTY_VALUE_BODY;
    const Py_ssize_t body_len = r->val_len > 0 ? r->val_len : 1;
    if (body_len > j->max_body) { *reason = FB_LIMIT; goto done; }
    if (r->header_count > MAX_HEADERS) { *reason = FB_HEADER_KEPT; goto done; }

    /* head | body | topic part | properties length | properties */
    NEED(head_len + body_len + j->b.topic_part.len + 2);
    memcpy(out + o, j->b.head.buf, (size_t)head_len);
    o += head_len;
    memcpy(out + o, value, (size_t)body_len);
    o += body_len;
    memcpy(out + o, j->b.topic_part.buf, (size_t)j->b.topic_part.len);
    o += j->b.topic_part.len;
    const Py_ssize_t props_len_at = o;
    o += 2;
    const Py_ssize_t props_at = o;

    int32_t key_hash = 0;
    if (r->key_len > 0) {
        if (odd_bytes(r->key, r->key_len, 1)) { *reason = FB_KEY; goto done; }
        const int64_t keys_pair = LITERAL_LENGTH(PAIR(PROPERTY_KEYS));
        NEED(keys_pair + r->key_len + 1);
        memcpy(out + o, PAIR(PROPERTY_KEYS), (size_t)keys_pair);
        memcpy(out + o + keys_pair, r->key, (size_t)r->key_len);
        out[o + keys_pair + r->key_len] = (uint8_t)PROPERTY_SEPARATOR[0];
        o += keys_pair + r->key_len + 1;
        if (j->key_hash_queues > 0)
            key_hash = java_hash(r->key, r->key_len);
    }
    const uint8_t *tags = NULL;
    Py_ssize_t tags_len = 0;
    for (int64_t h = 0; h < r->header_count; h++) {
        const uint8_t *name = r->names[h], *val = r->vals[h];
        const Py_ssize_t name_len = r->name_lens[h], vlen = r->val_lens[h];
        if (name_len == 0 || odd_bytes(name, name_len, 1)) { *reason = FB_HEADER_NAME; goto done; }
        if (same(name, name_len, j->b.born_header.buf, j->b.born_header.len) || same(name, name_len, PROPERTY_DELAY, LITERAL_LENGTH(PROPERTY_DELAY))) {
            *reason = FB_SPECIAL_HEADER; goto done;
        }
        if (listed(name, name_len, j->b.reserved.buf, j->b.reserved.len)
            || repeated(r->names, r->name_lens, h, name, name_len)) {
            *reason = FB_HEADER_KEPT; goto done;
        }
        /* a null or empty value vanishes in RocketMQ's property parser; 0x01 inside a value would
         * make a DELAY\x01 look-alike for the delay-level scan */
        if (vlen <= 0 || odd_bytes(val, vlen, 1)) { *reason = FB_HEADER_VALUE; goto done; }
        NEED(name_len + vlen + 2);
        memcpy(out + o, name, (size_t)name_len);
        o += name_len;
        out[o++] = (uint8_t)NAME_VALUE_SEPARATOR[0];
        memcpy(out + o, val, (size_t)vlen);
        o += vlen;
        out[o++] = (uint8_t)PROPERTY_SEPARATOR[0];
        if (same(name, name_len, PROPERTY_TAGS, LITERAL_LENGTH(PROPERTY_TAGS))) {
            tags = val;
            tags_len = vlen;
        }
    }
    if (r->val_len < 0) {
        /* a tombstone: the one-byte body stands for null */
        NEED(LITERAL_LENGTH(VALUE_NULL_PIECE));
        memcpy(out + o, VALUE_NULL_PIECE, (size_t)LITERAL_LENGTH(VALUE_NULL_PIECE));
        o += LITERAL_LENGTH(VALUE_NULL_PIECE);
    } else if (r->val_len == 0) {
        NEED(LITERAL_LENGTH(VALUE_EMPTY_PIECE));
        memcpy(out + o, VALUE_EMPTY_PIECE, (size_t)LITERAL_LENGTH(VALUE_EMPTY_PIECE));
        o += LITERAL_LENGTH(VALUE_EMPTY_PIECE);
    }

    /* KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET (decimal) and UNIQ_KEY (hex) */
    const int64_t offset = r->offset;
    char digits[24];
    int nd = 0;
    uint64_t u = offset < 0 ? (uint64_t)0 - (uint64_t)offset : (uint64_t)offset;
    do { digits[nd++] = (char)('0' + u % 10); u /= 10; } while (u);
    NEED(j->b.coords_prefix.len + nd + 1 + LITERAL_LENGTH(UNIQ_KEY_PIECE_START) + j->b.uniq_prefix.len + 16 + 1 + 1);
    memcpy(out + o, j->b.coords_prefix.buf, (size_t)j->b.coords_prefix.len);
    o += j->b.coords_prefix.len;
    if (offset < 0)
        out[o++] = '-';
    while (nd)
        out[o++] = (uint8_t)digits[--nd];
    memcpy(out + o, UNIQ_KEY_PIECE_START, (size_t)LITERAL_LENGTH(UNIQ_KEY_PIECE_START));
    o += LITERAL_LENGTH(UNIQ_KEY_PIECE_START);
    memcpy(out + o, j->b.uniq_prefix.buf, (size_t)j->b.uniq_prefix.len);
    o += j->b.uniq_prefix.len;
    for (int s = 60; s >= 0; s -= 4)
        out[o++] = (uint8_t)HEX[((uint64_t)offset >> s) & 0xF];
    out[o++] = (uint8_t)PROPERTY_SEPARATOR[0];
    if (j->crc_reserve > 0) {
        NEED(j->crc_reserve);
        memset(out + o, 0, (size_t)j->crc_reserve);
        o += j->crc_reserve;
    }

    const Py_ssize_t props_len = o - props_at;
    const Py_ssize_t total = o - start;
    if (props_len > j->max_props || total > j->max_record) { *reason = FB_LIMIT; goto done; }
    out[props_len_at] = (uint8_t)(props_len >> 8);
    out[props_len_at + 1] = (uint8_t)props_len;
    const int32_t qid = j->key_hash_queues > 0
        ? (int32_t)(llabs((long long)key_hash) % j->key_hash_queues) : j->queue_id;
    uint8_t *rec = out + start;
    put32(rec, (uint32_t)total);
    put32(rec + POS_BODYCRC, crc32_of(value, body_len) & 0x7FFFFFFFu);
    put32(rec + POS_QUEUEID, (uint32_t)qid);
    put64(rec + POS_BORNTIMESTAMP, (uint64_t)r->ts_ms);
    put32(rec + head_len - 4, (uint32_t)body_len);     /* BODYLENGTH ends the head, wherever the hosts put it */

    const Py_ssize_t row = j->row++;
    ((int64_t *)j->b.starts.buf)[row] = start;
    ((int32_t *)j->b.queue_ids.buf)[row] = qid;
    ((int64_t *)j->b.tags_codes.buf)[row] = tags ? java_hash(tags, tags_len) : 0;
    ((int64_t *)j->b.kafka_offsets.buf)[row] = offset;
    ((int64_t *)j->b.timestamps.buf)[row] = r->raw_ts;
    ((int8_t *)j->b.value_kinds.buf)[row] =
        (int8_t)(r->val_len > 0 ? VALUE_IN_BODY : r->val_len < 0 ? VALUE_NULL : VALUE_EMPTY);
    j->out_pos = o;
    return 0;
done:
    return status;     /* handed back or out of room: nothing of it stays (out_pos unchanged) */
}

/* Notes a handed-back record: (where, first, last, reason); 0, or FB_CAPACITY when back is full. */
static int hand_back(Job *j, int64_t where, int64_t first, int64_t last, int reason) {
    if (j->nback >= j->b.back.len / 32)
        return FB_CAPACITY;
    int64_t *back = (int64_t *)j->b.back.buf + 4 * j->nback++;
    back[0] = where, back[1] = first, back[2] = last, back[3] = reason;
    return 0;
}

#endif
