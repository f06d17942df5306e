"""Every constant of the RocketMQ CommitLog format, in one place (../shared/golden/FORMAT.md).
The C passes take the layout's numbers and the property names from _layout.h beside this file,
under the same names (tests/store/format/test_layout_header.py holds the two equal).

Names follow RocketMQ's so a RocketMQ engineer finds their way.
"""

from __future__ import annotations

# --- magic codes (FORMAT.md §4) -------------------------------------------------------------
MESSAGE_MAGIC_CODE = 0xDAA320A7          # V1: 1-byte topic length
MESSAGE_MAGIC_CODE_V2 = 0xDAA320AB       # V2: 2-byte topic length
BLANK_MAGIC_CODE = 0xCBD43194            # end-of-segment filler
END_FILE_MIN_BLANK_LENGTH = 4 + 4        # TOTALSIZE + MAGICCODE of a BLANK record

# --- record layout (FORMAT.md §3), positions for IPv4 hosts --------------------------------
POS_TOTALSIZE = 0
POS_MAGICCODE = 4
POS_BODYCRC = 8
POS_QUEUEID = 12
POS_FLAG = 16
POS_QUEUEOFFSET = 20
POS_PHYSICALOFFSET = 28
POS_SYSFLAG = 36
POS_BORNTIMESTAMP = 40
POS_BORNHOST = 48
IPV4_HOST_LENGTH = 8                     # 4-byte address + int32 port
IPV6_HOST_LENGTH = 20                    # 16-byte address + int32 port
IPV6_HOST_EXTRA_LENGTH = IPV6_HOST_LENGTH - IPV4_HOST_LENGTH    # what an IPv6 host moves the fields after it
# STORETIMESTAMP follows BORNHOST: 56 with an IPv4 born host, 68 with an IPv6 one.
POS_STORETIMESTAMP_V4 = POS_BORNHOST + IPV4_HOST_LENGTH
POS_STORETIMESTAMP_V6 = POS_BORNHOST + IPV6_HOST_LENGTH
# With both hosts IPv4 (each IPv6 host adds 12 bytes before what follows it):
POS_STOREHOST_V4 = POS_STORETIMESTAMP_V4 + 8
POS_RECONSUMETIMES_V4 = POS_STOREHOST_V4 + IPV4_HOST_LENGTH
POS_PREPAREDTRANSACTIONOFFSET_V4 = POS_RECONSUMETIMES_V4 + 4
POS_BODYLENGTH_V4 = POS_PREPAREDTRANSACTIONOFFSET_V4 + 8
MIN_RECORD_LENGTH = 91                   # empty body/topic/properties, V1, IPv4 hosts
FIXED_PART_LENGTH = 91                   # TOTALSIZE = 91 + body + topic + props + 12/v6 host + 1 if V2

# --- SYSFLAG bits (FORMAT.md §5) ------------------------------------------------------------
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_TYPE_MASK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_LZ4 = 0x100
COMPRESSION_ZSTD = 0x200
COMPRESSION_ZLIB = 0x300

# --- properties (FORMAT.md §7) --------------------------------------------------------------
NAME_VALUE_SEPARATOR = "\u0001"
PROPERTY_SEPARATOR = "\u0002"
MAX_PROPERTIES_LENGTH = 32767
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY = "DELAY"
PROPERTY_CRC32 = "__CRC32#"
CRC32_RESERVED_LEN = len(PROPERTY_CRC32) + 1 + 10 + 1   # name, \u0001, 10 digits, \u0002
# Not RocketMQ's: the Kafka coordinates our ingest job writes into every message (ingest/encode/
# mapping.py), named here so that the store's readers can show them without importing ingest.
PROPERTY_KAFKA_TOPIC = "KAFKA_TOPIC"
PROPERTY_KAFKA_PARTITION = "KAFKA_PARTITION"
PROPERTY_KAFKA_OFFSET = "KAFKA_OFFSET"
PROPERTY_KAFKA_KEY_BASE64 = "KAFKA_KEY_BASE64"
# Every header of the record, in order, as JSON [[name, base64 value or null], ...]: written when the
# headers as name=value properties would lose something (README, "Keys, tombstones and headers")
PROPERTY_KAFKA_HEADERS = "KAFKA_HEADERS"
# RocketMQ has no empty body: its producers refuse one and its decoder leaves the body null, which
# 4.9's consumers cannot take (ProcessQueue reads body.length). A Kafka null value (tombstone) or
# 0-byte value is stored as this one-byte body with one of the two properties below saying which
# (README, "Keys, tombstones and headers"); the body alone means nothing.
EMPTY_VALUE_BODY = b"\x00"
PROPERTY_KAFKA_VALUE_NULL = "KAFKA_VALUE_NULL"     # "true": the Kafka value was null (a tombstone)
PROPERTY_KAFKA_VALUE_EMPTY = "KAFKA_VALUE_EMPTY"   # "true": the Kafka value was 0 bytes
PROPERTY_VALUE_TRUE = "true"                       # the value of the two above

# --- limits and defaults (FORMAT.md §9, MessageStoreConfig) --------------------------------
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024               # maxMessageSize: largest BODY
MAX_RECORD_OVERHEAD = 64 * 1024                          # a whole record <= maxMessageSize + 64 KiB
MAX_TOPIC_LENGTH_V1 = 127
MAX_TOPIC_LENGTH_V2 = 32767
DEFAULT_COMMITLOG_FILE_SIZE = 1024 * 1024 * 1024         # mappedFileSizeCommitLog
OS_PAGE_SIZE = 4096
FILE_NAME_DIGITS = 20                                    # UtilAll.offset2FileName

