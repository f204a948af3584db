"""CertificateSigningRequests (certificates.k8s.io/v1) as kube-apiserver validates them and
kube-controller-manager's csrapproving and csrsigning controllers decide about them.

Everything cryptographic is the `openssl` command (3.0): a request's signature is checked with
`openssl req -verify`, certificates are signed with `openssl ca` (the only way to give OpenSSL
3.0 a start and an end date) and read back with `openssl x509`. A request's fields (subject,
subjectAltNames, key type) come from a small DER reader here, so they are exactly what Go's
x509.ParseCertificateRequest sees. No Python crypto package is needed.

Plain data in, plain data out, but for the openssl processes: fake_apiserver.py keeps the
objects, the locks and the controller thread.
"""

import base64
import binascii
import calendar
import datetime
import difflib
import hashlib
import ipaddress
import json
import os
import re
import subprocess
import tempfile
import threading
import time

# The signer names of the in-tree signers (k8s.io/api/certificates/v1).
KUBE_APISERVER_CLIENT = "kubernetes.io/kube-apiserver-client"
KUBELET_CLIENT = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_SERVING = "kubernetes.io/kubelet-serving"
LEGACY_UNKNOWN = "kubernetes.io/legacy-unknown"
# What kube-controller-manager's csrsigning controller signs with --cluster-signing-cert-file
# (kubeadm sets it; the legacy-unknown signer only serves v1beta1, which the fake does not).
SIGNED_HERE = (KUBE_APISERVER_CLIENT, KUBELET_CLIENT, KUBELET_SERVING)

DEFAULT_SIGNING_SECONDS = 365 * 24 * 3600  # --cluster-signing-duration's default, 8760h
MIN_EXPIRATION_SECONDS = 600  # spec.expirationSeconds' lower bound, and the signer's floor
BACKDATE_SECONDS = 5 * 60  # signer.go: NotBefore = now - 5m
SHORT_SECONDS = 8 * 3600  # a TTL below this is not backdated at its end

APPROVED, DENIED, FAILED = "Approved", "Denied", "Failed"

# pkg/apis/certificates: the key usages and what x509 makes of them (authority/policies.go),
# as openssl's extension names. "signing" and "digital signature" are the same bit, "s/mime"
# and "email protection" the same extended usage.
KEY_USAGES = {
    "signing": "digitalSignature", "digital signature": "digitalSignature", "content commitment": "nonRepudiation",
    "key encipherment": "keyEncipherment", "key agreement": "keyAgreement", "data encipherment": "dataEncipherment",
    "cert sign": "keyCertSign", "crl sign": "cRLSign", "encipher only": "encipherOnly", "decipher only": "decipherOnly",
}
# In Go's x509.ExtKeyUsage order, which is how the signer sorts them.
EXT_KEY_USAGES = {
    "any": (0, "anyExtendedKeyUsage"), "server auth": (1, "serverAuth"), "client auth": (2, "clientAuth"),
    "code signing": (3, "codeSigning"), "email protection": (4, "emailProtection"), "s/mime": (4, "emailProtection"),
    "ipsec end system": (5, "ipsecEndSystem"), "ipsec tunnel": (6, "ipsecTunnel"), "ipsec user": (7, "ipsecUser"),
    "timestamping": (8, "timeStamping"), "ocsp signing": (9, "OCSPSigning"), "microsoft sgc": (10, "msSGC"),
    "netscape sgc": (11, "nsSGC"),
}
ALL_USAGES = sorted(set(KEY_USAGES) | set(EXT_KEY_USAGES))

# ValidateKubeletClientCSR / ValidateKubeletServingCSR (pkg/apis/certificates/helpers.go):
# the usage sets they accept, with and without key encipherment (an EC key has no use for it).
KUBELET_CLIENT_USAGES = ({"digital signature", "key encipherment", "client auth"}, {"digital signature", "client auth"})
KUBELET_SERVING_USAGES = ({"digital signature", "key encipherment", "server auth"}, {"digital signature", "server auth"})

