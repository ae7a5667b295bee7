"""Service-account tokens signed with the local control plane's own signing key
(hack/k8s-up.sh's sa.key), so a test can hold tokens the API server would never mint on
request, such as one that expired an hour ago (TokenRequest's shortest is 10 minutes)."""

from __future__ import annotations

import base64
import json
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

ISSUER = "https://kubernetes.default.svc.cluster.local"
"""hack/k8s-up.sh's --service-account-issuer (also its only --api-audiences)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def service_account_token(
    key: Path, *, namespace: str, name: str, uid: str, issued: datetime, lifetime: timedelta
) -> str:
    """An RS256 JWT with the claims of a bound service-account token, valid from `issued`
    for `lifetime` (signed by openssl: no JWT library needed)."""
    now = int(issued.timestamp())
    claims = {
        "iss": ISSUER, "aud": [ISSUER], "sub": f"system:serviceaccount:{namespace}:{name}",
        "iat": now, "nbf": now, "exp": now + int(lifetime.total_seconds()),
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
    }  # fmt: skip
    header = {"alg": "RS256", "typ": "JWT"}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = subprocess.run(
        ["openssl", "dgst", "-sha256", "-sign", str(key)],
        input=signing_input.encode(), capture_output=True, check=True, timeout=10,
    ).stdout  # fmt: skip
    return f"{signing_input}.{_b64(signature)}"
