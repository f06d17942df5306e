"""ingest.kafka.access without a broker: the settings checked before any connection, the failures
of a connection said as their causes, and the OAUTHBEARER token of the kafka-python source.
The same refusals against a real secured broker: tests/ingest/secured/test_secured_refusals.py."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from kafka.errors import KafkaConnectionError, SaslAuthenticationFailedError, UnsupportedSaslMechanismError

from ingest.kafka.access import (
    KafkaAuthenticationError,
    KafkaSettingFileError,
    KafkaTlsError,
    KafkaUnsupportedSettingError,
    check_client_settings,
    classify,
    principal,
)
from ingest.kafka.options import kafka_client_params

pytestmark = pytest.mark.unit

SCRAM = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice",
         "sasl_plain_password": "s3cret-pw", "ssl_cafile": "/etc/ca.pem"}


def test_a_protocol_or_mechanism_no_client_knows_is_named_with_the_supported_ones() -> None:
    with pytest.raises(KafkaUnsupportedSettingError, match=r"security.protocol 'SASL_TLS' is not supported: "
                                                            r"use one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"):
        check_client_settings({"kafka.security.protocol": "SASL_TLS"})
    with pytest.raises(KafkaUnsupportedSettingError, match=r"sasl.mechanism 'SCRAM-SHA-1' is not supported: "
                                                            r"use one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"):
        check_client_settings({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-1"})
    check_client_settings({"security.protocol": "SSL", "sasl.mechanism": "SCRAM-SHA-1"})   # no SASL: not used


def test_a_file_a_setting_names_must_be_readable(tmp_path: Path) -> None:
    with pytest.raises(KafkaSettingFileError, match=r"setting ssl.truststore.location = /no/ca.pem: no such file"):
        check_client_settings({"ssl.truststore.location": "/no/ca.pem"})
    with pytest.raises(KafkaSettingFileError, match=rf"setting ssl.keystore.location = {tmp_path}: not a file"):
        check_client_settings({"kafka.ssl.keystore.location": str(tmp_path)})
    locked = tmp_path / "key.pem"
    locked.write_text("x")
    locked.chmod(0)
    if os.access(locked, os.R_OK):     # root reads anything
        return
    with pytest.raises(KafkaSettingFileError, match=r"ssl.keyfile = .*key.pem: cannot be read \(Permission denied\)"):
        check_client_settings({"ssl.keyfile": str(locked)})


def test_connection_failures_are_said_as_their_causes() -> None:
    failed = classify(SaslAuthenticationFailedError("SaslAuthenticationFailedError: invalid credentials"), SCRAM,
                      "h:9093")
    assert isinstance(failed, KafkaAuthenticationError)
    assert "authentication failed at h:9093: SASL SCRAM-SHA-512 as user alice (invalid credentials)" in str(failed)
    assert "s3cret-pw" not in str(failed)
    lacking = classify(UnsupportedSaslMechanismError("Kafka broker does not support SCRAM-SHA-512 sasl mechanism. "
                                                     "Enabled mechanisms: ['PLAIN']"), SCRAM, "h:9093")
    assert isinstance(lacking, KafkaUnsupportedSettingError) and "(it offers ['PLAIN'])" in str(lacking)
    unknown_ca = classify(KafkaConnectionError("Handshake failed: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify "
                                               "failed: unable to get local issuer certificate (_ssl.c:1006)"),
                          SCRAM, "h:9093")
    assert isinstance(unknown_ca, KafkaTlsError)
    assert "does not verify against truststore /etc/ca.pem (unable to get local issuer certificate)" in str(unknown_ca)
    host = classify(KafkaConnectionError("Handshake failed: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify "
                                         "failed: Hostname mismatch, certificate is not valid for 'h'. (_ssl.c:1006)"),
                    SCRAM, "h:9093")
    assert isinstance(host, KafkaTlsError) and "not for that host name (Hostname mismatch" in str(host)
    alert = KafkaConnectionError("[SSL: SSLV3_ALERT_BAD_CERTIFICATE] sslv3 alert bad certificate (_ssl.c:2580)")
    assert "requires a client certificate" in str(classify(alert, {"security_protocol": "SSL"}, "h:9093"))
    refused = classify(alert, {"security_protocol": "SSL", "ssl_certfile": "/c.pem"}, "h:9093")
    assert "refused client certificate /c.pem" in str(refused)
    assert classify(KafkaConnectionError("socket disconnected"), SCRAM, "h:9093") is None   # not judged here


def test_oauthbearer_with_unsecured_claims_is_a_token_for_kafka_python() -> None:
    params = kafka_client_params({
        "kafka.bootstrap.servers": "h:9092", "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                                  'unsecuredLoginStringClaim_sub="carol";'})
    provider = params["sasl_oauth_token_provider"]
    header, payload, signature = provider.token().split(".")
    assert signature == ""
    pad = lambda text: base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))  # noqa: E731
    assert json.loads(pad(header)) == {"alg": "none"}
    claims = json.loads(pad(payload))
    assert claims["sub"] == "carol" and claims["exp"] - claims["iat"] == 3600
    assert principal(params) == "User:carol"
    assert provider.token() == provider.token()     # made once, not per connection
