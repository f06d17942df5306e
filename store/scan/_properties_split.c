/* The PROPERTIES of many records split into (name, value) pairs, as RocketMQ's
 * MessageDecoder.string2messageProperties splits one record's: the C half of
 * store/scan/arrow_text.py, which documents the contract and keeps the numpy path that
 * tests/store/scan/test_readback_arrow.py compares with this file, pair for pair.
 *
 * Per record: a piece ends at \x02 or at the record's end; its name ends at the piece's first
 * \x01; a piece without one, or with an empty name or value, is dropped; of pairs with the same
 * name (byte for byte) only the last is kept, in its place. Names and values are copied back to
 * back into the caller's buffers with int32 offsets (Arrow's string layout). Whether they are
 * UTF-8 is the caller's to check (Java replaces malformed bytes; Arrow validates the whole column
 * faster than a loop here would); this file only says whether any byte of the
 * properties was not ASCII.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../format/_text.h" /* piece_end, name_end, any_high: string2messageProperties' pieces */

#define PREFETCH_AHEAD 16
#define PAIRWISE_MAX 16    /* a record with more pairs than this finds repeated names by hashing */

typedef struct {
    int64_t name, name_len, value, value_len;    /* positions in the caller's buffer */
} Pair;

typedef struct {
    Pair *pairs;          /* one record's pairs, before repeated names are dropped */
    uint8_t *keep;
    int32_t *slots;       /* open addressing over pair indexes, -1 empty */
    Py_ssize_t cap, slot_cap;
} Scratch;

static int same_name(const uint8_t *d, const Pair *a, const Pair *b) {
    return a->name_len == b->name_len && memcmp(d + a->name, d + b->name, (size_t)a->name_len) == 0;
}

