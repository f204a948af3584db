"""Kubernetes API semantics for the fake kube-apiserver: schema validation, patches,
defaulting, selectors and the server-side tables kubectl prints.

Everything here is plain data in, plain data out (no I/O but reading the schemas), so
fake_apiserver.py stays about HTTP, identities and state.
"""

import base64
import binascii
import copy
import datetime
import functools
import json
import re
import secrets
import uuid

import kubernetes_validate.utils as kv_utils

# kubernetes_validate reads its 1.2 MB definitions file on every call: read each file once.
kv_utils.schema_contents = functools.lru_cache(maxsize=None)(kv_utils.schema_contents)


class ApiError(Exception):
    """An error answered as a `Status` object (kind, reason and code as the real apiserver)."""

    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self):
        s = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            s["details"] = self.details
        return s


CAUSE_TYPES = {
    "Invalid value": "FieldValueInvalid", "Required value": "FieldValueRequired", "Too long": "FieldValueTooLong",
    "Forbidden": "FieldValueForbidden", "Duplicate value": "FieldValueDuplicate",
    "Unsupported value": "FieldValueNotSupported", "Too many": "FieldValueTooMany",
}


def invalid(kind, name, errors, group=""):
    """422 Invalid as apierrors.NewInvalid makes it from field errors [(field, body)]: the
    message `Kind "name" is invalid: field: body` (several: `[a, b]`), one cause each."""
    parts = [f"{f}: {m}" if f else m for f, m in errors]
    agg = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    qualified = f"{kind}.{group}" if group else kind
    causes = [{"reason": CAUSE_TYPES.get(m.split(":", 1)[0], "FieldValueInvalid"), "message": m, "field": f}
              for f, m in errors]
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {agg}',
                    {"name": name, "group": group, "kind": kind, "causes": causes})


def go_value(v):
    """A value as field.Invalid prints it: strings quoted (%q), numbers bare."""
    return json.dumps(v) if isinstance(v, str) else str(v)


def not_found(resource, name, group=""):
    gr = f"{resource}.{group}" if group else resource
    return ApiError(404, "NotFound", f'{gr} "{name}" not found', {"name": name, "group": group, "kind": resource})


def conflict(resource, name, why, group=""):
    gr = f"{resource}.{group}" if group else resource
    return ApiError(
        409, "Conflict", f'Operation cannot be fulfilled on {gr} "{name}": {why}', {"name": name, "group": group, "kind": resource}
    )


STALE = "the object has been modified; please apply your changes to the latest version and try again"


# ---- time --------------------------------------------------------------------------------

def now():
    return datetime.datetime.now(datetime.timezone.utc)


def fmt_time(t):
    """metav1.Time: RFC 3339, whole seconds."""
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def fmt_micro(t):
    """metav1.MicroTime: RFC 3339 with exactly six fractional digits."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# Go's time.Parse with RFC3339 (metav1.Time) takes any fraction; with RFC3339Micro
# (metav1.MicroTime: Lease renewTime/acquireTime, Event eventTime) exactly six digits.
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
MICRO_TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")
QUANTITY_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")


def parse_time(s):
    if not s:
        return None
    s = s.replace("Z", "+00:00")
    try:
        return datetime.datetime.fromisoformat(s)
    except ValueError:
        return None


def human_duration(seconds):
    """apimachinery's duration.HumanDuration, as kubectl's AGE column shows it."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def since(ts):
    t = parse_time(ts)
    if t is None:
        return "<unknown>"
    return human_duration((now() - t).total_seconds())


def new_uid():
    return str(uuid.uuid4())


def random_suffix(n=5):
    # The apiserver's generateName alphabet (no vowels, no look-alikes).
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(secrets.choice(alphabet) for _ in range(n))


# ---- schemas -----------------------------------------------------------------------------

KINDS = {
    # kind -> (apiVersion, definitions name)
    "Node": ("v1", "io.k8s.api.core.v1.Node"),
    "Pod": ("v1", "io.k8s.api.core.v1.Pod"),
    "Event": ("v1", "io.k8s.api.core.v1.Event"),
    "Namespace": ("v1", "io.k8s.api.core.v1.Namespace"),
    "Binding": ("v1", "io.k8s.api.core.v1.Binding"),
    "Lease": ("coordination.k8s.io/v1", "io.k8s.api.coordination.v1.Lease"),
    "ConfigMap": ("v1", "io.k8s.api.core.v1.ConfigMap"),
    "Secret": ("v1", "io.k8s.api.core.v1.Secret"),
    "ServiceAccount": ("v1", "io.k8s.api.core.v1.ServiceAccount"),
    "TokenRequest": ("authentication.k8s.io/v1", "io.k8s.api.authentication.v1.TokenRequest"),
    "CertificateSigningRequest": ("certificates.k8s.io/v1", "io.k8s.api.certificates.v1.CertificateSigningRequest"),
}


