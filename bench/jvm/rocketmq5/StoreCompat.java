import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.TopicFilterType;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/** The few things RocketStorePeer needs that rocketmq-store 5.x spells its own way. */
final class StoreCompat {
    private StoreCompat() {
    }

    static DefaultMessageStore open(MessageStoreConfig config, BrokerConfig broker, String topic, int queues)
            throws java.io.IOException {
        // 5.x reads topics' settings (their consume queue type among them) from the broker's topic table
        ConcurrentHashMap<String, TopicConfig> topics = new ConcurrentHashMap<>();
        topics.put(topic, new TopicConfig(topic, queues, queues));
        return new DefaultMessageStore(config, new BrokerStatsManager(broker.getBrokerClusterName(), false),
                null, broker, topics);
    }

    /** A MessageExtBrokerInner (a class of rocketmq-common since 5.0) as a broker hands it to the store. */
    static MessageExt inner(String properties) {
        MessageExtBrokerInner m = new MessageExtBrokerInner();
        MessageAccessor.setProperties(m, MessageDecoder.string2messageProperties(properties));
        m.setPropertiesString(properties);
        m.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(TopicFilterType.SINGLE_TAG, m.getTags()));
        return m;
    }

    static CompletableFuture<PutMessageResult> put(DefaultMessageStore store, MessageExt message) {
        return store.asyncPutMessage((MessageExtBrokerInner) message);
    }
}