# --- consume queue (FORMAT.md §12) ----------------------------------------------------------
CQ_STORE_UNIT_SIZE = 20
DEFAULT_CONSUME_QUEUE_UNITS = 300_000
DEFAULT_CONSUME_QUEUE_FILE_SIZE = DEFAULT_CONSUME_QUEUE_UNITS * CQ_STORE_UNIT_SIZE
CQ_BLANK_UNIT = (0, 2147483647, 0)                       # pre-fill before a queue's first offset
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# TopicValidator's system topics: the broker creates them itself, with its own queue counts
SYSTEM_TOPICS = frozenset({SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                           "TRANS_CHECK_MAX_TIME_TOPIC", "RMQ_SYS_TRACE_TOPIC", "SELF_TEST_TOPIC",
                           "OFFSET_MOVED_EVENT", "TBW102", "BenchmarkTest"})
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

# --- compaction log (RocketMQ 5.1+: CompactionStore / CompactionLog / SparseConsumeQueue) -----
# A compaction topic's queue also lives in compaction/compactionLog/<topic>/<queueId>/ (the records'
# bytes with PHYSICALOFFSET set to their place there) and compaction/compactionCq/<topic>/<queueId>/
# (BatchConsumeQueue units, files named as the log's); a 5.x broker serves the topic from them only.
COMPACTION_DIR = "compaction"
COMPACTION_LOG_DIR = "compactionLog"
COMPACTION_CQ_DIR = "compactionCq"
BCQ_STORE_UNIT_SIZE = 46              # phys 8, size 4, tagsCode 8, storeTime 8, msgBaseOffset 8, batchSize 2,
                                      # compactedOffset 4, reserved 4
BCQ_INVALID_POS = -1                  # compactedOffset of every unit the broker writes
COMPACTION_END_FILE_MIN_BLANK_LENGTH = 8   # a log file ends with (its blank length, BLANK_MAGIC_CODE)
DEFAULT_COMPACTION_MAPPED_FILE_SIZE = 100 * 1024 * 1024      # compactionMappedFileSize
DEFAULT_COMPACTION_CQ_MAPPED_FILE_SIZE = 10 * 1024 * 1024    # compactionCqMappedFileSize
CLEANUP_POLICY_ATTRIBUTE = "cleanup.policy"     # TopicAttributes.CLEANUP_POLICY_ATTRIBUTE
CLEANUP_POLICY_COMPACTION = "COMPACTION"

# --- checkpoint (FORMAT.md §13) -------------------------------------------------------------
CHECKPOINT_FILE_SIZE = OS_PAGE_SIZE
CHECKPOINT_POS_PHYSIC_MSG_TIMESTAMP = 0
CHECKPOINT_POS_LOGICS_MSG_TIMESTAMP = 8
CHECKPOINT_POS_INDEX_MSG_TIMESTAMP = 16
CHECKPOINT_POS_MASTER_FLUSHED_OFFSET = 24
CHECKPOINT_POS_CONFIRM_PHY_OFFSET = 32

# --- flush (MessageStoreConfig defaults) ----------------------------------------------------
FLUSH_INTERVAL_COMMITLOG_MS = 500
FLUSH_COMMITLOG_LEAST_PAGES = 4
FLUSH_COMMITLOG_THOROUGH_INTERVAL_MS = 10_000

# --- store directory layout -----------------------------------------------------------------
COMMITLOG_DIR = "commitlog"
CONSUMEQUEUE_DIR = "consumequeue"
CHECKPOINT_FILE = "checkpoint"
ABORT_FILE = "abort"
LOCK_FILE = "lock"
APPEND_INTENT_FILE = "append.intent"   # ours: which records past the commit point are the writer's

# --- IndexFile (index/, RocketMQ's IndexService; ../shared/golden/INDEX_FORMAT_NOTES.md) ---------
INDEX_DIR = "index"
CONFIG_DIR = "config"                    # the broker's JSON config files (topics.json, ...)
INDEX_SETTINGS_FILE = "messageIndex.json"  # ours, in config/: the geometry index/ was built with
TOPICS_FILE = "topics.json"              # TopicConfigManager's, in config/
TOPIC_PERM_READ_WRITE = 6                # PermName.PERM_READ | PERM_WRITE
TOPIC_FILTER_TYPE = "SINGLE_TAG"
INDEX_HEADER_SIZE = 40                   # begin/end timestamp, begin/end phy offset, slot count, index count
INDEX_HASH_SLOT_SIZE = 4
INDEX_HEADER_POS_INDEX_COUNT = 36
INDEX_ITEM_SIZE = 20                     # keyHash, phyOffset, timeDiff, prevIndex
INDEX_ITEM_POS_PHY_OFFSET = 4
INDEX_ITEM_POS_TIME_DIFF = 12
INDEX_ITEM_POS_PREV_INDEX = 16
INDEX_INVALID_INDEX = 0
DEFAULT_MAX_HASH_SLOT_NUM = 5_000_000    # maxHashSlotNum
DEFAULT_MAX_INDEX_NUM = 5_000_000 * 4    # maxIndexNum
MAX_MSGS_NUM_BATCH = 64                  # queryMessage caps maxNum here
INDEX_KEY_SEPARATOR = " "                # MessageConst.KEY_SEPARATOR: KEYS holds tokens split on it
INDEX_TOPIC_KEY_JOIN = "#"               # the indexed text is topic + "#" + key
