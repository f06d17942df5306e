"""OAUTHBEARER for the kafka-python source as Kafka's Java client does it without a token endpoint:
``OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="alice";`` makes an unsecured JWS
(``alg: none``) naming the principal, which a broker checks with Kafka's unsecured validator (a
development and test setup; a production broker validates signed tokens)."""

from __future__ import annotations

import base64
import json
import re
import time

from kafka.net.sasl.oauth import AbstractTokenProvider

LOGIN_MODULE = "OAuthBearerLoginModule"
LIFETIME_S = 3600      # the Java client's unsecuredLoginLifetimeSeconds default
_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).rstrip(b"=").decode()


class UnsecuredToken(AbstractTokenProvider):
    """The token of ``unsecuredLoginStringClaim_<name>`` options (``sub`` required), made again
    once it is past half its lifetime."""

    def __init__(self, claims: dict[str, str], lifetime_s: int = LIFETIME_S) -> None:
        super().__init__()
        self.claims = dict(claims)
        self.lifetime_s = lifetime_s
        self._token = ""
        self._made = 0.0

    @property
    def principal(self) -> str:
        return self.claims["sub"]

    def token(self) -> str:
        now = time.time()
        if not self._token or now - self._made > self.lifetime_s / 2:
            payload = {**self.claims, "iat": int(now), "exp": int(now) + self.lifetime_s}
            self._token = f"{_b64({'alg': 'none'})}.{_b64(payload)}."
            self._made = now
        return self._token


def unsecured_token(jaas: str) -> UnsecuredToken | None:
    """The token provider of an OAuthBearerLoginModule JAAS line, None if it names no principal."""
    options = dict(_OPTION.findall(jaas))
    claims = {k[len("unsecuredLoginStringClaim_"):]: v for k, v in options.items()
              if k.startswith("unsecuredLoginStringClaim_")}
    if "sub" not in claims:
        return None
    lifetime = options.get("unsecuredLoginLifetimeSeconds", "")
    return UnsecuredToken(claims, int(lifetime) if lifetime.isdigit() else LIFETIME_S)
