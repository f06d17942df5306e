"""What a secured Apache Kafka refuses (tests/helpers/brokers/secured_kafka.py) ends ``run`` and ``replay`` in one
line naming the cause, exit 2, before Spark starts, for both sources, on a fresh store and on one
that already holds Kafka offsets: a wrong password, a truststore without the CA, a truststore path
that does not exist, a mechanism no client knows, one the listener does not offer, no client
certificate or one from a CA the broker does not trust, and bob, who may read nothing."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.jobs import job_config, run_until_caught_up, sample
from tests.helpers.brokers.kafka_records import produce
from tests.helpers.replays import new_topic
from tests.helpers.brokers.secured_kafka import TOPIC_PREFIX, Listener, SecuredKafka, secured_kafka  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=3)]

# generous: the refusal itself takes about a second and a CLI's start a few; a machine shared by many
# jobs stretches both (speed proper is bench's)
BOUND_S = 45.0

# case -> (how the listener is spoiled, what the line must say)
CASES: dict[str, tuple[Callable[[SecuredKafka], Listener], tuple[str, ...]]] = {
    "wrong password": (lambda k: k.listener("SCRAM-SHA-512", password="not-the-password"),
                       ("authentication failed", "SCRAM-SHA-512", "user alice")),
    "wrong password, PLAIN": (lambda k: k.listener("PLAIN", password="not-the-password"),
                              ("authentication failed", "PLAIN", "user alice")),
    "truststore without the CA": (lambda k: k.listener("SCRAM-SHA-256").with_settings(
        ssl_truststore_location=str(k.certs.other_ca)), ("TLS", "does not verify against truststore",
                                                         "other-ca.pem")),
    "truststore that does not exist": (lambda k: k.listener("SCRAM-SHA-512").with_settings(
        ssl_truststore_location="/nonexistent/ca.pem"), ("ssl.truststore.location", "/nonexistent/ca.pem",
                                                         "no such file")),
    "unknown mechanism": (lambda k: k.listener("SCRAM-SHA-512").with_settings(sasl_mechanism="SCRAM-SHA-1"),
                          ("sasl.mechanism 'SCRAM-SHA-1' is not supported", "SCRAM-SHA-512")),
    "mechanism the listener lacks": (lambda k: k.listener("PLAIN").with_settings(sasl_mechanism="SCRAM-SHA-256"),
                                     ("SCRAM-SHA-256", "not enabled on the listener")),
    "no client certificate": (lambda k: Listener("mTLS", k.ports["MTLS"], {
        key: v for key, v in k.listener("mTLS").settings.items() if not key.startswith("ssl.keystore")}),
        ("TLS", "requires a client certificate")),
    "client certificate of another CA": (lambda k: k.listener("mTLS", user="bob"),
                                         ("TLS", "refused client certificate", "stranger.pem")),
    "bob may not read": (lambda k: k.listener("SCRAM-SHA-512", user="bob"),
                         ("not authorized", "User:bob", "Describe", "Read")),
    "bob by OAUTHBEARER": (lambda k: k.listener("OAUTHBEARER", user="bob"), ("not authorized", "User:bob")),
}
PASSWORDS_SHOWN = ("not-the-password",)


@pytest.fixture(scope="module")
def topic(secured_kafka: SecuredKafka) -> str:
    name = new_topic(secured_kafka.admin_bootstrap, 2, prefix=TOPIC_PREFIX)
    produce(secured_kafka.admin_bootstrap, [(name, i % 2, *rest) for i, (_, _, *rest) in
                                            enumerate(sample([name], 6))])
    return name


@pytest.fixture(scope="module")
def stored(secured_kafka: SecuredKafka, topic: str, spark: object, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store (and its checkpoint) that already holds Kafka offsets, written as alice."""
    where = tmp_path_factory.mktemp("secured-store")
    alice = secured_kafka.listener("SCRAM-SHA-512")
    run_until_caught_up(job_config(alice.bootstrap, [topic], where, kafka_option=dict(alice.settings)), spark)
    return where


def _command(command: str, listener: Listener, topic: str, where: Path, source: str) -> list[str]:
    args = [sys.executable, "-m", "ingest.cli", command, *listener.cli_args(where), "--store", str(where / "store"),
            "--source", source, "--master", "local[1]"]
    if command == "run":
        return [*args, "--subscribe", topic, "--checkpoint", str(where / "checkpoint"), "--trigger", "available-now"]
    return [*args, "--topics", topic]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _refused(args: list[str], expected: tuple[str, ...], what: str) -> None:
    started, cpu = time.monotonic(), _children_cpu_s()
    done = subprocess.run(args, capture_output=True, text=True, timeout=180)
    took = time.monotonic() - started
    # the CPU the command used besides the wall time: on a loaded machine the wall time is mostly waiting
    print(f"\n[refusal] {what}: {took:.1f} s ({_children_cpu_s() - cpu:.1f} s CPU): {done.stderr.strip()}")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(lines) == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "at org.apache" not in done.stderr
    for part in expected:
        assert part in lines[0], lines[0]
    for secret in PASSWORDS_SHOWN:
        assert secret not in done.stderr and secret not in done.stdout
    assert took < BOUND_S, f"{what} took {took:.1f} s"


@pytest.mark.parametrize("command", ["run", "replay"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_refusal_is_one_line_naming_its_cause(secured_kafka: SecuredKafka, topic: str, source: str, command: str,
                                                case: str, tmp_path: Path) -> None:
    spoil, expected = CASES[case]
    _refused(_command(command, spoil(secured_kafka), topic, tmp_path, source), expected,
             f"{command} --source {source}, {case}")


@pytest.mark.parametrize("command", ["run", "replay"])
@pytest.mark.parametrize("case", ["wrong password", "bob may not read"])
def test_a_store_holding_offsets_is_refused_the_same(secured_kafka: SecuredKafka, topic: str, stored: Path,
                                                     source: str, command: str, case: str) -> None:
    spoil, expected = CASES[case]
    _refused(_command(command, spoil(secured_kafka), topic, stored, source), expected,
             f"{command} --source {source} on a store with offsets, {case}")


def test_a_pattern_bob_cannot_see_says_the_topics_are_hidden(secured_kafka: SecuredKafka, topic: str,
                                                            tmp_path: Path) -> None:
    bob = secured_kafka.listener("PLAIN", user="bob")
    args = _command("run", bob, topic, tmp_path, "kafka-python")
    at = args.index("--subscribe")
    args[at:at + 2] = ["--subscribe-pattern", f"{TOPIC_PREFIX}.*"]
    _refused(args, ("not authorized", "hidden", "User:bob"), "run --subscribe-pattern as bob")


def test_a_topic_alice_may_describe_but_not_read_is_refused(secured_kafka: SecuredKafka, tmp_path: Path) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern, ResourceType

    name = new_topic(secured_kafka.admin_bootstrap, 1, prefix="described")
    admin = KafkaAdminClient(bootstrap_servers=secured_kafka.admin_bootstrap)
    try:
        admin.create_acls([ACL("User:alice", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
                               ResourcePattern(ResourceType.TOPIC, name, ACLResourcePatternType.LITERAL))])
    finally:
        admin.close()
    alice = secured_kafka.listener("PLAIN")
    _refused(_command("replay", alice, name, tmp_path, "kafka-python"), ("not authorized", "User:alice",
                                                                         "not Read", name),
             "replay of a topic alice may only Describe")