class Schemas:
    """The official JSON schemas of one Kubernetes version, as kubernetes-validate ships them:
    strict validation, plus the patch strategies strategic merge patch needs."""

    def __init__(self, version):
        self.version = version
        major_minor = ".".join(version.split(".")[:2])
        vs = [v for v in kv_utils.all_versions() if kv_utils.major_minor(v) <= major_minor]
        if not vs:
            raise SystemExit(f"kubernetes-validate has no schemas for Kubernetes {version}")
        self.schema_dir = f"v{vs[-1]}-local-strict"
        self.defs = kv_utils.schema_contents(f"kubernetes-json-schema/{self.schema_dir}/_definitions.json", version)["$defs"]

    def node(self, kind):
        return self.defs[KINDS[kind][1]]

    def resolve(self, s):
        while isinstance(s, dict) and "$ref" in s:
            s = self.defs[s["$ref"].rsplit("/", 1)[-1]]
        return s if isinstance(s, dict) else {}

    def child(self, s, key):
        s = self.resolve(s)
        props = s.get("properties") or {}
        if key in props:
            return props[key]
        ap = s.get("additionalProperties")
        return ap if isinstance(ap, dict) else {}

    def validate(self, obj):
        """Errors of `obj` as [(field path, message)]: the strict schema of its kind, then the
        formats the real apiserver's decoder enforces (times, quantities) and a few semantic
        rules of its validation (names, labels, events, leases)."""
        errors = []
        try:
            kv_utils.validate(obj, self.version, strict=True)
        except kv_utils.ValidationError as e:
            errors.append((".".join(str(p) for p in e.path), e.message))
        except kv_utils.SchemaNotFoundError as e:
            errors.append(("kind", e.message))
        kind = obj.get("kind")
        if kind in KINDS:
            self._formats(obj, self.node(kind), "", errors)
            errors.extend(semantic_errors(obj))
        return errors

    def _formats(self, v, s, path, errors):
        ref = s.get("$ref", "") if isinstance(s, dict) else ""
        name = ref.rsplit("/", 1)[-1]
        if name == "io.k8s.apimachinery.pkg.apis.meta.v1.Time":
            if isinstance(v, str) and not TIME_RE.match(v):
                errors.append((path, f"{v!r}: not an RFC 3339 time (metav1.Time)"))
            return
        if name == "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime":
            if isinstance(v, str) and not MICRO_TIME_RE.match(v):
                errors.append((path, f"{v!r}: not an RFC 3339 time with exactly 6 fractional digits (metav1.MicroTime)"))
            return
        if name == "io.k8s.apimachinery.pkg.api.resource.Quantity":
            if isinstance(v, str) and not QUANTITY_RE.match(v):
                errors.append((path, f"{v!r}: quantities must match the regular expression {QUANTITY_RE.pattern!r}"))
            return
        s = self.resolve(s)
        if isinstance(v, dict):
            for k, sub in v.items():
                self._formats(sub, self.child(s, k), f"{path}.{k}" if path else k, errors)
        elif isinstance(v, list) and isinstance(s.get("items"), dict):
            for i, sub in enumerate(v):
                self._formats(sub, s["items"], f"{path}[{i}]", errors)

    # ---- strategic merge patch -----------------------------------------------------------

    def strategic_merge(self, original, patch, kind):
        """`patch` applied to `original` as a strategic merge patch, lists merged by the
        `x-kubernetes-patch-merge-key` of the schema; supports the `$patch` (replace, delete),
        `$setElementOrder/`, `$deleteFromPrimitiveList/` and `$retainKeys` directives."""
        return self._smp_map(copy.deepcopy(original), patch, self.node(kind))

    def _smp_map(self, original, patch, s):
        if not isinstance(patch, dict):
            return copy.deepcopy(patch)
        if not isinstance(original, dict):
            original = {}
        directive = patch.get("$patch")
        if directive == "replace":
            return self._smp_map({}, {k: v for k, v in patch.items() if k != "$patch"}, s)
        if directive == "delete":
            return None
        if directive is not None:
            raise ApiError(400, "BadRequest", f"unknown patch type: {directive!r} in map")
        for k, v in patch.items():
            if k in ("$patch", "$retainKeys") or k.startswith("$setElementOrder/"):
                continue
            if k.startswith("$deleteFromPrimitiveList/"):
                field = k.split("/", 1)[1]
                original[field] = [x for x in original.get(field) or [] if x not in v]
                continue
            if v is None:
                original.pop(k, None)
                continue
            sub = self.child(s, k)
            if isinstance(v, dict):
                merged = self._smp_map(original.get(k), v, sub)
                if merged is None:
                    original.pop(k, None)
                else:
                    original[k] = merged
            elif isinstance(v, list):
                original[k] = self._smp_list(original.get(k), v, sub)
            else:
                original[k] = v
        for k, order in patch.items():
            if k.startswith("$setElementOrder/"):
                self._set_order(original, k.split("/", 1)[1], order, self.child(s, k.split("/", 1)[1]))
        if "$retainKeys" in patch:
            keep = set(patch["$retainKeys"] or [])
            original = {k: v for k, v in original.items() if k in keep}
        return original

    def _smp_list(self, original, patch, s):
        s = self.resolve(s)
        strategy = (s.get("x-kubernetes-patch-strategy") or "").split(",")
        key = s.get("x-kubernetes-patch-merge-key")
        items = s.get("items") or {}
        if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
            return [self._smp_map({}, x, items) if isinstance(x, dict) else x for x in patch if not (isinstance(x, dict) and "$patch" in x)]
        if "merge" not in strategy or not isinstance(original, list):
            return [self._smp_map({}, x, items) if isinstance(x, dict) else x for x in patch]
        out = copy.deepcopy(original)
        if key is None:  # a set of primitives (finalizers): union
            return out + [x for x in patch if x not in out]
        for x in patch:
            if not isinstance(x, dict):
                raise ApiError(400, "BadRequest", f"list with merge key {key!r} holds a non-map item")
            if x.get("$patch") == "delete":
                out = [o for o in out if not (isinstance(o, dict) and o.get(key) == x.get(key))]
                continue
            for i, o in enumerate(out):
                if isinstance(o, dict) and o.get(key) == x.get(key):
                    out[i] = self._smp_map(o, x, items)
                    break
            else:
                out.append(self._smp_map({}, x, items))
        return out

    def _set_order(self, obj, field, order, s):
        lst = obj.get(field)
        if not isinstance(lst, list):
            return
        key = self.resolve(s).get("x-kubernetes-patch-merge-key")

        def ident(x):
            return json.dumps(x.get(key) if key and isinstance(x, dict) else x, sort_keys=True)

        rank = {ident(o): i for i, o in enumerate(order)}
        obj[field] = sorted(lst, key=lambda x: rank.get(ident(x), len(rank)))


