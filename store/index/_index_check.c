/* verify's look at a healthy index in C, with the GIL released (store/index/check.py calls it; the
 * numpy checks there and in store/tools/verify_index.py find and word the faults of every index
 * that is not healthy). Each pass only says whether all is as it should be: the moment
 * anything differs it stops, and the numpy path finds the problems and words them, so what verify
 * reports never depends on this module (tests/store/index/test_index_verify_c.py runs both ways).
 *
 * records_match: one walk of a segment along TOTALSIZE (as store/scan/walk.py walks it), the keys
 *   of each message record found by the append's key finder (_index_keys.h) and compared, in order,
 *   with the items pointing into the segment, read where the IndexFiles hold them: the item's
 *   phyOffset, its keyHash and the timeDiff its record's STORETIMESTAMP gives against its file's
 *   beginTimestamp (IndexFile.putKey's).
 * chains_hold: an IndexFile's items against its slots: keyHashes non-negative, phyOffsets never
 *   going back, every prevIndex the item before it in its hash slot, every slot the newest item of
 *   its chain (store/index/check.py structure_faults, which words what differs).
 * item_columns: an IndexFile's items as the native columns the numpy checks compare, in one pass.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_index_file.h" /* the IndexFile's geometry, slot_of, time_diff */
#include "_index_keys.h" /* record_keys, MOST_KEYS; record_total, be32, be64 (store/format/_layout.h) */

#define SLOT_LAG 32 /* chains_hold: items ahead whose slot is asked for */
#define STREAM_AHEAD 2048 /* records_match: segment bytes ahead of the walk asked for */

/* A run of items of one IndexFile, as the file holds them (20 bytes each, big-endian) */
typedef struct {
    const uint8_t *items;
    Py_ssize_t n;
    int64_t begin; /* the file's beginTimestamp */
    int first;     /* items[0] is the file's first item: its timeDiff is from the file before */
} Run;

/* the next item to match: item k of run r */
typedef struct {
    const Run *runs;
    Py_ssize_t count, r, k;
} Cursor;

/* the item under the cursor, or NULL when every run is matched */
static inline const uint8_t *item_at(Cursor *c) {
    while (c->r < c->count && c->k >= c->runs[c->r].n)
        c->r++, c->k = 0;
    return c->r < c->count ? c->runs[c->r].items + INDEX_ITEM_SIZE * c->k : NULL;
}

/* The walk of d[0, end) against the items; ``strict``: every key of every message record must have
 * its item (the index covers the store), else only the records items point at are looked at (their
 * PHYSICALOFFSET must say where they are, as it must for a record off the walk). 1: all match. */
static int walk_matches(const uint8_t *d, int64_t len, int64_t end, int64_t base, int strict, Cursor *c,
                        uint32_t *keys) {
    TopicCache tc = {NULL, 0, 0};
    int64_t pos = 0, ahead = 0;
    for (;;) {
        for (; ahead < pos + STREAM_AHEAD && ahead < end; ahead += 64)
            __builtin_prefetch(d + ahead);
        const int64_t total = record_total(d, end, pos, MIN_RECORD_LENGTH);
        if (total < 0)
            break; /* the walk ends here, as walk.py's; items past it are told by the numpy path */
        const uint32_t magic = be32(d + pos + POS_MAGICCODE);
        if (magic == MESSAGE_MAGIC_CODE || magic == MESSAGE_MAGIC_CODE_V2) {
            const int64_t at = base + pos;
            const uint8_t *next = item_at(c);
            const int64_t next_phy = next ? be64(next + INDEX_ITEM_POS_PHY_OFFSET) : INT64_MAX;
            if (next_phy < at)
                return 0; /* an item between records, at a BLANK, or an extra one of the record before */
            if (strict || next_phy == at) {
                if (!strict && be64(d + pos + POS_PHYSICALOFFSET) != at)
                    return 0;
                int64_t ts = 0;
                const int64_t count = record_keys(d, len, pos, total, &tc, keys, &ts);
                if (count < 0)
                    return 0; /* keys left to Python */
                for (int64_t j = 0; j < count; j++, c->k++) {
                    const uint8_t *item = item_at(c);
                    if (!item || be64(item + INDEX_ITEM_POS_PHY_OFFSET) != at || be32(item) != keys[j])
                        return 0;
                    const Run *run = &c->runs[c->r];
                    if (!(c->k == 0 && run->first)
                        && (int32_t)be32(item + INDEX_ITEM_POS_TIME_DIFF) != time_diff(ts, run->begin))
                        return 0;
                }
            }
        }
        pos += total;
    }
    return item_at(c) == NULL;
}

