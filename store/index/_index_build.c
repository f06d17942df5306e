/* The index's passes in C, with the GIL released (the numpy oracles of tests/oracles/index_keys.py and
 * index_put.py are what tests/store/index/test_index_build.py holds them equal to, byte for byte):
 *
 * find_keys: the keys RocketMQ's IndexService puts for each record, hashed (the key finder of
 *   _index_keys.h, which verify's check in _index_check.c shares); records whose keys it cannot
 *   find as Java would are left to the caller.
 * put_items: IndexFile.putKey (_index_put.h) for a run of keys, in order: each item linked to the
 *   newest one of its slot, the slot pointed at it, the header's counters moved as RocketMQ moves them.
 * index_records: both at once, a few hundred keys at a time (the way the append's index is built):
 *   each key's slot is asked for when the key is found and written once the few hundred are found;
 *   it stops before a key whose slot lies in a page of the file without its disk blocks reserved
 *   (store/index/blocks.py), which the caller reserves before it goes on.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_index_keys.h" /* record_keys, MOST_KEYS; record_total (store/format/_layout.h) */
#include "_index_put.h"  /* Index, open_index, put_key, write_item, slot_at, HEADER_FORMAT */

#define PREFETCH_RECORDS 6  /* records ahead whose first and last bytes are asked for */
#define LAG 256             /* put_items, put_shipped: keys ahead whose slot is asked for; a slot is
                               a miss to memory, and beside the append's copy a slow one */
#define CHUNK 256           /* index_records: keys found, their slots asked for, before they are put */

enum { DONE = 0, FULL = 1, LEFT = 2, UNRESERVED = 3 };

static void prefetch_record(const uint8_t *d, int64_t len, const int64_t *st, Py_ssize_t n, Py_ssize_t i) {
    if (i >= n)
        return;
    const int64_t a = st[i];
    if (a >= 0 && a + 64 <= len)
        __builtin_prefetch(d + a);
    /* the properties are a record's last bytes: the line before the next record */
    const int64_t z = i + 1 < n ? st[i + 1] : -1;
    if (z > a + 128 && z <= len)
        __builtin_prefetch(d + z - 64);
}

/* find_keys(buf, starts, first, base, rec, hash, phy, ts) -> (count, next)
 * buf: the records' bytes; starts: int64 record positions in buf, from ``first`` on. Out, per key:
 * rec (the record's index in starts) int64, hash int32, phy (base + its position) int64, ts (its
 * STORETIMESTAMP) int64. A record left to the caller gives one entry with hash -1. Stops before a
 * record whose keys might not fit the outputs; ``next`` is the first record not done. */
static PyObject *find_keys(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer buf, starts, rec, hash, phy, ts;
    Py_ssize_t first;
    long long base;
    if (!PyArg_ParseTuple(args, "y*y*nLw*w*w*w*", &buf, &starts, &first, &base, &rec, &hash, &phy, &ts))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = starts.len / 8, cap = hash.len / 4;
    uint32_t *scratch = NULL;
    if (rec.len / 8 < cap || phy.len / 8 < cap || ts.len / 8 < cap || cap < MOST_KEYS || first < 0 || first > n) {
        PyErr_SetString(PyExc_ValueError, "find_keys: output arrays shorter than one record's keys or of different "
                                          "lengths, or first out of range");
        goto done;
    }
    if (!(scratch = PyMem_RawMalloc(MOST_KEYS * sizeof(uint32_t)))) {
        PyErr_NoMemory();
        goto done;
    }
    const uint8_t *d = buf.buf;
    const int64_t len = buf.len, *st = starts.buf;
    int64_t *o_rec = rec.buf, *o_phy = phy.buf, *o_ts = ts.buf;
    int32_t *o_hash = hash.buf;
    Py_ssize_t count = 0, i = first;
    TopicCache tc = {NULL, 0, 0};
    Py_BEGIN_ALLOW_THREADS
    for (; i < n; i++) {
        prefetch_record(d, len, st, n, i + PREFETCH_RECORDS);
        const int64_t total = record_total(d, len, st[i], MIN_RECORD_LENGTH);
        const int64_t most = total < 0 ? 1 : (2 + total / 2 < MOST_KEYS ? 2 + total / 2 : MOST_KEYS);
        if (count + most > cap)
            break;
        int64_t t = 0, k = total < 0 ? -1 : record_keys(d, len, st[i], total, &tc, scratch, &t);
        if (k < 0) {
            o_rec[count] = i, o_hash[count] = -1, o_phy[count] = base + st[i], o_ts[count] = 0;
            count++;
            continue;
        }
        for (int64_t j = 0; j < k; j++, count++)
            o_rec[count] = i, o_hash[count] = (int32_t)scratch[j], o_phy[count] = base + st[i], o_ts[count] = t;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("nn", count, i);
done:
    PyMem_RawFree(scratch);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&rec);
    PyBuffer_Release(&hash);
    PyBuffer_Release(&phy);
    PyBuffer_Release(&ts);
    return result;
}

