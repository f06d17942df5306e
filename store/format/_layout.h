/* The CommitLog record and IndexFile layout for every C pass (../shared/golden/FORMAT.md §3-5,
 * INDEX_FORMAT_NOTES.md): the numbers of store/format/constants.py under the same names
 * (tests/store/format/test_layout_header.py holds the two equal), and the reads every pass shares: big-endian
 * integers, the TOTALSIZE step, the head of a message record and its TOPICLENGTH, read as
 * RocketMQ's MessageVersion reads it (a signed byte in V1, a signed short in V2).
 * Everything is static inline: a module that includes it and leaves a helper unused gets no warning.
 */
#ifndef COMMITLOG_LAYOUT_H
#define COMMITLOG_LAYOUT_H

#include <stdint.h>
#include <string.h>

/* --- magic codes (FORMAT.md §4) */
#define MESSAGE_MAGIC_CODE 0xDAA320A7u
#define MESSAGE_MAGIC_CODE_V2 0xDAA320ABu
#define BLANK_MAGIC_CODE 0xCBD43194u

/* --- record layout (FORMAT.md §3), positions with IPv4 hosts; each IPv6 host moves what follows it */
#define POS_TOTALSIZE 0
#define POS_MAGICCODE 4
#define POS_BODYCRC 8
#define POS_QUEUEID 12
#define POS_FLAG 16
#define POS_QUEUEOFFSET 20
#define POS_PHYSICALOFFSET 28
#define POS_SYSFLAG 36
#define POS_BORNTIMESTAMP 40
#define POS_BORNHOST 48
#define IPV4_HOST_LENGTH 8
#define IPV6_HOST_LENGTH 20
#define IPV6_HOST_EXTRA_LENGTH (IPV6_HOST_LENGTH - IPV4_HOST_LENGTH)
#define POS_STORETIMESTAMP_V4 (POS_BORNHOST + IPV4_HOST_LENGTH)
#define POS_STORETIMESTAMP_V6 (POS_BORNHOST + IPV6_HOST_LENGTH)
#define POS_STOREHOST_V4 (POS_STORETIMESTAMP_V4 + 8)
#define POS_RECONSUMETIMES_V4 (POS_STOREHOST_V4 + IPV4_HOST_LENGTH)
#define POS_PREPAREDTRANSACTIONOFFSET_V4 (POS_RECONSUMETIMES_V4 + 4)
#define POS_BODYLENGTH_V4 (POS_PREPAREDTRANSACTIONOFFSET_V4 + 8)
#define MIN_RECORD_LENGTH 91
#define FIXED_PART_LENGTH 91

/* --- SYSFLAG bits (FORMAT.md §5) */
#define TRANSACTION_TYPE_MASK 0xC
#define TRANSACTION_ROLLBACK_TYPE 0xC
#define BORNHOST_V6_FLAG 0x10
#define STOREHOSTADDRESS_V6_FLAG 0x20

/* --- IndexFile: header, hash slots, then items of keyHash, phyOffset, timeDiff, prevIndex */
#define INDEX_HEADER_SIZE 40
#define INDEX_HEADER_POS_INDEX_COUNT 36
#define INDEX_HASH_SLOT_SIZE 4
#define INDEX_ITEM_SIZE 20
#define INDEX_ITEM_POS_PHY_OFFSET 4
#define INDEX_ITEM_POS_TIME_DIFF 12
#define INDEX_ITEM_POS_PREV_INDEX 16

/* --- properties (FORMAT.md §7): the names and separators of constants.py, as C strings; a piece
 * of PROPERTIES is NAME NAME_VALUE_SEPARATOR value PROPERTY_SEPARATOR, so PAIR(PROPERTY_KEYS) is
 * "KEYS\1" and LITERAL_LENGTH of it 5 */
#define NAME_VALUE_SEPARATOR "\x01"
#define PROPERTY_SEPARATOR "\x02"
#define PROPERTY_TAGS "TAGS"
#define PROPERTY_KEYS "KEYS"
#define PROPERTY_UNIQ_KEY "UNIQ_KEY"
#define PROPERTY_DELAY "DELAY"
#define PROPERTY_CRC32 "__CRC32#"
#define PROPERTY_KAFKA_VALUE_NULL "KAFKA_VALUE_NULL"
#define PROPERTY_KAFKA_VALUE_EMPTY "KAFKA_VALUE_EMPTY"
#define PROPERTY_VALUE_TRUE "true"
#define INDEX_KEY_SEPARATOR " "   /* KEYS holds the tokens the index puts split on it */
#define INDEX_TOPIC_KEY_JOIN "#"  /* the indexed text is topic, it, key */
#define PAIR(name) name NAME_VALUE_SEPARATOR
#define LITERAL_LENGTH(s) ((int64_t)sizeof(s) - 1)

/* The first n <= 8 bytes of s as one little-endian word (a name compared eight bytes at a time) */
static inline uint64_t le_word(const char *s, int n) {
    uint64_t w = 0;
    memcpy(&w, s, (size_t)n);
    return w;
}

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static inline uint32_t be32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return __builtin_bswap32(v);
}

static inline int64_t be64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return (int64_t)__builtin_bswap64(v);
}

/* The TOTALSIZE step of every walk: the size of the record at d[at], or -1 when no record of at
 * least min_length bytes starts there within d[0, len) (at past the end, TOTALSIZE below
 * min_length, or a record running past len). min_length >= 4. */
