import java.io.File;
import java.io.IOException;
import java.io.PrintWriter;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.zip.CRC32;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBatch;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.GetMessageStatus;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.PutMessageStatus;
import org.apache.rocketmq.store.QueryMessageResult;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * bench/store_append.py's peer: Apache RocketMQ's own DefaultMessageStore (rocketmq-store 4.9.x or
 * 5.x, whichever jars it is compiled and run with; StoreCompat hides their few differences) puts the
 * records the Python store appends, and says how long it took. It only measures: the checks of what
 * the reopened store serves are made by bench/rocketmq_store.py from what this prints.
 *
 * The records come from RECORDS (the commit-log records the bench built, back to back): their
 * bodies, topic, queue ids, flags, born timestamps and properties (TAGS, KEYS, UNIQ_KEY) become
 * messages as a broker receives them, built before the clock starts:
 *  - path "batch": one MessageExtBatch per queue per batch of BATCH records, its body the producer's
 *    wire encoding (MessageDecoder.encodeMessages), put with asyncPutMessages (a batch holds one
 *    queue's messages, as a producer's batch does);
 *  - path "single": one MessageExtBrokerInner per record, put with asyncPutMessage one by one.
 * Either way the futures of a batch are joined at its end: under SYNC_FLUSH a batch is durable when
 * its last future completes (GroupCommitService), as the Python store's batch is when append returns.
 * The clock stops once the reput service has dispatched everything (dispatchBehindBytes() == 0): the
 * consume queues and, with messageIndexEnable, the IndexFile, built by the store's own dispatcher.
 *
 * Each run opens a fresh store (the warm-up records FIRST put before the clock, one per queue, so the
 * first segment exists, warmed by warmMapedFileEnable, and the pre-allocation of the next one has
 * finished), times the puts, shuts it down, opens it again and reads it back: per queue its offsets,
 * and SAMPLES messages per queue by queue offset (body CRC32, KEYS, UNIQ_KEY, and which messages the
 * index finds by each key). One JSON object per run goes to RESULTS.
 *
 * Usage: RocketStorePeer records=FILE first=FILE root=DIR segment=BYTES batch=N runs=N warmup=N
 *        flush=async,sync index=off,on paths=batch,single ha_port=PORT samples=K results=FILE [keep=true]
 */
public final class RocketStorePeer {
    private static final String GROUP = "bench-check";

    /** The fields of the records a broker would receive: parsed from the commit-log records. */
    static final class Records {
        final int n;
        final byte[][] bodies;
        final int[] queueIds;
        final int[] flags;
        final long[] bornTimestamps;
        final String[] properties;
        final String topic;

        Records(byte[] raw, int limit) {
            ByteBuffer b = ByteBuffer.wrap(raw);
            List<Integer> starts = new ArrayList<>();
            for (int pos = 0; pos < raw.length && starts.size() < limit; pos += b.getInt(pos)) {
                starts.add(pos);
            }
            n = starts.size();
            bodies = new byte[n][];
            queueIds = new int[n];
            flags = new int[n];
            bornTimestamps = new long[n];
            properties = new String[n];
            String t = null;
            for (int i = 0; i < n; i++) {
                int pos = starts.get(i);
                queueIds[i] = b.getInt(pos + 12);
                flags[i] = b.getInt(pos + 16);
                bornTimestamps[i] = b.getLong(pos + 40);
                int bodyLen = b.getInt(pos + 84);
                bodies[i] = new byte[bodyLen];
                System.arraycopy(raw, pos + 88, bodies[i], 0, bodyLen);
                int topicLen = raw[pos + 88 + bodyLen] & 0xFF;
                if (t == null) {
                    t = new String(raw, pos + 89 + bodyLen, topicLen, MessageDecoder.CHARSET_UTF8);
                }
                int propPos = pos + 89 + bodyLen + topicLen;
                int propLen = b.getShort(propPos) & 0xFFFF;
                properties[i] = new String(raw, propPos + 2, propLen, MessageDecoder.CHARSET_UTF8);
            }
            topic = t;
        }
    }

