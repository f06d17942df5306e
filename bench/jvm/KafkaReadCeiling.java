import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * bench/kafka_ceilings.py's JVM ceiling: Apache Kafka's own KafkaConsumer (the kafka jar set)
 * reading every partition of TOPIC (or of each topic of a comma-separated list) from the start,
 * PASSES times in one JVM, each pass with a
 * fresh consumer; the passes before the last warm the JIT up, as Spark's long-lived JVM is.
 * The settings are the consumer's defaults, with kafka-consumer-perf-test's 2 MiB receive buffer.
 *
 * Usage: KafkaReadCeiling BOOTSTRAP TOPIC RECORDS PASSES
 * Prints one line per pass: "pass SECONDS RECORDS VALUE_BYTES": the clock runs from the first
 * records a poll returns to the last (the consumer's connection and first fetch are left out, as
 * Spark's sustained rate leaves out a query's start), RECORDS counts those after the first poll.
 */
public final class KafkaReadCeiling {
    public static void main(String[] args) {
        int status = 0;
        try {
            for (int p = 0; p < Integer.parseInt(args[3]); p++) {
                readAll(args[0], args[1], Long.parseLong(args[2]));
            }
        } catch (Exception e) {
            e.printStackTrace();
            status = 1;
        }
        System.exit(status);
    }

    static void readAll(String bootstrap, String topic, long expected) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.RECEIVE_BUFFER_CONFIG, String.valueOf(2 << 20));
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (String name : topic.split(",")) {
                for (PartitionInfo info : consumer.partitionsFor(name, Duration.ofSeconds(30))) {
                    partitions.add(new TopicPartition(name, info.partition()));
                }
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            long read = 0;
            long counted = 0;
            long valueBytes = 0;
            long t0 = 0;
            long deadline = System.nanoTime() + 300_000_000_000L;
            while (read < expected) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("read " + read + " of " + expected + " records of " + topic
                            + " in 300 s");
                }
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    read++;
                    valueBytes += r.value() == null ? 0 : r.value().length;
                }
                if (t0 == 0 && read > 0) {
                    t0 = System.nanoTime();
                } else if (t0 != 0) {
                    counted += records.count();
                }
            }
            long t1 = System.nanoTime();
            if (read != expected || counted == 0) {
                throw new IllegalStateException("read " + read + " records of " + topic + ", which holds " + expected
                        + " (" + counted + " after the first poll)");
            }
            System.out.println("pass " + (t1 - t0) / 1e9 + " " + counted + " " + valueBytes);
        }
    }
}
