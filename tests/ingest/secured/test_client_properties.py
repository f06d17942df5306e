"""Kafka client settings as Kafka's tools take them (issue 68, item 2): ``--kafka-config`` properties
files, config providers resolved in the driver, secrets files refused when anyone can read them, and
the secrets' values kept out of every line the job logs or prints."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import pytest

from ingest.client_properties import ENV_PROVIDER, FILE_PROVIDER, DIRECTORY_PROVIDER, read_properties
from ingest.config import JobConfigError
from ingest.job_arguments import add_job_arguments, config_from_args
from ingest.reader_options import kafka_reader_options
from ingest.redaction import REDACTED, Redactor, RedactingFilter, redacted, secrets_of
from tests.helpers.cli import run

pytestmark = pytest.mark.unit

PASSWORD = "s3cr3t-Pw-93c2"
KEY_PASSWORD = "key\\Pw\"77\n"     # a backslash, a quote, a new line: escaped differently by py4j, JSON and repr
JAAS_OF = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{}";'
PROVIDERS = {"config.providers": "file,env,dir", "config.providers.file.class": FILE_PROVIDER,
             "config.providers.env.class": ENV_PROVIDER, "config.providers.dir.class": DIRECTORY_PROVIDER}


def private(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def config(tmp_path: Path, *argv: str) -> object:
    p = argparse.ArgumentParser()
    add_job_arguments(p)
    return config_from_args(p.parse_args(["--bootstrap-servers", "k:9092", "--subscribe", "t",
                                          "--store", str(tmp_path / "store"), *argv]))


def test_a_properties_file_is_read_as_java_reads_it(tmp_path: Path) -> None:
    f = private(tmp_path / "client.properties", "\n".join([
        "# a comment", "! another", "", "security.protocol = SASL_SSL", "sasl.mechanism:SCRAM-SHA-512",
        "client.id   commitlog", "sasl.jaas.config=org.example.Login required \\", '    username="a\\u00e9" \\',
        '    password="p\\\\w";', "ssl.truststore.location=/etc/ca\\ dir/ca.pem", "empty=",
    ]))
    assert read_properties(f) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "client.id": "commitlog",
        "sasl.jaas.config": 'org.example.Login required username="aé" password="p\\w";',
        "ssl.truststore.location": "/etc/ca dir/ca.pem", "empty": ""}


def test_kafka_config_then_kafka_option_over_it_with_providers_resolved(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = private(tmp_path / "secrets.properties", f"password={PASSWORD}\n")
    (tmp_path / "keys").mkdir()
    private(tmp_path / "keys" / "truststore-password", "trust-Pw")
    monkeypatch.setenv("KAFKA_USER_ID", "commitlog-7")
    props = "\n".join([*(f"{k}={v}" for k, v in PROVIDERS.items()), "security.protocol=SASL_PLAINTEXT",
                       "client.id=from-file", "sasl.jaas.config=" + JAAS_OF.format(f"${{file:{secrets}:password}}"),
                       f"ssl.truststore.password=${{dir:{tmp_path / 'keys'}:truststore-password}}"])
    f = tmp_path / "client.properties"
    f.write_text(props)          # no secret written out in it: it may be readable (0644 here)
    f.chmod(0o644)

    cfg = config(tmp_path, "--kafka-config", str(f), "--kafka-option", "client.id=${env:KAFKA_USER_ID}")

    assert cfg.kafka_option["sasl.jaas.config"] == JAAS_OF.format(PASSWORD)
    assert cfg.kafka_option["ssl.truststore.password"] == "trust-Pw"
    assert cfg.kafka_option["client.id"] == "commitlog-7"       # the single setting beats the file
    options = kafka_reader_options(cfg, "earliest")              # what either source gets: values only
    assert not [k for k in options if "config.providers" in k]
    assert "${" not in "".join(options.values())
    assert PASSWORD not in repr(cfg)


@pytest.mark.parametrize("settings, says", [
    ({"sasl.jaas.config": "${vault:/x:pw}"}, "names config provider 'vault', which config.providers does not list"),
    ({**PROVIDERS, "sasl.jaas.config": "${env:NO_SUCH_VARIABLE_68}"}, "environment variable NO_SUCH_VARIABLE_68 is not set"),
    ({**PROVIDERS, "sasl.jaas.config": "${file:/nonexistent/s.properties:pw}"}, "/nonexistent/s.properties cannot be read"),
    ({"config.providers": "x", "config.providers.x.class": "com.example.Vault", "a": "b"}, "com.example.Vault: not a config provider"),
    ({**PROVIDERS, "config.providers.env.param.allowlist.pattern": "KAFKA_.*", "client.id": "${env:HOME}"},
     "variable HOME is not allowed by param.allowlist.pattern"),
])
def test_a_reference_that_cannot_resolve_is_one_line_exit_2(tmp_path: Path, settings: dict[str, str], says: str) -> None:
    f = private(tmp_path / "client.properties", "\n".join(f"{k}={v}" for k, v in settings.items()))
    rc, out, err = run("run", "--bootstrap-servers", "k:9092", "--subscribe", "t", "--store", str(tmp_path / "s"),
                       "--kafka-config", str(f))
    assert rc == 2
    assert err.strip().count("\n") == 0 and says in err, err
    assert "Traceback" not in err


def test_a_secrets_file_any_user_can_read_is_refused_one_its_group_can_read_warned(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    line = "sasl.jaas.config=" + JAAS_OF.format("pw-1234")
    f = private(tmp_path / "client.properties", line, 0o644)
    with pytest.raises(JobConfigError, match=r"readable by every user \(mode 0644\).*chmod 600"):
        config(tmp_path, "--kafka-config", str(f))
    secrets = private(tmp_path / "secrets.properties", "pw=pw-1234", 0o604)
    f = private(tmp_path / "ref.properties", "\n".join([*(f"{k}={v}" for k, v in PROVIDERS.items()),
                                                        f"ssl.key.password=${{file:{secrets}:pw}}"]), 0o644)
    with pytest.raises(JobConfigError, match=f"secrets file {secrets} is readable by every user"):
        config(tmp_path, "--kafka-config", str(f))
    secrets.chmod(0o640)
    with caplog.at_level(logging.WARNING, logger="commitlog.config"):
        assert config(tmp_path, "--kafka-config", str(f)).kafka_option["ssl.key.password"] == "pw-1234"
    assert [r.getMessage() for r in caplog.records if "readable by its group (mode 0640)" in r.getMessage()]


def test_a_toml_config_writing_a_secret_out_is_a_secrets_file(tmp_path: Path) -> None:
    toml = tmp_path / "job.toml"
    toml.write_text(f"[kafka_option]\n'sasl.jaas.config' = '{JAAS_OF.format('pw-5678')}'\n")
    toml.chmod(0o644)
    with pytest.raises(JobConfigError, match="--config: secrets file .*job.toml is readable by every user"):
        config(tmp_path, "--config", str(toml))
    toml.chmod(0o600)
    assert config(tmp_path, "--config", str(toml)).kafka_option["sasl.jaas.config"] == JAAS_OF.format("pw-5678")


def test_a_secret_on_the_command_line_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="commitlog.config"):
        config(tmp_path, "--kafka-option", "sasl.jaas.config=" + JAAS_OF.format("pw-9012"))
    warned = [r.getMessage() for r in caplog.records if "a secret on the command line" in r.getMessage()]
    assert warned and "pw-9012" not in warned[0] and "sasl.jaas.config" in warned[0]


def test_every_form_of_a_secret_is_redacted_in_log_lines_and_errors() -> None:
    settings = {"kafka.sasl.jaas.config": JAAS_OF.format(PASSWORD), "ssl.key.password": KEY_PASSWORD,
                "security.protocol": "SASL_SSL", "ssl.truststore.location": "/etc/ca.pem"}
    redactor = Redactor(secrets_of(settings))
    py4j = KEY_PASSWORD.replace("\\", "\\\\").replace("\n", "\\n")    # py4j.protocol.escape_new_line
    py4j_line = ("Command to send: c\no0\noption\nskafka.sasl.jaas.config\ns" + JAAS_OF.format(PASSWORD)
                 + "\nskafka.ssl.key.password\ns" + py4j + "\ne\n")
    for line in (py4j_line, repr(settings), f"{settings}", json.dumps(settings), KEY_PASSWORD + " and " + PASSWORD):
        clean = redactor.text(line)
        assert PASSWORD not in clean and "Pw" not in clean, clean
        assert REDACTED in clean
    assert "/etc/ca.pem" in redactor.text(repr(settings))         # what is not secret stays readable
    assert redacted(ValueError(f"failed with {PASSWORD}"), settings) == f"failed with {REDACTED}"

    record = logging.LogRecord("py4j.clientserver", logging.DEBUG, __file__, 1, "Command to send: %s", (py4j_line,),
                               None)
    RedactingFilter(redactor).filter(record)
    assert "Pw" not in record.getMessage() and "alice" not in record.getMessage()   # the JAAS line whole