/* records_match(segment, end, base, strict, runs) -> bool
 * segment: the segment's bytes (base: its offset), walked in [0, end); runs: a list of (items,
 * beginTimestamp, first) of the items pointing into it, in the order the files hold them: items a
 * run of an IndexFile's items, first whether its first is its file's first. True when every item
 * matched one key in order and (strict) every key one item. */
static PyObject *records_match(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer seg;
    long long end, base;
    int strict;
    PyObject *list;
    if (!PyArg_ParseTuple(args, "y*LLpO!", &seg, &end, &base, &strict, &PyList_Type, &list))
        return NULL;
    PyObject *result = NULL;
    uint32_t *keys = NULL;
    const Py_ssize_t count = PyList_GET_SIZE(list);
    Py_ssize_t held = 0;
    Py_buffer *views = PyMem_Calloc(count ? count : 1, sizeof(Py_buffer));
    Run *runs = PyMem_Calloc(count ? count : 1, sizeof(Run));
    keys = PyMem_RawMalloc(MOST_KEYS * sizeof(uint32_t));
    if (!views || !runs || !keys) {
        PyErr_NoMemory();
        goto done;
    }
    if (end < 0 || end > seg.len) {
        PyErr_SetString(PyExc_ValueError, "records_match: end past the segment");
        goto done;
    }
    for (; held < count; held++) {
        long long begin;
        int first;
        PyObject *view;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(list, held), "OLp;records_match: a run is (items, begin, first)",
                              &view, &begin, &first)
            || PyObject_GetBuffer(view, &views[held], PyBUF_SIMPLE) < 0)
            goto done;
        if (views[held].len % INDEX_ITEM_SIZE) {
            held++;
            PyErr_SetString(PyExc_ValueError, "records_match: a run that is not whole items");
            goto done;
        }
        runs[held] = (Run){views[held].buf, views[held].len / INDEX_ITEM_SIZE, begin, first};
    }
    Cursor c = {runs, count, 0, 0};
    int whole;
    Py_BEGIN_ALLOW_THREADS
    whole = walk_matches(seg.buf, seg.len, end, base, strict, &c, keys);
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(whole);
done:
    for (Py_ssize_t i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(runs);
    PyMem_RawFree(keys);
    PyBuffer_Release(&seg);
    return result;
}

/* The items (20 bytes each, big-endian) against the slots (4 bytes each): ``newest`` (slot_num
 * zeros) is each slot's newest item so far, which the next item of the slot must point back at. */
static int chains_match(const uint8_t *items, Py_ssize_t n, const uint8_t *slots, uint32_t slot_num,
                        uint32_t *newest) {
    const uint64_t mod_m = slot_mod_m(slot_num);
    int64_t last_phy = INT64_MIN;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *item = items + INDEX_ITEM_SIZE * i;
        if (i + SLOT_LAG < n) {
            const int32_t ahead = (int32_t)be32(item + INDEX_ITEM_SIZE * SLOT_LAG);
            if (ahead >= 0)
                __builtin_prefetch(newest + slot_of((uint32_t)ahead, mod_m, slot_num), 1);
        }
        const int32_t h = (int32_t)be32(item);
        const int64_t phy = be64(item + INDEX_ITEM_POS_PHY_OFFSET);
        if (h < 0 || phy < last_phy)
            return 0;
        last_phy = phy;
        uint32_t *slot = newest + slot_of((uint32_t)h, mod_m, slot_num);
        if (be32(item + INDEX_ITEM_POS_PREV_INDEX) != *slot)
            return 0;
        *slot = (uint32_t)(i + 1); /* items are numbered from 1: item 0 is never written */
    }
    for (uint32_t s = 0; s < slot_num; s++)
        if (be32(slots + INDEX_HASH_SLOT_SIZE * (int64_t)s) != newest[s])
            return 0;
    return 1;
}

