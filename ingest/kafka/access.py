"""Whether a Kafka client with the job's settings gets in and may read what it is told to: asked once,
before Spark starts, so that a refusal is one line naming its cause. Left to themselves kafka-python
retries a refused connection until its bootstrap timeout and says only "Unable to bootstrap", and
Spark's connector fails after minutes in a Java stack; the broker's own answer (a SASL failure, a TLS
alert, TOPIC_AUTHORIZATION_FAILED) is known within a second.

What is asked, in order: the settings themselves (a protocol or mechanism the clients do not know, a
file named in a setting that is not there or not readable); one connection to a bootstrap server
(TLS, then SASL), its failure classified; then one Metadata request naming the topics, whose answer
says per topic whether the principal may Describe it and, with the topic's authorized operations,
Read it. A broker that does not answer is not judged here (ingest.preflight.check_brokers).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from kafka.errors import KafkaError, SaslAuthenticationFailedError, UnsupportedSaslMechanismError

from ingest.kafka.options import KafkaSourceError

log = logging.getLogger(__name__)

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# what both sources can use: kafka-python's mechanisms that Kafka's Java client has too
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
# the client settings (Java names) that name a file the client reads
FILE_SETTINGS = ("ssl.truststore.location", "ssl.keystore.location", "ssl.cafile", "ssl.certfile",
                 "ssl.keyfile", "ssl.crlfile")
_TOPIC_AUTHORIZATION_FAILED = 29
_UNKNOWN_TOPIC_OR_PARTITION = 3


class KafkaAccessError(KafkaSourceError):
    """The brokers refuse the job, or its client settings cannot work: the message names the cause."""


class KafkaAuthenticationError(KafkaAccessError):
    pass


class KafkaTlsError(KafkaAccessError):
    pass


class KafkaSettingFileError(KafkaAccessError):
    pass


class KafkaUnsupportedSettingError(KafkaAccessError):
    pass


class KafkaNotAuthorizedError(KafkaAccessError):
    pass


def check_client_settings(settings: Mapping[str, str]) -> None:
    """The Java-named client settings (``kafka.`` prefix or not) checked without a broker: the
    security protocol and SASL mechanism are ones the clients know, and every file a setting names
    can be read."""
    plain = {k.lower().removeprefix("kafka."): str(v) for k, v in settings.items()}
    protocol = plain.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise KafkaUnsupportedSettingError(
            f"security.protocol {plain['security.protocol']!r} is not supported: use one of {', '.join(SECURITY_PROTOCOLS)}")
    if protocol.startswith("SASL_"):
        mechanism = plain.get("sasl.mechanism", "GSSAPI").strip().upper()
        if mechanism not in SASL_MECHANISMS:
            raise KafkaUnsupportedSettingError(
                f"sasl.mechanism {plain.get('sasl.mechanism', 'GSSAPI')!r} is not supported: use one of "
                f"{', '.join(SASL_MECHANISMS)}")
    for key in FILE_SETTINGS:
        if key in plain:
            _check_readable(key, plain[key])


def _check_readable(key: str, path: str) -> None:
    if not os.path.exists(path):
        raise KafkaSettingFileError(f"setting {key} = {path}: no such file")
    if not os.path.isfile(path):
        raise KafkaSettingFileError(f"setting {key} = {path}: not a file")
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise KafkaSettingFileError(f"setting {key} = {path}: cannot be read ({exc.strerror or exc})") from None


def principal(params: Mapping[str, Any]) -> str:
    """Who the brokers take the client for, as far as the client can tell."""
    protocol = str(params.get("security_protocol", "PLAINTEXT")).upper()
    if protocol.startswith("SASL_"):
        provider = params.get("sasl_oauth_token_provider")
        user = getattr(provider, "principal", None) or params.get("sasl_plain_username")
        if user:
            return f"User:{user}"
        return f"the {params.get('sasl_mechanism', 'SASL')} principal"
    if params.get("ssl_certfile"):
        return f"the principal of client certificate {params['ssl_certfile']}"
    return "User:ANONYMOUS"


def check_access(params: Mapping[str, Any], *, topics: Sequence[str] | None = None, pattern: str | None = None,
                 timeout_ms: int = 10_000) -> None:
    """Raise a KafkaAccessError naming the cause if the brokers refuse a client with kafka-python
    ``params`` (TLS, SASL) or the topics: ``topics`` each must be one the principal may Describe
    and Read; ``pattern`` must match one it may Describe. Nothing is raised when no broker answers
    in ``timeout_ms`` (the caller's reachability check says so) or on a topic that does not exist
    (a subscribed topic may come later)."""
    failure = _connection_failure(params, timeout_ms)
    if failure is not None:
        raise failure
    if topics or pattern is not None:
        _check_topics(params, list(topics or ()), pattern, timeout_ms)


# -- the connection -------------------------------------------------------------------------------

def _connection_failure(params: Mapping[str, Any], timeout_ms: int) -> KafkaAccessError | None:
    """The classified refusal of one connection to each bootstrap server in turn, None once one
    connects (or none answers at all)."""
    from kafka.admin import KafkaAdminClient
    from kafka.net.manager import KafkaConnectionManager
    from kafka.net.selector import NetworkSelector

    config = dict(KafkaAdminClient.DEFAULT_CONFIG)
    config.update({k: v for k, v in params.items() if k in KafkaAdminClient.DEFAULT_CONFIG})
    with captured_connection_errors() as seen:
        net = NetworkSelector(**config)
        manager = KafkaConnectionManager(net, **config)
        net.start()
        try:
            for node in manager.cluster.bootstrap_brokers():
                seen.clear()

                async def connect(node_id: str = node.node_id) -> None:
                    conn = manager.get_connection(node_id, timeout_ms=timeout_ms, pop_on_close=False,
                                                  refresh_metadata_on_err=False)
                    await manager.wait_for(conn.init_future, timeout_ms)

                try:
                    manager.run(connect)
                    return None
                except (KafkaError, OSError) as exc:
                    candidates = [manager.auth_failure(node.node_id), *seen.errors, exc]
                    server = f"{node.host}:{node.port}"
                    for cause in candidates:
                        refusal = classify(cause, params, server) if cause is not None else None
                        if refusal is not None:
                            return refusal
                    if seen.last_request in _SASL_EXCHANGE:
                        return authentication_failed(params, server, "the broker closed the connection "
                                                                     "on the credentials")
                    if seen.last_request == "SaslHandshakeRequest":
                        return KafkaUnsupportedSettingError(
                            f"sasl.mechanism {params.get('sasl_mechanism')!r} is not enabled on the listener at "
                            f"{server}: the broker closed the connection on the SASL handshake naming it")
                    log.debug("connecting to %s: %s", server, exc)
        finally:
            manager.close()
            net.stop()
    return None


# the requests of a SASL exchange after the handshake: a broker that closes the connection in
# answer to one refused the credentials (Kafka 4 over TLS closes it before kafka-python reads the
# error response); one that closes it in answer to the handshake does not offer the mechanism
_SASL_EXCHANGE = frozenset({"SaslAuthenticateRequest", "SaslBytesRequest"})


class _Seen(logging.Handler):
    """kafka-python's connection manager logs a connection's real failure and hands its caller only
    "socket disconnected": the logged exceptions are the ones to classify, and the last request
    logged says where in the SASL exchange the connection was lost."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.errors: list[BaseException] = []
        self.last_request = ""

    def clear(self) -> None:
        self.errors.clear()
        self.last_request = ""

    def emit(self, record: logging.LogRecord) -> None:
        for arg in record.args if isinstance(record.args, tuple) else ():
            if isinstance(arg, BaseException):
                self.errors.append(arg)
            elif type(arg).__name__.endswith("Request"):
                self.last_request = type(arg).__name__


@contextmanager
def captured_connection_errors() -> Iterator[_Seen]:
    """What kafka-python logs while the checks run, seen at DEBUG and kept from the terminal (one
    refusal line says what it says) unless its logger was asked for DEBUG (``-v``)."""
    logger = logging.getLogger("kafka")
    handler = _Seen()
    level, propagate = logger.level, logger.propagate
    verbose = logger.isEnabledFor(logging.DEBUG)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = propagate and verbose
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def authentication_failed(params: Mapping[str, Any], server: str, detail: str) -> KafkaAuthenticationError:
    mechanism = params.get("sasl_mechanism", "PLAIN")
    user = params.get("sasl_plain_username")
    who = f" as user {user}" if user else f" as {principal(params)}"
    return KafkaAuthenticationError(
        f"authentication failed at {server}: SASL {mechanism}{who} ({detail}); check the user name and "
        f"password (sasl.jaas.config) and that the user exists for {mechanism}")


_VERIFY = re.compile(r"certificate verify failed: ([^(]+?)\s*\(_ssl", re.I)
_ALERT = re.compile(r"\[SSL: ([A-Z0-9_]+)\]")
_CLIENT_CERT_ALERTS = {"SSLV3_ALERT_BAD_CERTIFICATE", "SSLV3_ALERT_CERTIFICATE_UNKNOWN", "TLSV1_ALERT_UNKNOWN_CA",
                       "TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_CERTIFICATE_EXPIRED",
                       "TLSV1_ALERT_ACCESS_DENIED"}


def classify(cause: BaseException, params: Mapping[str, Any], server: str) -> KafkaAccessError | None:
    """A connection failure said as the refusal a user can act on; None if it is not one (the
    broker is down or slow: not judged here)."""
    mechanism = params.get("sasl_mechanism", "PLAIN")
    if isinstance(cause, SaslAuthenticationFailedError):
        # the broker's message, without the error class names kafka-python puts before it
        detail = re.sub(r"^(\w+Error: )+", "", str(cause.args[0] if cause.args else cause)).strip()
        return authentication_failed(params, server, detail)
    if isinstance(cause, UnsupportedSaslMechanismError):
        offered = re.search(r"Enabled mechanisms: (.*)$", str(cause))
        return KafkaUnsupportedSettingError(
            f"sasl.mechanism {mechanism!r} is not enabled on the listener at {server}"
            + (f" (it offers {offered.group(1)})" if offered else ""))
    text = str(cause)
    truststore = params.get("ssl_cafile") or "(the system's default CAs)"
    verify = _VERIFY.search(text)
    if verify:
        reason = verify.group(1).strip()
        if "mismatch" in reason.lower():
            return KafkaTlsError(f"TLS: the broker's certificate at {server} is not for that host name ({reason}); "
                                 "connect by a name the certificate holds, or set "
                                 "ssl.endpoint.identification.algorithm= to skip the check")
        return KafkaTlsError(f"TLS: the broker's certificate at {server} does not verify against truststore "
                             f"{truststore} ({reason}): the truststore lacks the CA that signed it")
    alert = _ALERT.search(text)
    if alert and alert.group(1) in _CLIENT_CERT_ALERTS:
        cert = params.get("ssl_certfile")
        if not cert:
            return KafkaTlsError(f"TLS: the broker at {server} requires a client certificate "
                                 f"({alert.group(1)}); set ssl.keystore.location")
        return KafkaTlsError(f"TLS: the broker at {server} refused client certificate {cert} ({alert.group(1)}): "
                             "it does not trust the CA that signed it")
    if alert and alert.group(1) in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
        return KafkaTlsError(f"TLS: the listener at {server} does not speak TLS ({alert.group(1)}); is "
                             f"security.protocol {params.get('security_protocol')} the listener's?")
    if isinstance(cause, OSError) and getattr(cause, "filename", None):
        return KafkaSettingFileError(f"a file of the client's settings: {cause.filename}: {cause.strerror}")
    return None


# -- the topics -----------------------------------------------------------------------------------

def _check_topics(params: Mapping[str, Any], topics: list[str], pattern: str | None, timeout_ms: int) -> None:
    from kafka import KafkaAdminClient

    known = KafkaAdminClient.DEFAULT_CONFIG
    config = {k: v for k, v in params.items() if k in known}
    config.update(bootstrap_timeout_ms=timeout_ms, request_timeout_ms=timeout_ms)
    with captured_connection_errors():      # its retries and warnings are not the refusal's line
        try:
            admin = KafkaAdminClient(**config)
        except KafkaError as exc:      # connected a moment ago: a broker gone slow is not a refusal
            log.debug("listing the topics: %s", exc)
            return
        try:
            described = admin.describe_topics(None if pattern is not None else sorted(set(topics)))
        except KafkaError as exc:
            log.debug("listing the topics: %s", exc)
            return
        finally:
            admin.close()
    who = principal(params)
    if pattern is not None:
        _check_pattern(described, pattern, who, str(params.get("bootstrap_servers")))
        return
    by_name = {t["name"]: t for t in described}
    denied = [n for n in topics if by_name.get(n, {}).get("error_code") == _TOPIC_AUTHORIZATION_FAILED]
    if denied:
        raise KafkaNotAuthorizedError(
            f"not authorized: {who} may not Describe topic{'s' if len(denied) > 1 else ''} {', '.join(denied)} "
            f"(the brokers answer TOPIC_AUTHORIZATION_FAILED, and say so whether or not the topic exists); the "
            "job needs Describe (listing) and Read (fetching) on each topic it reads")
    unreadable = [n for n in topics if by_name.get(n, {}).get("error_code") == 0
                  and not _may_read(by_name[n])]
    if unreadable:
        raise KafkaNotAuthorizedError(
            f"not authorized: {who} may Describe topic{'s' if len(unreadable) > 1 else ''} {', '.join(unreadable)} "
            "but not Read it; the job needs Read on each topic it reads (fetching)")


def _may_read(topic: Mapping[str, Any]) -> bool:
    allowed = {str(op).upper().rsplit(".", 1)[-1] for op in topic.get("authorized_operations") or ()}
    # a principal shown the topic may Describe it: a list without DESCRIBE is a broker that did not
    # say (older than 2.3, or one that answers "not asked", as Tansu does)
    if not allowed & {"DESCRIBE", "ALL"}:
        return True
    return bool(allowed & {"READ", "ALL"})


def _check_pattern(described: list[Mapping[str, Any]], pattern: str, who: str, servers: str) -> None:
    regex = re.compile(pattern)
    visible = [t for t in described if not str(t["name"]).startswith("__")]
    matching = [t for t in visible if regex.fullmatch(t["name"])]
    if not matching and not visible:
        raise KafkaNotAuthorizedError(
            f"not authorized: pattern {pattern!r} matches no topic, and the brokers at {servers} show {who} no "
            "topic at all: the topics a principal may not Describe are hidden from it; grant Describe and "
            "Read on the topics the job reads")
    unreadable = [t["name"] for t in matching if not _may_read(t)]
    if unreadable:
        raise KafkaNotAuthorizedError(
            f"not authorized: {who} may Describe topic{'s' if len(unreadable) > 1 else ''} {', '.join(unreadable)} "
            f"(matching {pattern!r}) but not Read it; the job needs Read on each topic it reads (fetching)")
