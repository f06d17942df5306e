/* Is a range of a mapped segment readable? A page of a mapping that cannot be read (the file was
 * truncated under it, or the disk answered EIO when the page was faulted in) arrives as SIGBUS, which
 * would kill the Python process. probe() touches one byte of every page of the range with a SIGBUS
 * handler of its own installed, and says where the first unreadable page starts instead.
 *
 * The handler is installed only for the probe and only jumps back for the thread probing (the GIL is
 * held throughout, so one probe runs at a time); a SIGBUS of any other thread meanwhile puts the
 * previous handler back and returns, so the fault happens again and is handled as it would have been.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

/* volatile, and fenced: the store must happen before the reads, not be sunk past them */
static _Thread_local sigjmp_buf *volatile probe_jump = NULL;
static struct sigaction previous;

static void on_sigbus(int sig, siginfo_t *info, void *context) {
    (void)info; (void)context;
    if (probe_jump != NULL)
        siglongjmp(*probe_jump, 1);
    sigaction(sig, &previous, NULL);
}

/* The first offset in [start, end) whose page cannot be read, or -1. */
static Py_ssize_t first_unreadable(const volatile unsigned char *base, Py_ssize_t start, Py_ssize_t end,
                                   Py_ssize_t page) {
    sigjmp_buf jump;
    volatile Py_ssize_t at = start;
    struct sigaction ours;
    memset(&ours, 0, sizeof ours);
    ours.sa_sigaction = on_sigbus;
    ours.sa_flags = SA_SIGINFO;
    sigemptyset(&ours.sa_mask);
    if (sigaction(SIGBUS, &ours, &previous) != 0)
        return -2;
    Py_ssize_t found = -1;
    if (sigsetjmp(jump, 1) == 0) {
        probe_jump = &jump;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        unsigned char sink = 0;
        while (at < end) {
            sink ^= base[at];
            Py_ssize_t next = (at / page + 1) * page;
            at = next;
        }
        sink ^= base[end - 1];
        (void)sink;
    } else {
        found = at < end ? at : end - 1;
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    probe_jump = NULL;
    sigaction(SIGBUS, &previous, NULL);
    return found;
}

static PyObject *probe(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "y*nn", &buf, &start, &end))
        return NULL;
    if (start < 0 || end > buf.len || start > end) {
        PyErr_Format(PyExc_ValueError, "probe: range [%zd, %zd) is not inside the buffer of %zd bytes",
                     start, end, buf.len);
        PyBuffer_Release(&buf);
        return NULL;
    }
    Py_ssize_t found = -1;
    if (end > start) {
        long page = sysconf(_SC_PAGESIZE);
        found = first_unreadable((const volatile unsigned char *)buf.buf, start, end, page > 0 ? page : 4096);
    }
    PyBuffer_Release(&buf);
    if (found == -2)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromSsize_t(found);
}

static PyMethodDef methods[] = {
    {"probe", probe, METH_VARARGS,
     "probe(buffer, start, end) -> the first offset in [start, end) whose page cannot be read "
     "(SIGBUS), or -1"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_page_probe", NULL, -1, methods};

PyMODINIT_FUNC PyInit__page_probe(void) { return PyModule_Create(&module); }