def json_merge_patch(original, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(original) if isinstance(original, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = json_merge_patch(out.get(k), v)
    return out


# ---- validation rules the schemas do not express ------------------------------------------

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def dns_subdomain_errors(value):
    if not value:
        return ["must not be empty"]
    out = []
    if len(value) > 253:
        out.append("must be no more than 253 characters")
    if not DNS_SUBDOMAIN.match(value):
        out.append(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return out


def qualified_name_errors(key):
    prefix, _, name = key.rpartition("/")
    out = []
    if "/" in key and (not prefix or dns_subdomain_errors(prefix)):
        out.append("prefix part must be a lowercase RFC 1123 subdomain")
    if not name or len(name) > 63 or not LABEL_NAME.match(name):
        out.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
            "an alphanumeric character (at most 63 characters)"
        )
    return out


def semantic_errors(obj):
    errs = []
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    # A CSR's name is anything (ValidateCertificateRequestName); its own validation checks it.
    if obj.get("kind") not in ("Binding", "CertificateSigningRequest"):
        for m in dns_subdomain_errors(name):
            errs.append(("metadata.name", f"Invalid value: {name!r}: {m}"))
    for k, v in (meta.get("labels") or {}).items():
        for m in qualified_name_errors(k):
            errs.append(("metadata.labels", f"Invalid value: {k!r}: {m}"))
        if v and (len(v) > 63 or not LABEL_NAME.match(v)):
            errs.append(("metadata.labels", f"Invalid value: {v!r}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (at most 63 characters)"))
    for k in (meta.get("annotations") or {}):
        for m in qualified_name_errors(k):
            errs.append(("metadata.annotations", f"Invalid value: {k!r}: {m}"))
    if len(json.dumps(meta.get("annotations") or {})) > 256 * 1024:
        errs.append(("metadata.annotations", "Too long: must have at most 262144 bytes"))
    kind = obj.get("kind")
    if kind == "Event":
        errs.extend(event_errors(obj))
    if kind == "Lease":
        spec = obj.get("spec") or {}
        d = spec.get("leaseDurationSeconds")
        if d is not None and d <= 0:
            errs.append(("spec.leaseDurationSeconds", f"Invalid value: {d}: must be greater than 0"))
        t = spec.get("leaseTransitions")
        if t is not None and t < 0:
            errs.append(("spec.leaseTransitions", f"Invalid value: {t}: must be greater than or equal to 0"))
    if kind == "Node":
        for i, c in enumerate((obj.get("status") or {}).get("conditions") or []):
            if [x.get("type") for x in (obj["status"]["conditions"])].count(c.get("type")) > 1:
                errs.append((f"status.conditions[{i}].type", f"Duplicate value: {c.get('type')!r}"))
    if kind == "ConfigMap":
        errs.extend(config_map_errors(obj))
    if kind == "Secret":
        errs.extend(secret_errors(obj))
    if kind == "Pod":
        spec = obj.get("spec") or {}
        names = [c.get("name") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])]
        for n in set(names):
            if names.count(n) > 1:
                errs.append(("spec.containers", f"Duplicate value: {n!r}"))
    return errs


# ---- ConfigMaps and Secrets (ValidateConfigMap, ValidateSecret and their updates) ---------------

MAX_SECRET_SIZE = 1024 * 1024  # core.MaxSecretSize, for ConfigMaps too
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
CONFIG_KEY_MSG = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  "
                  "or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')")
IMMUTABLE_SET = "Forbidden: field is immutable when `immutable` is set"


def config_key_errors(key):
    """validation.IsConfigMapKey."""
    out = []
    if len(key) > 253:
        out.append("must be no more than 253 characters")
    if not CONFIG_KEY.match(key):
        out.append(CONFIG_KEY_MSG)
    if key == ".":
        out.append("must not be '.'")
    elif key == "..":
        out.append("must not be '..'")
    elif key.startswith(".."):
        out.append("must not start with '..'")
    return out