/* chains_hold(items, slots, slot_num) -> bool
 * items: the written items of an IndexFile (item 1 on); slots: its hash-slot table. */
static PyObject *chains_hold(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer items, slots;
    long long slot_num;
    if (!PyArg_ParseTuple(args, "y*y*L", &items, &slots, &slot_num))
        return NULL;
    PyObject *result = NULL;
    uint32_t *newest = NULL;
    if (slot_num <= 0 || slot_num > INT32_MAX || slots.len < INDEX_HASH_SLOT_SIZE * slot_num
        || items.len % INDEX_ITEM_SIZE) {
        PyErr_SetString(PyExc_ValueError, "chains_hold: the slots or items do not match slot_num");
        goto done;
    }
    if (!(newest = PyMem_RawCalloc((size_t)slot_num, sizeof(uint32_t)))) {
        PyErr_NoMemory();
        goto done;
    }
    int hold;
    Py_BEGIN_ALLOW_THREADS
    hold = chains_match(items.buf, items.len / INDEX_ITEM_SIZE, slots.buf, (uint32_t)slot_num, newest);
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(hold);
done:
    PyMem_RawFree(newest);
    PyBuffer_Release(&items);
    PyBuffer_Release(&slots);
    return result;
}

/* item_columns(items, low, limit, phy, key_hash, time_diff) -> outside
 * items: the written items of an IndexFile; out, per item: phy int64, key_hash and time_diff int32.
 * outside: how many items point below ``low`` or at or past ``limit`` (0: all of them are checked). */
static PyObject *item_columns(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer items, phy, key_hash, diff;
    long long low, limit;
    if (!PyArg_ParseTuple(args, "y*LLw*w*w*", &items, &low, &limit, &phy, &key_hash, &diff))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = items.len / INDEX_ITEM_SIZE;
    if (items.len % INDEX_ITEM_SIZE || phy.len != 8 * n || key_hash.len != 4 * n || diff.len != 4 * n) {
        PyErr_SetString(PyExc_ValueError, "item_columns: columns of another length than the items");
        goto done;
    }
    const uint8_t *it = items.buf;
    int64_t *o_phy = phy.buf;
    int32_t *o_hash = key_hash.buf, *o_diff = diff.buf;
    Py_ssize_t outside = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++, it += INDEX_ITEM_SIZE) {
        const int64_t at = be64(it + INDEX_ITEM_POS_PHY_OFFSET);
        o_phy[i] = at;
        o_hash[i] = (int32_t)be32(it);
        o_diff[i] = (int32_t)be32(it + INDEX_ITEM_POS_TIME_DIFF);
        outside += at < low || at >= limit;
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(outside);
done:
    PyBuffer_Release(&items);
    PyBuffer_Release(&phy);
    PyBuffer_Release(&key_hash);
    PyBuffer_Release(&diff);
    return result;
}

static PyMethodDef methods[] = {
    {"records_match", records_match, METH_VARARGS, "A segment's records against the items pointing into it."},
    {"chains_hold", chains_hold, METH_VARARGS, "An IndexFile's items against its hash slots."},
    {"item_columns", item_columns, METH_VARARGS, "An IndexFile's items as native columns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_index_check",
                                    "verify's checks of a healthy index (see store/index/check.py)", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__index_check(void) { return PyModule_Create(&module); }