static uint64_t name_hash(const uint8_t *p, int64_t n) {
    uint64_t h = 1469598103934665603ull;           /* FNV-1a */
    for (int64_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int grow(Scratch *s, Py_ssize_t pairs) {
    if (pairs > s->cap) {
        Py_ssize_t cap = pairs < 64 ? 64 : pairs * 2;
        Pair *p = PyMem_Realloc(s->pairs, (size_t)cap * sizeof(Pair));
        if (!p)
            return -1;
        s->pairs = p;
        uint8_t *k = PyMem_Realloc(s->keep, (size_t)cap);
        if (!k)
            return -1;
        s->keep = k;
        s->cap = cap;
    }
    if (pairs <= PAIRWISE_MAX)
        return 0;                                  /* no hash table: names compared pairwise */
    Py_ssize_t want = 16;
    while (want < pairs * 2)
        want *= 2;
    if (want > s->slot_cap) {
        int32_t *t = PyMem_Realloc(s->slots, (size_t)want * sizeof(int32_t));
        if (!t)
            return -1;
        s->slots = t;
        s->slot_cap = want;
    }
    return 0;
}

/* keep[i] = 0 for each pair a later pair of the same name overrides. */
static void drop_repeated(const uint8_t *d, Scratch *s, Py_ssize_t count) {
    memset(s->keep, 1, (size_t)count);
    if (count <= PAIRWISE_MAX) {
        for (Py_ssize_t i = count - 2; i >= 0; i--)
            for (Py_ssize_t j = i + 1; j < count; j++)
                if (s->keep[j] && same_name(d, &s->pairs[i], &s->pairs[j])) {
                    s->keep[i] = 0;
                    break;
                }
        return;
    }
    Py_ssize_t size = 16;
    while (size < count * 2)
        size *= 2;
    memset(s->slots, 0xFF, (size_t)size * sizeof(int32_t));
    for (Py_ssize_t i = count - 1; i >= 0; i--) {
        const Pair *p = &s->pairs[i];
        Py_ssize_t at = (Py_ssize_t)(name_hash(d + p->name, p->name_len) & (uint64_t)(size - 1));
        while (s->slots[at] >= 0 && !same_name(d, p, &s->pairs[s->slots[at]]))
            at = (at + 1) & (size - 1);
        if (s->slots[at] >= 0)
            s->keep[i] = 0;
        else
            s->slots[at] = (int32_t)i;
    }
}

/* The record's pieces (piece_end) as pairs into s->pairs; the number of pairs. *high collects
 * whether a byte of the properties is over 0x7F (``avail`` bytes readable from d + at). */
static Py_ssize_t pairs_of(const uint8_t *d, int64_t at, int64_t end, int64_t avail, Scratch *s, uint8_t *high) {
    Py_ssize_t count = 0;
    const uint8_t *p = d + at;
    const int64_t n = end - at;
    for (int64_t piece = 0; piece <= n;) {
        const int64_t stop = piece_end(p, piece, n, avail), sep = name_end(p, piece, stop);
        if (sep > piece && sep + 1 < stop) {
            /* a piece is at least 3 bytes and its separator 1: (len + 1) / 4 pairs at most */
            Pair *q = &s->pairs[count++];
            q->name = at + piece;
            q->name_len = sep - piece;
            q->value = at + sep + 1;
            q->value_len = stop - sep - 1;
        }
        piece = stop + 1;
    }
    if (any_high(p, n, avail))
        *high = 0x80;
    return count;
}

static int64_t copy_out(uint8_t *out, int64_t at, const uint8_t *from, int64_t n) {
    memcpy(out + at, from, (size_t)n);
    return at + n;
}

/* split(buf, pos, length, wanted, map_offsets, name_offsets, name_data, value_offsets, value_data,
 *       wanted_pair) -> (pairs, not_ascii)
 * pos, length: int64 per record (PROPERTIES within buf); wanted: names joined by \0, each found
 * pair's index written to wanted_pair[k * n + record] (int32, -1 when absent); map_offsets int32
 * [n + 1]; name/value offsets int32 [pairs + 1], sized by the caller for sum((length + 1) / 4)
 * pairs; name/value data sized for sum(length) bytes. */
static PyObject *split(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer buf, pos, len, wanted, map_off, name_off, name_data, value_off, value_data, wanted_pair;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*w*w*w*w*w*", &buf, &pos, &len, &wanted, &map_off, &name_off,
                          &name_data, &value_off, &value_data, &wanted_pair))
        return NULL;
    Py_buffer *all[] = {&buf, &pos, &len, &wanted, &map_off, &name_off, &name_data, &value_off, &value_data,
                        &wanted_pair};
    PyObject *result = NULL;
    Scratch s = {0};
    const uint8_t *d = buf.buf;
    const int64_t *p = pos.buf, *l = len.buf;
    Py_ssize_t n = pos.len / 8;
    /* the wanted names, split on \0 */
    const uint8_t *wnames[16];
    int64_t wlen[16];
    Py_ssize_t k = 0;
    if (wanted.len) {
        const uint8_t *w = wanted.buf, *wend = w + wanted.len;
        for (;;) {
            const uint8_t *z = memchr(w, 0, (size_t)(wend - w));
            if (k == 16) {
                PyErr_SetString(PyExc_ValueError, "split: at most 16 wanted names");
                goto done;
            }
            wnames[k] = w;
            wlen[k++] = (z ? z : wend) - w;
            if (!z)
                break;
            w = z + 1;
        }
    }
    int32_t *mo = map_off.buf, *no = name_off.buf, *vo = value_off.buf, *wp = wanted_pair.buf;
    uint8_t *nd = name_data.buf, *vd = value_data.buf;
    Py_ssize_t pair_cap = name_off.len / 4 - 1;
    if (len.len != pos.len || map_off.len < (n + 1) * 4 || value_off.len != name_off.len || pair_cap < 0
        || wanted_pair.len < k * n * 4) {
        PyErr_SetString(PyExc_ValueError, "split: output arrays of the wrong size");
        goto done;
    }
    for (Py_ssize_t i = 0; i < k * n; i++)
        wp[i] = -1;
    Py_ssize_t pairs = 0;
    int64_t name_at = 0, value_at = 0;
    uint8_t high = 0;
    mo[0] = no[0] = vo[0] = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        if (r + PREFETCH_AHEAD < n) {
            /* the records lie far apart in the segment: ask for a later one's bytes early, so
             * the split is not paced by one cache miss after another */
            int64_t ahead = p[r + PREFETCH_AHEAD], ahead_len = l[r + PREFETCH_AHEAD];
            if (ahead >= 0 && ahead_len > 0 && ahead_len <= buf.len - ahead) {
                __builtin_prefetch(d + ahead);
                __builtin_prefetch(d + ahead + ahead_len - 1);
            }
        }
        if (p[r] < 0 || l[r] < 0 || p[r] > buf.len || l[r] > buf.len - p[r]) {
            PyErr_Format(PyExc_ValueError, "split: record %zd's properties [%lld, +%lld) are outside the buffer", r,
                         (long long)p[r], (long long)l[r]);
            goto done;
        }
        if (grow(&s, (Py_ssize_t)(l[r] + 1) / 4) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        Py_ssize_t count = pairs_of(d, p[r], p[r] + l[r], buf.len - p[r], &s, &high);
        if (pairs + count > pair_cap || name_at + l[r] > name_data.len || value_at + l[r] > value_data.len
            || name_at + l[r] > INT32_MAX || value_at + l[r] > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "split: output buffers too small (or over 2 GiB of text)");
            goto done;
        }
        drop_repeated(d, &s, count);
        for (Py_ssize_t i = 0; i < count; i++) {
            if (!s.keep[i])
                continue;
            const Pair *q = &s.pairs[i];
            for (Py_ssize_t w = 0; w < k; w++)
                if (q->name_len == wlen[w] && memcmp(d + q->name, wnames[w], (size_t)wlen[w]) == 0)
                    wp[w * n + r] = (int32_t)pairs;
            name_at = copy_out(nd, name_at, d + q->name, q->name_len);
            value_at = copy_out(vd, value_at, d + q->value, q->value_len);
            pairs++;
            no[pairs] = (int32_t)name_at;
            vo[pairs] = (int32_t)value_at;
        }
        mo[r + 1] = (int32_t)pairs;
    }
    result = Py_BuildValue("nO", pairs, (high & 0x80) ? Py_True : Py_False);
done:
    PyMem_Free(s.pairs);
    PyMem_Free(s.keep);
    PyMem_Free(s.slots);
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        PyBuffer_Release(all[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"split", split, METH_VARARGS, "Split the PROPERTIES of many records into (name, value) pairs."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_properties_split",
                                    "string2messageProperties over many records (see store/scan/arrow_text.py)",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__properties_split(void) { return PyModule_Create(&module); }
