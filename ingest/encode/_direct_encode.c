/* Kafka record batch (message format v2) -> RocketMQ CommitLog records, in one pass per record.
 *
 * The C half of ingest/direct_encode.py, which documents the contract: the caller hands the
 * decompressed records of one fetch (its Kafka batches back to back), the constant parts of every
 * record of its task (a head template encoded by store.codec, the topic part, the KAFKA_* property
 * prefix, the positions store/constants.py gives the patched fields) and output buffers
 * sized for the worst case. A record is laid out exactly as store.batch_codec lays out the mapping
 * of ingest.mapping. A record this file does not cover (a key or header that is not UTF-8 text or
 * holds a separator, a null, empty, reserved or repeated header, a born-host or DELAY header, a
 * record over a limit) is handed back: its bytes' place is noted, nothing of it is written, and the
 * caller maps and encodes it the general way, so the rules and the error messages stay in one place
 * (the Python). Only a batch that does not parse (or a caller's buffer too small) fails the whole
 * call with a negative code. The property names written here (KEYS,
 * TAGS, DELAY, UNIQ_KEY, KAFKA_VALUE_NULL, KAFKA_VALUE_EMPTY) and the one-byte body of a null or
 * empty value (EMPTY_VALUE_BODY) are store/constants.py's; tests/test_direct_encode.py compares every
 * byte with the Python path, which takes them from there.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Why a section was refused; mirrored by FALLBACK_REASONS in direct_encode.py. */
enum {
    FB_CORRUPT = 1,        /* does not parse: the whole fetch goes the general way, which reports it */
    FB_KEY = 2,            /* key not UTF-8 text, or holds a property separator */
    FB_HEADER_NAME = 3,    /* header name empty, not UTF-8 text, or holds a separator */
    FB_HEADER_VALUE = 4,   /* header value null, empty, not UTF-8 text, or holds a separator */
    FB_SPECIAL_HEADER = 5, /* the born-host header or DELAY */
    FB_LIMIT = 6,          /* body, properties or record over its limit: a dead letter */
    FB_CAPACITY = 7,       /* the output buffers are too small (a caller bug): the whole fetch */
    FB_HEADER_KEPT = 8,    /* a header name of ours or repeated: the record keeps its headers as KAFKA_HEADERS */
};

/* RocketMQ has no empty body: a null or 0-byte Kafka value is stored as this byte and a property */
static const uint8_t EMPTY_VALUE_BODY = 0x00;
enum { VALUE_IN_BODY = 0, VALUE_NULL = 1, VALUE_EMPTY = 2 };   /* sink/batch.py's value_kind */

#define MAX_HEADERS 32     /* more headers than this in one record: handed back (repeats are checked pairwise) */

#include "../../store/format/_crc32.h"     /* crc_init, crc32_of */

static int varint(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos, int64_t *out) {
    uint64_t raw = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*pos >= end)
            return -1;
        uint8_t b = buf[(*pos)++];
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
    }
    return -1;
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

