/* The index's key finder, shared by store/index/_index_build.c (the append's index) and
 * store/index/_index_check.c (verify's comparison of the items with the records): the keys
 * RocketMQ's IndexService puts for a record (CommitLogDispatcherBuildIndex: UNIQ_KEY, then each
 * non-empty token of KEYS split on one space; nothing for a ROLLBACK record), read where the record
 * lies, each hashed as IndexService hashes "topic#key": Java's String.hashCode over UTF-16 units,
 * its absolute value, Integer.MIN_VALUE taken as 0. The properties are split as
 * MessageDecoder.string2messageProperties splits them (a later pair wins; a pair without a name or a
 * value does not count). Text that is not well-formed UTF-8 (Java replaces what it cannot decode)
 * and records whose lengths do not add up are left to the caller (record_keys returns -1).
 *
 * Positions are RocketMQ's (store/format/_layout.h): BORNHOST and STOREHOST are 8 bytes, or 20
 * when sysFlag says IPv6, and move what follows them. Everything is static inline: a module that
 * includes it and leaves a helper unused gets no warning.
 */
#ifndef COMMITLOG_INDEX_KEYS_H
#define COMMITLOG_INDEX_KEYS_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../format/_layout.h" /* the record's walk (record_spans), be64, the property names */
#include "../format/_text.h"   /* hash_text, piece_end, matches, word */

/* a piece of PROPERTIES naming UNIQ_KEY or KEYS, its first eight bytes read little-endian */
#define UNIQ_KEY_WORD le_word(PROPERTY_UNIQ_KEY, 8)
#define KEYS_PAIR_WORD le_word(PAIR(PROPERTY_KEYS), 5)
#define MOST_KEYS 16386     /* of one record: UNIQ_KEY and a KEYS token per 2 of 32,767 bytes */

static inline uint32_t key_hash(uint32_t h) {
    int32_t s = (int32_t)h;
    if (s == INT32_MIN)
        return 0; /* Math.abs leaves it negative; IndexService takes 0 */
    return (uint32_t)(s < 0 ? -s : s);
}

/* a[0, n) == b[0, n), both followed by at least 8 readable bytes (a topic by its properties' length) */
static inline int same_bytes(const uint8_t *a, const uint8_t *b, int64_t n) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        if (word(a + k, 8, 8) != word(b + k, 8, 8))
            return 0;
    return k == n || word(a + k, n - k, 8) == word(b + k, n - k, 8);
}

typedef struct {
    const uint8_t *at; /* the last topic hashed, and the hash of it with "#" */
    int64_t len;
    uint32_t prefix;
} TopicCache;

/* The keys of the record at d[at, at + total) (d holds ``len`` bytes) into hashes, and its
 * STORETIMESTAMP: how many keys, or -1 when the record is left to the caller. */
static inline int64_t record_keys(const uint8_t *d, int64_t len, int64_t at, int64_t total, TopicCache *tc,
                           uint32_t *hashes, int64_t *ts) {
    const uint8_t *r = d + at;
    RecordHead head;
    RecordSpans sp;
    if (total < MIN_RECORD_LENGTH || !record_head(r, &head))
        return -1;
    const int walked = record_spans(r, total, &head, &sp);
    *ts = be64(r + sp.at.store_timestamp_pos);
    if ((head.sys_flag & TRANSACTION_TYPE_MASK) == TRANSACTION_ROLLBACK_TYPE)
        return 0;
    if (walked != SPANS_OK)
        return -1;
    const int64_t props_len = sp.props_len, p = sp.props_pos;
    if (props_len <= 0)
        return 0;
    const uint8_t *props = r + p;
    const int64_t avail = len - (at + p); /* bytes readable from props on */
    /* string2messageProperties' pieces (piece_end), the last pair of a name winning. Only pieces that
     * begin UNIQ_KEY or KEYS and a NAME_VALUE_SEPARATOR matter: their first bytes are compared. */
    const int64_t uniq_name = LITERAL_LENGTH(PROPERTY_UNIQ_KEY), keys_pair = LITERAL_LENGTH(PAIR(PROPERTY_KEYS));
    int64_t uniq = -1, uniq_end = 0, keys = -1, keys_end = 0;
    for (int64_t piece = 0; piece <= props_len;) {
        const int64_t stop = piece_end(props, piece, props_len, avail);
        if (stop - piece > keys_pair) {
            const uint64_t head = word(props + piece, 8, avail - piece);
            if (head == UNIQ_KEY_WORD && stop - piece > uniq_name + 1 && props[piece + uniq_name] == NAME_VALUE_SEPARATOR[0])
                uniq = piece + uniq_name + 1, uniq_end = stop;
            else if ((head & ((1ull << (8 * keys_pair)) - 1)) == KEYS_PAIR_WORD)
                keys = piece + keys_pair, keys_end = stop;
        }
        piece = stop + 1;
    }
    if (uniq < 0 && keys < 0)
        return 0;
    const int64_t topic_at = sp.topic_pos, topic_len = sp.topic_len;
    if (tc->at == NULL || tc->len != topic_len || !same_bytes(tc->at, r + topic_at, topic_len)) {
        uint32_t h = 0;
        if (hash_text(r + topic_at, topic_len, len - (at + topic_at), &h) < 0)
            return -1;
        tc->at = r + topic_at;
        tc->len = topic_len;
        tc->prefix = h * 31u + (uint8_t)INDEX_TOPIC_KEY_JOIN[0];
    }
    int64_t count = 0;
    if (uniq >= 0) {
        uint32_t h = tc->prefix;
        if (hash_text(props + uniq, uniq_end - uniq, avail - uniq, &h) < 0)
            return -1;
        hashes[count++] = key_hash(h);
    }
    if (keys >= 0) {
        int64_t token = keys;
        for (int64_t b = keys;; b += BLOCK) {
            uint64_t spaces = b < keys_end ? matches(props + b, keys_end - b, avail - b, (uint8_t)INDEX_KEY_SEPARATOR[0]) : 0;
            const int last = b + BLOCK >= keys_end;
            for (;;) {
                int64_t stop;
                if (spaces) {
                    stop = b + MATCH_AT(spaces);
                    spaces &= spaces - 1;
                } else if (last) {
                    stop = keys_end; /* the last token, without a space after it */
                } else {
                    break;
                }
                if (stop > token) {
                    uint32_t h = tc->prefix;
                    if (hash_text(props + token, stop - token, avail - token, &h) < 0)
                        return -1;
                    hashes[count++] = key_hash(h);
                }
                token = stop + 1;
                if (stop == keys_end)
                    break;
            }
            if (last)
                break;
        }
    }
    return count;
}

#endif