# Condition types that may only be True (validation.go's trueConditionTypes).
TRUE_ONLY = (APPROVED, DENIED, FAILED)

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                     "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                     "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
DNS1123_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                         "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                         "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


class CsrError(Exception):
    """A request or certificate that cannot be used, with the words Go's x509 would use."""


def _openssl(*args, data=None, check=True):
    return subprocess.run(["openssl", *args], input=data, capture_output=True, check=check)


# ---- PEM and DER --------------------------------------------------------------------------------

PEM_BLOCK = re.compile(rb"-----BEGIN ([^\r\n-]*)-----\r?\n(.*?)-----END \1-----", re.S)


def pem_blocks(data):
    """[(type, headers?, DER bytes)] of the PEM blocks in `data`, as Go's pem.Decode finds
    them one after the other (text around them is skipped; a block whose body is not base64
    is skipped too)."""
    out = []
    for m in PEM_BLOCK.finditer(data or b""):
        body = m.group(2)
        headers = b":" in body.split(b"\n\n", 1)[0] if b"\n\n" in body else False
        if headers:
            body = body.split(b"\n\n", 1)[1]
        try:
            der = base64.b64decode(b"".join(body.split()), validate=True)
        except (binascii.Error, ValueError):
            continue
        out.append((m.group(1).decode("latin-1"), headers, der))
    return out


