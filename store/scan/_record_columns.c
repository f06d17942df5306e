/* The fixed fields, hosts, topics and bodies of many CommitLog records in one pass: the read-back's
 * columns (store/scan/record_batch.py documents the contract; tests/store/scan/test_readback_columns.py and
 * tests/store/scan/test_readback_arrow.py hold them to the messages written and to the golden stores).
 *
 * The records were walked and checked by store/scan/record_check.py first; this pass still bounds every
 * read by the buffer. Field positions are RocketMQ's (store/format/_layout.h names them):
 * BORNHOST and STOREHOST are 8 bytes, or 20 when sysFlag says IPv6, and move what follows them.
 * Hosts and topics repeat: each record gets an index into the distinct values, given back as the
 * position and length of their first occurrence, which the caller decodes once each. Past
 * MAX_DISTINCT distinct values the pass says so (-1) and the caller groups them its own way.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../format/_layout.h" /* the record's positions (host_positions), be32, be64 */

#define MAX_DISTINCT 256
#define PREFETCH_AHEAD 16    /* records ahead whose first bytes are asked for (they lie far apart) */

typedef struct {
    int64_t at[MAX_DISTINCT], len[MAX_DISTINCT];
    int32_t count, last, full;
} Distinct;

/* The index of d[at, at + len) among the distinct values seen so far (added when new), or -1
 * once more than MAX_DISTINCT were seen. */
static int32_t distinct_id(Distinct *s, const uint8_t *d, int64_t at, int64_t len) {
    if (s->full)
        return -1;
    int32_t l = s->last;
    if (l >= 0 && s->len[l] == len && memcmp(d + s->at[l], d + at, (size_t)len) == 0)
        return l;
    for (int32_t i = 0; i < s->count; i++)
        if (s->len[i] == len && memcmp(d + s->at[i], d + at, (size_t)len) == 0)
            return s->last = i;
    if (s->count == MAX_DISTINCT) {
        s->full = 1;
        return -1;
    }
    s->at[s->count] = at;
    s->len[s->count] = len;
    return s->last = s->count++;
}

static PyObject *firsts(const Distinct *s) {
    if (s->full)
        return Py_BuildValue("i", -1);
    PyObject *out = PyList_New(s->count);
    for (int32_t i = 0; out && i < s->count; i++) {
        PyObject *pair = Py_BuildValue("LL", (long long)s->at[i], (long long)s->len[i]);
        if (!pair) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, pair);
    }
    return out;
}

/* columns(buf, starts, topic_pos, topic_len, flag, born_ts, store_ts, reconsume, born_host,
 *         store_host, topic, body_pos, body_len, body_offsets, body_data)
 *   -> (hosts, topics): each a list of (position, length) of the distinct values, or -1.
 * starts, topic_pos, topic_len: int64 per record (from the scan). Out, per record: flag,
 * reconsume, born_host, store_host, topic, body_len int32; born_ts, store_ts, body_pos int64.
 * body_offsets int32 [n + 1] and body_data: the bodies back to back (Arrow's binary layout), or
 * an empty body_data for none (the caller then points at the bodies where they are). */
