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

#include "../format/_layout.h" /* the record's positions, be32, be64, record_head, topic_length */

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull
#define LOWS 0x7F7F7F7F7F7F7F7Full
#define UNIQ_KEY_WORD 0x59454B5F51494E55ull /* "UNIQ_KEY" read little-endian */
#define KEYS_PAIR_WORD 0x15359454Bull       /* "KEYS\1" */
#define MOST_KEYS 16386     /* of one record: UNIQ_KEY and a KEYS token per 2 of 32,767 bytes */

/* the n (> 0) bytes at p as a little-endian word, zeros above them (``avail`` readable from p) */
static inline uint64_t word(const uint8_t *p, int64_t n, int64_t avail) {
    uint64_t w = 0;
    if (__builtin_expect(avail >= 8, 1)) {
        memcpy(&w, p, 8);
        return n >= 8 ? w : w & ((1ull << (8 * n)) - 1);
    }
    for (int64_t k = 0; k < n && k < avail; k++)
        w |= (uint64_t)p[k] << (8 * k);
    return w;
}

/* Byte search a block at a time: a mask of the bytes of p[0, n) (n <= BLOCK, ``avail`` bytes
 * readable from p) equal to c, the first one's place being MATCH_AT(mask); HIGH_BYTES: the bytes
 * over 0x7F. SSE2 where the compiler has it (every x86-64), eight bytes in a word elsewhere. */
#if defined(__SSE2__)
#include <emmintrin.h>
#define BLOCK 16
#define MATCH_AT(m) __builtin_ctzll(m)
static inline uint64_t matches(const uint8_t *p, int64_t n, int64_t avail, uint8_t c) {
    uint64_t m;
    if (__builtin_expect(avail >= 16, 1)) {
        m = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)p), _mm_set1_epi8((char)c)));
    } else {
        m = 0;
        for (int64_t k = 0; k < avail && k < 16; k++)
            m |= (uint64_t)(p[k] == c) << k;
    }
    return n >= 16 ? m : m & ((1ull << n) - 1);
}
static inline uint64_t high_bytes(const uint8_t *p, int64_t n, int64_t avail) {
    uint64_t m;
    if (__builtin_expect(avail >= 16, 1)) {
        m = (uint32_t)_mm_movemask_epi8(_mm_loadu_si128((const __m128i *)p));
    } else {
        m = 0;
        for (int64_t k = 0; k < avail && k < 16; k++)
            m |= (uint64_t)(p[k] >> 7) << k;
    }
    return n >= 16 ? m : m & ((1ull << n) - 1);
}
#else
#define BLOCK 8
#define MATCH_AT(m) (__builtin_ctzll(m) >> 3)
/* a 0x80 in every byte of w that is zero (exact, no borrow between bytes) */
static inline uint64_t zero_bytes(uint64_t w) {
    return ~(((w & LOWS) + LOWS) | w | LOWS);
}
static inline uint64_t matches(const uint8_t *p, int64_t n, int64_t avail, uint8_t c) {
    return zero_bytes(word(p, n, avail) ^ (ONES * c)) & (n >= 8 ? ~0ull : (1ull << (8 * n)) - 1);
}
static inline uint64_t high_bytes(const uint8_t *p, int64_t n, int64_t avail) {
    return word(p, n, avail) & HIGHS;
}
#endif

/* Java's running String.hashCode over the UTF-16 units of well-formed UTF-8 text: 0 and *h
 * advanced, or -1 for text that is not well-formed (no overlong forms, no surrogates, nothing
 * past U+10FFFF: what Java decodes without a replacement). ``avail``: bytes readable from p. */
static inline __attribute__((always_inline)) int hash_text(const uint8_t *p, int64_t len, int64_t avail, uint32_t *h) {
    uint32_t x = *h;
    int64_t i = 0;
    uint64_t high = 0;
    for (int64_t b = 0; b < len; b += BLOCK)
        high |= high_bytes(p + b, len - b, avail - b);
    if (!high) {
        /* ASCII eight bytes at a time: x * 31^8 + sum of b[k] * 31^(7-k), the chain one multiply long */
        for (; i + 8 <= len; i += 8)
            x = x * 0x94446F01u + p[i] * 0x67E12CDFu + p[i + 1] * 0x34E63B41u + p[i + 2] * 0x01B4D89Fu
                + p[i + 3] * 0x000E1781u + p[i + 4] * 0x0000745Fu + p[i + 5] * 0x000003C1u + p[i + 6] * 31u
                + p[i + 7];
        if (i + 4 <= len) {
            x = x * 0x000E1781u + p[i] * 0x0000745Fu + p[i + 1] * 0x000003C1u + p[i + 2] * 31u + p[i + 3];
            i += 4;
        }
        for (; i < len; i++)
            x = x * 31u + p[i];
        *h = x;
        return 0;
    }
    while (i < len) {
        uint32_t c = p[i];
        if (c < 0x80) {
            x = x * 31u + c;
            i++;
            continue;
        }
        uint32_t cp;
        int need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            cp = c & 0x1F;
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            cp = c & 0x0F;
            need = 2;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            cp = c & 0x07;
            need = 3;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        } else {
            return -1;
        }
        if (i + need >= len)
            return -1;
        for (int k = 1; k <= need; k++) {
            uint8_t b = p[i + k];
            if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF))
                return -1;
            cp = cp << 6 | (b & 0x3F);
        }
        i += need + 1;
        if (cp >= 0x10000) {
            cp -= 0x10000;
            x = x * 31u + (0xD800u + (cp >> 10));
            x = x * 31u + (0xDC00u + (cp & 0x3FF));
        } else {
            x = x * 31u + cp;
        }
    }
    *h = x;
    return 0;
}

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
    /* string2messageProperties: pieces between \2, the name up to the first \1, the last pair of a
     * name wins. Only pieces that begin "UNIQ_KEY\1" or "KEYS\1" matter, so only the \2 are found. */
    int64_t uniq = -1, uniq_end = 0, keys = -1, keys_end = 0, piece = 0;
#define PIECE(stop)                                                                                                  \
    if ((stop) - piece > 5) {                                                                                        \
        const uint64_t head = word(props + piece, 8, avail - piece);                                                 \
        if (head == UNIQ_KEY_WORD && (stop) - piece > 9 && props[piece + 8] == 1)                                    \
            uniq = piece + 9, uniq_end = (stop);                                                                     \
        else if ((head & 0xFFFFFFFFFFull) == KEYS_PAIR_WORD)                                                         \
            keys = piece + 5, keys_end = (stop);                                                                     \
    }
    for (int64_t b = 0; b < props_len; b += BLOCK) {
        uint64_t seps = matches(props + b, props_len - b, avail - b, 2);
        while (seps) {
            const int64_t stop = b + MATCH_AT(seps);
            seps &= seps - 1;
            PIECE(stop)
            piece = stop + 1;
        }
    }
    PIECE(props_len) /* the last piece, without its \2 */
#undef PIECE
    if (uniq < 0 && keys < 0)
        return 0;
    const int64_t topic_at = sp.topic_pos, topic_len = sp.topic_len;
    if (tc->at == NULL || tc->len != topic_len || !same_bytes(tc->at, r + topic_at, topic_len)) {
        uint32_t h = 0;
        if (hash_text(r + topic_at, topic_len, len - (at + topic_at), &h) < 0)
            return -1;
        tc->at = r + topic_at;
        tc->len = topic_len;
        tc->prefix = h * 31u + '#';
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
            uint64_t spaces = b < keys_end ? matches(props + b, keys_end - b, avail - b, ' ') : 0;
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
