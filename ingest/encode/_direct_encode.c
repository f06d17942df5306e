/* Kafka record batch (message format v2) -> RocketMQ CommitLog records, in one pass per record; and
 * Kafka rows already in Arrow columns -> the same records (encode_rows: another walker, one writer).
 *
 * The C half of ingest/encode/direct_encode.py, which documents the contract: the caller hands the
 * decompressed records of one fetch (its Kafka batches back to back), the constant parts of every
 * record of its task (a head template encoded by store.format.codec, the topic part, the KAFKA_*
 * property prefix) and output buffers sized for the worst case; the positions of the fields patched
 * per record are store/format/_layout.h's. A record is laid out exactly as store.format.batch_codec
 * lays out the mapping of ingest.encode.mapping; with property CRCs (crc_reserve > 0) the properties
 * end with that many zero bytes, which the caller overwrites with the CRC pair as the batch codec
 * does. A record this file does not cover (a key or header
 * that is not UTF-8 text or holds a separator, a null, empty, reserved or repeated header, a born-host
 * or DELAY header, a record over a limit) is handed back: its bytes' place is noted, nothing of it is
 * written, and the caller maps and encodes it the general way, so the rules and the error messages
 * stay in one place (the Python). Only a batch that does not parse (or a caller's buffer too small)
 * fails the whole call with a negative code; arrays that disagree with each other (job_holds) raise
 * a ValueError. The property names written here (KEYS, TAGS, DELAY, UNIQ_KEY, KAFKA_VALUE_NULL,
 * KAFKA_VALUE_EMPTY) and the one-byte body of a null or empty value (EMPTY_VALUE_BODY) are
 * store/format/constants.py's; tests/ingest/encode/test_direct_encode.py and _rows.py compare every byte with the
 * Python path, which takes them from there.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_direct_record.h"     /* Job, Rec, write_record, hand_back, the FB_* reasons */

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

/* One section's records. No Python API in here: it runs with the GIL released (the consumer's
 * network thread receives the next fetch meanwhile). Leaves out_pos, row and nback where it stopped. */
static int encode_records(Job *j) {
    const uint8_t *in = j->b.records.buf;
    const Py_ssize_t in_end = j->sec_end;
    Py_ssize_t pos = j->sec_start;
    Rec rec;
    for (Py_ssize_t r = 0; r < j->count; r++) {
        int64_t length, ts_delta, off_delta, key_len, val_len;
        const Py_ssize_t rec_start = pos;
        if (varint(in, in_end, &pos, &length) || length < 1 || length > in_end - pos)
            return FB_CORRUPT;
        const Py_ssize_t rec_end = pos + (Py_ssize_t)length;
        pos++; /* attributes: unused in v2 */
        if (varint(in, rec_end, &pos, &ts_delta) || varint(in, rec_end, &pos, &off_delta)
            || varint(in, rec_end, &pos, &key_len) || key_len < -1 || key_len > rec_end - pos)
            return FB_CORRUPT;
        rec.key = in + pos;
        rec.key_len = (Py_ssize_t)key_len;
        pos += key_len > 0 ? (Py_ssize_t)key_len : 0;
        if (varint(in, rec_end, &pos, &val_len) || val_len < -1 || val_len > rec_end - pos)
            return FB_CORRUPT;
        rec.value = in + pos;
        rec.val_len = (Py_ssize_t)val_len;
        pos += val_len > 0 ? (Py_ssize_t)val_len : 0;
        if (varint(in, rec_end, &pos, &rec.header_count) || rec.header_count < 0)
            return FB_CORRUPT;
        rec.offset = (int64_t)j->base_offset + off_delta;
        const int in_range = rec.offset >= j->lo && rec.offset < j->hi;
        if (!in_range || rec.header_count <= MAX_HEADERS) {
            /* outside the task's range the headers are only walked over */
            for (int64_t h = 0; h < rec.header_count; h++) {
                const uint8_t *name, *val;
                Py_ssize_t name_len, vlen;
                if (next_header(in, rec_end, &pos, &name, &name_len, &val, &vlen))
                    return FB_CORRUPT;
                if (in_range)
                    rec.names[h] = name, rec.name_lens[h] = name_len, rec.vals[h] = val, rec.val_lens[h] = vlen;
            }
            if (pos != rec_end)
                return FB_CORRUPT;
        }
        if (!in_range)
            continue;
        rec.ts_ms = j->log_append_time ? (int64_t)j->max_ts : (int64_t)j->first_ts + ts_delta;
        rec.raw_ts = (int64_t)((uint64_t)rec.ts_ms * 1000u);
        int reason, status = write_record(j, &rec, &reason);
        if (status)
            return status;
        if (reason) {
            /* the caller decodes it the general way, which also reports any damage in the part of
             * it not walked here */
            if ((status = hand_back(j, j->section, rec_start, rec_end, reason)))
                return status;
            pos = rec_end;
        }
    }
    return pos != in_end ? FB_CORRUPT : 0;
}

