#!/usr/bin/env bash
# The image's entry point.
#   entrypoint.sh driver|executor ...   the roles Spark on Kubernetes starts its pods with (what the
#                                       official Spark image's entrypoint does for them)
#   entrypoint.sh ARGS ...              `commitlog ARGS ...` (run, replay, stat, verify, ...)
set -euo pipefail

spark_home="${SPARK_HOME:-$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}"

case "${1:-}" in
    driver)
        shift
        # spark-submit in the driver pod, in client mode against the Kubernetes API.
        exec "$spark_home/bin/spark-submit" \
            --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:-0.0.0.0}" \
            --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS:-}" \
            --deploy-mode client "$@"
        ;;
    executor)
        shift
        # The driver passes the executor's JVM options as SPARK_JAVA_OPT_0, _1, ... in order.
        java_opts=()
        while IFS= read -r opt; do java_opts+=("$opt"); done < <(
            env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
        exec java -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
            "${java_opts[@]}" \
            -cp "${SPARK_CLASSPATH:-$spark_home/jars/*}:$spark_home/jars/*" \
            org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
            --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" \
            --cores "$SPARK_EXECUTOR_CORES" --app-id "$SPARK_APPLICATION_ID" \
            --hostname "$SPARK_EXECUTOR_POD_IP" --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
            --podName "${SPARK_EXECUTOR_POD_NAME:-}"
        ;;
    *)
        exec commitlog "$@"
        ;;
esac
