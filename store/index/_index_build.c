/* The index's passes in C, with the GIL released (store/index/build.py keeps the numpy passes they
 * replace, for machines without a compiler; tests/test_index_build.py holds the ways equal byte for
 * byte):
 *
 * find_keys: the keys RocketMQ's IndexService puts for each record (CommitLogDispatcherBuildIndex:
 *   UNIQ_KEY, then each non-empty token of KEYS split on one space; nothing for a ROLLBACK record),
 *   read where the records lie, each hashed as IndexService hashes "topic#key": Java's
 *   String.hashCode over UTF-16 units, its absolute value, Integer.MIN_VALUE taken as 0. The
 *   properties are split as MessageDecoder.string2messageProperties splits them (a later pair
 *   wins; a pair without a name or a value does not count). Text that is not well-formed UTF-8
 *   (Java replaces what it cannot decode) and records whose lengths do not add up are left to the
 *   caller.
 * put_items: IndexFile.putKey for a run of keys, in order: each item linked to the newest one of
 *   its slot, the slot pointed at it, the header's counters moved as RocketMQ moves them.
 * index_records: both at once, a few hundred keys at a time (the way the append's index is built):
 *   each key's slot is asked for when the key is found and written once the few hundred are found.
 *
 * Positions are RocketMQ's (store/format/constants.py): BORNHOST and STOREHOST are 8 bytes, or 20
 * when sysFlag says IPv6, and move what follows them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAGIC_V1 0xDAA320A7u
#define MAGIC_V2 0xDAA320ABu
#define MIN_RECORD_LENGTH 91
#define SYSFLAG_POS 36
#define STORETIMESTAMP_POS 56
#define BODYLENGTH_POS 84
#define TRANSACTION_TYPE_MASK 0xC
#define TRANSACTION_ROLLBACK_TYPE 0xC
#define BORNHOST_V6_FLAG 0x10
#define STOREHOSTADDRESS_V6_FLAG 0x20
#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull
#define LOWS 0x7F7F7F7F7F7F7F7Full
#define UNIQ_KEY_WORD 0x59454B5F51494E55ull /* "UNIQ_KEY" read little-endian */
#define KEYS_PAIR_WORD 0x15359454Bull       /* "KEYS\1" */

#define HEADER_SIZE 40
#define HEADER_INDEX_COUNT 36 /* beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset (8 each), hashSlotCount (4), indexCount (4) */
#define SLOT_SIZE 4
#define ITEM_SIZE 20
#define MOST_KEYS 16386     /* of one record: UNIQ_KEY and a KEYS token per 2 of 32,767 bytes */
#define PREFETCH_RECORDS 6  /* records ahead whose first and last bytes are asked for */
#define LAG 32              /* put_items: keys ahead whose slot is asked for */
#define CHUNK 256           /* index_records: keys found, their slots asked for, before they are put */

enum { DONE = 0, FULL = 1, LEFT = 2 };

static uint32_t be32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return __builtin_bswap32(v);
}

