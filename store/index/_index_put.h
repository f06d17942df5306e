/* IndexFile.putKey in C for store/index/_index_build.c: an IndexFile's mapped bytes and header as
 * the writer holds them (Index), the item write, putKey itself and the header as the calls pass it
 * (HEADER_FORMAT, HEADER_OUT). Everything is static: the one module that includes it uses all of it.
 */
#ifndef COMMITLOG_INDEX_PUT_H
#define COMMITLOG_INDEX_PUT_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_index_file.h" /* the IndexFile's geometry, slot_of, time_diff; be32 (store/format/_layout.h) */

typedef struct {
    uint8_t *header, *slots, *items;
    uint32_t slot_num;
    uint64_t mod_m; /* slot_mod_m(slot_num) */
    int64_t index_num;
    long long begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count;
} Index;

static uint8_t *slot_at(const Index *ix, uint32_t key_hash) {
    return ix->slots + INDEX_HASH_SLOT_SIZE * (int64_t)slot_of(key_hash, ix->mod_m, ix->slot_num);
}

/* an item's timeDiff, big-endian */
static uint32_t item_time_diff(const Index *ix, int64_t ts) {
    return __builtin_bswap32((uint32_t)time_diff(ts, ix->begin_ts));
}

/* item number ``count`` of the file (``header``, ``items``), linked to ``slot``'s chain, and the slot
 * pointed at it; 1 when the slot was empty. ``ph`` and ``t`` come big-endian (a record's keys share
 * them). The header's indexCount counts the item before the slot points at it: a writer killed in
 * between leaves no slot past the count (RocketMQ's broker reads such a slot as empty and loses the
 * chain's older keys); the caller writes the rest of the header after the batch. Plain pointers, not
 * the Index: a store through a byte pointer may alias its fields, which would be read again per key */
static inline int write_item(uint8_t *header, uint8_t *items, int64_t count, uint8_t *slot, uint32_t key_hash,
                             uint64_t ph, uint32_t t) {
    int64_t prev = (int32_t)be32(slot);
    /* prev = 0 unless 0 < prev <= count, without a branch: in a new file the slots are about half
     * empty, at random, and a mispredicted branch per key costs as much as the key's other work */
    prev &= -(int64_t)((prev > 0) & (prev <= count));
    uint8_t *item = items + INDEX_ITEM_SIZE * count;
    const uint32_t h = __builtin_bswap32(key_hash), pv = __builtin_bswap32((uint32_t)prev),
                   n = __builtin_bswap32((uint32_t)count), counted = __builtin_bswap32((uint32_t)(count + 1));
    memcpy(item, &h, 4);
    memcpy(item + INDEX_ITEM_POS_PHY_OFFSET, &ph, 8);
    memcpy(item + INDEX_ITEM_POS_TIME_DIFF, &t, 4);
    memcpy(item + INDEX_ITEM_POS_PREV_INDEX, &pv, 4);
    memcpy(header + INDEX_HEADER_POS_INDEX_COUNT, &counted, 4);
    memcpy(slot, &n, 4);
    return prev == 0;
}

/* IndexFile.putKey: 0 when the file is full */
static int put_key(Index *ix, uint8_t *slot, uint32_t key_hash, int64_t phy, int64_t ts) {
    if (ix->index_count >= ix->index_num)
        return 0;
    const int first = ix->index_count <= 1;
    ix->slot_count += write_item(ix->header, ix->items, ix->index_count, slot, key_hash,
                                 __builtin_bswap64((uint64_t)phy), item_time_diff(ix, ts));
    ix->index_count++;
    if (first) {
        ix->begin_phy = phy;
        ix->begin_ts = ts;
    }
    ix->end_phy = phy;
    ix->end_ts = ts;
    return 1;
}

/* The file and header arguments of put_items and index_records into ``ix``; 0 with an error set */
static int open_index(Index *ix, Py_buffer *file, long long slot_num, long long index_num) {
    if (slot_num <= 0 || slot_num > INT32_MAX || index_num < 2 || index_num > INT32_MAX
        || file->len < INDEX_HEADER_SIZE + INDEX_HASH_SLOT_SIZE * slot_num + INDEX_ITEM_SIZE * index_num
        || ix->index_count < 1) {
        PyErr_SetString(PyExc_ValueError, "the index file does not match the geometry given");
        return 0;
    }
    ix->header = (uint8_t *)file->buf;
    ix->slots = ix->header + INDEX_HEADER_SIZE;
    ix->items = ix->slots + INDEX_HASH_SLOT_SIZE * slot_num;
    ix->slot_num = (uint32_t)slot_num;
    ix->mod_m = slot_mod_m(ix->slot_num);
    ix->index_num = index_num;
    return 1;
}

#define HEADER_FORMAT "(LLLLLL)"
#define HEADER_OUT(ix) (ix).begin_ts, (ix).end_ts, (ix).begin_phy, (ix).end_phy, (ix).slot_count, (ix).index_count

#endif
