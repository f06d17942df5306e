/* The text rules every C pass shares, as Java and RocketMQ apply them: UTF-8 decoded as Java decodes
 * it without a replacement, String.hashCode over its UTF-16 units, and PROPERTIES cut into pieces
 * as MessageDecoder.string2messageProperties cuts them (a piece ends at PROPERTY_SEPARATOR or at
 * the end; its name ends at its first NAME_VALUE_SEPARATOR). A byte search a block at a time
 * underneath (SSE2 where the compiler has it, every x86-64; eight bytes in a word elsewhere).
 * Everything is static inline: a module that includes it and leaves a helper unused gets no warning.
 */
#ifndef COMMITLOG_TEXT_H
#define COMMITLOG_TEXT_H

#include <stdint.h>
#include <string.h>

#include "_layout.h" /* NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR */

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull
#define LOWS 0x7F7F7F7F7F7F7F7Full

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

/* A mask of the bytes of p[0, n) (n <= BLOCK, ``avail`` bytes readable from p) equal to c, the
 * first one's place being MATCH_AT(mask); high_bytes: the bytes over 0x7F. */
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

/* Whether any byte of p[0, n) is over 0x7F (``avail`` bytes readable from p) */
static inline int any_high(const uint8_t *p, int64_t n, int64_t avail) {
    for (int64_t b = 0; b < n; b += BLOCK)
        if (high_bytes(p + b, n - b, avail - b))
            return 1;
    return 0;
}

/* The code point of the UTF-8 sequence at p (n bytes of text from p on) into *cp: its length, or 0
 * when it is not well-formed as Java decodes without a replacement (no overlong forms, no
 * surrogates, nothing past U+10FFFF, nothing cut short by the end) */
static inline int utf8_next(const uint8_t *p, int64_t n, uint32_t *cp) {
    const uint8_t c = p[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    uint32_t v;
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        v = c & 0x1F;
        need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        v = c & 0x0F;
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        v = c & 0x07;
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (need >= n)
        return 0;
    for (int k = 1; k <= need; k++) {
        const uint8_t b = p[k];
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF))
            return 0;
        v = v << 6 | (b & 0x3F);
    }
    *cp = v;
    return need + 1;
}

/* Java's running String.hashCode over the UTF-16 units of well-formed UTF-8 text: 0 and *h
 * advanced, or -1 for text that is not well-formed (utf8_next). ``avail``: bytes readable from p. */
static inline __attribute__((always_inline)) int hash_text(const uint8_t *p, int64_t len, int64_t avail, uint32_t *h) {
    uint32_t x = *h;
    int64_t i = 0;
    if (!any_high(p, len, avail)) {
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
        uint32_t cp;
        const int n = utf8_next(p + i, len - i, &cp);
        if (!n)
            return -1;
        i += n;
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

/* Where the piece of PROPERTIES p[0, n) that starts at ``from`` ends: at the next
 * PROPERTY_SEPARATOR, or at n (``avail`` bytes readable from p). The pieces of p are
 * [0, piece_end(p, 0, ...)), then each from one past the end before, while that is <= n. */
static inline int64_t piece_end(const uint8_t *p, int64_t from, int64_t n, int64_t avail) {
    for (int64_t b = from; b < n; b += BLOCK) {
        const uint64_t m = matches(p + b, n - b, avail - b, (uint8_t)PROPERTY_SEPARATOR[0]);
        if (m)
            return b + MATCH_AT(m);
    }
    return n;
}

/* Where the name of the piece p[piece, stop) ends: its first NAME_VALUE_SEPARATOR, or -1 */
static inline int64_t name_end(const uint8_t *p, int64_t piece, int64_t stop) {
    const void *at = stop > piece ? memchr(p + piece, NAME_VALUE_SEPARATOR[0], (size_t)(stop - piece)) : NULL;
    return at ? (const uint8_t *)at - p : -1;
}

#endif
