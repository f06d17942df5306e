import java.util.ArrayList;
import java.util.List;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * bench/wide_disk.py's producer: RocketMQ's own client sends, to every queue of topics
 * PREFIX0 .. PREFIX{topics-1} (each with QUEUES queues, on BROKER), PER messages of BODY bytes, one
 * batch per queue (the broker writes a batch's messages one after the other, as separate
 * messages in its commit log and consume queue). Prints one JSON line: how many were sent.
 *
 * Usage: WideSend namesrv broker prefix topics queues per body
 */
public final class WideSend {
    private static final int BATCH_BYTES = 1 << 20;     // under the broker's maxMessageSize (4 MiB)

    public static void main(String[] args) throws Exception {
        String namesrv = args[0], broker = args[1], prefix = args[2];
        int topics = Integer.parseInt(args[3]), queues = Integer.parseInt(args[4]);
        int per = Integer.parseInt(args[5]), body = Integer.parseInt(args[6]);
        DefaultMQProducer producer = new DefaultMQProducer("wide-send");
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(30_000);
        producer.start();
        byte[] bytes = new byte[body];
        for (int i = 0; i < body; i++) bytes[i] = (byte) ('a' + i % 26);
        long sent = 0;
        int perBatch = Math.max(1, Math.min(per, BATCH_BYTES / (body + 200)));
        for (int t = 0; t < topics; t++) {
            for (int q = 0; q < queues; q++) {
                MessageQueue mq = new MessageQueue(prefix + t, broker, q);
                for (int done = 0; done < per; done += perBatch) {
                    List<Message> batch = new ArrayList<>();
                    for (int i = done; i < Math.min(per, done + perBatch); i++) {
                        batch.add(new Message(prefix + t, "", "k" + t + "-" + q + "-" + i, bytes));
                    }
                    SendResult r = batch.size() == 1 ? producer.send(batch.get(0), mq) : producer.send(batch, mq);
                    if (r.getSendStatus() != SendStatus.SEND_OK) {
                        throw new IllegalStateException("send to " + mq + ": " + r.getSendStatus());
                    }
                    sent += batch.size();
                }
            }
        }
        producer.shutdown();
        System.out.println("{\"sent\":" + sent + "}");
        System.exit(0);
    }
}