static void put64(uint8_t *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* One UTF-8 sequence at p[0..n): its code point and length, or length 0 where Python's strict
 * decoder refuses it (a stray or missing continuation, an overlong form, a surrogate, > U+10FFFF). */
static int utf8_next(const uint8_t *p, Py_ssize_t n, uint32_t *cp) {
    const uint8_t b = p[0];
    int len;
    uint32_t c, min;
    if (b < 0x80) { *cp = b; return 1; }
    if ((b & 0xE0) == 0xC0) { len = 2; c = b & 0x1F; min = 0x80; }
    else if ((b & 0xF0) == 0xE0) { len = 3; c = b & 0x0F; min = 0x800; }
    else if ((b & 0xF8) == 0xF0) { len = 4; c = b & 0x07; min = 0x10000; }
    else return 0;
    if (len > n)
        return 0;
    for (int k = 1; k < len; k++) {
        if ((p[k] & 0xC0) != 0x80)
            return 0;
        c = c << 6 | (p[k] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return len;
}

/* 1 unless the bytes are UTF-8 text with no 0x02 (and no 0x01 when strict): what a property holds as it is. */
static int odd_bytes(const uint8_t *p, Py_ssize_t n, int strict) {
    Py_ssize_t i = 0;
    while (i < n) {
        const uint8_t b = p[i];
        if (b < 0x80) {
            if (b == 2 || (strict && b == 1))
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

/* Java String.hashCode of UTF-8 text (odd_bytes passed it): over its UTF-16 code units, a code point
 * above U+FFFF counting as its surrogate pair, int32 arithmetic. */
static int32_t java_hash(const uint8_t *p, Py_ssize_t n) {
    uint32_t h = 0;
    Py_ssize_t i = 0;
    while (i < n) {
        uint32_t cp;
        const int len = p[i] < 0x80 ? (cp = p[i], 1) : utf8_next(p + i, n - i, &cp);
        if (!len)
            break;
        if (cp >= 0x10000) {
            h = 31u * h + (0xD800u + ((cp - 0x10000u) >> 10));
            h = 31u * h + (0xDC00u + ((cp - 0x10000u) & 0x3FFu));
        } else {
            h = 31u * h + cp;
        }
        i += len;
    }
    return (int32_t)h;
}

/* The next header of a record: its name and value (a null value has length -1). */
static int next_header(const uint8_t *in, Py_ssize_t rec_end, Py_ssize_t *pos, const uint8_t **name,
                       Py_ssize_t *name_len, const uint8_t **val, Py_ssize_t *val_len) {
    int64_t hk, hv;
    if (varint(in, rec_end, pos, &hk) || hk < 0 || hk > rec_end - *pos)
        return -1;
    *name = in + *pos;
    *name_len = (Py_ssize_t)hk;
    *pos += *name_len;
    if (varint(in, rec_end, pos, &hv) || hv < -1 || hv > rec_end - *pos)
        return -1;
    *val = in + *pos;
    *val_len = (Py_ssize_t)hv;
    *pos += hv > 0 ? (Py_ssize_t)hv : 0;
    return 0;
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
    Py_ssize_t pos_body_crc, pos_queue_id, pos_born_timestamp;   /* store/constants.py's POS_* */
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

/* One section's records. No Python API in here: it runs with the GIL released (the consumer's
 * network thread receives the next fetch meanwhile). Leaves out_pos, row and nback where it stopped. */
static int encode_records(Job *j) {
    const Py_ssize_t count = j->count, max_body = j->max_body, max_record = j->max_record;
    const Py_ssize_t max_props = j->max_props;
    const long long base_offset = j->base_offset, first_ts = j->first_ts, max_ts = j->max_ts;
    const long long lo = j->lo, hi = j->hi;
    const int log_append_time = j->log_append_time, queue_id = j->queue_id, key_hash_queues = j->key_hash_queues;
    Py_ssize_t row = j->row, nback = j->nback;
    const uint8_t *in = j->b.records.buf;
    const Py_ssize_t in_end = j->sec_end;
    uint8_t *out = j->b.out.buf;
    const Py_ssize_t out_end = j->b.out.len;
    int64_t *starts = j->b.starts.buf, *tags_codes = j->b.tags_codes.buf, *kafka_offsets = j->b.kafka_offsets.buf;
    int64_t *timestamps = j->b.timestamps.buf, *back = j->b.back.buf;
    int8_t *value_kinds = j->b.value_kinds.buf;
    int32_t *queue_ids = j->b.queue_ids.buf;
    const Py_ssize_t rows_cap = j->b.starts.len / 8 < j->b.value_kinds.len ? j->b.starts.len / 8 : j->b.value_kinds.len;
    const Py_ssize_t back_cap = j->b.back.len / 32;
    const Py_ssize_t head_len = j->b.head.len;
    int status = 0;
    Py_ssize_t pos = j->sec_start, o = j->out_pos;
    const uint8_t *names[MAX_HEADERS];
    Py_ssize_t name_lens[MAX_HEADERS];

    for (Py_ssize_t r = 0; r < count; r++) {
        int64_t length, ts_delta, off_delta, key_len, val_len, header_count;
        const Py_ssize_t rec_start = pos;
        if (varint(in, in_end, &pos, &length) || length < 1 || length > in_end - pos) {
            status = FB_CORRUPT; goto done;
        }
        const Py_ssize_t rec_end = pos + (Py_ssize_t)length;
        pos++; /* attributes: unused in v2 */
        if (varint(in, rec_end, &pos, &ts_delta) || varint(in, rec_end, &pos, &off_delta)
            || varint(in, rec_end, &pos, &key_len) || key_len < -1 || key_len > rec_end - pos) {
            status = FB_CORRUPT; goto done;
        }
        const uint8_t *key = in + pos;
        pos += key_len > 0 ? (Py_ssize_t)key_len : 0;
        if (varint(in, rec_end, &pos, &val_len) || val_len < -1 || val_len > rec_end - pos) {
            status = FB_CORRUPT; goto done;
        }
        const uint8_t *value = val_len > 0 ? in + pos : &EMPTY_VALUE_BODY;
        const Py_ssize_t body_len = val_len > 0 ? (Py_ssize_t)val_len : 1;
        pos += val_len > 0 ? (Py_ssize_t)val_len : 0;
        if (varint(in, rec_end, &pos, &header_count) || header_count < 0) { status = FB_CORRUPT; goto done; }
        const uint8_t *name, *val;
        Py_ssize_t name_len, vlen;

        const int64_t offset = (int64_t)base_offset + off_delta;
        if (offset < lo || offset >= hi) {
            /* outside the task's range: only walked over */
            for (int64_t h = 0; h < header_count; h++)
                if (next_header(in, rec_end, &pos, &name, &name_len, &val, &vlen)) { status = FB_CORRUPT; goto done; }
            if (pos != rec_end) { status = FB_CORRUPT; goto done; }
            continue;
        }
        if (row >= rows_cap) { status = FB_CAPACITY; goto done; }
        const Py_ssize_t start = o;
        int reason = 0;
        if (body_len > max_body) { reason = FB_LIMIT; goto hand_back; }
        if (header_count > MAX_HEADERS) { reason = FB_HEADER_KEPT; goto hand_back; }

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
        if (key_len > 0) {
            if (odd_bytes(key, (Py_ssize_t)key_len, 1)) { reason = FB_KEY; goto hand_back; }
            NEED(key_len + 6);
            memcpy(out + o, "KEYS\x01", 5);
            memcpy(out + o + 5, key, (size_t)key_len);
            out[o + 5 + key_len] = 0x02;
            o += (Py_ssize_t)key_len + 6;
            if (key_hash_queues > 0)
                key_hash = java_hash(key, (Py_ssize_t)key_len);
        }
        const uint8_t *tags = NULL;
        Py_ssize_t tags_len = 0;
        for (int64_t h = 0; h < header_count; h++) {
            if (next_header(in, rec_end, &pos, &name, &name_len, &val, &vlen)) { status = FB_CORRUPT; goto done; }
            if (name_len == 0 || odd_bytes(name, name_len, 1)) { reason = FB_HEADER_NAME; goto hand_back; }
            if (same(name, name_len, j->b.born_header.buf, j->b.born_header.len) || same(name, name_len, "DELAY", 5)) {
                reason = FB_SPECIAL_HEADER; goto hand_back;
            }
            if (listed(name, name_len, j->b.reserved.buf, j->b.reserved.len)
                || repeated(names, name_lens, h, name, name_len)) {
                reason = FB_HEADER_KEPT; goto hand_back;
            }
            /* a null or empty value vanishes in RocketMQ's property parser; 0x01 inside a value would
             * make a DELAY\x01 look-alike for the delay-level scan */
            if (vlen <= 0 || odd_bytes(val, vlen, 1)) { reason = FB_HEADER_VALUE; goto hand_back; }
            names[h] = name;
            name_lens[h] = name_len;
            NEED(name_len + vlen + 2);
            memcpy(out + o, name, (size_t)name_len);
            o += name_len;
            out[o++] = 0x01;
            memcpy(out + o, val, (size_t)vlen);
            o += vlen;
            out[o++] = 0x02;
            if (same(name, name_len, "TAGS", 4)) {
                tags = val;
                tags_len = vlen;
            }
        }
        if (pos != rec_end) { status = FB_CORRUPT; goto done; }
        if (val_len < 0) {
            /* a tombstone: the one-byte body stands for null */
            NEED(22);
            memcpy(out + o, "KAFKA_VALUE_NULL\x01true\x02", 22);
            o += 22;
        } else if (val_len == 0) {
            NEED(23);
            memcpy(out + o, "KAFKA_VALUE_EMPTY\x01true\x02", 23);
            o += 23;
        }

        /* KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET (decimal) and UNIQ_KEY (hex) */
        char digits[24];
        int nd = 0;
        uint64_t u = offset < 0 ? (uint64_t)0 - (uint64_t)offset : (uint64_t)offset;
        do { digits[nd++] = (char)('0' + u % 10); u /= 10; } while (u);
        NEED(j->b.coords_prefix.len + nd + 1 + 10 + j->b.uniq_prefix.len + 16 + 1 + 1);
        memcpy(out + o, j->b.coords_prefix.buf, (size_t)j->b.coords_prefix.len);
        o += j->b.coords_prefix.len;
        if (offset < 0)
            out[o++] = '-';
        while (nd)
            out[o++] = (uint8_t)digits[--nd];
        memcpy(out + o, "\x02UNIQ_KEY\x01", 10);
        o += 10;
        memcpy(out + o, j->b.uniq_prefix.buf, (size_t)j->b.uniq_prefix.len);
        o += j->b.uniq_prefix.len;
        for (int s = 60; s >= 0; s -= 4)
            out[o++] = (uint8_t)HEX[((uint64_t)offset >> s) & 0xF];
        out[o++] = 0x02;

        const Py_ssize_t props_len = o - props_at;
        const Py_ssize_t total = o - start;
        if (props_len > max_props || total > max_record) { reason = FB_LIMIT; goto hand_back; }
        out[props_len_at] = (uint8_t)(props_len >> 8);
        out[props_len_at + 1] = (uint8_t)props_len;
        const int64_t ts_ms = log_append_time ? (int64_t)max_ts : (int64_t)first_ts + ts_delta;
        const int32_t qid = key_hash_queues > 0
            ? (int32_t)(llabs((long long)key_hash) % key_hash_queues) : queue_id;
        uint8_t *rec = out + start;
        put32(rec, (uint32_t)total);
        put32(rec + j->pos_body_crc, crc32_of(value, body_len) & 0x7FFFFFFFu);
        put32(rec + j->pos_queue_id, (uint32_t)qid);
        put64(rec + j->pos_born_timestamp, (uint64_t)ts_ms);
        put32(rec + head_len - 4, (uint32_t)body_len);

        starts[row] = start;
        queue_ids[row] = qid;
        tags_codes[row] = tags ? java_hash(tags, tags_len) : 0;
        kafka_offsets[row] = offset;
        timestamps[row] = (int64_t)((uint64_t)ts_ms * 1000u);
        value_kinds[row] = (int8_t)(val_len > 0 ? VALUE_IN_BODY : val_len < 0 ? VALUE_NULL : VALUE_EMPTY);
        row++;
        continue;
    hand_back:
        /* nothing of it stays in the output; the caller decodes it the general way, which also
         * reports any damage in the part of it not walked here */
        if (nback >= back_cap) { status = FB_CAPACITY; goto done; }
        back[4 * nback] = j->section;
        back[4 * nback + 1] = rec_start;
        back[4 * nback + 2] = rec_end;
        back[4 * nback + 3] = reason;
        nback++;
        o = start;
        pos = rec_end;
    }
    if (pos != in_end)
        status = FB_CORRUPT;
done:
    j->out_pos = o;
    j->row = row;
    j->nback = nback;
    return status;
}

static PyObject *encode_fetch(PyObject *self, PyObject *args) {
    (void)self;
    Job j;
    memset(&j, 0, sizeof j);
    Py_buffer sections;
    memset(&sections, 0, sizeof sections);
    if (!PyArg_ParseTuple(args, "y*y*LLw*w*w*w*w*w*w*w*y*y*y*y*y*y*nnnii(nnn)", &j.b.records, &sections, &j.lo,
                          &j.hi, &j.b.out, &j.b.starts, &j.b.queue_ids, &j.b.tags_codes, &j.b.kafka_offsets,
                          &j.b.timestamps, &j.b.value_kinds, &j.b.back, &j.b.head, &j.b.topic_part,
                          &j.b.coords_prefix,
                          &j.b.uniq_prefix, &j.b.reserved, &j.b.born_header, &j.max_body, &j.max_record,
                          &j.max_props, &j.queue_id, &j.key_hash_queues, &j.pos_body_crc, &j.pos_queue_id,
                          &j.pos_born_timestamp)) {
        release(&j.b);
        if (sections.obj)
            PyBuffer_Release(&sections);
        return NULL;
    }
    const int64_t *secs = sections.buf;
    const Py_ssize_t n_sections = sections.len / (Py_ssize_t)(6 * sizeof(int64_t));
    int status = 0;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t at = 0;
    for (Py_ssize_t k = 0; k < n_sections && !status; k++) {
        const int64_t *sec = secs + 6 * k;   /* count, base offset, first/max timestamp, append time, bytes */
        j.section = k;
        j.count = (Py_ssize_t)sec[0];
        j.base_offset = sec[1];
        j.first_ts = sec[2];
        j.max_ts = sec[3];
        j.log_append_time = sec[4] != 0;
        j.sec_start = at;
        j.sec_end = at + (Py_ssize_t)sec[5];
        status = sec[5] < 0 || j.sec_end > j.b.records.len ? FB_CORRUPT : encode_records(&j);
        at = j.sec_end;
    }
    if (!status && at != j.b.records.len)
        status = FB_CORRUPT;
    Py_END_ALLOW_THREADS
    release(&j.b);
    PyBuffer_Release(&sections);
    if (status)
        return PyLong_FromLong(-status);
    return Py_BuildValue("(nnn)", j.out_pos, j.row, j.nback);
}

static PyMethodDef methods[] = {
    {"encode_fetch", encode_fetch, METH_VARARGS,
     "encode_fetch(records, sections, lo, hi, out, starts, queue_ids, tags_codes, kafka_offsets, timestamps, "
     "value_kinds, back, "
     "head, topic_part, coords_prefix, uniq_prefix, reserved, born_header, max_body, max_record, max_props, "
     "queue_id, key_hash_queues, (pos_body_crc, pos_queue_id, pos_born_timestamp)) -> (out_len, rows, handed_back) "
     "| -reason; back holds (section, record start, record end, reason) per handed-back record"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_direct_encode",
                                    "Kafka record batches to CommitLog records; see ingest/direct_encode.py.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__direct_encode(void) {
    crc_init();
    return PyModule_Create(&module);
}
