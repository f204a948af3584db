"""Service account tokens as the kube-apiserver issues them (TokenRequest): JWTs signed RS256
with a key made at start (`sa.key`, `sa.pub` in the certificates' directory, as kubeadm has
them), with the claims of a bound token. Signing is `openssl dgst -sha256 -sign`: no
Python crypto package is needed."""

import base64
import hashlib
import json
import os
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
