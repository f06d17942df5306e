/* The record checks of store/format/encoded_check.py in C: records encoded elsewhere and not yet
 * appended, checked as recovery checks a segment (scan.py's _first_bad without the PHYSICALOFFSET
 * rule), with TOTALSIZE against each record's own length and BODYCRC, in one pass over their bytes
 * with the next record asked for ahead. The numpy path gathers each record's head and a window after
 * its body, then computes the body CRCs one call each; tests/test_encoded_check.py runs with both.
 * The GIL is released: the checks run on the sink's writer thread while Spark reads the next batch.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define AHEAD 4      /* records asked for ahead of the one checked */

#include "_crc32.h"     /* crc_init, crc32_of */

static inline uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

typedef struct {
    uint32_t magic_v1, magic_v2, born_v6, store_v6;
    int64_t min_length;
} Rules;

/* 1 when the record at d[s:s + z] passes; its QUEUEID, SYSFLAG and TOPIC place in the outputs */
static int check_one(const uint8_t *d, int64_t len, int64_t s, int64_t z, const Rules *r, int64_t *queue_id,
                     int64_t *sys_flag, int64_t *topic_pos, int64_t *topic_len) {
    if (s < 0 || z < r->min_length || s + z > len)
        return 0;
    const uint8_t *p = d + s;
    const int64_t end = s + z;
    uint32_t magic = be32(p + 4);
    if ((int64_t)(int32_t)be32(p) != z || (magic != r->magic_v1 && magic != r->magic_v2))
        return 0;
    int v2 = magic == r->magic_v2;
    uint32_t flags = be32(p + 36);
    int64_t hosts = (flags & r->born_v6 ? 12 : 0) + (flags & r->store_v6 ? 12 : 0);
    int64_t body_pos = s + 84 + hosts;
    if (body_pos + 4 > end)
        return 0;
    int64_t body_len = (int32_t)be32(d + body_pos);
    int64_t body = body_pos + 4;
    if (body_len < 0 || body + body_len + 1 + v2 > end)
        return 0;
    if (body_len > 0 && (crc32_of(d + body, body_len) & 0x7FFFFFFFu) != be32(p + 8))
        return 0;
    int64_t t = body + body_len;
    int64_t tl = v2 ? (int64_t)be16(d + t) : (int64_t)(int8_t)d[t];
    t += 1 + v2;
    if (tl < 0 || t + tl + 2 > end)
        return 0;
    int64_t pl = (int16_t)be16(d + t + tl);
    if (pl > 0 && t + tl + 2 + pl > end)
        return 0;
    if (91 + body_len + tl + (pl > 0 ? pl : 0) + hosts + v2 != z)
        return 0;
    *queue_id = (int32_t)be32(p + 12);
    *sys_flag = (int32_t)flags;
    *topic_pos = t;
    *topic_len = tl;
    return 1;
}

/* check(buf, starts, sizes, out, magic_v1, magic_v2, born_v6, store_v6, min_length)
 *     -> the index of the first record that fails (n when none does)
 * starts, sizes: int64; out: a writable (4, n) int64 array of QUEUEID, SYSFLAG, topic position and
 * TOPICLENGTH per record, filled for the records before it. */
static PyObject *check(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer buf, st, sz, out;
    unsigned int m1, m2, b6, s6;
    long long min_length;
    if (!PyArg_ParseTuple(args, "y*y*y*w*IIIIL", &buf, &st, &sz, &out, &m1, &m2, &b6, &s6, &min_length))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = st.len / 8;
    if (sz.len / 8 != n || out.len / 8 < 4 * n) {
        PyErr_SetString(PyExc_ValueError, "check: starts, sizes and the output differ in length");
        goto done;
    }
    const Rules rules = {m1, m2, b6, s6, min_length};
    const uint8_t *d = buf.buf;
    const int64_t *starts = st.buf, *sizes = sz.buf;
    int64_t *o = out.buf;
    Py_ssize_t i = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; i < n; i++) {
        if (i + AHEAD < n && starts[i + AHEAD] >= 0 && starts[i + AHEAD] < buf.len)
            __builtin_prefetch(d + starts[i + AHEAD]);
        if (!check_one(d, buf.len, starts[i], sizes[i], &rules, o + i, o + n + i, o + 2 * n + i, o + 3 * n + i))
            break;
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

static PyMethodDef methods[] = {
    {"check", check, METH_VARARGS, "Check records encoded elsewhere (store/format/encoded_check.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_check",
                                    "Checks of records not yet appended (see store/format/encoded_check.py)", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__record_check(void) {
    crc_init();
    return PyModule_Create(&module);
}
