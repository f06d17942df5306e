/* RocketMQ's checkMessageAndReturnSize in C (record_check.py's check_record is the Python one, which says
 * why a record fails), one pass over each record's bytes with the next record asked for ahead, the GIL
 * released:
 *
 * check: records at known positions: encoded elsewhere and not yet appended
 *   (store/scan/encoded_check.py: TOTALSIZE against each record's own length and BODYCRC, no
 *   PHYSICALOFFSET to hold them to; the sink's writer thread runs it while Spark reads the next
 *   batch), or where the consume queues point (store/scan/record_batch.py, PHYSICALOFFSET too).
 * scan: a segment walked along TOTALSIZE from a record start and every record checked on the way,
 *   PHYSICALOFFSET included (recovery and verify, store/scan/record_check.py), with the fields verify
 *   needs next: the queue, the topic's place, and from the PROPERTIES the consume-queue tagsCode
 *   (TAGS.hashCode(); a value that is not well-formed UTF-8 is marked for the Python way) and whether a
 *   __CRC32# pair is there.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define AHEAD 4      /* records asked for ahead of the one checked */

#include "../format/_crc32.h"     /* crc_init, crc32_of */
#include "../format/_layout.h"    /* the record's walk (record_head, record_spans), record_total, the names */
#include "../format/_text.h"      /* hash_text, piece_end */

typedef struct {
    int64_t min_length;
    int crc; /* check BODYCRC */
} Rules;

typedef struct {
    int64_t queue_id, sys_flag, topic_pos, topic_len, props_len;
} Parsed;

/* 1 when the record at d[s:s + z] passes, its fields in *f */
static int check_one(const uint8_t *d, int64_t len, int64_t s, int64_t z, const Rules *r, Parsed *f) {
    if (s < 0 || s > len || z < r->min_length || z > len - s)
        return 0;
    const uint8_t *p = d + s;
    RecordHead head;
    RecordSpans sp;
    if ((int64_t)(int32_t)be32(p + POS_TOTALSIZE) != z || !record_head(p, &head)
        || record_spans(p, z, &head, &sp) != SPANS_OK || spans_length(&sp, &head) != z)
        return 0;
    if (r->crc && sp.body_len > 0 && (crc32_of(p + sp.body_pos, sp.body_len) & 0x7FFFFFFFu) != be32(p + POS_BODYCRC))
        return 0;
    f->queue_id = (int32_t)be32(p + POS_QUEUEID);
    f->sys_flag = (int32_t)head.sys_flag;
    f->topic_pos = s + sp.topic_pos;
    f->topic_len = sp.topic_len;
    f->props_len = sp.props_len;
    return 1;
}

/* check(buf, starts, sizes, base, placed, crc, out)
 *     -> the index of the first record that fails (n when none does)
 * starts, sizes: int64 per record; each record checked as check_one does (BODYCRC when ``crc``),
 * and PHYSICALOFFSET == base + its start when ``placed`` (records of a segment, not yet-to-be-
 * appended ones). out: a writable (CHECK_COLUMNS, n) int64 array of QUEUEID, QUEUEOFFSET,
 * SYSFLAG, topic position, TOPICLENGTH and PROPERTIESLENGTH per record, filled for the records
 * before it. */