def _element(data, pos):
    """(tag, start, end) of the DER element at `pos` (its contents are data[start:end])."""
    if pos + 2 > len(data):
        raise ValueError("data truncated")
    tag, length = data[pos], data[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        if n == 0 or n > 4 or pos + n > len(data):
            raise ValueError("length too large")
        length = int.from_bytes(data[pos:pos + n], "big")
        pos += n
    if pos + length > len(data):
        raise ValueError("data truncated")
    return tag, pos, pos + length


def _children(data, start, end):
    out, pos = [], start
    while pos < end:
        tag, s, e = _element(data, pos)
        out.append((tag, s, e))
        pos = e
    return out


def _oid(raw):
    first = raw[0]
    parts, value = [first // 40 if first < 80 else 2, first % 40 if first < 80 else first - 80], 0
    for b in raw[1:]:
        value = value << 7 | (b & 0x7F)
        if not b & 0x80:
            parts.append(value)
            value = 0
    return ".".join(map(str, parts))


OID_CN, OID_O = "2.5.4.3", "2.5.4.10"
OID_EXTENSION_REQUEST = "1.2.840.113549.1.9.14"
OID_SAN = "2.5.29.17"
KEY_ALGORITHMS = {"1.2.840.113549.1.1.1": "RSA", "1.2.840.10045.2.1": "ECDSA", "1.3.101.112": "Ed25519"}


def _name(data, start, end):
    """The (OID, value) pairs of an X.501 Name, in order."""
    pairs = []
    for _, s, e in _children(data, start, end):  # RelativeDistinguishedName (a SET)
        for _, s2, e2 in _children(data, s, e):  # AttributeTypeAndValue
            (_, os_, oe), (_, vs, ve) = _children(data, s2, e2)[:2]
            pairs.append((_oid(data[os_:oe]), data[vs:ve].decode("utf-8", "replace")))
    return pairs


class Request:
    """A PKCS#10 request as x509.ParseCertificateRequest reads it."""

    def __init__(self, der):
        self.der = der
        try:
            top = _children(der, 0, len(der))
            if len(top) != 1 or top[0][0] != 0x30:
                raise ValueError("trailing data")
            info, _alg, _sig = _children(der, top[0][1], top[0][2])
            parts = _children(der, info[1], info[2])
            subject, spki = parts[1], parts[2]
            self.subject = _name(der, subject[1], subject[2])
            alg = _children(der, *_children(der, spki[1], spki[2])[0][1:])[0]
            self.key_algorithm = KEY_ALGORITHMS.get(_oid(der[alg[1]:alg[2]]), "unknown")
            self.dns, self.ips, self.emails, self.uris = [], [], [], []
            for tag, as_, ae in parts[3:]:
                if tag == 0xA0:  # [0] attributes
                    for _, s2, e2 in _children(der, as_, ae):
                        self._attribute(_children(der, s2, e2))
        except (ValueError, TypeError, IndexError):
            # encoding/asn1's words for what it cannot unmarshal, near enough.
            raise CsrError("asn1: structure error: tags don't match")
        self.organizations = [v for oid, v in self.subject if oid == OID_O]
        cns = [v for oid, v in self.subject if oid == OID_CN]
        self.common_name = cns[-1] if cns else ""

    def _attribute(self, parts):
        der = self.der
        if _oid(der[parts[0][1]:parts[0][2]]) != OID_EXTENSION_REQUEST:
            return
        for _, vs, ve in _children(der, parts[1][1], parts[1][2]):  # SET of Extensions
            for _, xs, xe in _children(der, vs, ve):  # Extension
                ext = _children(der, xs, xe)
                if _oid(der[ext[0][1]:ext[0][2]]) != OID_SAN:
                    continue
                octets = ext[-1]
                _, ns, ne = _children(der, octets[1], octets[2])[0]
                for tag, gs, ge in _children(der, ns, ne):
                    value = der[gs:ge]
                    if tag == 0x81:
                        self.emails.append(value.decode("latin-1"))
                    elif tag == 0x82:
                        self.dns.append(value.decode("latin-1"))
                    elif tag == 0x86:
                        self.uris.append(value.decode("latin-1"))
                    elif tag == 0x87:
                        self.ips.append(str(ipaddress.ip_address(value)))

    def pem(self):
        """The request as PEM (what `openssl ca` reads)."""
        body = base64.encodebytes(self.der).decode().replace("\n", "")
        lines = [body[i:i + 64] for i in range(0, len(body), 64)]
        return ("-----BEGIN CERTIFICATE REQUEST-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE REQUEST-----\n").encode()


def _escape(value):
    """A subject value for `openssl req -subj`, its separators escaped."""
    return re.sub(r"([/+\\=])", r"\\\1", value)


_parsed_lock = threading.Lock()
_parsed = {}  # DER SHA-256 -> (Request or CsrError, signature error or "")


def parse_request(pem):
    """The Request in `pem` (certificates.ParseCSR plus CheckSignature), or CsrError with the
    reason the apiserver gives. Results are cached by the request's bytes."""
    blocks = pem_blocks(pem)
    if not blocks or blocks[0][0] != "CERTIFICATE REQUEST":
        raise CsrError("PEM block type must be CERTIFICATE REQUEST")
    der = blocks[0][2]
    key = hashlib.sha256(der).hexdigest()
    with _parsed_lock:
        hit = _parsed.get(key)
    if hit is None:
        try:
            req = Request(der)
            verified = _openssl("req", "-inform", "DER", "-noout", "-verify", data=der, check=False)
            # OpenSSL 3.0 exits 0 after a failed verification too: its words are what count.
            ok = verified.returncode == 0 and b"verify OK" in verified.stdout + verified.stderr
            why = "" if ok else {
                "ECDSA": "x509: ECDSA verification failure", "Ed25519": "x509: Ed25519 verification failure",
            }.get(req.key_algorithm, "crypto/rsa: verification error")
            hit = (req, why)
        except CsrError as e:
            hit = (e, "")
        with _parsed_lock:
            _parsed[key] = hit
    if isinstance(hit[0], CsrError):
        raise hit[0]
    if hit[1]:
        raise CsrError(hit[1])
    return hit[0]


# ---- validation (pkg/apis/certificates/validation) ------------------------------------------------

def go_bytes(raw):
    """A []byte as Go's %#v prints it (field.Invalid of spec.request)."""
    if raw is None:
        return "[]byte(nil)"
    return "[]byte{" + ", ".join(f"0x{b:x}" for b in raw) + "}"


def _quote(v):
    return json.dumps(v)


def signer_name_errors(name):
    """ValidateSignerName: `domain/path`, both made of DNS-1123 labels."""
    path = "spec.signerName"
    if not name:
        return [(path, "Required value")]
    segments = name.split("/")
    if len(segments) != 2:
        return [(path, f"Invalid value: {_quote(name)}: must be a fully qualified domain and path of the form "
                       "'example.com/signer-name'")]
    domain, rest = segments
    errs = []
    if len(domain) > 253:
        errs.append((path, "Too long: must have at most 253 bytes"))
    labels = domain.split(".")
    for lbl in labels:
        why = ["must be no more than 63 characters"] if len(lbl) > 63 else []
        if not DNS1123_LABEL.match(lbl):
            why.append(DNS1123_LABEL_MSG)
        if why:
            errs += [(path, f"Invalid value: {_quote(domain)}: validating label {_quote(lbl)}: {w}") for w in why]
            break
    if len(labels) < 2:
        errs.append((path, f"Invalid value: {_quote(domain)}: should be a domain with at least two segments "
                           "separated by dots"))
    for lbl in rest.split("."):
        why = ["must be no more than 253 characters"] if len(lbl) > 253 else []
        if not DNS1123_SUBDOMAIN.match(lbl):
            why.append(DNS1123_SUBDOMAIN_MSG)
        if why:
            errs += [(path, f"Invalid value: {_quote(rest)}: validating label {_quote(lbl)}: {w}") for w in why]
            break
    if len(name) > 253 + 253 + 63 + 1 + 1:
        errs.append((path, "Too long: must have at most 571 bytes"))
    return errs


def certificate_error(raw):
    """validateCertificate: why status.certificate is not one or more CERTIFICATE blocks, or ""."""
    if not raw:
        return ""
    blocks = pem_blocks(raw)
    for typ, headers, der in blocks:
        if typ != "CERTIFICATE":
            return f"only CERTIFICATE PEM blocks are allowed, found {_quote(typ)}"
        if headers:
            return "no PEM block headers are permitted"
        try:
            tag, _, end = _element(der, 0)
            if tag != 0x30 or end != len(der):
                raise ValueError
        except ValueError:
            return "x509: malformed certificate"
    if not blocks:
        return "must contain at least one CERTIFICATE PEM block"
    return ""


def _b64(value):
    try:
        return base64.b64decode(value, validate=True) if value is not None else None
    except (binascii.Error, ValueError, TypeError):
        return None


def conditions_of(csr, typ):
    return [c for c in (csr.get("status") or {}).get("conditions") or [] if c.get("type") == typ]


def _has_unknown_usage(csr):
    return any(u not in ALL_USAGES for u in (csr.get("spec") or {}).get("usages") or [])


def _has_duplicate_usage(csr):
    usages = (csr.get("spec") or {}).get("usages") or []
    return len(set(usages)) != len(usages)


def _condition_types(csr):
    return [c.get("type") or "" for c in (csr.get("status") or {}).get("conditions") or []]


def well_typed(csr):
    """Whether the fields validation looks at have their JSON types (else the schema says
    what is wrong, as the apiserver's decoder would)."""
    spec, status = csr.get("spec"), csr.get("status")
    if not isinstance(spec, dict) or not isinstance(status, (dict, type(None))):
        return False
    status = status or {}

    def strings(v):
        return v is None or isinstance(v, list) and all(isinstance(x, str) for x in v)

    exp = spec.get("expirationSeconds")
    return (all(isinstance(spec.get(k), (str, type(None))) for k in ("request", "signerName"))
            and strings(spec.get("usages")) and (exp is None or isinstance(exp, int) and not isinstance(exp, bool))
            and isinstance(status.get("certificate"), (str, type(None)))
            and (status.get("conditions") is None or isinstance(status["conditions"], list)
                 and all(isinstance(c, dict) and all(isinstance(c.get(k), (str, type(None))) for k in ("type", "status"))
                         for c in status["conditions"])))


def validation_errors(csr, old=None, sub=""):
    """[(field, message)] of ValidateCertificateSigningRequestCreate (`old` None) or of the
    update of `old` through the resource (`sub` ""), `status` or `approval`, after the
    strategies' PrepareForUpdate (the caller has already put the stored spec back)."""
    spec, status = csr.get("spec") or {}, csr.get("status") or {}
    old_types = _condition_types(old) if old is not None else []
    errs = []
    meta = csr.get("metadata") or {}
    name = meta.get("name") or ""
    if not name and not meta.get("generateName"):
        errs.append(("metadata.name", "Required value: name or generateName is required"))
    elif name in (".", "..") or "/" in name or "%" in name:
        what = f"may not be '{name}'" if name in (".", "..") else \
            f"may not contain '{'/' if '/' in name else '%'}'"
        errs.append(("metadata.name", f"Invalid value: {_quote(name)}: {what}"))

    raw = _b64(spec.get("request"))
    try:
        parse_request(raw)
    except CsrError as e:
        errs.append(("spec.request", f"Invalid value: {go_bytes(raw)}: {e}"))
    usages = spec.get("usages") or []
    if not usages:
        errs.append(("spec.usages", "Required value"))
    if not (old is not None and _has_unknown_usage(old)):
        supported = ", ".join(_quote(u) for u in ALL_USAGES)
        errs += [(f"spec.usages[{i}]", f"Unsupported value: {_quote(u)}: supported values: {supported}")
                 for i, u in enumerate(usages) if u not in ALL_USAGES]
    if not (old is not None and _has_duplicate_usage(old)):
        errs += [(f"spec.usages[{i}]", f"Duplicate value: {_quote(u)}") for i, u in enumerate(usages) if u in usages[:i]]
    signer = spec.get("signerName") or ""
    if signer == LEGACY_UNKNOWN and not (old is not None and (old.get("spec") or {}).get("signerName") == LEGACY_UNKNOWN):
        errs.append(("spec.signerName", f"Invalid value: {_quote(signer)}: the legacy signerName is not allowed via "
                                        "this API version"))
    else:
        errs += signer_name_errors(signer)
    exp = spec.get("expirationSeconds")
    if exp is not None and exp < MIN_EXPIRATION_SECONDS:
        errs.append(("spec.expirationSeconds", f"Invalid value: {exp}: may not specify a duration less than 600 "
                                               "seconds (10 minutes)"))

    both_before = APPROVED in old_types and DENIED in old_types
    seen, approved, denied = set(), False, False
    for i, c in enumerate(status.get("conditions") or []):
        path, typ, st = f"status.conditions[{i}]", c.get("type") or "", c.get("status") or ""
        if not typ and "" not in old_types:
            errs.append((f"{path}.type", "Required value"))
        allowed = ["True"] if typ in TRUE_ONLY else ["False", "True", "Unknown"]
        if not st:
            errs.append((f"{path}.status", "Required value"))
        elif st not in allowed:
            errs.append((f"{path}.status", f"Unsupported value: {_quote(st)}: supported values: "
                                           + ", ".join(_quote(a) for a in allowed)))
        if not both_before and (typ == APPROVED and denied or typ == DENIED and approved):
            errs.append((f"{path}.type", f"Invalid value: {_quote(typ)}: Approved and Denied conditions are mutually "
                                         "exclusive"))
        approved, denied = approved or typ == APPROVED, denied or typ == DENIED
        if typ in seen and len(set(old_types)) == len(old_types):
            errs.append((f"{path}.type", f"Duplicate value: {_quote(typ)}"))
        seen.add(typ)

    cert, old_cert = _b64(status.get("certificate")) or b"", _b64((old or {}).get("status", {}).get("certificate")) or b""
    arbitrary = old is not None and (cert == old_cert or certificate_error(old_cert))
    why = "" if arbitrary else certificate_error(cert)
    if why:
        errs.append(("status.certificate", f'Invalid value: "<certificate data>": {why}'))
    if old is None:
        return errs

    for typ in (APPROVED, DENIED, FAILED):
        if len(conditions_of(csr, typ)) < len(conditions_of(old, typ)):
            errs.append(("status.conditions", f"Forbidden: updates may not remove a condition of type {_quote(typ)}"))
    if sub != "approval":
        for typ in (APPROVED, DENIED):
            was, now = conditions_of(old, typ), conditions_of(csr, typ)
            if len(now) > len(was):
                errs.append(("status.conditions", f"Forbidden: updates may not add a condition of type {_quote(typ)}"))
            elif len(now) == len(was) and now != was:
                diff = "\n".join(difflib.unified_diff(json.dumps(was, indent=1).splitlines(),
                                                      json.dumps(now, indent=1).splitlines(), lineterm="", n=0))
                errs.append(("status.conditions", f"Forbidden: updates may not modify a condition of type "
                                                  f"{_quote(typ)}\n{diff}"))
    if cert != old_cert:
        if sub != "status":
            errs.append(("status.certificate", "Forbidden: updates may not set certificate content"))
        elif old_cert:
            errs.append(("status.certificate", "Forbidden: updates may not modify existing certificate content"))
    return errs


# ---- what the kubelet signers accept (helpers.go, signer.go) ------------------------------------

def kubelet_client_error(req, usages):
    """ValidateKubeletClientCSR: "" or why not."""
    if req.organizations != ["system:nodes"]:
        return "subject organization is not system:nodes"
    for values, what in ((req.dns, "DNS"), (req.emails, "Email"), (req.ips, "IP"), (req.uris, "URI")):
        if values:
            return f"{what} subjectAltNames are not allowed"
    if not req.common_name.startswith("system:node:"):
        return "subject common name does not begin with system:node:"
    if set(usages) not in KUBELET_CLIENT_USAGES:
        return "usages did not match [client auth digital signature key encipherment]"
    return ""


def kubelet_serving_error(req, usages):
    """ValidateKubeletServingCSR: "" or why not."""
    if req.organizations != ["system:nodes"]:
        return "subject organization is not system:nodes"
    if not req.dns and not req.ips:
        return "DNS or IP subjectAltName is required"
    if req.emails:
        return "Email subjectAltNames are not allowed"
    if req.uris:
        return "URI subjectAltNames are not allowed"
    if set(usages) not in KUBELET_SERVING_USAGES:
        return "usages did not match [digital signature key encipherment server auth]"
    if not req.common_name.startswith("system:node:"):
        return "subject common name does not begin with system:node:"
    return ""


def apiserver_client_error(req, usages):
    """signer.go's validAPIServerClientUsages: "" or why not."""
    for u in usages:
        if u not in ("digital signature", "key encipherment", "client auth"):
            return f"invalid usage for client certificate: {u}"
    if "client auth" not in usages:
        return "missing required usage for client certificate: client auth"
    return ""


SIGNER_CHECKS = {KUBELET_CLIENT: kubelet_client_error, KUBELET_SERVING: kubelet_serving_error,
                 KUBE_APISERVER_CLIENT: apiserver_client_error}


def is_kubelet_client(csr, req):
    """The approver's isNodeClientCert."""
    spec = csr.get("spec") or {}
    return spec.get("signerName") == KUBELET_CLIENT and not kubelet_client_error(req, spec.get("usages") or [])


# ---- signing ------------------------------------------------------------------------------------

def certificate_lifetime(ttl, expiration_seconds):
    """signer.duration: the requested duration within [10 min, TTL], or the TTL."""
    if expiration_seconds is None:
        return ttl
    if expiration_seconds > ttl:
        return ttl
    return max(expiration_seconds, MIN_EXPIRATION_SECONDS)


def validity(now, lifetime, ca_not_after):
    """PermissiveSigningPolicy: (NotBefore, NotAfter) as Unix seconds, or CsrError."""
    not_before = now - BACKDATE_SECONDS
    not_after = now + lifetime if lifetime < SHORT_SECONDS else now + lifetime - BACKDATE_SECONDS
    not_after = min(not_after, ca_not_after)
    if not_before >= ca_not_after:
        raise CsrError(f"the signer has expired: NotAfter={_go_time(ca_not_after)}")
    if now >= ca_not_after:
        raise CsrError(f"refusing to sign a certificate that expired in the past: NotAfter={_go_time(ca_not_after)}")
    return not_before, not_after


def _go_time(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")


def _asn1_time(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y%m%d%H%M%SZ")


class Authority:
    """The cluster CA (`ca.crt`, `ca.key`: kube-controller-manager's --cluster-signing-cert-file
    and --cluster-signing-key-file in a kubeadm cluster)."""

    def __init__(self, directory):
        self.cert = os.path.join(directory, "ca.crt")
        self.key = os.path.join(directory, "ca.key")
        end = _openssl("x509", "-in", self.cert, "-noout", "-enddate").stdout.decode().strip().split("=", 1)[1]
        self.not_after = calendar.timegm(time.strptime(end.replace("  ", " "), "%b %d %H:%M:%S %Y %Z"))

    def sign(self, req, usages, not_before, not_after):
        """A certificate (PEM) for `req` as the signer's template makes it: the request's
        subject, public key and DNS/IP/email/URI subjectAltNames, no other extension of the
        request; key usages and extended key usages from `usages`; CA:FALSE; valid from
        `not_before` to `not_after` (Unix seconds); a random 128-bit serial; signed SHA-256."""
        key_usages = sorted({KEY_USAGES[u] for u in usages if u in KEY_USAGES})
        ext_usages = [name for _, name in sorted({EXT_KEY_USAGES[u] for u in usages if u in EXT_KEY_USAGES})]
        unknown = [u for u in usages if u not in KEY_USAGES and u not in EXT_KEY_USAGES]
        if unknown:
            raise CsrError("unrecognized usage values: [" + " ".join(_quote(u) for u in unknown) + "]")
        # Go adds no subjectKeyIdentifier to a leaf; OpenSSL 3.0 would, unless told not to.
        ext = ["[ext]", "basicConstraints = critical, CA:FALSE", "authorityKeyIdentifier = keyid",
               "subjectKeyIdentifier = none"]
        if key_usages:
            ext.append("keyUsage = critical, " + ", ".join(key_usages))
        if ext_usages:
            ext.append("extendedKeyUsage = " + ", ".join(ext_usages))
        alt = [f"DNS.{i} = {v}" for i, v in enumerate(req.dns)] + [f"IP.{i} = {v}" for i, v in enumerate(req.ips)] + \
              [f"email.{i} = {v}" for i, v in enumerate(req.emails)] + [f"URI.{i} = {v}" for i, v in enumerate(req.uris)]
        if alt:
            ext += ["subjectAltName = @alt", "[alt]"] + alt
        with tempfile.TemporaryDirectory(prefix="fake-ca-") as tmp:
            files = {name: os.path.join(tmp, name) for name in ("ca.cnf", "ext.cnf", "index.txt", "req.pem", "cert.pem")}
            with open(files["ca.cnf"], "w") as f:
                f.write(f"[ca]\ndefault_ca = fake\n[fake]\ndatabase = {files['index.txt']}\nnew_certs_dir = {tmp}\n"
                        f"serial = {tmp}/serial\npolicy = any\nunique_subject = no\ndefault_md = sha256\n[any]\n")
            with open(files["ext.cnf"], "w") as f:
                f.write("\n".join(ext) + "\n")
            open(files["index.txt"], "w").close()
            with open(files["req.pem"], "wb") as f:
                f.write(req.pem())
            out = _openssl("ca", "-batch", "-notext", "-config", files["ca.cnf"], "-cert", self.cert, "-keyfile",
                           self.key, "-in", files["req.pem"], "-out", files["cert.pem"], "-rand_serial",
                           "-preserveDN", "-startdate", _asn1_time(not_before), "-enddate", _asn1_time(not_after),
                           "-extfile", files["ext.cnf"], "-extensions", "ext", check=False)
            if out.returncode != 0:
                raise CsrError(f"failed to sign certificate: {out.stderr.decode(errors='replace').strip()}")
            with open(files["cert.pem"], "rb") as f:
                return f.read()

    def issue(self, cn, groups, not_before, not_after, usages):
        """A new EC P-256 key (SEC1 PEM, as a kubelet writes its own) and a certificate for it,
        CN `cn` and one O per group, valid from `not_before` to `not_after` (Unix seconds, any
        time, the past too): (certificate PEM, key PEM)."""
        key = _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout").stdout
        with tempfile.TemporaryDirectory(prefix="fake-issue-") as tmp:
            key_path = os.path.join(tmp, "key.pem")
            with open(key_path, "wb") as f:
                f.write(key)
            subject = "".join(f"/O={_escape(g)}" for g in groups) + f"/CN={_escape(cn)}"
            pem = _openssl("req", "-new", "-utf8", "-key", key_path, "-subj", subject).stdout
        req = parse_request(pem)
        return self.sign(req, usages, not_before, not_after), key


# ---- reading a certificate back ---------------------------------------------------------------------

_described_lock = threading.Lock()
_described = {}


def describe_certificate(pem):
    """What `openssl x509` says of the first certificate in `pem`: subject (`/O=../CN=..`),
    issuer, serial, notBefore and notAfter (RFC 3339 and Unix seconds), subjectAltNames
    (`DNS:x`, `IP:1.2.3.4`), key usages, extended key usages and whether it is a CA."""
    key = hashlib.sha256(pem).hexdigest()
    with _described_lock:
        if key in _described:
            return dict(_described[key])
    out = _openssl("x509", "-noout", "-nameopt", "compat", "-subject", "-issuer", "-serial", "-startdate", "-enddate",
                   "-dateopt", "iso_8601", "-ext", "subjectAltName,keyUsage,extendedKeyUsage,basicConstraints",
                   data=pem, check=False)
    if out.returncode != 0:
        return {"error": out.stderr.decode(errors="replace").strip()}
    info, ext, lines = {}, None, out.stdout.decode().splitlines()
    for line in lines:
        if "=" in line and not line.startswith(" ") and ext is None:
            k, v = line.split("=", 1)
            info[k] = v.strip()
        elif not line.startswith(" "):
            ext = line.strip().rstrip(":").split(": critical")[0].strip()
        else:
            info.setdefault(ext, []).extend(p.strip() for p in line.split(","))

    def stamp(iso):  # "2025-01-01 10:00:00Z"
        t = calendar.timegm(time.strptime(iso, "%Y-%m-%d %H:%M:%SZ"))
        return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), t

    not_before, not_before_unix = stamp(info["notBefore"])
    not_after, not_after_unix = stamp(info["notAfter"])
    sans = [s.replace("IP Address:", "IP:") for s in info.get("X509v3 Subject Alternative Name", [])]
    described = {
        "subject": info.get("subject", ""), "issuer": info.get("issuer", ""), "serial": info.get("serial", ""),
        "notBefore": not_before, "notAfter": not_after, "notBeforeUnix": not_before_unix, "notAfterUnix": not_after_unix,
        "sans": sans, "keyUsage": info.get("X509v3 Key Usage", []),
        "extendedKeyUsage": info.get("X509v3 Extended Key Usage", []),
        "isCA": "CA:TRUE" in info.get("X509v3 Basic Constraints", []),
    }
    with _described_lock:
        _described[key] = described
    return dict(described)
