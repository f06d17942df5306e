import java.util.concurrent.CompletableFuture;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicFilterType;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.MessageExtBrokerInner;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/** The few things RocketStorePeer needs that rocketmq-store 4.9.x spells its own way. */
final class StoreCompat {
    private StoreCompat() {
    }

    static DefaultMessageStore open(MessageStoreConfig config, BrokerConfig broker, String topic, int queues)
            throws java.io.IOException {
        return new DefaultMessageStore(config, new BrokerStatsManager(broker.getBrokerClusterName(), false),
                null, broker);
    }

    /** A MessageExtBrokerInner with the properties and tags code a broker's SendMessageProcessor sets. */
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