/* put_items(file, slot_num, index_num, header, hash, phy, ts) -> (header, count)
 * file: the IndexFile's writable bytes; header: (beginTimestamp, endTimestamp, beginPhyOffset,
 * endPhyOffset, hashSlotCount, indexCount) as they stand; hash int32, phy and ts int64 per key.
 * Puts keys in order while the file has room; returns the header after them and how many it put.
 * The caller writes the header into the file. */
static PyObject *put_items(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer file, hash, phy, ts;
    long long slot_num, index_num;
    Index ix;
    if (!PyArg_ParseTuple(args, "w*LL" HEADER_FORMAT "y*y*y*", &file, &slot_num, &index_num, &ix.begin_ts,
                          &ix.end_ts, &ix.begin_phy, &ix.end_phy, &ix.slot_count, &ix.index_count, &hash, &phy, &ts))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = hash.len / 4;
    if (!open_index(&ix, &file, slot_num, index_num))
        goto done;
    if (phy.len / 8 < n || ts.len / 8 < n) {
        PyErr_SetString(PyExc_ValueError, "put_items: key arrays of different lengths");
        goto done;
    }
    const uint32_t *hs = hash.buf;
    const int64_t *ps = phy.buf, *tss = ts.buf;
    Py_ssize_t k = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; k < n; k++) {
        if (k + LAG < n)
            __builtin_prefetch(slot_at(&ix, hs[k + LAG]), 1);
        if (!put_key(&ix, slot_at(&ix, hs[k]), hs[k], ps[k], tss[k]))
            break;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue(HEADER_FORMAT "n", HEADER_OUT(ix), k);
done:
    PyBuffer_Release(&file);
    PyBuffer_Release(&hash);
    PyBuffer_Release(&phy);
    PyBuffer_Release(&ts);
    return result;
}

/* The keys of ``m`` records into a file past its first item with room for them: record r has cs[r] keys
 * (``keys`` in all, hs[0..keys) in order), all at ps[r], stored at ``ts`` (``t``: its timeDiff,
 * big-endian). put_key's work, with what a record's keys share worked out once and the file's
 * geometry and counts in locals, the slot of the key LAG ahead asked for (``ahead`` keys readable
 * past the last). */
static void put_records(Index *ix, const uint32_t *hs, Py_ssize_t keys, Py_ssize_t ahead, const int32_t *cs,
                        const int64_t *ps, Py_ssize_t m, int64_t ts, uint32_t t) {
    const Index g = *ix;
    int64_t count = g.index_count, slot_count = g.slot_count, end_phy = g.end_phy;
    Py_ssize_t k = 0;
    for (Py_ssize_t r = 0; r < m; r++) {
        const uint64_t ph = __builtin_bswap64((uint64_t)ps[r]);
        for (int32_t c = 0; c < cs[r]; c++, k++, count++) {
            if (k + LAG < keys + ahead)
                __builtin_prefetch(slot_at(&g, hs[k + LAG]), 1);
            slot_count += write_item(g.header, g.items, count, slot_at(&g, hs[k]), hs[k], ph, t);
        }
        if (cs[r] > 0)
            end_phy = ps[r];
    }
    ix->index_count = count;
    ix->slot_count = slot_count;
    if (k > 0) {
        ix->end_phy = end_phy;
        ix->end_ts = ts;
    }
}

/* put_shipped(file, slot_num, index_num, header, hash, counts, phy, ts, first, skip, at, most)
 *   -> (header, next, skip, at)
 * put_items for keys shipped with their records (store/index/shipped.py), without a key's offset
 * and timestamp spelled out: record i has counts[i] (int32) keys, in order in ``hash``, all at
 * phy[i] (int64); every one is stored at ``ts``. From record ``first``'s key ``skip`` (the key
 * hash[at]) on, puts at most ``most`` keys, while the file has room; returns the header after them
 * and where it stopped (the record, its keys already in, the key). The caller writes the header. */
