"""Which Kafka client settings are secrets, and keeping their values out of everything the job prints.

A setting is secret by its name (Kafka's own Password-typed settings: ``sasl.jaas.config``,
``ssl.key.password``, ``ssl.keystore.key``, ... and any name saying password, secret or passphrase). Inside a JAAS line only the quoted values of such names are the secret (``password="..."``,
``clientSecret="..."``): the login module and ``username`` may be shown, and are, in the refusals.

Redaction is by value: the job knows each secret once its settings are resolved, and every line that
leaves the Python driver through logging (ours, kafka-python's, py4j's ``Command to send:`` at ``-v``)
has them replaced by ``[redacted]``, in the forms they are written in (as given, escaped as py4j sends
a string, quoted as JSON or repr). What Spark writes, it redacts itself by the settings'
names, with ``spark.redaction.regex`` (spark_conf); the Java Kafka client logs a Password setting as
``[hidden]``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping

REDACTED = "[redacted]"

# a setting name (without the "kafka." prefix) whose value is a secret: Kafka's Password-typed client
# settings (ssl.keystore.key, sasl.oauthbearer.client.credentials.client.secret, ...) and any other
# naming a password, a secret or a passphrase. Not "token" or "credentials": those names end in .url
# and .client.id, which a properties file may show.
SECRET_SETTING = re.compile(r"(?i)password|secret|passphrase|\.key$|^sasl\.jaas\.config$")
# ... and inside a JAAS line, the options whose quoted values are (not keyTab: a path)
_JAAS_FIELD = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_SECRET_FIELD = re.compile(r"(?i)password|secret|passphrase|token")
JAAS_SETTING = "sasl.jaas.config"

# Spark's default spark.redaction.regex, and the names it misses: a JAAS line that names no password
# (an OAUTHBEARER client's clientSecret, say), PEM keys given inline, credentials. Spark applies it to
# its configuration (the UI's Environment page, the event log) and to a data source's options in the
# plans it shows (with spark.sql.redaction.options.regex), matching the name or the value.
SPARK_REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|jaas|credential|\.key$"

# a secret shorter than this is not searched for in the output: it would blank ordinary words
MIN_SECRET_LENGTH = 4


def bare(key: str) -> str:
    """A client setting's name without Spark's ``kafka.`` prefix."""
    return key[len("kafka."):] if key.lower().startswith("kafka.") else key


def is_secret_setting(key: str) -> bool:
    return bool(SECRET_SETTING.search(bare(key)))


def secret_parts(key: str, value: str) -> list[str]:
    """The secrets one setting's value holds: a JAAS line's secret fields, another secret setting's
    whole value; none for a setting that is not secret."""
    if not is_secret_setting(key) or not value:
        return []
    if bare(key).lower() == JAAS_SETTING:
        fields = [v.replace('\\"', '"') for k, v in _JAAS_FIELD.findall(value) if _SECRET_FIELD.search(k)]
        return [v for v in fields if v]
    return [value]


def setting_secrets(key: str, value: str) -> list[str]:
    """What redaction looks for in one setting: its secret parts, and a secret setting's whole value
    (a JAAS line is shown whole by some, by py4j's debug lines for one)."""
    parts = secret_parts(key, value)
    return parts + [value] if is_secret_setting(key) and value and value not in parts else parts


def secrets_of(settings: Mapping[str, str]) -> list[str]:
    """Every secret the client settings hold, the longest first (a secret inside another goes after it)."""
    found = {s for key, value in settings.items() for s in setting_secrets(key, str(value))}
    return sorted(found, key=len, reverse=True)


def _forms(secret: str) -> list[str]:
    """``secret`` as it can appear in a line: as is, escaped as py4j sends a string to the JVM, inside
    JSON or a Python repr."""
    py4j = secret.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")
    return list(dict.fromkeys([secret, py4j, json.dumps(secret)[1:-1], repr(secret)[1:-1]]))


class Redactor:
    """Replaces each of the given secrets, in any of its forms, by ``[redacted]``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms = {f for s in secrets if len(s) >= MIN_SECRET_LENGTH for f in _forms(s)}
        ordered = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, text: str) -> str:
        return text if self._pattern is None else self._pattern.sub(REDACTED, text)


def redacted(error: BaseException | str, settings: Mapping[str, str] | None) -> str:
    """An error's message without the secrets of the client ``settings`` (None: not read yet)."""
    return Redactor(secrets_of(settings or {})).text(str(error))


class RedactingFilter(logging.Filter):
    """A handler's filter: each record's message, exception and stack redacted before it is written.
    On a handler, not a logger, so it sees the records of every logger that propagates to it."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        record.msg, record.args = self.redactor.text(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor.text(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor.text(record.stack_info)
        return True


def redact_logging(redactor: Redactor) -> None:
    """Put ``redactor`` on every handler the root logger writes through (and logging's last resort,
    which writes when there is none), in place of one put there before."""
    for handler in [*logging.getLogger().handlers, logging.lastResort]:
        if handler is None:
            continue
        for old in [f for f in handler.filters if isinstance(f, RedactingFilter)]:
            handler.removeFilter(old)
        if redactor:
            handler.addFilter(RedactingFilter(redactor))


def spark_conf(user_conf: Mapping[str, str]) -> dict[str, str]:
    """Spark's redaction of the settings' names, unless the user set their own."""
    if "spark.redaction.regex" in user_conf:
        return {}
    return {"spark.redaction.regex": SPARK_REDACTION_REGEX}
