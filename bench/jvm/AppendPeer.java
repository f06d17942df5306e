import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.HashMap;
import java.util.concurrent.locks.ReentrantLock;
import java.util.zip.CRC32;

/**
 * The JVM peer of bench/store_append.py: appends the same encoded records into a pre-touched
 * MappedByteBuffer the way RocketMQ's store does, so the Python-to-JVM ratio is on record.
 *
 * Two paths, both under a ReentrantLock like CommitLog's putMessageLock:
 *  - "batch"  (putMessages / MessageExtBatch): CRC32 of each body (MessageExtEncoder.encodeBatch),
 *    then DefaultAppendMessageCallback.doAppend's loop patching QUEUEOFFSET, PHYSICALOFFSET and
 *    STORETIMESTAMP of every record in the encoded buffer, then ONE put of the batch into the mapping;
 *  - "single" (putMessage): per record CRC32 of the body, the topicQueueTable lookup by the
 *    "topic-queueId" key, the same patches, one put per record.
 * SYNC flush: MappedByteBuffer.force() after each batch (GroupCommitService, one flush per batch).
 *
 * Usage: AppendPeer DATA_FILE TARGET_FILE TARGET_SIZE BATCH_RECORDS RUNS WARMUP batch|single async|sync
 * DATA_FILE holds the records back to back (TOTALSIZE first, big-endian, as in the commit log).
 * Prints one line per measured run: "run <seconds> <records> <bytes>".
 * Our own code, written from the behaviour of RocketMQ's store; nothing copied.
 */
public final class AppendPeer {
    private static final int POS_QUEUEID = 12;
    private static final int POS_QUEUEOFFSET = 20;
    private static final int POS_PHYSICALOFFSET = 28;
    private static final int POS_BODYCRC = 8;
    private static final int POS_STORETIMESTAMP_V4 = 56;
    private static final int POS_BODYLENGTH_V4 = 84;
    private static final int END_FILE_MIN_BLANK_LENGTH = 8;
    private static final int PAGE = 4096;

    public static void main(String[] args) throws IOException {
        Path data = Path.of(args[0]);
        Path target = Path.of(args[1]);
        int targetSize = Integer.parseInt(args[2]);
        int batchRecords = Integer.parseInt(args[3]);
        int runs = Integer.parseInt(args[4]);
        int warmup = Integer.parseInt(args[5]);
        boolean single = args[6].equals("single");
        boolean sync = args[7].equals("sync");
        String topic = args.length > 8 ? args[8] : "BenchTopic";

        byte[] raw = Files.readAllBytes(data);
        byte[] work = new byte[raw.length];   // each run patches its own copy of the records
        try (FileChannel ch = FileChannel.open(target, StandardOpenOption.CREATE, StandardOpenOption.READ,
                StandardOpenOption.WRITE)) {
            MappedByteBuffer mapped = ch.map(FileChannel.MapMode.READ_WRITE, 0, targetSize);
            // DefaultMappedFile.warmMappedFile: one write per page so appends never fault.
            for (int i = 0; i < targetSize; i += PAGE) {
                mapped.put(i, (byte) 0);
            }
            for (int r = 0; r < warmup + runs; r++) {
                System.arraycopy(raw, 0, work, 0, raw.length);
                ByteBuffer src = ByteBuffer.wrap(work);
                long t0 = System.nanoTime();
                long[] counts = single ? appendSingle(src, mapped, targetSize, batchRecords, sync, topic)
                        : appendBatches(src, mapped, targetSize, batchRecords, sync);
                long t1 = System.nanoTime();
                if (r >= warmup) {
                    System.out.println("run " + ((t1 - t0) / 1e9) + " " + counts[0] + " " + counts[1]);
                }
            }
        }
    }

    static int bodyCrc(CRC32 crc, byte[] b, int off, int len) {
        crc.reset();
        crc.update(b, off, len);
        return (int) (crc.getValue() & 0x7FFFFFFF); // UtilAll.crc32
    }

