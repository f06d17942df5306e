/*
 * RocketMQ's own clients, for the tests (tests/helpers/brokers/rocketmq.py compiles this against each jar set and runs
 * one command per JVM). Every command prints what it got as JSON lines; the checks live in Python.
 *
 *   pull  NAMESRV GROUP TOPIC...                  DefaultMQPullConsumer over every queue, offset 0 to the end
 *   lite  NAMESRV GROUP EXPECTED IDLE_MS TOPIC... DefaultLitePullConsumer subscribed from the first offset
 *   push  NAMESRV GROUP EXPECTED IDLE_MS TOPIC... DefaultMQPushConsumer from the first offset
 *   query NAMESRV                                 stdin lines "key|uniq|view <TAB> topic <TAB> key-or-msgId":
 *                                                 DefaultMQAdminExt.queryMessage, queryMessageByUniqKey, viewMessage
 *   send  NAMESRV GROUP                           stdin lines "kind topic tags keys delayLevel propsB64 bodyB64"
 *                                                 (tab-separated; kind normal | commit | rollback): sent, and
 *                                                 each SendResult printed with the send's time (sendUs)
 *
 * A consumer stops once it has EXPECTED messages and nothing came for IDLE_MS, or nothing came for
 * IDLE_MS * 4 (then the Python side sees the shortfall). Stays a client of both 4.9 and 5.x: only APIs
 * both have.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.impl.MQAdminImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class RocketClients {
    private static final PrintStream OUT = new PrintStream(System.out, false);
    // a loaded test machine answers slower than RocketMQ's 3 s default
    private static final int API_TIMEOUT_MS = 30_000;

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable e) {
            OUT.flush();
            e.printStackTrace();
            System.exit(1);    // the clients' non-daemon threads would keep a failed JVM too
        }
    }

    static void run(String[] args) throws Exception {
        String cmd = args[0];
        String namesrv = args[1];
        switch (cmd) {
            case "pull": pull(namesrv, args[2], tail(args, 3)); break;
            case "lite": lite(namesrv, args[2], Long.parseLong(args[3]), Long.parseLong(args[4]), tail(args, 5)); break;
            case "push": push(namesrv, args[2], Long.parseLong(args[3]), Long.parseLong(args[4]), tail(args, 5)); break;
            case "query": query(namesrv); break;
            case "send": send(namesrv, args[2]); break;
            default: throw new IllegalArgumentException("unknown command " + cmd);
        }
        OUT.flush();
        System.exit(0);   // the clients' non-daemon threads would keep the JVM
    }

    private static String[] tail(String[] a, int from) {
        String[] out = new String[a.length - from];
        System.arraycopy(a, from, out, 0, out.length);
        return out;
    }

    // --- consuming ------------------------------------------------------------------------------
    static void pull(String namesrv, String group, String[] topics) throws Exception {
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setMqClientApiTimeout(API_TIMEOUT_MS);
        consumer.start();
        for (String topic : topics) {
            for (MessageQueue mq : consumer.fetchSubscribeMessageQueues(topic)) {
                long offset = 0;
                int retries = 0;
                while (true) {
                    PullResult r = consumer.pull(mq, "*", offset, 32);
                    if (r.getPullStatus() == org.apache.rocketmq.client.consumer.PullStatus.NO_MATCHED_MSG
                        && r.getNextBeginOffset() == offset && ++retries > 100) {
                        // the broker says "retry immediately" (PULL_RETRY_IMMEDIATELY) and never moves on
                        OUT.println("{\"queue\":" + quote(mq.getTopic()) + ",\"queueId\":" + mq.getQueueId()
                            + ",\"status\":\"STUCK\",\"next\":" + offset + ",\"max\":" + r.getMaxOffset() + "}");
                        break;
                    }
                    switch (r.getPullStatus()) {
                        case FOUND:
                            for (MessageExt m : r.getMsgFoundList()) emit("pull", m);
                            break;
                        case NO_MATCHED_MSG:
                            break;
                        default:   // NO_NEW_MSG at the end; OFFSET_ILLEGAL is reported below
                            OUT.println("{\"queue\":" + quote(mq.getTopic()) + ",\"queueId\":" + mq.getQueueId()
                                + ",\"status\":" + quote(r.getPullStatus().name()) + ",\"next\":" + r.getNextBeginOffset()
                                + ",\"max\":" + r.getMaxOffset() + "}");
                    }
                    if (r.getPullStatus() != org.apache.rocketmq.client.consumer.PullStatus.FOUND
                        && r.getPullStatus() != org.apache.rocketmq.client.consumer.PullStatus.NO_MATCHED_MSG) break;
                    offset = r.getNextBeginOffset();
                }
            }
        }
        consumer.shutdown();
    }

    // How long a subscribing consumer waits with nothing new before it stops: idleMs once it has every
    // message; while some are missing, a whole rebalance interval more. Each topic is rebalanced on its
    // own, and one whose first rebalance finds the group's heartbeat not yet taken comes again only after
    // RebalanceService's 20 s, however many messages the other topics have given.
    static long patience(long got, long expected, long idleMs) {
        return got >= expected ? idleMs : Math.max(idleMs * 4, FIRST_REBALANCE_MS + idleMs);
    }

    static final long FIRST_REBALANCE_MS = 20_000;

    static void lite(String namesrv, String group, long expected, long idleMs, String[] topics) throws Exception {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setMqClientApiTimeout(API_TIMEOUT_MS);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        for (String topic : topics) consumer.subscribe(topic, "*");
        consumer.start();
        long got = 0, last = System.currentTimeMillis();
        while (true) {
            List<MessageExt> batch = consumer.poll(500);
            long now = System.currentTimeMillis();
            if (!batch.isEmpty()) {
                for (MessageExt m : batch) emit("lite", m);
                got += batch.size();
                last = now;
            } else if (now - last > patience(got, expected, idleMs)) {
                break;
            }
        }
        consumer.shutdown();
    }

    static void push(String namesrv, String group, long expected, long idleMs, String[] topics) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setMqClientApiTimeout(API_TIMEOUT_MS);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        for (String topic : topics) consumer.subscribe(topic, "*");
        final AtomicLong got = new AtomicLong(), last = new AtomicLong(System.currentTimeMillis());
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            synchronized (OUT) {
                for (MessageExt m : msgs) emit("push", m);
            }
            got.addAndGet(msgs.size());
            last.set(System.currentTimeMillis());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        while (true) {
            Thread.sleep(200);
            long idle = System.currentTimeMillis() - last.get();
            if (idle > patience(got.get(), expected, idleMs)) break;
        }
        consumer.shutdown();
    }

    // --- looking up ---------------------------------------------------------------------------
    static void query(String namesrv) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setMqClientApiTimeout(API_TIMEOUT_MS);
        admin.start();
        // queryMessageByUniqKey(topic, key, maxNum, begin, end) is MQAdminImpl's in both versions
        DefaultMQProducer lookup = new DefaultMQProducer("commitlog-tests-lookup");
        lookup.setNamesrvAddr(namesrv);
        lookup.setMqClientApiTimeout(API_TIMEOUT_MS);
        lookup.start();
        MQAdminImpl impl = lookup.getDefaultMQProducerImpl().getMqClientFactory().getMQAdminImpl();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) continue;
            String[] f = line.split("\t", -1);
            List<MessageExt> found = new ArrayList<>();
            String error = null;
            try {
                if (f[0].equals("key")) {
                    found.addAll(admin.queryMessage(f[1], f[2], 64, 0, Long.MAX_VALUE).getMessageList());
                } else if (f[0].equals("uniq")) {
                    QueryResult r = impl.queryMessageByUniqKey(f[1], f[2], 32, 0, Long.MAX_VALUE);
                    found.addAll(r.getMessageList());
                } else {
                    MessageExt m = admin.viewMessage(f[1], f[2]);
                    if (m != null) found.add(m);
                }
            } catch (Exception e) {
                error = e.toString();
            }
            StringBuilder sb = new StringBuilder("{\"kind\":").append(quote(f[0])).append(",\"topic\":")
                .append(quote(f[1])).append(",\"key\":").append(quote(f[2])).append(",\"error\":")
                .append(error == null ? "null" : quote(error)).append(",\"found\":[");
            for (int i = 0; i < found.size(); i++) sb.append(i > 0 ? "," : "").append(json(found.get(i)));
            OUT.println(sb.append("]}"));
        }
        lookup.shutdown();
        admin.shutdown();
    }

    // --- producing ----------------------------------------------------------------------------
    static void send(String namesrv, String group) throws Exception {
        TransactionMQProducer producer = new TransactionMQProducer(group);
        producer.setNamesrvAddr(namesrv);
        producer.setMqClientApiTimeout(API_TIMEOUT_MS);
        producer.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return "rollback".equals(arg) ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.COMMIT_MESSAGE;
            }

            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        producer.setSendMsgTimeout(API_TIMEOUT_MS);
        producer.start();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        int n = 0;
        java.util.Set<String> routed = new java.util.HashSet<>();
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) continue;
            String[] f = line.split("\t", -1);
            if (routed.add(f[1])) awaitRoute(producer, f[1]);
            Message msg = new Message(f[1], Base64.getDecoder().decode(f[6]));
            if (!f[2].isEmpty()) msg.setTags(f[2]);
            if (!f[3].isEmpty()) msg.setKeys(f[3]);
            if (!f[4].equals("0")) msg.setDelayTimeLevel(Integer.parseInt(f[4]));
            String props = new String(Base64.getDecoder().decode(f[5]), StandardCharsets.UTF_8);
            for (Map.Entry<String, String> e : MessageDecoder.string2messageProperties(props).entrySet()) {
                msg.putUserProperty(e.getKey(), e.getValue());
            }
            long began = System.nanoTime();
            SendResult r = f[0].equals("normal") ? producer.send(msg) : producer.sendMessageInTransaction(msg, f[0]);
            long sendUs = (System.nanoTime() - began) / 1000;
            OUT.println("{\"n\":" + n++ + ",\"kind\":" + quote(f[0]) + ",\"status\":" + quote(r.getSendStatus().name())
                + ",\"sendUs\":" + sendUs
                + ",\"msgId\":" + quote(r.getMsgId()) + ",\"offsetMsgId\":" + quote(r.getOffsetMsgId())
                + ",\"queueId\":" + r.getMessageQueue().getQueueId() + ",\"queueOffset\":" + r.getQueueOffset()
                + ",\"transactionState\":" + quote(String.valueOf(r.getSendStatus())) + "}");
        }
        producer.shutdown();
    }

    /** A send looks its topic's route up under a lock it waits 3 s for, and fails: a NameServer on a
     * loaded machine can take longer to answer the first request. Wait for the route first. */
    static void awaitRoute(DefaultMQProducer producer, String topic) throws Exception {
        long deadline = System.currentTimeMillis() + API_TIMEOUT_MS * 4L;
        while (true) {
            try {
                if (!producer.fetchPublishMessageQueues(topic).isEmpty()) return;
            } catch (Exception e) {
                if (System.currentTimeMillis() > deadline) throw e;
            }
            Thread.sleep(500);
        }
    }

    // --- JSON ---------------------------------------------------------------------------------
    static void emit(String via, MessageExt m) {
        OUT.println("{\"via\":" + quote(via) + "," + json(m).substring(1));
    }

    static String json(MessageExt m) {
        Map<String, String> props = new TreeMap<>(m.getProperties());
        StringBuilder p = new StringBuilder("{");
        for (Map.Entry<String, String> e : props.entrySet()) {
            if (p.length() > 1) p.append(',');
            p.append(quote(e.getKey())).append(':').append(quote(e.getValue()));
        }
        p.append('}');
        byte[] body = m.getBody();
        return "{\"topic\":" + quote(m.getTopic()) + ",\"queueId\":" + m.getQueueId() + ",\"queueOffset\":"
            + m.getQueueOffset() + ",\"commitLogOffset\":" + m.getCommitLogOffset() + ",\"msgId\":"
            + quote(m.getMsgId()) + ",\"offsetMsgId\":" + quote(offsetMsgId(m)) + ",\"keys\":" + quote(m.getKeys())
            + ",\"tags\":" + quote(m.getTags()) + ",\"sysFlag\":" + m.getSysFlag() + ",\"flag\":" + m.getFlag()
            + ",\"bornTimestamp\":" + m.getBornTimestamp() + ",\"storeTimestamp\":" + m.getStoreTimestamp()
            + ",\"reconsumeTimes\":" + m.getReconsumeTimes() + ",\"bodyCRC\":" + m.getBodyCRC()
            + ",\"body\":" + (body == null ? "null" : quote(Base64.getEncoder().encodeToString(body)))
            + ",\"properties\":" + p + "}";
    }

    static String offsetMsgId(MessageExt m) {
        try {
            return MessageDecoder.createMessageId(m.getStoreHost(), m.getCommitLogOffset());
        } catch (Exception e) {
            return null;
        }
    }

    static String quote(String s) {
        if (s == null) return "null";
        StringBuilder sb = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') sb.append('\\').append(c);
            else if (c < 0x20 || (c >= 0xD800 && c <= 0xDFFF)) sb.append(String.format("\\u%04x", (int) c));
            else sb.append(c);
        }
        return sb.append('"').toString();
    }
}
