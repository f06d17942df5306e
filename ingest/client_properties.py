"""Kafka client settings as Kafka's own tools take them: a properties file (``--kafka-config``, what
``--command-config`` is to Kafka's tools) and config providers inside any value.

``config.providers=file,env`` names the providers and ``config.providers.<name>.class`` their classes,
as a Java client is configured; a value then holds ``${file:/path/secrets.properties:password}``,
``${dir:/path/dir:name}`` or ``${env:KAFKA_PASSWORD}``. The driver resolves them all before anything
starts and the sources get the values, never the references: Spark's connector would otherwise resolve
them in each executor, where the file or the variable may not be; our source never could. A reference
that cannot be resolved is a setting error (Kafka's client would leave it in the value, a password
that then fails at the broker), and so is a secrets file any user of the machine can read.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from ingest.redaction import is_secret_setting, secret_parts

log = logging.getLogger("commitlog.config")

PROVIDERS_SETTING = "config.providers"
# the config provider classes of Apache Kafka's client, by what each reads
FILE_PROVIDER = "org.apache.kafka.common.config.provider.FileConfigProvider"
DIRECTORY_PROVIDER = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
ENV_PROVIDER = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
PROVIDER_CLASSES = (FILE_PROVIDER, DIRECTORY_PROVIDER, ENV_PROVIDER)
# their parameters (config.providers.<name>.param.<parameter>), as Kafka names them
ALLOWED_PATHS = "allowed.paths"          # file and directory providers: the paths they may read
ALLOWLIST_PATTERN = "allowlist.pattern"  # the environment provider: the variables it may read

# Kafka's ConfigTransformer pattern: ${provider:[path:]key}
REFERENCE = re.compile(r"\$\{([^}]*?):(?:([^}]*?):)?([^}]*?)\}")

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class ClientConfigError(ValueError):
    """A client setting, a properties file or a config provider that cannot work; the message names it
    (never a secret's value)."""


def read_properties(path: str | Path, role: str = "--kafka-config") -> dict[str, str]:
    """A Java .properties file (java.util.Properties.load's syntax: ``key=value``, ``key: value`` or
    ``key value``, ``#`` and ``!`` comments, a trailing backslash continuing the line, backslash
    escapes with ``\\uXXXX``), as Kafka's tools read ``--command-config``. ``role``: the file's part, in
    the messages."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ClientConfigError(f"{role}: {path} cannot be read ({_reason(exc)})") from None
    props: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line)
        try:
            props[_unescape(key)] = _unescape(value)
        except ValueError as exc:
            raise ClientConfigError(f"{role}: {path} line {number}: {exc}") from None
    return props


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, logical line) without comments and blank lines, continuations joined."""
    lines, pending, start = [], "", 0
    for number, natural in enumerate(text.splitlines(), 1):
        part = natural.lstrip(" \t\f")
        if not pending and (not part or part[0] in "#!"):
            continue
        if not pending:
            start = number
        trailing = len(part) - len(part.rstrip("\\"))
        if trailing % 2:
            pending += part[:-1]
            continue
        lines.append((start, pending + part))
        pending = ""
    if pending:
        lines.append((start, pending))
    return lines


def _split(line: str) -> tuple[str, str]:
    """A logical line's key and value: the key ends at the first unescaped '=', ':' or white space."""
    i = 0
    while i < len(line) and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2:i + 6]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"malformed \\uXXXX escape {text[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def resolve(settings: Mapping[str, str], origin: str = "Kafka setting") -> dict[str, str]:
    """``settings`` (Java client names, with or without ``kafka.``) with every config provider reference
    replaced by its value and the ``config.providers`` settings taken out: what both sources get."""
    providers = _providers(settings)
    resolved: dict[str, str] = {}
    for key, value in settings.items():
        if _bare(key) == PROVIDERS_SETTING or _bare(key).startswith(PROVIDERS_SETTING + "."):
            continue
        resolved[key] = REFERENCE.sub(lambda m: _lookup(m, key, providers, origin), str(value))
    return resolved


def _bare(key: str) -> str:
    return key[len("kafka."):] if key.startswith("kafka.") else key


def _providers(settings: Mapping[str, str]) -> dict[str, tuple[str, dict[str, str]]]:
    """name -> (class, parameters) of each provider config.providers names."""
    bare = {_bare(k): str(v) for k, v in settings.items()}
    names = [n.strip() for n in bare.get(PROVIDERS_SETTING, "").split(",") if n.strip()]
    providers = {}
    for name in names:
        prefix = f"{PROVIDERS_SETTING}.{name}"
        cls = bare.get(f"{prefix}.class", "").strip()
        if not cls:
            raise ClientConfigError(f"{PROVIDERS_SETTING} names {name!r} but {prefix}.class is not set; give one "
                                    f"of {', '.join(PROVIDER_CLASSES)}")
        if cls not in PROVIDER_CLASSES:
            raise ClientConfigError(f"{prefix}.class = {cls}: not a config provider the job can run in its driver; "
                                    f"use {', '.join(PROVIDER_CLASSES)}")
        params = {k[len(prefix) + 7:]: v for k, v in bare.items() if k.startswith(f"{prefix}.param.")}
        providers[name] = (cls, params)
    return providers