    /** putMessages: one lock, one CRC pass, one patch loop and one bulk put per batch. */
    static long[] appendBatches(ByteBuffer src, MappedByteBuffer dst, int fileSize, int batchRecords,
                                boolean sync) {
        ReentrantLock putLock = new ReentrantLock();
        CRC32 crc = new CRC32();
        long[] queueOffsets = new long[1024];
        byte[] a = src.array();
        int pos = 0;
        int wrote = 0;
        long records = 0;
        while (pos < a.length) {
            int batchStart = pos;
            int n = 0;
            // encodeBatch: body CRCs, before the lock
            while (pos < a.length && n < batchRecords) {
                int size = src.getInt(pos);
                int bodyLen = src.getInt(pos + POS_BODYLENGTH_V4);
                src.putInt(pos + POS_BODYCRC, bodyCrc(crc, a, pos + POS_BODYLENGTH_V4 + 4, bodyLen));
                pos += size;
                n++;
            }
            int batchLen = pos - batchStart;
            putLock.lock();
            try {
                if (wrote + batchLen + END_FILE_MIN_BLANK_LENGTH > fileSize) {
                    throw new IllegalStateException("target file too small for the data");
                }
                long storeTimestamp = System.currentTimeMillis();
                for (int p = batchStart; p < pos; ) {
                    int size = src.getInt(p);
                    int q = src.getInt(p + POS_QUEUEID);
                    src.putLong(p + POS_QUEUEOFFSET, queueOffsets[q]++);
                    src.putLong(p + POS_PHYSICALOFFSET, (long) wrote + (p - batchStart));
                    src.putLong(p + POS_STORETIMESTAMP_V4, storeTimestamp);
                    p += size;
                }
                dst.put(wrote, a, batchStart, batchLen);
                wrote += batchLen;
                records += n;
            } finally {
                putLock.unlock();
            }
            if (sync) {
                dst.force();
            }
        }
        return new long[] {records, wrote};
    }

    /** putMessage, one record at a time. */
    static long[] appendSingle(ByteBuffer src, MappedByteBuffer dst, int fileSize, int batchRecords,
                               boolean sync, String topic) {
        ReentrantLock putLock = new ReentrantLock();
        CRC32 crc = new CRC32();
        HashMap<String, Long> topicQueueTable = new HashMap<>();
        StringBuilder keyBuilder = new StringBuilder(64);
        byte[] a = src.array();
        int pos = 0;
        int wrote = 0;
        long records = 0;
        int inBatch = 0;
        while (pos < a.length) {
            int size = src.getInt(pos);
            int bodyLen = src.getInt(pos + POS_BODYLENGTH_V4);
            src.putInt(pos + POS_BODYCRC, bodyCrc(crc, a, pos + POS_BODYLENGTH_V4 + 4, bodyLen));
            keyBuilder.setLength(0);
            String key = keyBuilder.append(topic).append('-').append(src.getInt(pos + POS_QUEUEID)).toString();
            putLock.lock();
            try {
                if (wrote + size + END_FILE_MIN_BLANK_LENGTH > fileSize) {
                    throw new IllegalStateException("target file too small for the data");
                }
                Long queueOffset = topicQueueTable.getOrDefault(key, 0L);
                src.putLong(pos + POS_QUEUEOFFSET, queueOffset);
                src.putLong(pos + POS_PHYSICALOFFSET, wrote);
                src.putLong(pos + POS_STORETIMESTAMP_V4, System.currentTimeMillis());
                dst.put(wrote, a, pos, size);
                topicQueueTable.put(key, queueOffset + 1);
                wrote += size;
            } finally {
                putLock.unlock();
            }
            pos += size;
            records++;
            if (sync && ++inBatch == batchRecords) {
                dst.force();
                inBatch = 0;
            }
        }
        if (sync) {
            dst.force();
        }
        return new long[] {records, wrote};
    }
}