#define CHECK_COLUMNS 6
static PyObject *check(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer buf, st, sz, out;
    long long base;
    int placed, crc;
    if (!PyArg_ParseTuple(args, "y*y*y*Lppw*", &buf, &st, &sz, &base, &placed, &crc, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = st.len / 8;
    if (sz.len / 8 != n || out.len / 8 < CHECK_COLUMNS * n) {
        PyErr_Format(PyExc_ValueError, "check: %zd starts, %zd sizes and an out of %zd values (%d per record) differ",
                     n, (Py_ssize_t)(sz.len / 8), (Py_ssize_t)(out.len / 8), CHECK_COLUMNS);
        goto done;
    }
    const Rules rules = {MIN_RECORD_LENGTH, crc};
    const uint8_t *d = buf.buf;
    const int64_t *starts = st.buf, *sizes = sz.buf;
    int64_t *o = out.buf;
    Py_ssize_t i = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; i < n; i++) {
        if (i + AHEAD < n && starts[i + AHEAD] >= 0 && starts[i + AHEAD] < buf.len)
            __builtin_prefetch(d + starts[i + AHEAD]);
        Parsed f;
        if (!check_one(d, buf.len, starts[i], sizes[i], &rules, &f)
            || (placed && be64(d + starts[i] + POS_PHYSICALOFFSET) != base + starts[i]))
            break;
        o[i] = f.queue_id, o[n + i] = be64(d + starts[i] + POS_QUEUEOFFSET), o[2 * n + i] = f.sys_flag;
        o[3 * n + i] = f.topic_pos, o[4 * n + i] = f.topic_len, o[5 * n + i] = f.props_len;
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(i);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&st);
    PyBuffer_Release(&sz);
    PyBuffer_Release(&out);
    return result;
}

/* --- scan ------------------------------------------------------------------------------------- */

#define SCAN_COLUMNS 10 /* start, QUEUEID, QUEUEOFFSET, SYSFLAG, topic position, TOPICLENGTH,
                           PROPERTIESLENGTH, tagsCode, marks, topic id */
#define MARK_TAGS_SLOW 1   /* a TAGS value that is not well-formed UTF-8: its tagsCode is left to Python */
#define MARK_PROP_CRC 2    /* a piece named __CRC32#: the whole-record CRC is checked by Python */

/* The tagsCode and marks from the PROPERTIES p[0, n) (``avail`` bytes readable from p):
 * MessageDecoder.string2messageProperties' pieces (piece_end), a pair with an empty value does not
 * count and the last pair of a name wins; the tagsCode is TAGS.hashCode() (hash_text). */
static void props_facts(const uint8_t *p, int64_t n, int64_t avail, int64_t *tags_code, int64_t *marks) {
    const int64_t tags_pair = LITERAL_LENGTH(PAIR(PROPERTY_TAGS)), crc_pair = LITERAL_LENGTH(PAIR(PROPERTY_CRC32));
    int64_t tags = -1, tags_end = 0, m = 0;
    for (int64_t piece = 0; piece <= n;) {
        const int64_t stop = piece_end(p, piece, n, avail), k = stop - piece;
        if (k > tags_pair && memcmp(p + piece, PAIR(PROPERTY_TAGS), (size_t)tags_pair) == 0)
            tags = piece + tags_pair, tags_end = stop;
        else if (k >= crc_pair && memcmp(p + piece, PAIR(PROPERTY_CRC32), (size_t)crc_pair) == 0)
            m |= MARK_PROP_CRC;
        piece = stop + 1;
    }
    uint32_t h = 0;
    if (tags >= 0 && hash_text(p + tags, tags_end - tags, avail - tags, &h) < 0) {
        m |= MARK_TAGS_SLOW;
        h = 0;
    }
    *tags_code = (int32_t)h;
    *marks = m;
}

/* The index of the topic d[at, at + n) in the table of distinct topics (count, then the position
 * and length of each one's first record), added when new; -1 once the table is full. */
static int64_t topic_id(const uint8_t *d, int64_t at, int64_t n, int64_t *table, int64_t most, int64_t *last) {
    int64_t *const count = table, *const topics = table + 1;
    for (int64_t k = 0, j = *last; k < *count; k++, j = (j + 1) % *count)
        if (topics[2 * j + 1] == n && memcmp(d + topics[2 * j], d + at, (size_t)n) == 0)
            return *last = j;
    if (*count == most)
        return -1;
    topics[2 * *count] = at;
    topics[2 * *count + 1] = n;
    return *last = (*count)++;
}

/* 1 when scan's arguments let it read and write only inside its buffers, else 0 with a ValueError
 * naming the first one that does not: the topic table's positions come back from an earlier call
 * and are read again, so each must still lie in the buffer */
static int scan_args_hold(Py_ssize_t len, long long pos, long long end, Py_ssize_t cap, long long need,
                          const int64_t *table, int64_t most) {
    if (end < 0 || end > len)
        PyErr_Format(PyExc_ValueError, "scan: end %lld outside the buffer of %zd bytes", end, len);
    else if (pos < 0)
        PyErr_Format(PyExc_ValueError, "scan: pos %lld is negative", pos);
    else if (need > cap)
        PyErr_Format(PyExc_ValueError, "scan: out holds %zd records, the walk may find %lld", cap, need);
    else if (most < 1)
        PyErr_Format(PyExc_ValueError, "scan: topics holds room for %lld topics, at least 1 needed", (long long)most);
    else if (table[0] < 0 || table[0] > most)
        PyErr_Format(PyExc_ValueError, "scan: topics count %lld outside [0, %lld]", (long long)table[0],
                     (long long)most);
    else {
        for (int64_t k = 0; k < table[0]; k++) {
            const int64_t at = table[1 + 2 * k], n = table[2 + 2 * k];
            if (at < 0 || n < 0 || at > len - n) {
                PyErr_Format(PyExc_ValueError, "scan: topic %lld at %lld, %lld bytes, outside the buffer of %zd bytes",
                             (long long)k, (long long)at, (long long)n, len);
                return 0;
            }
        }
        return 1;
    }
    return 0;
}

/* scan(buf, pos, end, stop_at, base, crc, fields, out, topics)
 *     -> (count, next, more, bad)
 * From the record start ``pos``, follow TOTALSIZE while it is plausible (>= min_length) and the
 * record fits below ``end``, as store/scan/walk.py does, pausing at the first record start past
 * ``stop_at`` (``more``: the walk should go on from ``next``). Each record is checked as
 * check_one does, PHYSICALOFFSET == base + its position included; ``bad``: the walk stopped at
 * a record that fails (at ``next``). out: a writable (SCAN_COLUMNS, cap) int64 array, a column per
 * record walked and passed; cap must hold (min(end - min_length, stop_at) - pos) / min_length + 1.
 * topics: the table of distinct topics (see topic_id), kept from call to call over one buffer.
 * ``fields`` false (recovery: the record starts alone): no topic numbered, no PROPERTIES read. */
static PyObject *scan(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer buf, out, topics;
    long long pos, end, stop_at, base;
    const int64_t min_length = MIN_RECORD_LENGTH;
    int crc, fields;
    if (!PyArg_ParseTuple(args, "y*LLLLppw*w*", &buf, &pos, &end, &stop_at, &base, &crc, &fields, &out, &topics))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t cap = out.len / 8 / SCAN_COLUMNS;
    const int64_t most = (topics.len / 8 - 1) / 2, last = (end - min_length < stop_at ? end - min_length : stop_at);
    int64_t *table = topics.buf, last_topic = 0;
    const long long need = last >= pos ? (last - pos) / min_length + 1 : 0;
    if (!scan_args_hold(buf.len, pos, end, cap, need, table, most))
        goto done;
    const Rules rules = {min_length, crc};
    const uint8_t *d = buf.buf;
    int64_t *o = out.buf;
    Py_ssize_t i = 0;
    int more = 0, bad = 0;
    int64_t p = pos;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        if (p > last) {
            more = p <= end - min_length;
            break;
        }
        const int64_t total = record_total(d, end, p, min_length);
        if (total < 0)
            break;
        if (p + total + 64 <= end)
            __builtin_prefetch(d + p + total + 64);
        Parsed f;
        if (!check_one(d, end, p, total, &rules, &f) || be64(d + p + POS_PHYSICALOFFSET) != base + p) {
            bad = 1;
            break;
        }
        o[i] = p;
        o[cap + i] = f.queue_id;
        o[2 * cap + i] = be64(d + p + POS_QUEUEOFFSET);
        o[3 * cap + i] = f.sys_flag;
        o[4 * cap + i] = f.topic_pos;
        o[5 * cap + i] = f.topic_len;
        o[6 * cap + i] = f.props_len;
        o[7 * cap + i] = 0;
        o[8 * cap + i] = 0;
        o[9 * cap + i] = fields ? topic_id(d, f.topic_pos, f.topic_len, table, most, &last_topic) : 0;
        if (fields && f.props_len > 0)
            props_facts(d + f.topic_pos + f.topic_len + 2, f.props_len, end - (f.topic_pos + f.topic_len + 2),
                        o + 7 * cap + i, o + 8 * cap + i);
        i++;
        p += total;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("nLii", i, (long long)p, more, bad);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&out);
    PyBuffer_Release(&topics);
    return result;
}

/* crc32(data, table) -> the CRC-32 of data, by the table when table is true, else as the checks take
 * it (libdeflate's when loaded): for the test that holds both to zlib's value */
static PyObject *crc32(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer data;
    int table;
    if (!PyArg_ParseTuple(args, "y*p", &data, &table))
        return NULL;
    uint32_t c = table ? crc32_of_table(data.buf, data.len) : crc32_of(data.buf, data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *crc_source(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(unused)) {
    return PyUnicode_FromString(crc_library != NULL ? "libdeflate" : "table");
}

static PyMethodDef methods[] = {
    {"check", check, METH_VARARGS, "Check records encoded elsewhere (store/scan/encoded_check.py)."},
    {"crc32", crc32, METH_VARARGS, "crc32(data, table) -> zlib's CRC-32 of data, by the table or as the checks take it."},
    {"crc_source", crc_source, METH_NOARGS, "crc_source() -> 'libdeflate' or 'table': what computes BODYCRC here."},
    {"scan", scan, METH_VARARGS, "Walk a segment and check its records (store/scan/record_check.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_check",
                                    "Record checks: records not yet appended, and segment scans (store/scan/record_check.py)", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__record_check(void) {
    crc_init();
    return PyModule_Create(&module);
}