    static final InetSocketAddress BORN_HOST = new InetSocketAddress("127.0.0.1", 12345);
    static final InetSocketAddress STORE_HOST = new InetSocketAddress("127.0.0.1", 10911);

    public static void main(String[] argv) {
        int status = 0;
        try {
            run(argv);
        } catch (Throwable t) {
            t.printStackTrace();
            status = 1;
        }
        // the store's executors and services leave non-daemon threads behind them (4.9's above all)
        System.exit(status);
    }

    static void run(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String kv : argv) {
            int eq = kv.indexOf('=');
            a.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        byte[] raw = Files.readAllBytes(Path.of(a.get("records")));
        Records records = new Records(raw, Integer.MAX_VALUE);
        Records first = new Records(Files.readAllBytes(Path.of(a.get("first"))), Integer.MAX_VALUE);
        File root = new File(a.get("root"));
        int segment = Integer.parseInt(a.get("segment"));
        int batch = Integer.parseInt(a.get("batch"));
        int runs = Integer.parseInt(a.get("runs"));
        int warmup = Integer.parseInt(a.get("warmup"));
        int haPort = Integer.parseInt(a.get("ha_port"));
        int samples = Integer.parseInt(a.get("samples"));
        boolean keep = a.getOrDefault("keep", "false").equals("true");
        String[] flushes = a.get("flush").split(",");
        String[] indexes = a.get("index").split(",");
        String[] paths = a.get("paths").split(",");
        List<String[]> configs = new ArrayList<>();
        for (String f : flushes) {
            for (String i : indexes) {
                for (String p : paths) {
                    configs.add(new String[] {f, i, p});
                }
            }
        }
        // the warm-up runs put the first two batches only: enough for the JIT, and cheaper
        Records warmupRecords = warmup > 0 ? new Records(raw, 2 * batch) : null;
        raw = null;
        // A queue's share of a batch goes in with one put, as the Python store takes a batch in one
        // call: maxMessageSize (4 MiB by default, which also bounds a producer's batch) is raised to
        // hold it, which gives RocketMQ fewer, larger puts than a broker would see.
        int maxMessageSize = Math.max(4 << 20, largestBatchSlice(records, batch) + (64 << 10));
        try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(Path.of(a.get("results"))))) {
            // Unrecorded warm-up runs: the JIT compiles the put paths before any figure is taken.
            for (int w = 0; w < warmup; w++) {
                for (String p : paths) {
                    Run run = new Run(warmupRecords, first, new File(root, "warmup"), segment, batch, maxMessageSize,
                            "async", true, p, haPort);
                    run.execute(0, false);
                }
            }
            // The configurations take turns within each round, in a rotating order, so a drift in
            // the shared machine's speed falls on all of them alike.
            for (int r = 0; r < runs; r++) {
                for (int k = 0; k < configs.size(); k++) {
                    String[] c = configs.get((k + r) % configs.size());
                    Run run = new Run(records, first, new File(root, "run-" + r + "-" + k), segment, batch,
                            maxMessageSize, c[0], c[1].equals("on"), c[2], haPort);
                    out.println(run.execute(samples, keep));
                    out.flush();
                }
            }
        }
    }

    /** The wire size of the largest one-queue slice of a batch: the store's maxMessageSize must hold it. */
    static int largestBatchSlice(Records r, int batch) {
        int largest = 0;
        for (int s = 0; s < r.n; s += batch) {
            Map<Integer, Integer> bytes = new HashMap<>();
            for (int i = s; i < Math.min(r.n, s + batch); i++) {
                int len = 4 + 4 + 4 + 4 + 4 + r.bodies[i].length + 2 + r.properties[i].length();
                bytes.merge(r.queueIds[i], len, Integer::sum);
            }
            for (int v : bytes.values()) {
                largest = Math.max(largest, v);
            }
        }
        return largest;
    }

    static final class Run {
        final Records records;
        final Records first;
        final File dir;
        final int segment;
        final int batch;
        final int maxMessageSize;
        final String flush;
        final boolean index;
        final String path;
        final int haPort;

        Run(Records records, Records first, File dir, int segment, int batch, int maxMessageSize, String flush,
            boolean index, String path, int haPort) {
            this.records = records;
            this.first = first;
            this.dir = dir;
            this.segment = segment;
            this.batch = batch;
            this.maxMessageSize = maxMessageSize;
            this.flush = flush;
            this.index = index;
            this.path = path;
            this.haPort = haPort;
        }

        MessageStoreConfig config() {
            MessageStoreConfig c = new MessageStoreConfig();
            c.setStorePathRootDir(dir.getPath());
            c.setStorePathCommitLog(new File(dir, "commitlog").getPath());
            c.setMappedFileSizeCommitLog(segment);
            c.setFlushDiskType(flush.equals("sync") ? FlushDiskType.SYNC_FLUSH : FlushDiskType.ASYNC_FLUSH);
            // a put waits for its flush as long as ours does: the 5 s default answers FLUSH_DISK_TIMEOUT
            // (the message stored, the wait given up) on a busy disk, which is not a refusal to measure
            c.setSyncFlushTimeout(120_000);
            c.setMessageIndexEnable(index);
            c.setWarmMapedFileEnable(true);
            c.setMaxMessageSize(maxMessageSize);
            c.setHaListenPort(haPort);
            c.setDiskFallRecorded(false);
            return c;
        }

        DefaultMessageStore open() throws Exception {
            BrokerConfig bc = new BrokerConfig();
            bc.setLongPollingEnable(false);   // no consumers wait on this store
            DefaultMessageStore store = StoreCompat.open(config(), bc, records.topic, 1 + maxQueue(records));
            if (!store.load()) {
                throw new IllegalStateException("DefaultMessageStore.load() failed in " + dir);
            }
            store.start();
            return store;
        }

        String execute(int samples, boolean keep) throws Exception {
            deleteTree(dir);
            DefaultMessageStore store = open();
            long t0;
            long tPut;
            long t1;
            try {
                putFirst(store);
                awaitDispatched(store);
                awaitAllocations(store);
                List<MessageExtBatch[]> batched = path.equals("batch") ? batches() : null;
                List<MessageExt[]> singles = batched == null ? singlesByBatch() : null;
                t0 = System.nanoTime();
                if (batched != null) {
                    for (MessageExtBatch[] perQueue : batched) {
                        List<CompletableFuture<PutMessageResult>> fs = new ArrayList<>(perQueue.length);
                        for (MessageExtBatch mb : perQueue) {
                            fs.add(store.asyncPutMessages(mb));
                        }
                        for (CompletableFuture<PutMessageResult> f : fs) {
                            check(f.join());
                        }
                    }
                } else {
                    for (MessageExt[] group : singles) {
                        for (CompletableFuture<PutMessageResult> f : putSingles(store, group)) {
                            check(f.join());
                        }
                    }
                }
                tPut = System.nanoTime();
                awaitDispatched(store);
                t1 = System.nanoTime();
            } finally {
                store.shutdown();
            }
            StringBuilder json = new StringBuilder(4096);
            json.append("{\"version\":\"").append(MQVersion.getVersionDesc(MQVersion.CURRENT_VERSION)).append("\",\"path\":\"").append(path)
                .append("\",\"flush\":\"").append(flush).append("\",\"index\":").append(index)
                .append(",\"messages\":").append(records.n)
                .append(",\"seconds\":").append((t1 - t0) / 1e9)
                .append(",\"put_seconds\":").append((tPut - t0) / 1e9)
                .append(",\"max_message_size\":").append(maxMessageSize);
            if (samples > 0) {
                readBack(json, samples);
            }
            json.append('}');
            if (!keep) {
                deleteTree(dir);
            }
            return json.toString();
        }

        /** The warm-up records, before the clock. Creating the first segment can outlast the store's
         * 5 s wait when warmMapedFileEnable writes it out on a busy disk (SYNC_FLUSH forces every
         * 16 MiB): the put then fails (CREATE_MAPPED_FILE_FAILED) while the segment is still being
         * made, and is retried, as a producer would. */
        void putFirst(DefaultMessageStore store) throws InterruptedException {
            long deadline = System.nanoTime() + 300_000_000_000L;
            for (MessageExt m : singles(first, 0, first.n)) {
                PutMessageResult r = StoreCompat.put(store, m).join();
                // CREATE_MAPEDFILE_FAILED in 4.9, CREATE_MAPPED_FILE_FAILED in 5.x
                while (r.getPutMessageStatus().name().startsWith("CREATE_MAP") && System.nanoTime() < deadline) {
                    Thread.sleep(100);
                    r = StoreCompat.put(store, m).join();
                }
                check(r);
            }
        }

        /** Reopen the store and print what it serves: offsets per queue, sampled messages, index hits. */
        void readBack(StringBuilder json, int samples) throws Exception {
            DefaultMessageStore store = open();
            try {
                int queues = 1 + maxQueue(records);
                json.append(",\"max_phy_offset\":").append(store.getMaxPhyOffset()).append(",\"queues\":[");
                long[] max = new long[queues];
                for (int q = 0; q < queues; q++) {
                    long min = store.getMinOffsetInQueue(records.topic, q);
                    max[q] = store.getMaxOffsetInQueue(records.topic, q);
                    json.append(q == 0 ? "" : ",").append('[').append(min).append(',').append(max[q]).append(']');
                }
                json.append("],\"samples\":[");
                boolean firstSample = true;
                for (int q = 0; q < queues; q++) {
                    for (int k = 0; k < samples && max[q] > 0; k++) {
                        long off = samples == 1 ? 0 : Math.round(k * (max[q] - 1) / (double) (samples - 1));
                        json.append(firstSample ? "" : ",");
                        firstSample = false;
                        sample(store, json, q, off);
                    }
                }
                json.append(']');
            } finally {
                store.shutdown();
            }
        }

        void sample(DefaultMessageStore store, StringBuilder json, int q, long off) {
            json.append("{\"queue\":").append(q).append(",\"offset\":").append(off);
            GetMessageResult got = store.getMessage(GROUP, records.topic, q, off, 1, null);
            try {
                json.append(",\"status\":\"").append(got.getStatus()).append('"');
                if (got.getStatus() != GetMessageStatus.FOUND || got.getMessageBufferList().isEmpty()) {
                    json.append('}');
                    return;
                }
                MessageExt m = MessageDecoder.decode(got.getMessageBufferList().get(0));
                CRC32 crc = new CRC32();
                crc.update(m.getBody());
                json.append(",\"queue_offset\":").append(m.getQueueOffset())
                    .append(",\"body_crc32\":").append(crc.getValue())
                    .append(",\"keys\":\"").append(m.getKeys()).append('"')
                    .append(",\"uniq_key\":\"").append(m.getProperty("UNIQ_KEY")).append('"');
                json.append(",\"by_keys\":");
                hits(store, json, m.getKeys());
                json.append(",\"by_uniq_key\":");
                hits(store, json, m.getProperty("UNIQ_KEY"));
            } finally {
                got.release();
            }
            json.append('}');
        }

        /** [queue, queue offset] of every message the index finds by ``key``. */
        void hits(DefaultMessageStore store, StringBuilder json, String key) {
            json.append('[');
            if (key != null) {
                QueryMessageResult found = store.queryMessage(records.topic, key, 64, 0, Long.MAX_VALUE);
                try {
                    boolean firstHit = true;
                    for (ByteBuffer buf : found.getMessageBufferList()) {
                        MessageExt m = MessageDecoder.decode(buf, false, false);
                        json.append(firstHit ? "" : ",").append('[').append(m.getQueueId()).append(',')
                            .append(m.getQueueOffset()).append(']');
                        firstHit = false;
                    }
                } finally {
                    found.release();
                }
            }
            json.append(']');
        }

        /** One MessageExtBatch per queue per batch, as producers' batches arrive at a broker. */
        List<MessageExtBatch[]> batches() {
            List<MessageExtBatch[]> out = new ArrayList<>();
            for (int s = 0; s < records.n; s += batch) {
                Map<Integer, List<Message>> byQueue = new java.util.TreeMap<>();
                Map<Integer, Long> born = new HashMap<>();
                for (int i = s; i < Math.min(records.n, s + batch); i++) {
                    Message m = new Message(records.topic, records.bodies[i]);
                    m.setFlag(records.flags[i]);
                    MessageAccessor.setProperties(m, MessageDecoder.string2messageProperties(records.properties[i]));
                    byQueue.computeIfAbsent(records.queueIds[i], k -> new ArrayList<>()).add(m);
                    born.putIfAbsent(records.queueIds[i], records.bornTimestamps[i]);
                }
                MessageExtBatch[] perQueue = new MessageExtBatch[byQueue.size()];
                int k = 0;
                for (Map.Entry<Integer, List<Message>> e : byQueue.entrySet()) {
                    MessageExtBatch mb = new MessageExtBatch();
                    mb.setTopic(records.topic);
                    mb.setQueueId(e.getKey());
                    mb.setSysFlag(0);
                    mb.setBornTimestamp(born.get(e.getKey()));
                    mb.setBornHost(BORN_HOST);
                    mb.setStoreHost(STORE_HOST);
                    mb.setBody(MessageDecoder.encodeMessages(e.getValue()));
                    perQueue[k++] = mb;
                }
                out.add(perQueue);
            }
            return out;
        }

        List<MessageExt[]> singlesByBatch() {
            List<MessageExt[]> out = new ArrayList<>();
            for (int s = 0; s < records.n; s += batch) {
                out.add(singles(records, s, Math.min(records.n, s + batch)));
            }
            return out;
        }

        static MessageExt[] singles(Records r, int from, int to) {
            MessageExt[] out = new MessageExt[to - from];
            for (int i = from; i < to; i++) {
                MessageExt m = StoreCompat.inner(r.properties[i]);
                m.setTopic(r.topic);
                m.setQueueId(r.queueIds[i]);
                m.setFlag(r.flags[i]);
                m.setBody(r.bodies[i]);
                m.setBornTimestamp(r.bornTimestamps[i]);
                m.setBornHost(BORN_HOST);
                m.setStoreHost(STORE_HOST);
                m.setSysFlag(0);
                m.setReconsumeTimes(0);
                out[i - from] = m;
            }
            return out;
        }

        static List<CompletableFuture<PutMessageResult>> putSingles(DefaultMessageStore store, MessageExt[] msgs) {
            List<CompletableFuture<PutMessageResult>> fs = new ArrayList<>(msgs.length);
            for (MessageExt m : msgs) {
                fs.add(StoreCompat.put(store, m));
            }
            return fs;
        }

        void check(PutMessageResult r) {
            if (r == null || r.getPutMessageStatus() != PutMessageStatus.PUT_OK) {
                throw new IllegalStateException("RocketMQ's store refused a put (" + path + ", " + flush + "): "
                        + (r == null ? "no result" : r.getPutMessageStatus()));
            }
        }
    }

    static int maxQueue(Records r) {
        int m = 0;
        for (int q : r.queueIds) {
            m = Math.max(m, q);
        }
        return m;
    }

    /** Until the reput service has dispatched all the commit log holds (consume queues, index). */
    static void awaitDispatched(DefaultMessageStore store) throws InterruptedException {
        while (store.dispatchBehindBytes() > 0) {
            Thread.sleep(0, 200_000);
        }
    }

    /** Until the AllocateMappedFileService has created (and warmed) the segments it was asked for
     * ahead: the next segment after the first, which it pre-allocates in the background. */
    static void awaitAllocations(DefaultMessageStore store) throws Exception {
        Object service = store.getAllocateMappedFileService();
        java.lang.reflect.Field table = service.getClass().getDeclaredField("requestTable");
        table.setAccessible(true);
        for (Object request : ((Map<?, ?>) table.get(service)).values()) {
            java.lang.reflect.Method latch = request.getClass().getDeclaredMethod("getCountDownLatch");
            latch.setAccessible(true);
            ((java.util.concurrent.CountDownLatch) latch.invoke(request)).await();
        }
    }

    static void deleteTree(File f) throws IOException {
        File[] children = f.listFiles();
        if (children != null) {
            for (File c : children) {
                deleteTree(c);
            }
        }
        Files.deleteIfExists(f.toPath());
    }
}