static PyObject *encode_fetch(PyObject *self, PyObject *args) {
    (void)self;
    Job j;
    memset(&j, 0, sizeof j);
    Py_buffer sections;
    memset(&sections, 0, sizeof sections);
    if (!PyArg_ParseTuple(args, "y*y*LLw*w*w*w*w*w*w*w*y*y*y*y*y*y*nnniin", &j.b.records, &sections, &j.lo,
                          &j.hi, &j.b.out, &j.b.starts, &j.b.queue_ids, &j.b.tags_codes, &j.b.kafka_offsets,
                          &j.b.timestamps, &j.b.value_kinds, &j.b.back, &j.b.head, &j.b.topic_part,
                          &j.b.coords_prefix,
                          &j.b.uniq_prefix, &j.b.reserved, &j.b.born_header, &j.max_body, &j.max_record,
                          &j.max_props, &j.queue_id, &j.key_hash_queues, &j.crc_reserve)) {
        release(&j.b);
        if (sections.obj)
            PyBuffer_Release(&sections);
        return NULL;
    }
    if (!job_holds(&j, "encode_fetch")) {
        release(&j.b);
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

/* The Arrow buffers of Kafka rows (ingest/encode/direct_encode.py, DirectEncoder.encode_rows): per row
 * the key's and the value's offsets (n + 1, int32), bytes and validity (n, uint8), the headers' list
 * offsets (n + 1), per header its name's offsets and bytes, whether it is a usable header (a
 * non-null element with a non-null name), its value's offsets, bytes and validity; per row the Kafka
 * offset, the timestamp in milliseconds and in microseconds (int64), and whether the caller sends it
 * the general way (uint8). */
enum { KEY_OFF, KEY_DATA, KEY_VALID, VAL_OFF, VAL_DATA, VAL_VALID, HDR_OFF, NAME_OFF, NAME_DATA, HDR_OK,
       HVAL_OFF, HVAL_DATA, HVAL_VALID, OFFSETS, TS_MS, RAW_TS, GENERAL, N_COLUMNS };

/* bytes [off[i], off[i + 1]) of data, when the offsets lie inside it; 0 when they do not */
static int span(const Py_buffer *offs, const Py_buffer *data, Py_ssize_t i, const uint8_t **at, Py_ssize_t *len) {
    const int32_t *o = offs->buf;
    if (o[i] < 0 || o[i] > o[i + 1] || o[i + 1] > data->len)
        return 0;
    *at = (const uint8_t *)data->buf + o[i];
    *len = o[i + 1] - o[i];
    return 1;
}

/* Every row of the columns; leaves out_pos, row and nback where it stopped. */
static int encode_columns(Job *j, const Py_buffer *c, Py_ssize_t n) {
    const uint8_t *key_valid = c[KEY_VALID].buf, *val_valid = c[VAL_VALID].buf, *hdr_ok = c[HDR_OK].buf;
    const uint8_t *hval_valid = c[HVAL_VALID].buf, *general = c[GENERAL].buf;
    const int32_t *hdr_off = c[HDR_OFF].buf;
    const int64_t *offsets = c[OFFSETS].buf, *ts_ms = c[TS_MS].buf, *raw_ts = c[RAW_TS].buf;
    const Py_ssize_t headers = c[HDR_OK].len;
    Rec rec;
    for (Py_ssize_t i = 0; i < n; i++) {
        int reason = general[i] ? FB_ROW : 0, status;
        if (!reason) {
            rec.key_len = rec.val_len = -1;
            if (key_valid[i] && !span(&c[KEY_OFF], &c[KEY_DATA], i, &rec.key, &rec.key_len))
                return FB_CORRUPT;
            if (val_valid[i] && !span(&c[VAL_OFF], &c[VAL_DATA], i, &rec.value, &rec.val_len))
                return FB_CORRUPT;
            if (hdr_off[i] < 0 || hdr_off[i] > hdr_off[i + 1] || hdr_off[i + 1] > headers)
                return FB_CORRUPT;
            rec.header_count = hdr_off[i + 1] - hdr_off[i];
            for (int64_t h = 0; h < rec.header_count && rec.header_count <= MAX_HEADERS; h++) {
                const Py_ssize_t e = hdr_off[i] + h;
                if (!hdr_ok[e]) {
                    reason = FB_HEADER_NAME;
                    break;
                }
                rec.val_lens[h] = -1;
                if (!span(&c[NAME_OFF], &c[NAME_DATA], e, &rec.names[h], &rec.name_lens[h])
                    || (hval_valid[e] && !span(&c[HVAL_OFF], &c[HVAL_DATA], e, &rec.vals[h], &rec.val_lens[h])))
                    return FB_CORRUPT;
            }
            rec.offset = offsets[i], rec.ts_ms = ts_ms[i], rec.raw_ts = raw_ts[i];
        }
        if (!reason && (status = write_record(j, &rec, &reason)))
            return status;
        if (reason && (status = hand_back(j, i, 0, 0, reason)))
            return status;
    }
    return 0;
}

static PyObject *encode_rows(PyObject *self, PyObject *args) {
    (void)self;
    Job j;
    memset(&j, 0, sizeof j);
    Py_buffer c[N_COLUMNS];
    memset(c, 0, sizeof c);
    PyObject *result = NULL;
    /* the columns flat, not as a tuple: PyArg_ParseTuple sizes its cleanup list by the top-level
     * arguments, and the buffers of a nested tuple overrun it */
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*y*y*y*y*y*y*y*y*w*w*w*w*w*w*w*w*y*y*y*y*y*y*nnniin",
                          &c[KEY_OFF], &c[KEY_DATA], &c[KEY_VALID], &c[VAL_OFF], &c[VAL_DATA], &c[VAL_VALID],
                          &c[HDR_OFF], &c[NAME_OFF], &c[NAME_DATA], &c[HDR_OK], &c[HVAL_OFF], &c[HVAL_DATA],
                          &c[HVAL_VALID], &c[OFFSETS], &c[TS_MS], &c[RAW_TS], &c[GENERAL],
                          &j.b.out, &j.b.starts, &j.b.queue_ids, &j.b.tags_codes, &j.b.kafka_offsets,
                          &j.b.timestamps, &j.b.value_kinds, &j.b.back, &j.b.head, &j.b.topic_part,
                          &j.b.coords_prefix, &j.b.uniq_prefix, &j.b.reserved, &j.b.born_header, &j.max_body,
                          &j.max_record, &j.max_props, &j.queue_id, &j.key_hash_queues, &j.crc_reserve)
        || !job_holds(&j, "encode_rows"))
        goto done;
    const Py_ssize_t n = c[OFFSETS].len / 8, headers = c[HDR_OK].len;
    if (c[KEY_OFF].len < 4 * (n + 1) || c[VAL_OFF].len < 4 * (n + 1) || c[HDR_OFF].len < 4 * (n + 1)
        || c[KEY_VALID].len < n || c[VAL_VALID].len < n || c[GENERAL].len < n || c[TS_MS].len < 8 * n
        || c[RAW_TS].len < 8 * n || c[NAME_OFF].len < 4 * (headers + 1) || c[HVAL_OFF].len < 4 * (headers + 1)
        || c[HVAL_VALID].len < headers) {
        PyErr_Format(PyExc_ValueError, "encode_rows: a column's buffers are shorter than its %zd rows (offsets) or "
                     "%zd headers (usable)", n, headers);
        goto done;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = encode_columns(&j, c, n);
    Py_END_ALLOW_THREADS
    result = status ? PyLong_FromLong(-status) : Py_BuildValue("(nnn)", j.out_pos, j.row, j.nback);
done:
    release(&j.b);
    for (int k = 0; k < N_COLUMNS; k++)
        if (c[k].obj)
            PyBuffer_Release(&c[k]);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_fetch", encode_fetch, METH_VARARGS,
     "encode_fetch(records, sections, lo, hi, out, starts, queue_ids, tags_codes, kafka_offsets, timestamps, "
     "value_kinds, back, "
     "head, topic_part, coords_prefix, uniq_prefix, reserved, born_header, max_body, max_record, max_props, "
     "queue_id, key_hash_queues, crc_reserve) -> (out_len, rows, handed_back) "
     "| -reason; back holds (section, record start, record end, reason) per handed-back record"},
    {"encode_rows", encode_rows, METH_VARARGS,
     "encode_rows(*columns, out, starts, ... as encode_fetch from out on) -> (out_len, rows, handed_back) | -reason; "
     "columns: the 17 Arrow buffers of Kafka rows of one partition (see encode_columns); back holds (row, 0, 0, "
     "reason) per handed-back row"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_direct_encode",
                                    "Kafka record batches to CommitLog records; see ingest/encode/direct_encode.py.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__direct_encode(void) {
    crc_init();
    return PyModule_Create(&module);
}