static PyObject *columns(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer buf, starts, tpos, tlen, flag, born_ts, store_ts, reconsume, born_host, store_host, topic,
        body_pos, body_len, body_off, body_data;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*w*w*w*w*w*w*w*w*w*w*", &buf, &starts, &tpos, &tlen, &flag, &born_ts,
                          &store_ts, &reconsume, &born_host, &store_host, &topic, &body_pos, &body_len, &body_off,
                          &body_data))
        return NULL;
    Py_buffer *all[] = {&buf, &starts, &tpos, &tlen, &flag, &born_ts, &store_ts, &reconsume, &born_host,
                        &store_host, &topic, &body_pos, &body_len, &body_off, &body_data};
    PyObject *result = NULL;
    Distinct *hosts = PyMem_Calloc(1, sizeof(Distinct)), *topics = PyMem_Calloc(1, sizeof(Distinct));
    if (!hosts || !topics) {
        PyErr_NoMemory();
        goto done;
    }
    hosts->last = topics->last = -1;
    const uint8_t *d = buf.buf;
    const int64_t len = buf.len;
    const int64_t *st = starts.buf, *tp = tpos.buf, *tl = tlen.buf;
    const Py_ssize_t n = starts.len / 8;
    int32_t *o_flag = flag.buf, *o_reconsume = reconsume.buf, *o_born = born_host.buf, *o_store = store_host.buf,
            *o_topic = topic.buf, *o_blen = body_len.buf, *o_boff = body_off.buf;
    int64_t *o_born_ts = born_ts.buf, *o_store_ts = store_ts.buf, *o_bpos = body_pos.buf;
    uint8_t *out = body_data.buf;
    const int copy = body_data.len > 0;
    if (tpos.len != starts.len || tlen.len != starts.len || flag.len < n * 4 || reconsume.len < n * 4
        || born_host.len < n * 4 || store_host.len < n * 4 || topic.len < n * 4 || body_len.len < n * 4
        || born_ts.len < n * 8 || store_ts.len < n * 8 || body_pos.len < n * 8 || body_off.len < (n + 1) * 4) {
        PyErr_Format(PyExc_ValueError, "columns: %zd starts, but topic_pos, topic_len or an output array holds fewer "
                     "(body_offsets needs %zd)", n, n + 1);
        goto done;
    }
    int64_t written = 0;
    o_boff[0] = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        if (r + PREFETCH_AHEAD < n && st[r + PREFETCH_AHEAD] >= 0 && st[r + PREFETCH_AHEAD] + 128 <= len) {
            __builtin_prefetch(d + st[r + PREFETCH_AHEAD]);
            __builtin_prefetch(d + st[r + PREFETCH_AHEAD] + 64);
        }
        const int64_t at = st[r];
        /* SYSFLAG, which says how long the hosts are */
        if (at < 0 || at > len - (POS_SYSFLAG + 4)) {
            PyErr_Format(PyExc_ValueError, "columns: record %zd at %lld is outside the buffer of %lld bytes", r,
                         (long long)at, (long long)len);
            goto done;
        }
        const uint8_t *rec = d + at;
        const HostPositions pos = host_positions(be32(rec + POS_SYSFLAG));
        const int64_t born_w = pos.born_host_len, store_w = pos.store_host_len, store_ts_at = pos.store_timestamp_pos,
                      store_at = pos.store_host_pos, tail = pos.reconsume_times_pos, body_len_at = pos.body_length_pos;
        if (at > len - (body_len_at + 4)) {
            PyErr_Format(PyExc_ValueError, "columns: record %zd at %lld is outside the buffer of %lld bytes", r,
                         (long long)at, (long long)len);
            goto done;
        }
        const int64_t blen = (int32_t)be32(rec + body_len_at), bpos = at + body_len_at + 4;
        if (blen < 0 || blen > len - bpos || tp[r] < 0 || tl[r] < 0 || tp[r] > len || tl[r] > len - tp[r]) {
            PyErr_Format(PyExc_ValueError, "columns: record %zd at %lld: its body (%lld bytes) or topic (%lld bytes at "
                         "%lld) is outside the buffer of %lld bytes", r, (long long)at, (long long)blen,
                         (long long)tl[r], (long long)tp[r], (long long)len);
            goto done;
        }
        o_flag[r] = (int32_t)be32(rec + POS_FLAG);
        o_born_ts[r] = be64(rec + POS_BORNTIMESTAMP);
        o_store_ts[r] = be64(rec + store_ts_at);
        o_reconsume[r] = (int32_t)be32(rec + tail);
        o_born[r] = distinct_id(hosts, d, at + POS_BORNHOST, born_w);
        o_store[r] = distinct_id(hosts, d, at + store_at, store_w);
        o_topic[r] = distinct_id(topics, d, tp[r], tl[r]);
        o_bpos[r] = bpos;
        o_blen[r] = (int32_t)blen;
        if (copy) {
            if (blen > body_data.len - written || written + blen > INT32_MAX) {
                PyErr_SetString(PyExc_ValueError, "columns: the bodies do not fit body_data (or pass 2 GiB)");
                goto done;
            }
            memcpy(out + written, d + bpos, (size_t)blen);
            written += blen;
        }
        o_boff[r + 1] = (int32_t)written;
    }
    PyObject *h = firsts(hosts), *t = h ? firsts(topics) : NULL;
    if (h && t)
        result = PyTuple_Pack(2, h, t);
    Py_XDECREF(h);
    Py_XDECREF(t);
done:
    PyMem_Free(hosts);
    PyMem_Free(topics);
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        PyBuffer_Release(all[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"columns", columns, METH_VARARGS, "The fixed fields, hosts, topics and bodies of many records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_columns",
                                    "The read-back's record columns in one pass (see store/scan/record_batch.py)",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__record_columns(void) { return PyModule_Create(&module); }
