"""One secured Apache Kafka 4.1.1 node (KRaft, from the `make jvm` jars) with a listener per way in,
for the secured-broker tests (issue 68): a module-scoped fixture, ``secured_kafka``, and a
``Listener`` per mechanism holding a client's settings for both sources.

- SASL_SSL with SCRAM-SHA-512 and SCRAM-SHA-256 (listener SCRAM), TLS from a private CA;
- SASL_PLAINTEXT with PLAIN and OAUTHBEARER (listener SASL), OAUTHBEARER checked by Kafka's
  unsecured JWS validator (its default when no validator is configured: a test's tokens, never
  production's);
- SSL requiring a client certificate (listener MTLS), the certificate's CN mapped to the user name;
- PLAINTEXT for the harness's own admin, producer and checks (the ANONYMOUS principal, a super user
  like ``admin``).

``StandardAuthorizer``: alice and carol may Read and Describe every topic whose name starts with
``secure`` and any group; bob may nothing. The certificates are made here with ``cryptography``:
a private CA, the broker's for 127.0.0.1 and localhost, a client certificate for alice, and a
second CA the broker does not trust (with its own client certificate) for the refusals.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ingest.devtools.broker import Broker, start_kafka
from tests.helpers.brokers.report import note_broker

TOPIC_PREFIX = "secure"          # alice and carol may read the topics named so; no one else
USERS = ("alice", "bob", "carol")
PASSWORDS = {"admin": "admin-Pw-5e1f", "alice": "alice-Pw-93c2", "bob": "bob-Pw-17aa", "carol": "carol-Pw-c0d4"}
KEYSTORE_PASSWORD = "broker-keystore-Pw"
SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
MECHANISMS = (*SCRAM_MECHANISMS, "PLAIN", "mTLS", "OAUTHBEARER")

_JAAS = {
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
}
OAUTH_LOGIN = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


@dataclass(frozen=True)
class Certificates:
    """PEM files (and the broker's PKCS12 keystore) in one directory."""

    ca: Path                 # the private CA: the clients' truststore
    broker_keystore: Path    # PKCS12: the broker's key and certificate (KEYSTORE_PASSWORD)
    client: Path             # alice's key and certificate chain, one PEM (what kafka-python and a PEM keystore read)
    other_ca: Path           # a CA the broker's certificate is not from
    stranger: Path           # a client certificate from other_ca, which the broker refuses


@dataclass(frozen=True)
class Listener:
    """How a client reaches one mechanism: ``settings`` are Java client settings without the
    ``kafka.`` prefix (``--kafka-option``); ``spark_options`` the same for ``--source spark-kafka``;
    ``python`` kafka-python's names for them."""

    mechanism: str
    bootstrap: str
    settings: dict[str, str]
    python: dict[str, object] = field(default_factory=dict)
    user: str = ""

    @property
    def spark_options(self) -> dict[str, str]:
        return {f"kafka.{k}": v for k, v in self.settings.items()}

    def cli_args(self, where: Path) -> list[str]:
        """``--bootstrap-servers`` and ``--kafka-config`` naming the settings written to a client
        properties file in ``where`` (mode 600: the job refuses a secrets file others can read, and
        warns of a secret given on the command line)."""
        where.mkdir(parents=True, exist_ok=True)
        path = where / "client.properties"
        path.write_text("".join(f"{k}={v.replace(chr(92), chr(92) * 2)}\n" for k, v in self.settings.items()))
        path.chmod(0o600)
        return ["--bootstrap-servers", self.bootstrap, "--kafka-config", str(path)]

    def with_settings(self, **changes: str) -> "Listener":
        """The same listener with settings changed (keys with dots spelled with underscores)."""
        settings = dict(self.settings)
        settings.update({k.replace("_", "."): v for k, v in changes.items()})
        return replace(self, settings=settings)


@dataclass
class SecuredKafka:
    broker: Broker
    certs: Certificates
    ports: dict[str, str]    # listener name -> host:port

    @property
    def admin_bootstrap(self) -> str:
        """The PLAINTEXT listener: a super user, for creating topics, producing and checking."""
        return self.broker.bootstrap_servers

    def listener(self, mechanism: str, user: str = "alice", password: str | None = None) -> Listener:
        """A client's settings for ``mechanism`` as ``user`` (its password unless ``password``)."""
        password = PASSWORDS[user] if password is None else password
        ca = str(self.certs.ca)
        if mechanism == "mTLS":
            client = str(self.certs.client if user == "alice" else self.certs.stranger)
            return Listener(mechanism, self.ports["MTLS"], {
                "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": ca,
                "ssl.keystore.type": "PEM", "ssl.keystore.location": client,
            }, {"security_protocol": "SSL", "ssl_cafile": ca, "ssl_certfile": client}, user)
        if mechanism == "OAUTHBEARER":
            return Listener(mechanism, self.ports["SASL"], {
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                "sasl.jaas.config": f'{OAUTH_LOGIN} required unsecuredLoginStringClaim_sub="{user}";',
            }, {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER"}, user)
        jaas = f'{_JAAS[mechanism]} required username="{user}" password="{password}";'
        python: dict[str, object] = {"sasl_mechanism": mechanism, "sasl_plain_username": user,
                                     "sasl_plain_password": password}
        if mechanism == "PLAIN":
            return Listener(mechanism, self.ports["SASL"], {
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas,
            }, {"security_protocol": "SASL_PLAINTEXT", **python}, user)
        return Listener(mechanism, self.ports["SCRAM"], {
            "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism, "sasl.jaas.config": jaas,
            "ssl.truststore.type": "PEM", "ssl.truststore.location": ca,
        }, {"security_protocol": "SASL_SSL", "ssl_cafile": ca, **python}, user)


# -- certificates ---------------------------------------------------------------------------------

def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _issue(subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
           *, ca: bool = False, hosts: tuple[str, ...] = (), client: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    issuer_name = issuer[0].subject if issuer else _name(subject)
    signer = issuer[1] if issuer else key
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                                        critical=True)
    if hosts:
        names: list[x509.GeneralName] = []
        for h in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                names.append(x509.DNSName(h))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if hosts or client:
        usage = [ExtendedKeyUsageOID.SERVER_AUTH] if hosts else [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_certificates(where: Path) -> Certificates:
    where.mkdir(parents=True, exist_ok=True)
    keys = {n: ec.generate_private_key(ec.SECP256R1()) for n in ("ca", "broker", "alice", "other", "stranger")}
    ca = _issue("commitlog test CA", keys["ca"], None, ca=True)
    other = _issue("a CA the broker does not know", keys["other"], None, ca=True)
    broker = _issue("localhost", keys["broker"], (ca, keys["ca"]), hosts=("127.0.0.1", "localhost"))
    alice = _issue("alice", keys["alice"], (ca, keys["ca"]), client=True)
    stranger = _issue("alice", keys["stranger"], (other, keys["other"]), client=True)
    out = Certificates(where / "ca.pem", where / "broker.p12", where / "alice.pem", where / "other-ca.pem",
                       where / "stranger.pem")
    out.ca.write_bytes(_pem(ca))
    out.other_ca.write_bytes(_pem(other))
    out.client.write_bytes(_key_pem(keys["alice"]) + _pem(alice) + _pem(ca))
    out.stranger.write_bytes(_key_pem(keys["stranger"]) + _pem(stranger) + _pem(other))
    # PBES2 with AES: what Java's PKCS12 keystore reads (the legacy RC2/3DES default of some builds it may not)
    encryption = (serialization.PrivateFormat.PKCS12.encryption_builder().kdf_rounds(10_000)
                  .key_cert_algorithm(pkcs12.PBES.PBESv2SHA256AndAES256CBC).hmac_hash(hashes.SHA256())
                  .build(KEYSTORE_PASSWORD.encode()))
    out.broker_keystore.write_bytes(pkcs12.serialize_key_and_certificates(
        b"broker", keys["broker"], broker, [ca], encryption))
    for path in (out.client, out.stranger):
        path.chmod(0o600)
    return out


# -- the broker -----------------------------------------------------------------------------------

def broker_config(certs: Certificates) -> dict[str, str]:
    plain_users = " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    return {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin",     # ANONYMOUS: the PLAINTEXT and controller listeners
        "allow.everyone.if.no.acl.found": "false",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(certs.broker_keystore),
        "ssl.keystore.password": KEYSTORE_PASSWORD,
        "ssl.key.password": KEYSTORE_PASSWORD,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+).*$/$1/,DEFAULT",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.scram.sasl.enabled.mechanisms": ",".join(SCRAM_MECHANISMS),
        **{f"listener.name.scram.{m.lower()}.sasl.jaas.config": f"{_JAAS[m]} required;" for m in SCRAM_MECHANISMS},
        "listener.name.sasl.sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
        "listener.name.sasl.plain.sasl.jaas.config":
            f'{_JAAS["PLAIN"]} required username="admin" password="{PASSWORDS["admin"]}" {plain_users};',
        "listener.name.sasl.oauthbearer.sasl.jaas.config": f'{OAUTH_LOGIN} required unsecuredLoginStringClaim_sub="admin";',
    }


def grant_acls(bootstrap: str) -> None:
    """alice and carol: Read and Describe on the topics named ``secure*`` and on any group."""
    from kafka import KafkaAdminClient
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern, ResourceType

    topics = ResourcePattern(ResourceType.TOPIC, TOPIC_PREFIX, ACLResourcePatternType.PREFIXED)
    groups = ResourcePattern(ResourceType.GROUP, "*", ACLResourcePatternType.LITERAL)
    acls = [ACL(f"User:{user}", "*", op, ACLPermissionType.ALLOW, pattern)
            for user in ("alice", "carol") for op in (ACLOperation.READ, ACLOperation.DESCRIBE)
            for pattern in (topics, groups)]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.create_acls(acls)
    finally:
        admin.close()
    if result.get("failed"):
        raise RuntimeError(f"creating the test ACLs failed: {result['failed']}")


def start_secured_kafka(home: Path) -> SecuredKafka:
    certs = make_certificates(home / "certs")
    scram = [f"{m}=[name={u},password={p}]" for m in SCRAM_MECHANISMS for u, p in PASSWORDS.items()]
    broker = start_kafka(data_dir=home / "kafka", config=broker_config(certs), scram=scram, timeout_s=300,
                         listeners={"SCRAM": "SASL_SSL", "SASL": "SASL_PLAINTEXT", "MTLS": "SSL"})
    try:
        grant_acls(broker.bootstrap_servers)
    except BaseException:
        broker.stop()
        raise
    return SecuredKafka(broker, certs, dict(broker.listeners))


def secured_kafka_fixture(tmp_path_factory: pytest.TempPathFactory, module: str) -> Iterator[SecuredKafka]:
    """A module's secured broker (always from the jars: the container image has no listener of these);
    wrap it in a module-scoped fixture."""
    secured = start_secured_kafka(tmp_path_factory.mktemp("secured-kafka"))
    note_broker(module, secured.broker)
    try:
        yield secured
    finally:
        secured.broker.stop()


@pytest.fixture(scope="module")
def secured_kafka(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[SecuredKafka]:
    """Import it into a test module (``from tests.helpers.brokers.secured_kafka import secured_kafka``): one broker per module."""
    yield from secured_kafka_fixture(tmp_path_factory, request.module.__name__)