static inline int64_t record_total(const uint8_t *d, int64_t len, int64_t at, int64_t min_length) {
    if (at < 0 || at > len - min_length)
        return -1;
    const int64_t total = (int32_t)be32(d + at + POS_TOTALSIZE);
    return total >= min_length && total <= len - at ? total : -1;
}

/* The fixed head of a message record, as far as its hosts move the rest */
typedef struct {
    uint32_t sys_flag;
    int v2;                /* MESSAGE_MAGIC_CODE_V2: a two-byte TOPICLENGTH */
    int64_t born_extra;    /* bytes an IPv6 born host adds before STORETIMESTAMP */
    int64_t hosts_extra;   /* bytes both hosts add before RECONSUMETIMES */
} RecordHead;

/* The head of the record at r (MIN_RECORD_LENGTH bytes readable): 1, or 0 when MAGICCODE is not
 * a message's */
static inline int record_head(const uint8_t *r, RecordHead *h) {
    const uint32_t magic = be32(r + POS_MAGICCODE);
    if (magic != MESSAGE_MAGIC_CODE && magic != MESSAGE_MAGIC_CODE_V2)
        return 0;
    h->v2 = magic == MESSAGE_MAGIC_CODE_V2;
    h->sys_flag = be32(r + POS_SYSFLAG);
    h->born_extra = (h->sys_flag & BORNHOST_V6_FLAG) ? IPV6_HOST_EXTRA_LENGTH : 0;
    h->hosts_extra = h->born_extra + ((h->sys_flag & STOREHOSTADDRESS_V6_FLAG) ? IPV6_HOST_EXTRA_LENGTH : 0);
    return 1;
}

/* TOPICLENGTH at p as MessageVersion.getTopicLength reads it: V1 a signed byte, V2 a signed short
 * (negative: the record is corrupt) */
static inline int64_t topic_length(const uint8_t *p, int v2) {
    return v2 ? (int64_t)(int16_t)be16(p) : (int64_t)(int8_t)p[0];
}

/* --- the walk of a message record: store/format/layout.py's record_spans, in C (every C reader of
 * a record takes its positions from here; tests/store/format/test_record_spans.py holds it to the oracle) */

/* What record_spans returns: the record's fields fit, or the first that does not fit in TOTALSIZE */
enum { SPANS_OK = 0, SPANS_HOSTS, SPANS_BODY, SPANS_TOPIC, SPANS_PROPERTIES };

/* The positions in a record of the fixed fields its hosts move */
typedef struct {
    int64_t born_host_len, store_host_len;  /* IPV4_HOST_LENGTH, or IPV6_HOST_LENGTH as SYSFLAG says */
    int64_t store_timestamp_pos, store_host_pos, reconsume_times_pos, body_length_pos;
} HostPositions;

static inline HostPositions host_positions(uint32_t sys_flag) {
    HostPositions h;
    h.born_host_len = (sys_flag & BORNHOST_V6_FLAG) ? IPV6_HOST_LENGTH : IPV4_HOST_LENGTH;
    h.store_host_len = (sys_flag & STOREHOSTADDRESS_V6_FLAG) ? IPV6_HOST_LENGTH : IPV4_HOST_LENGTH;
    h.store_timestamp_pos = POS_BORNHOST + h.born_host_len;
    h.store_host_pos = h.store_timestamp_pos + 8;
    h.reconsume_times_pos = h.store_host_pos + h.store_host_len;
    h.body_length_pos = h.reconsume_times_pos + 4 + 8; /* RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET */
    return h;
}

/* Where the fields of one message record lie, positions from its start; a length past the fault
 * record_spans returned is not read */
typedef struct {
    HostPositions at;
    int64_t body_pos, body_len, topic_pos, topic_len, props_pos, props_len; /* props_len signed, as read */
} RecordSpans;

/* Walk the message record at r (total bytes readable, total >= MIN_RECORD_LENGTH, its head read by
 * record_head): SPANS_OK, or the first field that does not fit in total: the hosts (the fixed
 * fields up to BODYLENGTH), the body and the TOPICLENGTH after it, the topic and the
 * PROPERTIESLENGTH after it, or a positive PROPERTIESLENGTH */
static inline int record_spans(const uint8_t *r, int64_t total, const RecordHead *head, RecordSpans *s) {
    s->at = host_positions(head->sys_flag);
    s->body_pos = s->at.body_length_pos + 4;
    if (s->body_pos > total)
        return SPANS_HOSTS;
    s->body_len = (int32_t)be32(r + s->at.body_length_pos);
    const int64_t tl_at = s->body_pos + s->body_len, width = 1 + head->v2;
    if (s->body_len < 0 || tl_at + width > total)
        return SPANS_BODY;
    s->topic_len = topic_length(r + tl_at, head->v2);
    s->topic_pos = tl_at + width;
    if (s->topic_len < 0 || s->topic_pos + s->topic_len + 2 > total)
        return SPANS_TOPIC;
    s->props_pos = s->topic_pos + s->topic_len + 2;
    s->props_len = (int16_t)be16(r + s->props_pos - 2);
    if (s->props_len > 0 && s->props_pos + s->props_len > total)
        return SPANS_PROPERTIES;
    return SPANS_OK;
}

/* MessageExtEncoder.calMsgLength of a walked record: its TOTALSIZE when the lengths add up (a
 * negative PROPERTIESLENGTH counts as none) */
static inline int64_t spans_length(const RecordSpans *s, const RecordHead *head) {
    return FIXED_PART_LENGTH + s->body_len + s->topic_len + (s->props_len > 0 ? s->props_len : 0) + head->hosts_extra
           + head->v2;
}

#endif
