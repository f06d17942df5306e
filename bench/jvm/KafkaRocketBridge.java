import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The Kafka-to-RocketMQ bridge a careful user writes (bench/bridge.py runs it): a KafkaConsumer
 * assigned every partition of a topic, from the group's committed offsets (else the earliest), and a
 * DefaultMQProducer sending each partition's records as batches (send(Collection, MessageQueue,
 * callback)) to the queue of the same number. One batch in flight per queue keeps a queue in the
 * partition's order while every queue has one in flight; a failed batch is sent again (at least once).
 * The group's Kafka offsets are committed after SEND_OK only, so a crash repeats records, never
 * skips them.
 *
 * A record becomes: body = value (RocketMQ refuses an empty body, so a null or empty value is the
 * one-byte body 0x00 marked KAFKA_VALUE=null|empty), KEYS = the key as UTF-8 text, a user property per
 * header whose value is non-empty UTF-8 text with no property separator and whose name is not a
 * system one (a repeated name keeps its last value; the others are dropped and counted), and the
 * provenance KAFKA_PARTITION, KAFKA_OFFSET, KAFKA_TIMESTAMP. The broker sets the born and store times.
 *
 * args: bootstrap topic namesrv rocketTopic brokerName group [batchMessages batchBytes]
 * prints: "assigned <partitions> <records to send>", "first <ms since main>", "acked <n>" every
 * 10 % of the records, then "done <ms since main> <ms since first record> <acked> <headers dropped>
 * <resends>", exit 0.
 */
public final class KafkaRocketBridge {
    private static final int POLL_RECORDS = 10_000;
    private static final byte[] PLACEHOLDER = {0};
    // RocketMQ's property separators: a value holding one would corrupt the properties string
    private static final char NAME_VALUE = 1;
    private static final char PROPERTY = 2;

    private final int batchMessages;
    private final int batchBytes;
    private final String rocketTopic;
    private final String brokerName;
    private final DefaultMQProducer producer;
    private final Map<Integer, Semaphore> inFlight = new HashMap<>();
    private final Map<Integer, Long> ackedUpTo = new HashMap<>();          // next offset, per partition
    private final ConcurrentLinkedQueue<long[]> acks = new ConcurrentLinkedQueue<>();
    private final AtomicReference<Throwable> failure = new AtomicReference<>();
    private final AtomicLong acked = new AtomicLong();
    private final AtomicLong resends = new AtomicLong();
    private long headersDropped;

    private KafkaRocketBridge(DefaultMQProducer producer, String rocketTopic, String brokerName, int batchMessages,
                              int batchBytes) {
        this.producer = producer;
        this.rocketTopic = rocketTopic;
        this.brokerName = brokerName;
        this.batchMessages = batchMessages;
        this.batchBytes = batchBytes;
    }

    private static final class Batch {
        final List<Message> messages = new ArrayList<>();
        long bytes;
        long lastOffset = -1;
    }