def go_base64(value):
    """The bytes of a []byte field as Go's JSON decoder reads it (standard base64, padded,
    CR and LF skipped), or ValueError with Go's message."""
    if value is None:
        return b""
    text = value.replace("\r", "").replace("\n", "")
    for i, ch in enumerate(text):
        if not (ch.isascii() and (ch.isalnum() or ch in "+/=")):
            raise ValueError(f"illegal base64 data at input byte {i}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        # Bad length or padding: Go reports about where the last quantum starts.
        at = len(text) - len(text) % 4 if len(text) % 4 else max(len(text) - 1, 0)
        raise ValueError(f"illegal base64 data at input byte {at}")


def decode_bytes_fields(obj):
    """400 as the apiserver's decoder answers a ConfigMap's binaryData, a Secret's data or a
    CertificateSigningRequest's spec.request and status.certificate that is not base64."""
    kind = obj.get("kind")
    if kind == "CertificateSigningRequest":
        values = [(obj.get(part) or {}).get(key) for part, key in (("spec", "request"), ("status", "certificate"))
                  if isinstance(obj.get(part), dict)]
        version = "certificates.k8s.io/v1"
    else:
        field = {"ConfigMap": "binaryData", "Secret": "data"}.get(kind)
        values = obj.get(field) if field else None
        values = list(values.values()) if isinstance(values, dict) else []
        version = "v1"
    for v in values:
        try:
            go_base64(v if isinstance(v, str) else None)
        except ValueError as e:
            raise ApiError(400, "BadRequest", f'{kind} in version "{version}" cannot be handled as a {kind}: {e}')


def prepare_secret(obj):
    """What decoding a v1 Secret does before validation: `type` defaults to Opaque and
    `stringData` is merged into `data` (base64) and dropped."""
    obj["type"] = obj.get("type") or "Opaque"
    string_data = obj.pop("stringData", None) or {}
    if string_data:
        data = obj.get("data") or {}
        for k, v in string_data.items():
            data[k] = base64.b64encode((v or "").encode()).decode()
        obj["data"] = data
    for f in ("data",):
        if f in obj and not obj[f]:
            del obj[f]


def prepare_config_map(obj):
    for f in ("data", "binaryData"):
        if f in obj and not obj[f]:
            del obj[f]


def _json_object_error(raw):
    """Why Go's json.Unmarshal into map[string]interface{} refuses `raw` (its messages, the
    syntax ones approximately), or None."""
    try:
        v = json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError as e:
        pos = getattr(e, "pos", len(raw))
        text = raw.decode("utf-8", errors="replace")
        if pos >= len(text.rstrip()):
            return "unexpected end of JSON input"
        return f"invalid character {text[pos]!r} looking for beginning of value"
    if v is None or isinstance(v, dict):  # null unmarshals into a map as nothing
        return None
    kind = {list: "array", str: "string", bool: "bool"}.get(type(v), "number")
    return f"json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"


def config_map_errors(cm):
    errs = []
    data, binary = cm.get("data") or {}, cm.get("binaryData") or {}
    size = 0
    for k in sorted(data):
        for m in config_key_errors(k):
            errs.append((f"data[{k}]", f"Invalid value: {go_value(k)}: {m}"))
        if k in binary:
            errs.append((f"data[{k}]", f"Invalid value: {go_value(k)}: duplicate of key present in binaryData"))
        size += len((data[k] or "").encode())
    for k in sorted(binary):
        for m in config_key_errors(k):
            errs.append((f"binaryData[{k}]", f"Invalid value: {go_value(k)}: {m}"))
        size += len(go_base64(binary[k]))
    if size > MAX_SECRET_SIZE:
        errs.append(("[]", f"Too long: must have at most {MAX_SECRET_SIZE} bytes"))
    return errs


def secret_errors(secret):
    errs = []
    data = secret.get("data") or {}
    raw = {k: go_base64(v) for k, v in data.items()}
    for k in sorted(data):
        for m in config_key_errors(k):
            errs.append((f"data[{k}]", f"Invalid value: {go_value(k)}: {m}"))
    if sum(len(v) for v in raw.values()) > MAX_SECRET_SIZE:
        errs.append(("data", f"Too long: must have at most {MAX_SECRET_SIZE} bytes"))
    typ = secret.get("type") or "Opaque"
    json_keys = {"kubernetes.io/dockercfg": ".dockercfg", "kubernetes.io/dockerconfigjson": ".dockerconfigjson"}
    if typ in json_keys:
        key = json_keys[typ]
        if key not in raw:
            errs.append((f"data[{key}]", "Required value"))
        else:
            why = _json_object_error(raw[key])
            if why:
                errs.append((f"data[{key}]", f'Invalid value: "<secret contents redacted>": {why}'))
    elif typ == "kubernetes.io/service-account-token":
        if not ((secret.get("metadata") or {}).get("annotations") or {}).get("kubernetes.io/service-account.name"):
            errs.append(("metadata.annotations[kubernetes.io/service-account.name]", "Required value"))
    elif typ == "kubernetes.io/basic-auth":
        if "username" not in raw and "password" not in raw:
            errs.extend([("data[username]", "Required value"), ("data[password]", "Required value")])
    elif typ == "kubernetes.io/ssh-auth":
        if not raw.get("ssh-privatekey"):
            errs.append(("data[ssh-privatekey]", "Required value"))
    elif typ == "kubernetes.io/tls":
        for key in ("tls.crt", "tls.key"):
            if key not in raw:
                errs.append((f"data[{key}]", "Required value"))
    return errs


def update_errors(old, new):
    """ValidateConfigMapUpdate/ValidateSecretUpdate beyond ValidateConfigMap/ValidateSecret:
    a Secret's type never changes; an immutable object's data (and binaryData) and
    `immutable` itself stay as they are."""
    kind = old.get("kind")
    errs = []
    if kind == "Secret" and (new.get("type") or "Opaque") != (old.get("type") or "Opaque"):
        errs.append(("type", f"Invalid value: {go_value(new.get('type') or '')}: field is immutable"))
    if kind in ("ConfigMap", "Secret") and old.get("immutable"):
        if not new.get("immutable"):
            errs.append(("immutable", IMMUTABLE_SET))
        for f in ("data", "binaryData") if kind == "ConfigMap" else ("data",):
            if (new.get(f) or {}) != (old.get(f) or {}):
                errs.append((f, IMMUTABLE_SET))
    return errs


# ---- what a pod references (pkg/api/v1/pod: VisitPodSecretNames, VisitPodConfigmapNames) ----

def _all_containers(spec):
    return (spec.get("initContainers") or []) + (spec.get("containers") or []) + (spec.get("ephemeralContainers") or [])


def pod_secret_names(pod):
    """Every Secret name `pod` references, as the Node authorizer's graph has them."""
    spec = pod.get("spec") or {}
    names = {r.get("name") for r in spec.get("imagePullSecrets") or []}
    for c in _all_containers(spec):
        names |= {(e.get("secretRef") or {}).get("name") for e in c.get("envFrom") or [] if e.get("secretRef")}
        names |= {((e.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name")
                  for e in c.get("env") or [] if (e.get("valueFrom") or {}).get("secretKeyRef")}
    for v in spec.get("volumes") or []:
        if v.get("secret"):
            names.add(v["secret"].get("secretName"))
        if v.get("azureFile"):
            names.add(v["azureFile"].get("secretName"))
        for src in ((v.get("projected") or {}).get("sources") or []):
            if src.get("secret"):
                names.add(src["secret"].get("name"))
        for kind in ("cephfs", "cinder", "flexVolume", "rbd", "scaleIO", "iscsi", "storageos"):
            if (v.get(kind) or {}).get("secretRef"):
                names.add(v[kind]["secretRef"].get("name"))
        if (v.get("csi") or {}).get("nodePublishSecretRef"):
            names.add(v["csi"]["nodePublishSecretRef"].get("name"))
    names.discard(None)
    return names


def pod_config_map_names(pod):
    """Every ConfigMap name `pod` references, as the Node authorizer's graph has them."""
    spec = pod.get("spec") or {}
    names = set()
    for c in _all_containers(spec):
        names |= {(e.get("configMapRef") or {}).get("name") for e in c.get("envFrom") or [] if e.get("configMapRef")}
        names |= {((e.get("valueFrom") or {}).get("configMapKeyRef") or {}).get("name")
                  for e in c.get("env") or [] if (e.get("valueFrom") or {}).get("configMapKeyRef")}
    for v in spec.get("volumes") or []:
        if v.get("configMap"):
            names.add(v["configMap"].get("name"))
        for src in ((v.get("projected") or {}).get("sources") or []):
            if src.get("configMap"):
                names.add(src["configMap"].get("name"))
    names.discard(None)
    return names


def normalize_pod_service_account(pod):
    """The v1 conversion of the deprecated `serviceAccount`: read when `serviceAccountName`
    is empty, always written back as a copy of it."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    name = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if name:
        spec["serviceAccountName"] = spec["serviceAccount"] = name
    else:
        spec.pop("serviceAccountName", None)
        spec.pop("serviceAccount", None)


# ---- the ServiceAccount admission plugin's token volume ---------------------------------

TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
WARN_ONLY_TOKEN_SECONDS = 3607  # serviceaccount.WarnOnlyBoundTokenExpirationSeconds


def token_volume(name):
    """The projected volume ServiceAccount admission adds (TokenVolumeSource)."""
    return {"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": WARN_ONLY_TOKEN_SECONDS, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                       "fieldPath": "metadata.namespace"}}]}}]}}


def mount_service_account_token(pod):
    """mountServiceAccountToken: every init and app container without a mount at the token
    path gets one of the `kube-api-access-*` volume, added when some container needs it."""
    spec = pod["spec"]
    volume_name = next((v["name"] for v in spec.get("volumes") or [] if v.get("name", "").startswith("kube-api-access-")),
                       None)
    has_volume = volume_name is not None
    volume_name = volume_name or "kube-api-access-" + random_suffix()
    needed = False
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        if any(m.get("mountPath") == TOKEN_MOUNT_PATH for m in c.get("volumeMounts") or []):
            continue
        c.setdefault("volumeMounts", []).append({"name": volume_name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH})
        needed = True
    if needed and not has_volume:
        spec.setdefault("volumes", []).append(token_volume(volume_name))


def event_errors(ev):
    """core/v1 Event validation (legacyValidateEvent): the event's namespace must agree with
    its involved object's; new-style events (eventTime set) need the reporting fields."""
    errs = []
    ns = (ev.get("metadata") or {}).get("namespace") or ""
    inv = ev.get("involvedObject") or {}
    inv_ns = inv.get("namespace") or ""
    if not ev.get("eventTime"):
        if not inv_ns:
            if ns not in ("", "default"):
                errs.append(("involvedObject.namespace", f"Invalid value: {inv_ns!r}: does not match event.namespace"))
        elif ns != inv_ns:
            errs.append(("involvedObject.namespace", f"Invalid value: {inv_ns!r}: does not match event.namespace"))
    else:
        if not inv_ns and ns not in ("default", "kube-system"):
            errs.append(("involvedObject.namespace", f"Invalid value: {inv_ns!r}: does not match event.namespace"))
        for field in ("reportingComponent", "reportingInstance", "action", "reason"):
            if not ev.get(field):
                errs.append((field, "Required value"))
    if len(ev.get("message") or "") > 4096:
        errs.append(("message", "Invalid value: can have at most 4096 characters"))
    return errs


# ---- defaults (what the apiserver's defaulting and admission add to a new pod) ---------------

def default_pod(pod):
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    # DefaultTolerationSeconds admission.
    tols = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tols):
            tols.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        image = c.get("image") or ""
        tagged = ":" in image.rsplit("/", 1)[-1] or "@" in image
        c.setdefault("imagePullPolicy", "IfNotPresent" if tagged and not image.endswith(":latest") else "Always")
        res = c.setdefault("resources", {})
        if res.get("limits"):
            req = res.setdefault("requests", {})
            for k, v in res["limits"].items():
                req.setdefault(k, v)
        for p in c.get("ports") or []:
            p.setdefault("protocol", "TCP")
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            pr = c.get(probe)
            if isinstance(pr, dict):
                pr.setdefault("timeoutSeconds", 1)
                pr.setdefault("periodSeconds", 10)
                pr.setdefault("successThreshold", 1)
                pr.setdefault("failureThreshold", 3)
                if isinstance(pr.get("httpGet"), dict):
                    pr["httpGet"].setdefault("scheme", "HTTP")
                    pr["httpGet"].setdefault("path", "/")
    return pod


def qos_class(pod):
    spec = pod.get("spec") or {}
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if any(k in req or k in lim for k in ("cpu", "memory")):
            any_set = True
        for k in ("cpu", "memory"):
            if k not in lim or req.get(k, lim.get(k)) != lim.get(k):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def pod_spec_update_errors(old, new):
    """The apiserver's rule: a pod's spec may only change in its images,
    activeDeadlineSeconds, added tolerations and terminationGracePeriodSeconds."""
    a, b = copy.deepcopy(old.get("spec") or {}), copy.deepcopy(new.get("spec") or {})
    for spec in (a, b):
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            c.pop("image", None)
        for f in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
            spec.pop(f, None)
    if a != b:
        return [("spec", "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                 "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions "
                 "to existing tolerations) or `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
                 "previously negative)")]
    return []


# ---- selectors -----------------------------------------------------------------------------

FIELD_LABELS = {
    "pods": {"metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
             "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"},
    "events": {"metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
               "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
               "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent",
               "source", "type"},
    "nodes": {"metadata.name", "spec.unschedulable"},
    "leases": {"metadata.name", "metadata.namespace"},
    "namespaces": {"metadata.name", "status.phase"},
    "configmaps": {"metadata.name", "metadata.namespace"},
    "secrets": {"metadata.name", "metadata.namespace", "type"},
    "serviceaccounts": {"metadata.name", "metadata.namespace"},
    "certificatesigningrequests": {"metadata.name", "spec.signerName"},
}


def parse_field_selector(resource, text):
    """`a=b,c!=d` as [(field, op, value)]; 400 for a field the apiserver does not index."""
    terms = []
    for part in filter(None, (text or "").split(",")):
        m = re.match(r"^([^=!]+)(==|=|!=)(.*)$", part)
        if not m:
            raise ApiError(400, "BadRequest", f'invalid field selector: "{part}"')
        field, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if field not in FIELD_LABELS.get(resource, set()):
            raise ApiError(400, "BadRequest", f'field label not supported: {field}')
        terms.append((field, "!=" if op == "!=" else "=", value))
    return terms


def selector_name(text):
    """The name a field selector requires (`metadata.name=x`, RequiresExactMatch), when it
    is a valid path segment; else "" (the apiserver's RequestInfo takes it as the name of a
    single-object list or watch)."""
    for part in (text or "").split(","):
        field, op, value = re.match(r"^([^=!]*)(==|=|!=)?(.*)$", part).groups()
        if field.strip() == "metadata.name" and op in ("=", "=="):
            value = value.strip()
            if value and value not in (".", "..") and "/" not in value and "%" not in value:
                return value
    return ""


def field_value(obj, field):
    if field == "source":
        return (obj.get("source") or {}).get("component") or ""
    v = obj
    for p in field.split("."):
        v = v.get(p) if isinstance(v, dict) else None
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "false" if field in ("spec.hostNetwork", "spec.unschedulable") else ""
    return str(v)


def parse_label_selector(text):
    """Equality and existence terms (`a=b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x)`)."""
    terms = []
    for part in re.findall(r"[^,(]+(?:\([^)]*\))?", text or ""):
        part = part.strip().strip(",").strip()
        if not part:
            continue
        m = re.match(r"^(\S+)\s+(in|notin)\s+\((.*)\)$", part)
        if m:
            terms.append((m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}))
        elif part.startswith("!"):
            terms.append((part[1:], "!exists", None))
        elif "!=" in part:
            k, v = part.split("!=", 1)
            terms.append((k.strip(), "notin", {v.strip()}))
        elif "=" in part:
            k, v = part.split("==", 1) if "==" in part else part.split("=", 1)
            terms.append((k.strip(), "in", {v.strip()}))
        else:
            terms.append((part, "exists", None))
    return terms


def selected(obj, fields, labels):
    for field, op, value in fields:
        if (field_value(obj, field) == value) != (op == "="):
            return False
    lbls = (obj.get("metadata") or {}).get("labels") or {}
    for key, op, values in labels:
        if op == "exists" and key not in lbls:
            return False
        if op == "!exists" and key in lbls:
            return False
        if op == "in" and lbls.get(key) not in values:
            return False
        if op == "notin" and key in lbls and lbls[key] in values:
            return False
    return True


# ---- tables (server-side printing: what `kubectl get` shows) ---------------------------------

def _col(name, typ="string", priority=0, fmt=""):
    return {"name": name, "type": typ, "format": fmt, "description": "", "priority": priority}


COLUMNS = {
    "pods": [_col("Name", fmt="name"), _col("Ready"), _col("Status"), _col("Restarts"), _col("Age"),
             _col("IP", priority=1), _col("Node", priority=1), _col("Nominated Node", priority=1),
             _col("Readiness Gates", priority=1)],
    "nodes": [_col("Name", fmt="name"), _col("Status"), _col("Roles"), _col("Age"), _col("Version"),
              _col("Internal-IP", priority=1), _col("External-IP", priority=1), _col("OS-Image", priority=1),
              _col("Kernel-Version", priority=1), _col("Container-Runtime", priority=1)],
    "events": [_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Subobject", priority=1),
               _col("Source", priority=1), _col("Message"), _col("First Seen", priority=1),
               _col("Count", "integer", priority=1), _col("Name", fmt="name", priority=1)],
    "leases": [_col("Name", fmt="name"), _col("Holder"), _col("Age")],
    "namespaces": [_col("Name", fmt="name"), _col("Status"), _col("Age")],
    "configmaps": [_col("Name", fmt="name"), _col("Data", "integer"), _col("Age")],
    "secrets": [_col("Name", fmt="name"), _col("Type"), _col("Data", "integer"), _col("Age")],
    "serviceaccounts": [_col("Name", fmt="name"), _col("Secrets", "integer"), _col("Age")],
    "certificatesigningrequests": [_col("Name", fmt="name"), _col("Age"), _col("SignerName"), _col("Requestor"),
                                   _col("RequestedDuration"), _col("Condition")],
}


def table(resource, objs, rv, include_object):
    rows = []
    for o in objs:
        cells = ROW[resource](o)
        if include_object == "None":
            obj = None
        elif include_object == "Object":
            obj = o
        else:
            obj = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o.get("metadata", {})}
        rows.append({"cells": cells, "object": obj})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
            "columnDefinitions": COLUMNS[resource], "rows": rows}