def _lookup(match: re.Match[str], setting: str, providers: Mapping[str, tuple[str, dict[str, str]]],
            origin: str) -> str:
    name, path, key = match.group(1), match.group(2) or "", match.group(3)
    where = f"{origin} {_bare(setting)}: {match.group(0)}"
    if name not in providers:
        listed = ", ".join(providers) or "none"
        raise ClientConfigError(f"{where} names config provider {name!r}, which {PROVIDERS_SETTING} does not "
                                f"list (it lists {listed}); add it, e.g. {PROVIDERS_SETTING}={name} and "
                                f"{PROVIDERS_SETTING}.{name}.class=<one of {', '.join(PROVIDER_CLASSES)}>")
    cls, params = providers[name]
    if cls == ENV_PROVIDER:
        return _from_environment(where, path, key, params)
    if not path:
        raise ClientConfigError(f"{where}: a {cls.rsplit('.', 1)[-1]} reference is ${{{name}:PATH:KEY}}")
    _check_allowed(where, path, params)
    if cls == FILE_PROVIDER:
        values = read_properties(path, where)
        if key not in values:
            raise ClientConfigError(f"{where}: {path} has no key {key!r} (it has {', '.join(sorted(values)) or 'none'})")
        if is_secret_setting(setting):
            check_secret_file(path, f"{origin} {_bare(setting)}")
        return values[key]
    target = Path(path) / key
    if Path(key).is_absolute() or ".." in Path(key).parts:
        raise ClientConfigError(f"{where}: {key!r} must name a file inside {path}")
    try:
        value = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ClientConfigError(f"{where}: {target} cannot be read ({_reason(exc)})") from None
    if is_secret_setting(setting):
        check_secret_file(target, f"{origin} {_bare(setting)}")
    return value


def _from_environment(where: str, path: str, key: str, params: Mapping[str, str]) -> str:
    if path:
        raise ClientConfigError(f"{where}: an EnvVarConfigProvider reference is ${{NAME:VARIABLE}}, without a path")
    pattern = params.get(ALLOWLIST_PATTERN)
    if pattern is not None:
        try:
            allowed = re.fullmatch(pattern, key) is not None
        except re.error as exc:
            raise ClientConfigError(f"{where}: param.{ALLOWLIST_PATTERN} {pattern!r} is not a regex ({exc})") from None
        if not allowed:
            raise ClientConfigError(f"{where}: variable {key} is not allowed by param.{ALLOWLIST_PATTERN} {pattern!r}")
    if key not in os.environ:
        raise ClientConfigError(f"{where}: the environment variable {key} is not set")
    return os.environ[key]


def _check_allowed(where: str, path: str, params: Mapping[str, str]) -> None:
    allowed = [p.strip() for p in params.get(ALLOWED_PATHS, "").split(",") if p.strip()]
    if not allowed:
        return
    real = os.path.realpath(path)
    if not any(real == os.path.realpath(a) or real.startswith(os.path.realpath(a).rstrip("/") + "/")
               for a in allowed):
        raise ClientConfigError(f"{where}: {path} is outside param.{ALLOWED_PATHS} ({', '.join(allowed)})")


def check_secret_file(path: str | Path, role: str) -> None:
    """A file holding a secret must not be readable by every user of the machine: refused (mode and
    the fix named). Readable by its group: one warning, since a group can be meant to (a service's
    group, Kubernetes' fsGroup on a Secret volume)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ClientConfigError(f"{role}: {path} cannot be read ({_reason(exc)})") from None
    if mode & stat.S_IROTH:
        raise ClientConfigError(f"{role}: secrets file {path} is readable by every user (mode "
                                f"{stat.S_IMODE(mode):04o}); make it yours alone: chmod 600 {path}")
    if mode & stat.S_IRGRP:
        log.warning("%s: secrets file %s is readable by its group (mode %04o): chmod 600 it unless that group "
                    "is meant to read it", role, path, stat.S_IMODE(mode))


def holds_literal_secret(settings: Mapping[str, str]) -> bool:
    """Whether a secret is written out in ``settings``, not only config provider references."""
    return any(REFERENCE.sub("", part).strip()
               for key, value in settings.items() for part in secret_parts(key, str(value)))


def check_settings_file(path: str | Path, settings: Mapping[str, str], role: str) -> None:
    """A file whose client settings write a secret out is a secrets file (check_secret_file)."""
    if holds_literal_secret(settings):
        check_secret_file(path, role)


def warn_command_line_secrets(settings: Mapping[str, str]) -> None:
    """A secret given with --kafka-option is on the command line, which every user sees (``ps``): one
    warning naming the setting and the ways that keep it off."""
    named = sorted(_bare(k) for k, v in settings.items() if holds_literal_secret({k: v}))
    if named:
        log.warning("--kafka-option %s: a secret on the command line, shown to every user of the machine by ps; "
                    "put it in --kafka-config FILE (mode 600) or a config provider reference "
                    "(${env:NAME}, ${file:PATH:KEY})", ", ".join(named))


def load(kafka_config: str | None, options: Mapping[str, str]) -> dict[str, str]:
    """The job's Kafka client settings: the ``--kafka-config`` file, then each of ``options`` over it
    (a single setting beats a file, as with Kafka's tools), resolved. A properties file that writes a
    secret out is checked as a secrets file."""
    merged: dict[str, str] = {}
    if kafka_config:
        from_file = read_properties(kafka_config)
        check_settings_file(kafka_config, from_file, "--kafka-config")
        merged.update(from_file)
    merged.update({str(k): str(v) for k, v in options.items()})
    return resolve(merged)


def job_settings(kafka_config: str | None, options: Mapping[str, str], config_file: str | None,
                 from_config_file: Mapping[str, str], from_command_line: Mapping[str, str]) -> dict[str, str]:
    """A job's client settings (``load``), after the checks of where its secrets were written: the TOML
    ``config_file`` as a secrets file if it writes one out (``from_config_file``: its own settings),
    a warning for those on the command line (``from_command_line``)."""
    if config_file:
        check_settings_file(config_file, from_config_file, "--config")
    warn_command_line_secrets(from_command_line)
    return load(kafka_config, options)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return str(exc)
