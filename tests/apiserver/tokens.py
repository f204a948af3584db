"""Service account tokens as the kube-apiserver issues them (TokenRequest): JWTs signed RS256
with a key made at start (`sa.key`, `sa.pub` in the certificates' directory, as kubeadm has
them), with the claims of a bound token. Signing is `openssl dgst -sha256 -sign`: no
Python crypto package is needed. Also what the bootstrap token authenticator makes of a
`bootstrap-token-<id>` Secret (plugin/pkg/auth/authenticator/token/bootstrap)."""

import base64
import binascii
import datetime
import hashlib
import json
import os
import re
import subprocess
import threading
import uuid

ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCES = [ISSUER]
EXPIRATION_EXTENSION_SECONDS = 24 * 365 * 60 * 60  # serviceaccount.ExpirationExtensionSeconds


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _openssl(*args, data=None):
    return subprocess.run(["openssl", *args], input=data, capture_output=True, check=True).stdout


class Issuer:
    """The token signer: its key, its key id, and the log of what it issued."""

    def __init__(self, directory):
        self.key = os.path.join(directory, "sa.key")
        self.pub = os.path.join(directory, "sa.pub")
        if not os.path.exists(self.key):
            tmp = self.key + ".tmp"
            try:
                _openssl("genrsa", "-traditional", "-out", tmp, "2048")
            except subprocess.CalledProcessError:  # OpenSSL 1.1 writes PKCS#1 without the flag
                _openssl("genrsa", "-out", tmp, "2048")
            os.chmod(tmp, 0o600)
            os.rename(tmp, self.key)
        if not os.path.exists(self.pub):
            _openssl("rsa", "-in", self.key, "-pubout", "-out", self.pub)
        der = _openssl("rsa", "-in", self.key, "-pubout", "-outform", "DER")
        # serviceaccount.keyIDFromPublicKey: base64url(SHA-256(PKIX DER)), unpadded.
        self.kid = b64url(hashlib.sha256(der).digest())
        self.lock = threading.Lock()
        self.issued = []
        # Every token issued with its claims: TokenReview knows a token by its exact bytes,
        # which is as strong as checking the signature (nothing else holds the key).
        self.claims = {}

    def sign(self, claims):
        """The compact JWS of `claims` (keys sorted at every level, as go-jose writes them)."""
        def part(obj):
            return b64url(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode())

        signing_input = part({"alg": "RS256", "kid": self.kid}) + "." + part(claims)
        signature = _openssl("dgst", "-sha256", "-sign", self.key, data=signing_input.encode())
        return signing_input + "." + b64url(signature)

    def issue(self, sa, audiences, expiration, warn_after, now, pod=None, node=None, secret=None, record=None):
        """A token for ServiceAccount `sa` (token.Claims) issued at `now` (Unix seconds),
        valid `expiration` seconds, bound to `pod` (and its `node`: a dict with name and uid,
        or name alone when the Node is not there), to `node` alone or to `secret`;
        `warn_after` seconds (0: none) for an extended token. Logs `record` with what was
        issued, for /control/tokens."""
        meta = sa["metadata"]
        k8s_claims = {"namespace": meta["namespace"],
                      "serviceaccount": {"name": meta["name"], "uid": meta["uid"]}}
        if pod is not None:
            k8s_claims["pod"] = {"name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        if secret is not None:
            k8s_claims["secret"] = {"name": secret["metadata"]["name"], "uid": secret["metadata"]["uid"]}
        if node is not None:
            k8s_claims["node"] = {k: v for k, v in node.items() if v}
        if warn_after:
            k8s_claims["warnafter"] = now + warn_after
        claims = {"aud": list(audiences), "exp": now + expiration, "iat": now, "nbf": now, "iss": ISSUER,
                  "sub": f"system:serviceaccount:{meta['namespace']}:{meta['name']}", "jti": str(uuid.uuid4()),
                  "kubernetes.io": k8s_claims}
        token = self.sign(claims)
        entry = dict(record or {}, namespace=meta["namespace"], serviceaccount=meta["name"],
                     pod=pod["metadata"]["name"] if pod else None, pod_uid=pod["metadata"]["uid"] if pod else None,
                     node=(node or {}).get("name"), audiences=list(audiences), iat=now, exp=now + expiration,
                     warnafter=k8s_claims.get("warnafter"), jti=claims["jti"])
        with self.lock:
            self.issued.append(entry)
            self.claims[token] = claims
        return token

    def claims_of(self, token):
        """The claims of a token issued here, or None."""
        with self.lock:
            return self.claims.get(token)


# ---- bootstrap tokens (k8s.io/cluster-bootstrap: token/api, util/secrets, util/tokens) ----------

BOOTSTRAP_TOKEN = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
BOOTSTRAP_NAMESPACE = "kube-system"
BOOTSTRAP_SECRET_PREFIX = "bootstrap-token-"
BOOTSTRAP_SECRET_TYPE = "bootstrap.kubernetes.io/token"
BOOTSTRAP_USER_PREFIX = "system:bootstrap:"
BOOTSTRAP_GROUP = "system:bootstrappers"
BOOTSTRAP_EXTRA_GROUP = re.compile(r"^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$")


def bootstrap_token_parts(token):
    """(id, secret) of a token shaped as a bootstrap token, else None (the authenticator
    leaves it to the others)."""
    m = BOOTSTRAP_TOKEN.match(token)
    return (m.group(1), m.group(2)) if m else None


def _secret_value(secret, key):
    try:
        return base64.b64decode((secret.get("data") or {}).get(key) or "", validate=True).decode()
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return ""


def bootstrap_expired(secret, now):
    """util/secrets.HasExpired: an `expiration` that is past, or that does not parse (RFC 3339),
    is expired; none never expires."""
    text = _secret_value(secret, "expiration")
    if not text:
        return False
    try:
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return True
    if t.tzinfo is None or not re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)$", text):
        return True
    return t.timestamp() <= now


def bootstrap_identity(secret, token_id, token_secret, now):
    """(user name, groups) for bootstrap token `token_id.token_secret` from its Secret (None:
    missing), as AuthenticateToken: the Secret not being deleted, of the bootstrap type, with
    the same token-secret and token-id, not expired, marked usage-bootstrap-authentication=true
    and with valid auth-extra-groups; else None. The groups are system:bootstrappers and the
    extra ones, sorted and without duplicates."""
    if secret is None or (secret.get("metadata") or {}).get("deletionTimestamp"):
        return None
    if secret.get("type") != BOOTSTRAP_SECRET_TYPE or not secret.get("data"):
        return None
    if _secret_value(secret, "token-secret") != token_secret or _secret_value(secret, "token-id") != token_id:
        return None
    if bootstrap_expired(secret, now):
        return None
    if _secret_value(secret, "usage-bootstrap-authentication") != "true":
        return None
    groups = {BOOTSTRAP_GROUP}
    extra = _secret_value(secret, "auth-extra-groups")
    if extra:
        for g in extra.split(","):
            if not BOOTSTRAP_EXTRA_GROUP.match(g):
                return None
            groups.add(g)
    return BOOTSTRAP_USER_PREFIX + token_id, sorted(groups)