static PyObject *put_shipped(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer file, hash, counts, phy;
    long long slot_num, index_num, ts;
    Py_ssize_t i, j, k, most;
    Index ix;
    if (!PyArg_ParseTuple(args, "w*LL" HEADER_FORMAT "y*y*y*Lnnnn", &file, &slot_num, &index_num, &ix.begin_ts,
                          &ix.end_ts, &ix.begin_phy, &ix.end_phy, &ix.slot_count, &ix.index_count, &hash, &counts,
                          &phy, &ts, &i, &j, &k, &most))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = counts.len / 4, keys = hash.len / 4;
    if (!open_index(&ix, &file, slot_num, index_num))
        goto done;
    if (phy.len / 8 != n || i < 0 || i > n || j < 0 || k < 0 || k > keys) {
        PyErr_SetString(PyExc_ValueError, "put_shipped: not one offset per record, or a start out of range");
        goto done;
    }
    const int32_t *cs = counts.buf;
    const uint32_t *hs = hash.buf;
    const int64_t *ps = phy.buf;
    int over = 0;
    uint32_t t = item_time_diff(&ix, ts); /* every key's: one store timestamp, and beginTimestamp moves only at item 1 */
    Py_BEGIN_ALLOW_THREADS
    while (i < n && most > 0 && ix.index_count < ix.index_num) {
        if (j >= cs[i]) {
            i++, j = 0;
            continue;
        }
        Py_ssize_t room = ix.index_num - ix.index_count;
        room = room < most ? room : most;
        if (j == 0 && ix.index_count > 1) {
            /* whole records while they fit: one loop over them all */
            Py_ssize_t m = i, sum = 0;
            const Py_ssize_t fits = room < keys - k ? room : keys - k;
            while (m < n && cs[m] >= 0 && sum + cs[m] <= fits)
                sum += cs[m++];
            if (m > i) {
                put_records(&ix, hs + k, sum, keys - k - sum, cs + i, ps + i, m - i, ts, t);
                k += sum, most -= sum, i = m;
                continue;
            }
        }
        /* part of a record: a gate hold or a full file stops in it, or it started in one */
        Py_ssize_t run = cs[i] - j;
        run = run < room ? run : room;
        if (run > keys - k) {
            over = 1;
            break;
        }
        if (ix.index_count <= 1) { /* the file's first item sets beginTimestamp, which timeDiff is from */
            run = put_key(&ix, slot_at(&ix, hs[k]), hs[k], ps[i], ts);
            t = item_time_diff(&ix, ts);
        } else {
            const int32_t part = (int32_t)run;
            put_records(&ix, hs + k, run, keys - k - run, &part, ps + i, 1, ts, t);
        }
        j += run, k += run, most -= run;
    }
    Py_END_ALLOW_THREADS
    if (over)
        PyErr_SetString(PyExc_ValueError, "put_shipped: the key counts add up to more keys than were given");
    else
        result = Py_BuildValue(HEADER_FORMAT "nnn", HEADER_OUT(ix), i, j, k);
done:
    PyBuffer_Release(&file);
    PyBuffer_Release(&hash);
    PyBuffer_Release(&counts);
    PyBuffer_Release(&phy);
    return result;
}

typedef struct {
    uint8_t *slot;
    uint32_t hash;
    int32_t rank;
    int64_t rec, phy, ts;
} Pending;

/* index_records(buf, starts, first, skip, base, file, slot_num, index_num, header, reserved, unit_shift)
 *   -> (header, status, next, skip, unit)
 * The keys of the records at ``starts`` from ``first`` on (the first ``skip`` keys of that record
 * already put) into the IndexFile, in order, each record's offset being base + its position.
 * status DONE: every record indexed; FULL: the file filled up, the record ``next`` has ``skip``
 * keys in it; LEFT: the record ``next`` is left to the caller, every one before it indexed;
 * UNRESERVED: the record ``next`` has ``skip`` keys in, and its next key's slot is in ``unit`` (the
 * file's bytes in units of 1 << unit_shift), whose blocks ``reserved`` (a byte per unit of the
 * header and slots, nonzero where they are reserved; empty: all of them) says are not reserved.
 * Keys are found CHUNK at a time, their slots asked for, then put. */