    public static void main(String[] args) throws Exception {
        long t0 = System.nanoTime();
        String bootstrap = args[0];
        String topic = args[1];
        String namesrv = args[2];
        String rocketTopic = args[3];
        String brokerName = args[4];
        String group = args[5];
        int batchMessages = args.length > 6 ? Integer.parseInt(args[6]) : 1000;
        int batchBytes = args.length > 7 ? Integer.parseInt(args[7]) : 256 * 1024;

        Properties kc = new Properties();
        kc.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        kc.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        kc.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        kc.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        kc.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, String.valueOf(POLL_RECORDS));
        kc.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, String.valueOf(4 << 20));
        kc.put(ConsumerConfig.RECEIVE_BUFFER_CONFIG, String.valueOf(1 << 20));
        kc.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        kc.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

        DefaultMQProducer producer = new DefaultMQProducer(group + "-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(30_000);
        producer.setRetryTimesWhenSendAsyncFailed(5);
        producer.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
        producer.start();
        KafkaRocketBridge bridge = new KafkaRocketBridge(producer, rocketTopic, brokerName, batchMessages, batchBytes);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(kc)) {
            bridge.run(consumer, topic, t0);
        } finally {
            producer.shutdown();
        }
    }

    private void run(KafkaConsumer<byte[], byte[]> consumer, String topic, long t0) throws Exception {
        List<TopicPartition> parts = new ArrayList<>();
        for (PartitionInfo p : consumer.partitionsFor(topic)) {
            parts.add(new TopicPartition(topic, p.partition()));
        }
        consumer.assign(parts);
        Map<TopicPartition, Long> end = consumer.endOffsets(parts);
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(new java.util.HashSet<>(parts));
        long toSend = 0;
        for (TopicPartition tp : parts) {
            OffsetAndMetadata c = committed.get(tp);
            long start;
            if (c != null) {
                consumer.seek(tp, c.offset());
                start = c.offset();
            } else {
                consumer.seekToBeginning(List.of(tp));
                start = consumer.position(tp);
            }
            inFlight.put(tp.partition(), new Semaphore(1));
            ackedUpTo.put(tp.partition(), start);
            toSend += end.get(tp) - start;
        }
        System.out.println("assigned " + parts.size() + " " + toSend);
        System.out.flush();
        long step = Math.max(1, toSend / 10);
        long nextReport = step;
        long first = -1;
        Map<Integer, Batch> open = new HashMap<>();
        while (!caughtUp(parts, end)) {
            checkFailure();
            ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
            if (first < 0 && !records.isEmpty()) {
                first = System.nanoTime();
                System.out.println("first " + (first - t0) / 1_000_000);
                System.out.flush();
            }
            for (ConsumerRecord<byte[], byte[]> r : records) {
                Batch b = open.computeIfAbsent(r.partition(), k -> new Batch());
                Message m = message(r);
                b.messages.add(m);
                b.bytes += m.getBody().length + 64 + (r.key() == null ? 0 : r.key().length);
                b.lastOffset = r.offset();
                if (b.messages.size() >= batchMessages || b.bytes >= batchBytes) {
                    inFlight.get(r.partition()).acquire();      // this queue's previous batch acknowledged
                    send(r.partition(), open.remove(r.partition()));
                }
            }
            // a partly filled batch goes as soon as its queue is free: the consumer is not held back
            for (Integer p : new ArrayList<>(open.keySet())) {
                if (inFlight.get(p).tryAcquire()) {
                    send(p, open.remove(p));
                }
            }
            commitAcked(consumer, topic);
            long n = acked.get();
            while (n >= nextReport && nextReport <= toSend) {
                System.out.println("acked " + n);
                System.out.flush();
                nextReport += step;
            }
        }
        for (Semaphore s : inFlight.values()) {
            s.acquire();
        }
        checkFailure();
        commitAcked(consumer, topic);
        long done = System.nanoTime();
        System.out.println("done " + (done - t0) / 1_000_000 + " " + (first < 0 ? 0 : (done - first) / 1_000_000)
                + " " + acked.get() + " " + headersDropped + " " + resends.get());
    }

    private boolean caughtUp(List<TopicPartition> parts, Map<TopicPartition, Long> end) {
        drainAcks();
        for (TopicPartition tp : parts) {
            if (ackedUpTo.get(tp.partition()) < end.get(tp)) {
                return false;
            }
        }
        return true;
    }

    private void drainAcks() {
        long[] a;
        while ((a = acks.poll()) != null) {
            ackedUpTo.put((int) a[0], a[1]);
        }
    }

    private void commitAcked(KafkaConsumer<byte[], byte[]> consumer, String topic) {
        drainAcks();
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (Map.Entry<Integer, Long> e : ackedUpTo.entrySet()) {
            offsets.put(new TopicPartition(topic, e.getKey()), new OffsetAndMetadata(e.getValue()));
        }
        consumer.commitSync(offsets);
    }

    private void checkFailure() {
        Throwable t = failure.get();
        if (t != null) {
            throw new IllegalStateException("a batch could not be sent: " + t, t);
        }
    }

    private void send(int partition, Batch batch) throws Exception {
        MessageQueue mq = new MessageQueue(rocketTopic, brokerName, partition);
        producer.send(batch.messages, mq, new SendCallback() {
            @Override
            public void onSuccess(SendResult result) {
                if (result.getSendStatus() != SendStatus.SEND_OK) {
                    onException(new IllegalStateException("send status " + result.getSendStatus()));
                    return;
                }
                acked.addAndGet(batch.messages.size());
                acks.add(new long[] {partition, batch.lastOffset + 1});
                inFlight.get(partition).release();
            }

            @Override
            public void onException(Throwable e) {
                // the producer's own retries are spent: send it again, still this queue's only batch
                resends.incrementAndGet();
                if (resends.get() > 100) {
                    failure.compareAndSet(null, e);
                    inFlight.get(partition).release();
                    return;
                }
                try {
                    send(partition, batch);
                } catch (Exception again) {
                    failure.compareAndSet(null, again);
                    inFlight.get(partition).release();
                }
            }
        }, 30_000);
    }

    private Message message(ConsumerRecord<byte[], byte[]> r) {
        byte[] value = r.value();
        Message m = new Message(rocketTopic, value == null || value.length == 0 ? PLACEHOLDER : value);
        if (value == null || value.length == 0) {
            m.putUserProperty("KAFKA_VALUE", value == null ? "null" : "empty");
        }
        if (r.key() != null && r.key().length > 0) {
            String key = text(r.key());
            if (key != null) {
                m.setKeys(key);
            }
        }
        for (Header h : r.headers()) {
            String v = h.value() == null || h.value().length == 0 ? null : text(h.value());
            if (v == null || v.isBlank() || h.key().isBlank() || MessageConst.STRING_HASH_SET.contains(h.key())
                    || h.key().startsWith("KAFKA_")) {
                headersDropped++;
                continue;
            }
            m.putUserProperty(h.key(), v);
        }
        m.putUserProperty("KAFKA_PARTITION", String.valueOf(r.partition()));
        m.putUserProperty("KAFKA_OFFSET", String.valueOf(r.offset()));
        m.putUserProperty("KAFKA_TIMESTAMP", String.valueOf(r.timestamp()));
        return m;
    }

    /** UTF-8 text with no property separator, else null (the bridge drops what a property would change). */
    private static String text(byte[] b) {
        try {
            String s = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT).decode(java.nio.ByteBuffer.wrap(b)).toString();
            return s.indexOf(NAME_VALUE) >= 0 || s.indexOf(PROPERTY) >= 0 ? null : s;
        } catch (CharacterCodingException e) {
            return null;
        }
    }
}
