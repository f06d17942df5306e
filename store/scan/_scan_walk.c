/* The segment walk of store/scan/walk.py in C: from a record start, follow TOTALSIZE while it is
 * plausible and the record fits, collecting the record starts. Every other check of a record runs
 * afterwards in record_check.py, vectorized over the starts found, as it does after the numpy walk this
 * replaces (tests/store/scan/test_codec_scan.py runs with both). It reads each record's first four bytes,
 * where the numpy walk compares every byte of the segment against the magic code.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../format/_layout.h" /* record_total */

#define STREAM_AHEAD 2048    /* bytes ahead of the walk asked for */

/* walk(buf, pos, end, stop_at, min_length, positions) -> (count, next position, more)
 * positions: a writable int64 buffer; the walk stops early when it is full (more is then true
 * and the caller walks on from the next position). As walk.py's _walk: records start at pos
 * while pos <= min(end - min_length, stop_at); a TOTALSIZE below min_length or a record past
 * end ends the walk (more false); more is true when the walk stopped only at stop_at or a full
 * buffer and a record could still start before end. */
static PyObject *walk(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer buf, out;
    long long pos, end, stop_at, min_length;
    if (!PyArg_ParseTuple(args, "y*LLLLw*", &buf, &pos, &end, &stop_at, &min_length, &out))
        return NULL;
    PyObject *result = NULL;
    if (end < 0 || end > buf.len) {
        PyErr_Format(PyExc_ValueError, "walk: end %lld outside the buffer of %zd bytes", end, buf.len);
        goto done;
    }
    if (pos < 0 || min_length < 4) {
        PyErr_Format(PyExc_ValueError, "walk: pos %lld is negative or min_length %lld below 4 (TOTALSIZE's bytes)",
                     pos, min_length);
        goto done;
    }
    const uint8_t *d = buf.buf;
    int64_t *positions = out.buf;
    const Py_ssize_t cap = out.len / 8;
    Py_ssize_t count = 0;
    long long last = end - min_length < stop_at ? end - min_length : stop_at;
    /* each TOTALSIZE says where the next record starts, so nothing can be asked for a record
     * ahead; the walk streams the bytes ahead instead (the checks that follow read them too) */
    long long ahead = pos;
    int more;
    for (;;) {
        for (; ahead < pos + STREAM_AHEAD && ahead < end; ahead += 64)
            __builtin_prefetch(d + ahead);
        if (pos > last) {
            more = pos <= end - min_length;
            break;
        }
        if (count == cap) {
            more = 1;
            break;
        }
        const int64_t total = record_total(d, end, pos, min_length);
        if (total < 0) {
            more = 0;
            break;
        }
        positions[count++] = pos;
        pos += total;
    }
    result = Py_BuildValue("nLO", count, pos, more ? Py_True : Py_False);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Follow TOTALSIZE from a record start (store/scan/record_check.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan_walk",
                                    "The segment walk along TOTALSIZE (see store/scan/record_check.py)", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan_walk(void) { return PyModule_Create(&module); }