static int64_t be64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return (int64_t)__builtin_bswap64(v);
}

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
static uint64_t zero_bytes(uint64_t w) {
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

static uint32_t key_hash(uint32_t h) {
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
static int64_t record_keys(const uint8_t *d, int64_t len, int64_t at, int64_t total, TopicCache *tc,
                           uint32_t *hashes, int64_t *ts) {
    const uint8_t *r = d + at;
    const uint32_t magic = be32(r + 4);
    if (magic != MAGIC_V1 && magic != MAGIC_V2)
        return -1;
    const uint32_t sys_flag = be32(r + SYSFLAG_POS);
    const int64_t born6 = (sys_flag & BORNHOST_V6_FLAG) ? 12 : 0;
    const int64_t hosts = born6 + ((sys_flag & STOREHOSTADDRESS_V6_FLAG) ? 12 : 0);
    *ts = be64(r + STORETIMESTAMP_POS + born6);
    if ((sys_flag & TRANSACTION_TYPE_MASK) == TRANSACTION_ROLLBACK_TYPE)
        return 0;
    int64_t p = BODYLENGTH_POS + hosts;
    if (p + 4 > total)
        return -1;
    const int64_t body_len = (int32_t)be32(r + p);
    if (body_len < 0)
        return -1;
    p += 4 + body_len;
    const int wide = magic == MAGIC_V2;
    if (p + 1 + wide > total)
        return -1;
    const int64_t topic_len = wide ? ((int64_t)r[p] << 8 | r[p + 1]) : r[p];
    const int64_t topic_at = p + 1 + wide;
    p = topic_at + topic_len;
    if (p + 2 > total)
        return -1;
    const int64_t props_len = (int16_t)((uint16_t)r[p] << 8 | r[p + 1]);
    p += 2;
    if (props_len <= 0)
        return 0;
    if (p + props_len > total)
        return -1;
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

/* the record at starts[i], or -1 when its TOTALSIZE does not fit the buffer */
static int64_t record_total(const uint8_t *d, int64_t len, int64_t at) {
    if (at < 0 || at > len - MIN_RECORD_LENGTH)
        return -1;
    const int64_t total = (int32_t)be32(d + at);
    return total >= MIN_RECORD_LENGTH && total <= len - at ? total : -1;
}

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
        const int64_t total = record_total(d, len, st[i]);
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

/* --- the IndexFile ------------------------------------------------------------------------ */
typedef struct {
    uint8_t *header, *slots, *items;
    uint32_t slot_num;
    uint64_t mod_m; /* UINT64_MAX / slot_num + 1: a % slot_num without a division (Lemire et al.) */
    int64_t index_num;
    long long begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count;
} Index;

static uint8_t *slot_of(const Index *ix, uint32_t key_hash) {
    const uint32_t s = ix->slot_num == 1 ? 0 : (uint32_t)(((__uint128_t)(ix->mod_m * key_hash) * ix->slot_num) >> 64);
    return ix->slots + SLOT_SIZE * (int64_t)s;
}

/* IndexFile.putKey: 0 when the file is full */
static int put_key(Index *ix, uint8_t *slot, uint32_t key_hash, int64_t phy, int64_t ts) {
    if (ix->index_count >= ix->index_num)
        return 0;
    int64_t prev = (int32_t)be32(slot);
    if (prev <= 0 || prev > ix->index_count)
        prev = 0;
    int64_t diff = 0;
    if (ix->begin_ts > 0) {
        diff = (ts - ix->begin_ts) / 1000; /* C truncates toward zero, as Java's long division */
        if (diff > INT32_MAX)
            diff = INT32_MAX;
        else if (diff < 0)
            diff = 0;
    }
    uint8_t *item = ix->items + ITEM_SIZE * ix->index_count;
    const uint32_t h = __builtin_bswap32(key_hash), t = __builtin_bswap32((uint32_t)diff),
                   pv = __builtin_bswap32((uint32_t)prev), n = __builtin_bswap32((uint32_t)ix->index_count);
    const uint64_t ph = __builtin_bswap64((uint64_t)phy);
    memcpy(item, &h, 4);
    memcpy(item + 4, &ph, 8);
    memcpy(item + 12, &t, 4);
    memcpy(item + 16, &pv, 4);
    /* the header's indexCount counts the item before the slot points at it: a writer killed in
     * between leaves no slot past the count (RocketMQ's broker reads such a slot as empty and
     * loses the chain's older keys); the caller writes the rest of the header after the batch */
    const uint32_t counted = __builtin_bswap32((uint32_t)(ix->index_count + 1));
    memcpy(ix->header + HEADER_INDEX_COUNT, &counted, 4);
    memcpy(slot, &n, 4);
    if (ix->index_count <= 1) {
        ix->begin_phy = phy;
        ix->begin_ts = ts;
    }
    if (prev == 0)
        ix->slot_count++;
    ix->index_count++;
    ix->end_phy = phy;
    ix->end_ts = ts;
    return 1;
}

/* The file and header arguments of put_items and index_records into ``ix``; 0 with an error set */
static int open_index(Index *ix, Py_buffer *file, long long slot_num, long long index_num) {
    if (slot_num <= 0 || slot_num > INT32_MAX || index_num < 2 || index_num > INT32_MAX
        || file->len < HEADER_SIZE + SLOT_SIZE * slot_num + ITEM_SIZE * index_num || ix->index_count < 1) {
        PyErr_SetString(PyExc_ValueError, "the index file does not match the geometry given");
        return 0;
    }
    ix->header = (uint8_t *)file->buf;
    ix->slots = ix->header + HEADER_SIZE;
    ix->items = ix->slots + SLOT_SIZE * slot_num;
    ix->slot_num = (uint32_t)slot_num;
    ix->mod_m = UINT64_MAX / (uint64_t)slot_num + 1;
    ix->index_num = index_num;
    return 1;
}

#define HEADER_FORMAT "(LLLLLL)"
#define HEADER_OUT(ix) (ix).begin_ts, (ix).end_ts, (ix).begin_phy, (ix).end_phy, (ix).slot_count, (ix).index_count

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
            __builtin_prefetch(slot_of(&ix, hs[k + LAG]), 1);
        if (!put_key(&ix, slot_of(&ix, hs[k]), hs[k], ps[k], tss[k]))
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

typedef struct {
    uint8_t *slot;
    uint32_t hash;
    int32_t rank;
    int64_t rec, phy, ts;
} Pending;

/* index_records(buf, starts, first, skip, base, file, slot_num, index_num, header)
 *   -> (header, status, next, skip)
 * The keys of the records at ``starts`` from ``first`` on (the first ``skip`` keys of that record
 * already put) into the IndexFile, in order, each record's offset being base + its position.
 * status DONE: every record indexed; FULL: the file filled up, the record ``next`` has ``skip``
 * keys in it; LEFT: the record ``next`` is left to the caller, every one before it indexed.
 * Keys are found CHUNK at a time, their slots asked for, then put. */
static PyObject *index_records(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer buf, starts, file;
    Py_ssize_t first, skip;
    long long base, slot_num, index_num;
    Index ix;
    if (!PyArg_ParseTuple(args, "y*y*nnLw*LL" HEADER_FORMAT, &buf, &starts, &first, &skip, &base, &file, &slot_num,
                          &index_num, &ix.begin_ts, &ix.end_ts, &ix.begin_phy, &ix.end_phy, &ix.slot_count,
                          &ix.index_count))
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
    scratch = PyMem_RawMalloc(MOST_KEYS * sizeof(uint32_t));
    pending = PyMem_RawMalloc((CHUNK + MOST_KEYS) * sizeof(Pending));
    if (!scratch || !pending) {
        PyErr_NoMemory();
        goto done;
    }
    const uint8_t *d = buf.buf;
    const int64_t len = buf.len, *st = starts.buf;
    int status = DONE;
    Py_ssize_t i = first, next = n, next_skip = 0;
    TopicCache tc = {NULL, 0, 0};
    Py_BEGIN_ALLOW_THREADS
    while (status == DONE && i < n) {
        Py_ssize_t found = 0;
        int left = 0;
        for (; found < CHUNK && i < n; i++) {
            prefetch_record(d, len, st, n, i + PREFETCH_RECORDS);
            const int64_t total = record_total(d, len, st[i]);
            int64_t t = 0, count = total < 0 ? -1 : record_keys(d, len, st[i], total, &tc, scratch, &t);
            if (count < 0) {
                left = 1;
                break;
            }
            for (int64_t j = i == first ? skip : 0; j < count; j++, found++) {
                Pending *p = &pending[found];
                p->hash = scratch[j], p->rank = (int32_t)j, p->rec = i, p->phy = base + st[i], p->ts = t;
                p->slot = slot_of(&ix, p->hash);
                __builtin_prefetch(p->slot, 1);
            }
        }
        for (Py_ssize_t k = 0; k < found; k++) {
            const Pending *p = &pending[k];
            if (!put_key(&ix, p->slot, p->hash, p->phy, p->ts)) {
                status = FULL, next = p->rec, next_skip = p->rank;
                break;
            }
        }
        if (status == DONE && left)
            status = LEFT, next = i;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue(HEADER_FORMAT "inn", HEADER_OUT(ix), status, next, next_skip);
done:
    PyMem_RawFree(scratch);
    PyMem_RawFree(pending);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&file);
    return result;
}

static PyMethodDef methods[] = {
    {"find_keys", find_keys, METH_VARARGS, "The index keys of many records, hashed (store/index/build.py)."},
    {"put_items", put_items, METH_VARARGS, "IndexFile.putKey for many keys (store/index/file.py)."},
    {"index_records", index_records, METH_VARARGS, "Many records' keys put into an IndexFile (store/index/file.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_index_build",
                                    "The index's key finder and item writer (see store/index/build.py)", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__index_build(void) { return PyModule_Create(&module); }
