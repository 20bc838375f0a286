"""A registry v2 client (stdlib only): ping, tag list, manifest HEAD.

The manifest HEAD sends all four manifest media types in `Accept` (Docker v2 manifest and
list, OCI manifest and index): with fewer, a registry answers an OCI index with 404 and a
Docker v2 manifest with 400. Basic auth, or the Bearer token flow a 401 challenge names. The
password comes from the environment and is never part of a message.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from forge_sandbox._errors import SandboxError
from forge_sandbox.images._config import ImagesConfig

MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
)


class RegistryError(SandboxError):
    """The registry could not be reached or refused a request (expected / found / fix)."""


@dataclass
class Registry:
    config: ImagesConfig
    timeout_s: float = 15.0
    _token: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"{self.config.registry_scheme}://{self.config.registry}"

    def _basic(self) -> str | None:
        password = self.config.password()
        if self.config.username is None or password is None:
            return None
        raw = f"{self.config.username}:{password}".encode()
        return "Basic " + base64.b64encode(raw).decode()

    def _request(self, method: str, path: str, accept: str | None = None, scope: str = ""):
        headers = {"Accept": accept} if accept else {}
        auth = self._token.get(scope) or self._basic()
        if auth:
            headers["Authorization"] = auth
        request = urllib.request.Request(self.base + path, method=method, headers=headers)
        try:
            return urllib.request.urlopen(request, timeout=self.timeout_s)
        except urllib.error.HTTPError as exc:
            challenge = exc.headers.get("WWW-Authenticate", "")
            if exc.code == 401 and challenge.startswith("Bearer") and scope not in self._token:
                self._token[scope] = self._bearer(challenge)
                return self._request(method, path, accept, scope)
            raise

    def _bearer(self, challenge: str) -> str:
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        query = urllib.parse.urlencode({k: v for k, v in params.items() if k != "realm"})
        request = urllib.request.Request(f"{params.get('realm', '')}?{query}")
        basic = self._basic()
        if basic:
            request.add_header("Authorization", basic)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                body = json.loads(answer.read())
        except (urllib.error.URLError, ValueError) as exc:
            raise RegistryError(
                f"registry token: expected a token from {params.get('realm')!r}; found "
                f"{type(exc).__name__}; fix: check username / {self.config.password_env}"
            ) from None
        return "Bearer " + str(body.get("token") or body.get("access_token", ""))

    def ping(self) -> str:
        """'ok' (200) or 'auth required' (401): the registry answers v2."""
        try:
            with self._request("GET", "/v2/"):
                return "ok"
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                return "auth required"
            raise self._error("GET /v2/", exc) from None
        except OSError as exc:
            raise self._error("GET /v2/", exc) from None

    def tags(self, repository: str) -> set[str]:
        """The repository's tags (empty when it does not exist yet)."""
        path = f"/v2/{repository}/tags/list"
        try:
            with self._request("GET", path, scope=f"repository:{repository}:pull") as answer:
                body = json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return set()
            raise self._error(f"GET {path}", exc) from None
        except OSError as exc:
            raise self._error(f"GET {path}", exc) from None
        return set(body.get("tags") or [])

    def manifest_digest(self, repository: str, reference: str) -> str | None:
        """The manifest's digest (Docker-Content-Digest of a HEAD), None when it is absent."""
        path = f"/v2/{repository}/manifests/{reference}"
        try:
            with self._request(
                "HEAD", path, ", ".join(MANIFEST_TYPES), scope=f"repository:{repository}:pull"
            ) as answer:
                digest = answer.headers.get("Docker-Content-Digest")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise self._error(f"HEAD {path}", exc) from None
        except OSError as exc:
            raise self._error(f"HEAD {path}", exc) from None
        if not digest:
            raise RegistryError(
                f"HEAD {path}: expected a Docker-Content-Digest header; found none; fix: the "
                "registry must implement the v2 API (distribution >= 2.3)"
            )
        return digest

    def _error(self, what: str, exc: BaseException) -> RegistryError:
        code = getattr(exc, "code", None)
        found = f"HTTP {code}" if code else f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
        fix = {
            401: f"set username and the {self.config.password_env} environment variable",
            403: "grant the registry user pull (and push, for builds) on the repository",
        }.get(code or 0, f"check the registry at {self.base} is up and reachable from here")
        return RegistryError(f"{what} on {self.base}: expected success; found {found}; fix: {fix}")
