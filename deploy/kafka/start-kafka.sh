#!/usr/bin/env bash
# One KRaft node, broker and controller in one JVM, as Kafka's own scripts start it: the storage
# formatted once (kafka.tools.StorageTool), then kafka.Kafka. Settings: a single-node default (one
# replica and one partition for every internal topic), then each KAFKA_FOO_BAR variable as foo.bar
# (apache/kafka's convention: `__` stands for `_`, `___` for `-`). KAFKA_HEAP_OPTS, KAFKA_JVM_OPTS,
# CLUSTER_ID and SERVER_PROPERTIES (where the file goes) are not settings.
set -euo pipefail

props="${SERVER_PROPERTIES:-/opt/kafka/config/server.properties}"   # the test writes elsewhere
declare -A settings=(
    [process.roles]=broker,controller
    [node.id]=1
    [listeners]=PLAINTEXT://:9092,CONTROLLER://:9093
    [advertised.listeners]=PLAINTEXT://localhost:9092
    [controller.listener.names]=CONTROLLER
    [listener.security.protocol.map]=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
    [inter.broker.listener.name]=PLAINTEXT
    [offsets.topic.replication.factor]=1
    [transaction.state.log.replication.factor]=1
    [transaction.state.log.min.isr]=1
    [share.coordinator.state.topic.replication.factor]=1
    [share.coordinator.state.topic.min.isr]=1
    [group.initial.rebalance.delay.ms]=0
)
for var in $(compgen -e); do
    case "$var" in
        KAFKA_HEAP_OPTS|KAFKA_JVM_OPTS) continue ;;
        KAFKA_*) ;;
        *) continue ;;
    esac
    key="${var#KAFKA_}"
    key="${key,,}"
    key="${key//___/-}"
    key="${key//__/@}"
    key="${key//_/.}"
    settings["${key//@/_}"]="${!var}"
done
# The controller quorum: the voters named, else this node alone (the controller listener's port).
if [ -z "${settings[controller.quorum.voters]:-}" ] && [ -z "${settings[controller.quorum.bootstrap.servers]:-}" ]; then
    controller="$(tr ',' '\n' <<<"${settings[listeners]}" | grep '^CONTROLLER://' | sed 's|^CONTROLLER://||')"
    settings[controller.quorum.bootstrap.servers]="${controller/#:/localhost:}"
fi
: > "$props"
for key in "${!settings[@]}"; do echo "$key=${settings[$key]}" >> "$props"; done

jvm=(java ${KAFKA_HEAP_OPTS:--Xms256m -Xmx1g} ${KAFKA_JVM_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true}
     -Dlog4j2.configurationFile=/opt/kafka/bin/log4j2.properties -cp '/opt/kafka/libs/*')
logs="${settings[log.dirs]}"
if [ ! -e "${logs%%,*}/meta.properties" ]; then
    id="${CLUSTER_ID:-}"
    while [ -z "$id" ] || [ "${id:0:1}" = - ]; do   # a Kafka Uuid: 16 random bytes, URL-safe base64
        id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
    done
    standalone=()
    [ -n "${settings[controller.quorum.voters]:-}" ] || standalone=(--standalone)
    "${jvm[@]}" kafka.tools.StorageTool format "${standalone[@]}" --cluster-id "$id" --config "$props" >/dev/null
fi
exec "${jvm[@]}" kafka.Kafka "$props"
