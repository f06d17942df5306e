/* What both index C files (_index_build.c writes, _index_check.c compares) say of an IndexFile: its
 * geometry comes from store/format/_layout.h (INDEX_HEADER_SIZE, INDEX_HASH_SLOT_SIZE,
 * INDEX_ITEM_SIZE, the item's field positions); here a key's hash slot and an item's timeDiff,
 * as IndexFile.putKey computes them (store/index/file.py, store/index/check.py time_diffs).
 */
#ifndef COMMITLOG_INDEX_FILE_H
#define COMMITLOG_INDEX_FILE_H

#include <stdint.h>

#include "../format/_layout.h"

/* UINT64_MAX / slot_num + 1: what slot_of needs to take a hash modulo slot_num without a division */
static inline uint64_t slot_mod_m(uint32_t slot_num) { return UINT64_MAX / slot_num + 1; }

/* key_hash % slot_num (Lemire et al.'s fastmod, mod_m from slot_mod_m) */
static inline uint32_t slot_of(uint32_t key_hash, uint64_t mod_m, uint32_t slot_num) {
    return slot_num == 1 ? 0 : (uint32_t)(((__uint128_t)(mod_m * key_hash) * slot_num) >> 64);
}

/* IndexFile.putKey's timeDiff: whole seconds since the file's beginTimestamp (0 while it has none),
 * clamped to [0, Integer.MAX_VALUE]; C truncates toward zero, as Java's long division */
static inline int64_t time_diff(int64_t ts, int64_t begin) {
    if (begin <= 0 || ts < begin)
        return 0;
    const int64_t diff = (ts - begin) / 1000;
    return diff > INT32_MAX ? INT32_MAX : diff;
}

#endif