static PyObject *index_records(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer buf, starts, file, reserved;
    Py_ssize_t first, skip;
    long long base, slot_num, index_num;
    int unit_shift;
    Index ix;
    if (!PyArg_ParseTuple(args, "y*y*nnLw*LL" HEADER_FORMAT "y*i", &buf, &starts, &first, &skip, &base, &file,
                          &slot_num, &index_num, &ix.begin_ts, &ix.end_ts, &ix.begin_phy, &ix.end_phy, &ix.slot_count,
                          &ix.index_count, &reserved, &unit_shift))
        return NULL;
    PyObject *result = NULL;
    uint32_t *scratch = NULL;
    Pending *pending = NULL;
    const Py_ssize_t n = starts.len / 8;
    if (!open_index(&ix, &file, slot_num, index_num))
        goto done;
    if (first < 0 || first > n || skip < 0) {
        PyErr_SetString(PyExc_ValueError, "index_records: first or skip out of range");
        goto done;
    }
    const Py_ssize_t units = reserved.len;
    if (unit_shift < 0 || unit_shift > 30
        || (units && units << unit_shift < INDEX_HEADER_SIZE + INDEX_HASH_SLOT_SIZE * slot_num)) {
        PyErr_SetString(PyExc_ValueError, "index_records: reserved does not cover the slot table in its units");
        goto done;
    }
    const uint8_t *held = reserved.buf;
    scratch = PyMem_RawMalloc(MOST_KEYS * sizeof(uint32_t));
    pending = PyMem_RawMalloc((CHUNK + MOST_KEYS) * sizeof(Pending));
    if (!scratch || !pending) {
        PyErr_NoMemory();
        goto done;
    }
    const uint8_t *d = buf.buf;
    const int64_t len = buf.len, *st = starts.buf;
    int status = DONE;
    Py_ssize_t i = first, next = n, next_skip = 0, unit = -1;
    TopicCache tc = {NULL, 0, 0};
    Py_BEGIN_ALLOW_THREADS
    while (status == DONE && i < n) {
        Py_ssize_t found = 0, stop_rank = 0;
        int left = 0, blocked = 0;
        for (; found < CHUNK && i < n; i++) {
            prefetch_record(d, len, st, n, i + PREFETCH_RECORDS);
            const int64_t total = record_total(d, len, st[i], MIN_RECORD_LENGTH);
            int64_t t = 0, count = total < 0 ? -1 : record_keys(d, len, st[i], total, &tc, scratch, &t);
            if (count < 0) {
                left = 1;
                break;
            }
            for (int64_t j = i == first ? skip : 0; j < count; j++, found++) {
                Pending *p = &pending[found];
                p->hash = scratch[j], p->rank = (int32_t)j, p->rec = i, p->phy = base + st[i], p->ts = t;
                p->slot = slot_at(&ix, p->hash);
                const Py_ssize_t u = (Py_ssize_t)((p->slot - ix.header) >> unit_shift);
                if (units && !held[u]) {
                    blocked = 1, unit = u, stop_rank = (Py_ssize_t)j;
                    break;
                }
                __builtin_prefetch(p->slot, 1);
            }
            if (blocked)
                break;
        }
        for (Py_ssize_t k = 0; k < found; k++) {
            const Pending *p = &pending[k];
            if (!put_key(&ix, p->slot, p->hash, p->phy, p->ts)) {
                status = FULL, next = p->rec, next_skip = p->rank;
                break;
            }
        }
        if (status == DONE && blocked)
            status = UNRESERVED, next = i, next_skip = stop_rank;
        else if (status == DONE && left)
            status = LEFT, next = i;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue(HEADER_FORMAT "innn", HEADER_OUT(ix), status, next, next_skip, unit);
done:
    PyMem_RawFree(scratch);
    PyMem_RawFree(pending);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&file);
    PyBuffer_Release(&reserved);
    return result;
}

static PyMethodDef methods[] = {
    {"find_keys", find_keys, METH_VARARGS, "The index keys of many records, hashed (store/index/build.py)."},
    {"put_items", put_items, METH_VARARGS, "IndexFile.putKey for many keys (store/index/file.py)."},
    {"put_shipped", put_shipped, METH_VARARGS, "put_items for keys shipped with their records (store/index/file.py)."},
    {"index_records", index_records, METH_VARARGS, "Many records' keys put into an IndexFile (store/index/file.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_index_build",
                                    "The index's key finder and item writer (see store/index/build.py)", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__index_build(void) { return PyModule_Create(&module); }