def _pod_row(pod):
    meta, spec, st = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or []}
    total = len(spec.get("containers") or []) + sum(1 for c in init_specs.values() if c.get("restartPolicy") == "Always")
    ready = restarts = 0
    last_restart = None
    reason = st.get("reason") or st.get("phase") or ""
    for c in st.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    def note_restart(cs):
        nonlocal last_restart
        t = parse_time(((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))
        if t and (last_restart is None or t > last_restart):
            last_restart = t

    initializing = False
    sidecar_restarts = 0
    init_statuses = st.get("initContainerStatuses") or []
    for i, cs in enumerate(init_statuses):
        restarts += cs.get("restartCount", 0)
        note_restart(cs)
        state = cs.get("state") or {}
        term, wait = state.get("terminated"), state.get("waiting")
        sidecar = (init_specs.get(cs.get("name")) or {}).get("restartPolicy") == "Always"
        if sidecar:
            sidecar_restarts += cs.get("restartCount", 0)
        if term and term.get("exitCode") == 0:
            continue
        if sidecar and cs.get("started"):
            if cs.get("ready"):
                ready += 1
            continue
        if term:
            if term.get("reason"):
                reason = "Init:" + term["reason"]
            elif term.get("signal"):
                reason = f"Init:Signal:{term['signal']}"
            else:
                reason = f"Init:ExitCode:{term.get('exitCode', 0)}"
        elif wait and wait.get("reason") and wait["reason"] != "PodInitializing":
            reason = "Init:" + wait["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True" for c in st.get("conditions") or [])
    if not initializing or initialized:
        restarts = sidecar_restarts
        has_running = False
        for cs in reversed(st.get("containerStatuses") or []):
            restarts += cs.get("restartCount", 0)
            note_restart(cs)
            state = cs.get("state") or {}
            term, wait = state.get("terminated"), state.get("waiting")
            if wait and wait.get("reason"):
                reason = wait["reason"]
            elif term and term.get("reason"):
                reason = term["reason"]
            elif term:
                reason = f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode', 0)}"
            elif cs.get("ready") and "running" in state:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            ready_cond = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
            reason = "Running" if ready_cond else "NotReady"
    if meta.get("deletionTimestamp") and st.get("reason") == "NodeLost":
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and st.get("phase") not in ("Succeeded", "Failed"):
        reason = "Terminating"
    restarts_s = str(restarts)
    if restarts and last_restart:
        restarts_s = f"{restarts} ({human_duration((now() - last_restart).total_seconds())} ago)"
    ips = st.get("podIPs") or []
    ip = (ips[0].get("ip") if ips else st.get("podIP")) or "<none>"
    gates = spec.get("readinessGates") or []
    gates_s = "<none>"
    if gates:
        conds = {c.get("type"): c.get("status") for c in st.get("conditions") or []}
        gates_s = f"{sum(1 for g in gates if conds.get(g.get('conditionType')) == 'True')}/{len(gates)}"
    return [meta.get("name"), f"{ready}/{total}", reason, restarts_s, since(meta.get("creationTimestamp")), ip,
            spec.get("nodeName") or "<none>", st.get("nominatedNodeName") or "<none>", gates_s]


def _node_row(node):
    meta, spec, st = node.get("metadata", {}), node.get("spec", {}), node.get("status", {})
    status = []
    for c in st.get("conditions") or []:
        if c.get("type") == "Ready":
            status.append("Ready" if c.get("status") == "True" else "NotReady")
    if not status:
        status.append("Unknown")
    if spec.get("unschedulable"):
        status.append("SchedulingDisabled")
    roles = set()
    for k, v in (meta.get("labels") or {}).items():
        if k.startswith("node-role.kubernetes.io/") and k.split("/", 1)[1]:
            roles.add(k.split("/", 1)[1])
        elif k == "kubernetes.io/role" and v:
            roles.add(v)
    info = st.get("nodeInfo") or {}

    def addr(kind):
        for a in st.get("addresses") or []:
            if a.get("type") == kind:
                return a.get("address")
        return "<none>"

    return [meta.get("name"), ",".join(status), ",".join(sorted(roles)) or "<none>", since(meta.get("creationTimestamp")),
            info.get("kubeletVersion", ""), addr("InternalIP"), addr("ExternalIP"), info.get("osImage") or "<unknown>",
            info.get("kernelVersion") or "<unknown>", info.get("containerRuntimeVersion") or "<unknown>"]


def _event_row(ev):
    first = since(ev.get("firstTimestamp")) if ev.get("firstTimestamp") else since(ev.get("eventTime"))
    last = since(ev.get("lastTimestamp")) if ev.get("lastTimestamp") else first
    count = ev.get("count") or 1
    if ev.get("series"):
        last = since(ev["series"].get("lastObservedTime"))
        count = ev["series"].get("count", count)
    inv = ev.get("involvedObject") or {}
    target = f"{(inv.get('kind') or '').lower()}/{inv['name']}" if inv.get("name") else (inv.get("kind") or "").lower()
    src = ev.get("source") or {}
    comp, host = src.get("component") or ev.get("reportingComponent") or "", src.get("host") or ""
    source = f"{comp}, {host}" if host else comp
    return [last, ev.get("type", ""), ev.get("reason", ""), target, inv.get("fieldPath", ""), source,
            (ev.get("message") or "").strip(), first, count, ev.get("metadata", {}).get("name")]


def _lease_row(lease):
    return [lease["metadata"].get("name"), (lease.get("spec") or {}).get("holderIdentity") or "",
            since(lease["metadata"].get("creationTimestamp"))]


def _namespace_row(ns):
    return [ns["metadata"].get("name"), (ns.get("status") or {}).get("phase", "Active"),
            since(ns["metadata"].get("creationTimestamp"))]


def _config_map_row(cm):
    return [cm["metadata"].get("name"), len(cm.get("data") or {}) + len(cm.get("binaryData") or {}),
            since(cm["metadata"].get("creationTimestamp"))]


def _secret_row(secret):
    return [secret["metadata"].get("name"), secret.get("type") or "Opaque", len(secret.get("data") or {}),
            since(secret["metadata"].get("creationTimestamp"))]


def _service_account_row(sa):
    return [sa["metadata"].get("name"), len(sa.get("secrets") or []), since(sa["metadata"].get("creationTimestamp"))]


def _csr_row(csr):
    """printCertificateSigningRequest: the condition is Denied, Approved or Pending, then
    ,Failed and ,Issued."""
    spec, st = csr.get("spec") or {}, csr.get("status") or {}
    types = {c.get("type") for c in st.get("conditions") or []}
    condition = "Denied" if "Denied" in types else "Approved" if "Approved" in types else "Pending"
    condition += ",Failed" if "Failed" in types else ""
    condition += ",Issued" if st.get("certificate") else ""
    exp = spec.get("expirationSeconds")
    return [csr["metadata"].get("name"), since(csr["metadata"].get("creationTimestamp")), spec.get("signerName") or "<none>",
            spec.get("username", ""), human_duration(exp) if exp is not None else "<none>", condition]


ROW = {"pods": _pod_row, "nodes": _node_row, "events": _event_row, "leases": _lease_row, "namespaces": _namespace_row,
       "configmaps": _config_map_row, "secrets": _secret_row, "serviceaccounts": _service_account_row,
       "certificatesigningrequests": _csr_row}
