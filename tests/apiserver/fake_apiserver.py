#!/usr/bin/env python3
"""A fake kube-apiserver for ferrolet's cluster-mode tests (tests/apiserver/README.md).

HTTP/1.1 over TLS; the user is the client certificate's CN (verified against the test CA),
its groups the O fields, or a bearer token's (the tests' static tokens, service account
tokens issued here). It serves exactly what a kubelet uses
(Nodes, Leases, Pods with list+watch, pod status, mirror pods, Events, ConfigMaps, Secrets,
ServiceAccounts and their tokens, CertificateSigningRequests; discovery and tables for
kubectl; TokenReview and SubjectAccessReview; pods/log, exec, attach and portforward passed on
to the pod's kubelet) with the real apiserver's semantics, bootstrap tokens, the Node
authorizer and NodeRestriction admission for `system:node:*` users, the ServiceAccount
admission plugin on request, the CSR admission plugins, and strict schema validation of what
is written. A controller thread does what kube-controller-manager's csrapproving, csrsigning
and tokencleaner controllers do.

A second, plain-HTTP port on 127.0.0.1 is for the tests: the same API as `system:masters`
(never faulted, never logged) and /control/* (faults, request log, counters, dumps).

    fake_apiserver.py --certs DIR --ready-file FILE [--port 0] [--control-port 0]
                      [--service-account-admission] [--extend-token-expiration] [--max-token-seconds N]
"""

import argparse
import base64
import copy
import datetime
import json
import os
import queue
import select
import socket
import ssl
import sys
import threading
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import csr
import k8s
import tokens
from k8s import ApiError
from store import Store, Watch, encode_event
from tokens import API_AUDIENCES, EXPIRATION_EXTENSION_SECONDS, Issuer

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
NODE_LEASE_NAMESPACE = "kube-node-lease"
MAX_BODY = 3 * 1024 * 1024  # the real apiserver's request size limit
ROOT_CA_CONFIG_MAP = "kube-root-ca.crt"
ROOT_CA_DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints "
                       "such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across "
                       "distributions of Kubernetes clusters.")


class Resource:
    def __init__(self, name, group, kind, namespaced, short, subresources=()):
        self.name = name
        self.group = group
        self.version = "v1"
        self.kind = kind
        self.namespaced = namespaced
        self.short = short
        self.subresources = subresources

    @property
    def api_version(self):
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCES = {
    r.name: r
    for r in (
        Resource("nodes", "", "Node", False, ["no"], ("status",)),
        Resource("pods", "", "Pod", True, ["po"], ("status", "binding", "log", "exec", "attach", "portforward")),
        Resource("events", "", "Event", True, ["ev"]),
        Resource("namespaces", "", "Namespace", False, ["ns"]),
        Resource("leases", "coordination.k8s.io", "Lease", True, []),
        Resource("configmaps", "", "ConfigMap", True, ["cm"]),
        Resource("secrets", "", "Secret", True, []),
        Resource("serviceaccounts", "", "ServiceAccount", True, ["sa"], ("token",)),
        Resource("certificatesigningrequests", "certificates.k8s.io", "CertificateSigningRequest", False, ["csr"],
                 ("approval", "status")),
    )
}
CSRS = "certificatesigningrequests"
CERTIFICATES_GROUP = "certificates.k8s.io"
# The API groups served besides the core one, for discovery.
GROUPS = ("coordination.k8s.io", CERTIFICATES_GROUP)
# What a subresource takes (discovery): kind, group, version, verbs.
SUBRESOURCES = {
    "status": (None, None, None, ["get", "patch", "update"]),
    "approval": (None, None, None, ["get", "patch", "update"]),
    "binding": ("Binding", None, None, ["create"]),
    "token": ("TokenRequest", "authentication.k8s.io", "v1", ["create"]),
    "log": (None, None, None, ["get"]),
    "exec": ("PodExecOptions", None, None, ["create", "get"]),
    "attach": ("PodAttachOptions", None, None, ["create", "get"]),
    "portforward": ("PodPortForwardOptions", None, None, ["create", "get"]),
}
# The pod subresources the apiserver serves by calling the pod's kubelet.
NODE_PROXIED = ("log", "exec", "attach", "portforward")
# kubeadm's --kubelet-preferred-address-types.
PREFERRED_ADDRESS_TYPES = ("InternalIP", "ExternalIP", "Hostname")
DEFAULT_KUBELET_PORT = 10250
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
# The jwt library's leeway when the apiserver checks exp and nbf (jwt.DefaultLeeway).
TOKEN_LEEWAY_SECONDS = 60
VERBS = {
    "nodes": ["create", "delete", "get", "list", "patch", "update", "watch"],
    "pods": ["create", "delete", "get", "list", "patch", "update", "watch"],
    "events": ["create", "delete", "get", "list", "patch", "update", "watch"],
    "namespaces": ["create", "get", "list", "watch"],
    "leases": ["create", "delete", "get", "list", "patch", "update", "watch"],
    "configmaps": ["create", "delete", "get", "list", "patch", "update", "watch"],
    "secrets": ["create", "delete", "get", "list", "patch", "update", "watch"],
    "serviceaccounts": ["create", "delete", "get", "list", "patch", "update", "watch"],
    "certificatesigningrequests": ["create", "delete", "get", "list", "patch", "update", "watch"],
}
# What the Node authorizer's node rules (the system:node role) allow on CSRs.
NODE_CSR_VERBS = ("create", "get", "list", "watch")
# The approver's recognizers (sarapprove.go), in order: the subresource the requester needs
# `create` on, and the condition's message.
APPROVER_RECOGNIZERS = (
    ("selfnodeclient", "Auto approving self kubelet client certificate after SubjectAccessReview."),
    ("nodeclient", "Auto approving kubelet client certificate after SubjectAccessReview."),
)
# The RBAC kubeadm init sets up for node certificates, as the tests' rules: nodes' own client
# certificates are renewed without anyone approving them.
KUBEADM_NODE_RULES = (
    {"group": "system:nodes", "verbs": ["create"], "resource": CSRS, "subresource": "selfnodeclient",
     "apiGroup": CERTIFICATES_GROUP, "binding": "kubeadm:node-autoapprove-certificate-rotation",
     "role": "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"},
)
# How often the token cleaner looks for expired bootstrap tokens.
TOKEN_CLEANER_PERIOD = 1.0


class User:
    def __init__(self, name, groups, uid="", extra=None):
        self.name = name
        self.groups = list(groups)
        self.uid = uid
        self.extra = extra or {}

    def node(self):
        """The node name of a node identity (Node authorizer's rule: user system:node:<name>
        in group system:nodes), else None."""
        if self.name.startswith("system:node:") and "system:nodes" in self.groups:
            return self.name[len("system:node:"):]
        return None

    def admin(self):
        return superuser(self.name, self.groups)


# Who may do everything: system:masters (the privileged-group authorizer), kubeadm's
# kubeadm:cluster-admins (bound to cluster-admin), and the apiserver's own kubelet client
# (kubeadm binds it to system:kubelet-api-admin; it is in kubeadm:cluster-admins anyway).
SUPERUSER_GROUPS = ("system:masters", "kubeadm:cluster-admins")
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"


def superuser(name, groups):
    return name == KUBELET_CLIENT_USER or any(g in SUPERUSER_GROUPS for g in groups)


CONTROL_USER = User("fake-apiserver:control", ["system:masters", "system:authenticated"])


class Attrs:
    """A request's authorization attributes, as the apiserver's RequestInfo."""

    def __init__(self, verb, resource, sub, namespace, name):
        self.verb = verb
        self.resource = resource
        self.sub = sub
        self.namespace = namespace
        self.name = name

    def res(self):
        return RESOURCES[self.resource]


class Response:
    def __init__(self, code, body, headers=None):
        self.code = code
        self.body = body
        self.headers = headers or {}


class NodeProxy:
    """A request the apiserver answers by calling the pod's kubelet: `host` and `port` of its
    Node (host None: the log of a pod not bound yet, an empty stream), the kubelet's `path`
    (with its query), `upgrade` for exec, attach and port-forward (a pass-through of the
    client's upgrade) and `resource`/`name` for the Status of a failed log request."""

    def __init__(self, host, port, path, upgrade, name):
        self.host = host
        self.port = port
        self.path = path
        self.upgrade = upgrade
        self.name = name


class WatchRequest:
    def __init__(self, watch, since, timeout):
        self.watch = watch
        self.since = since
        self.timeout = timeout


def status_success(attrs, obj=None):
    meta = (obj or {}).get("metadata") or {}
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": attrs.name, "group": attrs.res().group, "kind": attrs.resource, "uid": meta.get("uid")}}


class Api:
    """The API itself: one call per request, no HTTP in here.

    `issuer` signs service account tokens, `ca_pem` is what kube-root-ca.crt holds;
    `service_account_admission` turns the ServiceAccount admission plugin on and
    `extend_token_expiration` is kube-apiserver's --service-account-extend-token-expiration;
    `max_token_seconds` (0: none) caps every token's lifetime as its
    --service-account-max-token-expiration does, but below the real one's 1 hour minimum, so
    a test sees renewals within seconds. `authority` is the cluster CA the CSR signer signs with.
    """

    def __init__(self, store, schemas, version, issuer=None, ca_pem="", service_account_admission=False,
                 extend_token_expiration=False, max_token_seconds=0, authority=None):
        self.store = store
        self.schemas = schemas
        self.version = version
        self.issuer = issuer
        self.ca_pem = ca_pem
        self.service_account_admission = service_account_admission
        self.extend_token_expiration = extend_token_expiration
        self.max_token_seconds = max_token_seconds
        self.failures_lock = threading.Lock()
        self.validation_failures = []
        # What the tests set up (control port): static bearer tokens (token -> User) and
        # authorization rules for users who are neither superusers nor nodes; and the
        # TokenReviews and SubjectAccessReviews answered, for tests of a node's caches.
        self.auth_lock = threading.Lock()
        self.static_tokens = {}
        self.rules = [dict(r, effect="allow") for r in KUBEADM_NODE_RULES]
        self.reviews = []
        # kube-controller-manager's certificate controllers: the CA, --cluster-signing-duration,
        # whether csrapproving runs, the CSRs to look at (names), and what they did.
        self.authority = authority
        self.csr_lock = threading.Lock()
        self.signing_seconds = csr.DEFAULT_SIGNING_SECONDS
        self.approver_on = True
        self.csr_queue = queue.Queue()
        self.csr_counts = {"csr_created": 0, "csr_approved": 0, "csr_denied": 0, "csr_signed": 0}
        self.csr_order = {}  # name -> the resourceVersion it was created at, for /control/csrs
        self.controller_errors = []
        for ns in ("default", "kube-system", "kube-public", NODE_LEASE_NAMESPACE):
            self.store.write("namespaces", self._new_meta({"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]},
                                                          "status": {"phase": "Active"}}), "ADDED")
            self._reconcile("namespaces", "", ns)

    # ---- entry ------------------------------------------------------------------------------

    def handle(self, method, path, query, headers, body, user, multi=None):
        """A Response, a WatchRequest or a NodeProxy; ApiError for failures. `multi` is the
        query with every value of repeated parameters (exec's `command`)."""
        if path.rstrip("/") in (TOKEN_REVIEWS, SUBJECT_ACCESS_REVIEWS):
            return self.review(method, path.rstrip("/"), body, user)
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"] and len(parts) > 2:
            group, rest = "", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) > 3:
            group, rest = parts[1], parts[3:]
            if parts[2] != "v1":
                raise self._unknown(user)
        else:
            return self.non_resource(path, user)
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3 or rest[0] not in RESOURCES or RESOURCES[rest[0]].group != group:
            raise self._unknown(user)
        res = RESOURCES[rest[0]]
        if res.namespaced is False and namespace is not None:
            raise self._unknown(user)
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub and sub not in res.subresources:
            raise self._unknown(user)
        verb = {
            "GET": ("watch" if query.get("watch") in ("true", "1") else "list") if not name else "get",
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection",
        }.get(method)
        if verb is None:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if verb in ("list", "watch"):  # RequestInfo: the name of a single-object list or watch
            name = k8s.selector_name(query.get("fieldSelector"))
        attrs = Attrs(verb, res.name, sub, namespace, name)
        if res.name == "pods" and sub in NODE_PROXIED:
            if method not in (("GET",) if sub == "log" else ("GET", "POST")):
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
            self.authorize(user, attrs, query)
            return self.node_proxy(attrs, multi if multi is not None else {k: [v] for k, v in query.items()})
        self.authorize(user, attrs, query)
        if sub == "token" and verb != "create":
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        ctype = (headers.get("Content-Type") or "").split(";")[0].strip()
        if verb in ("create", "update") and body and ctype not in ("", "application/json", "*/*"):
            # As the apiserver answers a body it has no decoder for; protobuf (what kubectl's
            # typed clients send) is not served here.
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted "
                                                        "media types include: application/json")
        return getattr(self, "do_" + verb)(attrs, query, headers, body, user)

    def _unknown(self, user):
        if user.node() and not user.admin():
            return ApiError(403, "Forbidden", f'forbidden: User "{user.name}" cannot access this path')
        return ApiError(404, "NotFound", "the server could not find the requested resource")

    # ---- discovery ----------------------------------------------------------------------------

    def non_resource(self, path, user):
        path = path.rstrip("/") or "/"
        major, minor = self.version.split(".")[:2]
        docs = {
            "/version": {"major": major, "minor": minor, "gitVersion": f"v{major}.{minor}.0-fake",
                         "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
                         "buildDate": "2024-01-01T00:00:00Z", "goVersion": "go1.22.0", "compiler": "gc",
                         "platform": "linux/amd64"},
            "/api": {"kind": "APIVersions", "versions": ["v1"],
                     "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]},
            "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [self._group_doc(g) for g in GROUPS]},
            "/api/v1": self._resource_list(""),
        }
        for g in GROUPS:
            docs[f"/apis/{g}"] = dict(self._group_doc(g), kind="APIGroup", apiVersion="v1")
            docs[f"/apis/{g}/v1"] = self._resource_list(g)
        if path in ("/healthz", "/livez", "/readyz"):
            return Response(200, "ok")
        if path in docs:
            return Response(200, docs[path])
        raise self._unknown(user)

    def _group_doc(self, group):
        gv = {"groupVersion": f"{group}/v1", "version": "v1"}
        return {"name": group, "versions": [gv], "preferredVersion": gv}

    def _resource_list(self, group):
        resources = []
        for r in RESOURCES.values():
            if r.group != group:
                continue
            doc = {"name": r.name, "singularName": r.kind.lower(), "namespaced": r.namespaced, "kind": r.kind,
                   "verbs": VERBS[r.name]}
            if r.short:
                doc["shortNames"] = r.short
            if r.name == "pods":
                doc["categories"] = ["all"]
            resources.append(doc)
            for sub in r.subresources:
                kind, sub_group, sub_version, verbs = SUBRESOURCES[sub]
                doc = {"name": f"{r.name}/{sub}", "singularName": "", "namespaced": r.namespaced,
                       "kind": kind or r.kind, "verbs": verbs}
                if sub_group:
                    doc.update(group=sub_group, version=sub_version)
                resources.append(doc)
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/v1" if group else "v1",
                "resources": resources}

    # ---- Node authorizer and RBAC ----------------------------------------------------------------

    def authorize(self, user, a, query):
        if user.admin():
            return
        decision, reason = self.rule_decision(user.name, user.groups, a.verb, a.res().group, a.resource, a.sub,
                                              a.namespace or "", a.name or "")
        if decision == "allow":
            return
        node = user.node()
        why = None
        if decision == "deny":
            why = reason
        elif node is None:
            why = ""  # RBAC: no role grants anything to this user
        elif a.resource == "pods" and a.sub in NODE_PROXIED:
            why = ""  # the system:node role has no pods/log, pods/exec, ...
        elif a.resource == "nodes":
            if a.verb == "get" and a.name != node:
                why = f"node '{node}' cannot read '{a.name}', only its own Node object"
            elif a.verb in ("list", "watch") and ("metadata.name", "=", node) not in k8s.parse_field_selector(
                    "nodes", query.get("fieldSelector")):
                why = f"node '{node}' can only {a.verb} its own Node object (fieldSelector metadata.name={node})"
            elif a.verb in ("delete", "deletecollection"):
                why = ""
        elif a.resource == "pods":
            if a.sub == "binding" or a.verb == "deletecollection":
                why = ""
            elif a.verb in ("list", "watch"):
                if ("spec.nodeName", "=", node) not in k8s.parse_field_selector("pods", query.get("fieldSelector")):
                    why = f"can only {a.verb} pods with spec.nodeName field selector"
            elif a.verb in ("update", "patch") and a.sub != "status":
                why = ""
            elif a.verb == "get":
                pod = self.store.get("pods", a.namespace, a.name)
                if pod is not None and (pod.get("spec") or {}).get("nodeName") != node:
                    why = f"no relationship found between node '{node}' and this object"
        elif a.resource == "events":
            if a.verb not in ("create", "update", "patch"):
                why = ""
        elif a.resource == "leases":
            if a.verb not in ("get", "create", "update", "patch", "delete"):
                why = ""
        elif a.resource in ("configmaps", "secrets") or (a.resource == "serviceaccounts" and a.verb == "get" and not a.sub):
            why = self._authorize_read_namespaced(node, a)
        elif a.resource == CSRS:
            if a.verb not in NODE_CSR_VERBS or a.sub:
                why = ""  # the node rules: create, get, list and watch of CSRs themselves
        elif a.resource == "serviceaccounts":
            if a.verb != "create" or not a.name:
                why = "can only create tokens for individual service accounts"
            elif a.sub != "token":
                why = "can only create token subresource of serviceaccount"
            elif not self._node_uses(node, a.resource, a.namespace, a.name):
                why = f"no relationship found between node '{node}' and this object"
        else:
            why = ""
        if why is None:
            return
        res = a.resource + (f"/{a.sub}" if a.sub else "")
        gr = f"{a.resource}.{a.res().group}" if a.res().group else a.resource
        target = f'{gr} "{a.name}"' if a.name else gr
        scope = f'in the namespace "{a.namespace}"' if a.namespace else "at the cluster scope"
        msg = f'{target} is forbidden: User "{user.name}" cannot {a.verb} resource "{res}" in API group "{a.res().group}" {scope}'
        raise ApiError(403, "Forbidden", msg + (f": {why}" if why else ""),
                       {"name": a.name, "group": a.res().group, "kind": a.resource})

    def _authorize_read_namespaced(self, node, a):
        """The Node authorizer's authorizeReadNamespacedObject: get, or list and watch of one
        object (fieldSelector metadata.name), related to the node through a pod bound to it;
        None when allowed, else the reason."""
        if a.verb not in ("get", "list", "watch"):
            return "can only read resources of this type"
        if a.sub:
            return "cannot read subresource"
        if not a.namespace:
            return "can only read namespaced object of this type"
        if not a.name:
            return "No Object name found"
        if not self._node_uses(node, a.resource, a.namespace, a.name):
            return f"no relationship found between node '{node}' and this object"
        return None

    def _node_uses(self, node, resource, namespace, name):
        """The Node authorizer's graph: whether a pod bound to `node` (stored, terminating or
        not; mirror pods count for nothing) references ConfigMap, Secret or ServiceAccount
        `namespace/name`."""
        pods, _ = self.store.list("pods", namespace, [("spec.nodeName", "=", node)])
        for pod in pods:
            if MIRROR_ANNOTATION in (pod["metadata"].get("annotations") or {}):
                continue
            if resource == "configmaps" and name in k8s.pod_config_map_names(pod):
                return True
            if resource == "secrets" and name in k8s.pod_secret_names(pod):
                return True
            if resource == "serviceaccounts" and name == pod_service_account(pod):
                return True
        return False

    # ---- the tests' rules (RBAC, in short) ----------------------------------------------------

    def add_rule(self, rule, effect):
        """A rule from the control port: `user` or `group`, `verbs`, then `resource` (with
        `subresource`, `apiGroup`, `namespace`, `name`: absent matches any; `*` matches any)
        or `nonResourceURLs` (a trailing `*` matches a prefix); `binding` and `role` name the
        ClusterRoleBinding and ClusterRole in the allowing reason. `effect` allow or deny: a deny
        answers SubjectAccessReviews with denied=true, as a webhook authorizer may."""
        if not (rule.get("user") or rule.get("group")) or not rule.get("verbs"):
            raise ValueError("a rule needs user or group, and verbs")
        if not rule.get("resource") and not rule.get("nonResourceURLs"):
            raise ValueError("a rule needs resource or nonResourceURLs")
        verbs = rule["verbs"]
        rule = dict(rule, effect=effect, verbs=verbs.split(",") if isinstance(verbs, str) else list(verbs))
        with self.auth_lock:
            if rule not in self.rules:  # kubeadm's bindings are made once, however often asked
                self.rules.append(rule)
        return rule

    def rule_decision(self, name, groups, verb, group, resource, sub, namespace, rname, path=None):
        """("allow" | "deny" | None, reason) by the tests' rules; denies first."""
        def matches(rule):
            if rule.get("user") and rule["user"] != name:
                return False
            if rule.get("group") and rule["group"] not in groups:
                return False
            if verb not in rule["verbs"] and "*" not in rule["verbs"]:
                return False
            if path is not None:
                return any(u == path or u == "*" or (u.endswith("*") and path.startswith(u[:-1]))
                           for u in rule.get("nonResourceURLs") or [])
            if not rule.get("resource"):
                return False
            want = {"resource": resource, "subresource": sub, "apiGroup": group, "namespace": namespace, "name": rname}
            return all(rule.get(k) is None or rule[k] in ("*", v) for k, v in want.items() if k != "subresource") and \
                rule.get("subresource", "") in ("*", sub)

        with self.auth_lock:
            rules = list(self.rules)
        for effect in ("deny", "allow"):
            for rule in rules:
                if rule["effect"] == effect and matches(rule):
                    who = f'User "{rule["user"]}"' if rule.get("user") else f'Group "{rule["group"]}"'
                    if effect == "deny":
                        return "deny", f"denied by the fake apiserver's rule for {who}"
                    binding, role = rule.get("binding", "fake-apiserver:rules"), rule.get("role", "fake-apiserver:rules")
                    return "allow", f'RBAC: allowed by ClusterRoleBinding "{binding}" of ClusterRole "{role}" to {who}'
        return None, ""

    def authenticate_token(self, token, audiences=None):
        """The token authenticators: the tests' static tokens, then service account tokens
        issued here (valid, not expired beyond the leeway, for one of `audiences` (default
        the apiserver's), their service account and bound object still there). (User or
        None, the audiences it is good for, error)."""
        audiences = list(audiences or API_AUDIENCES)
        with self.auth_lock:
            static = self.static_tokens.get(token)
        if static is not None:  # audience-agnostic: good for whatever was asked
            return static, audiences, ""
        parts = tokens.bootstrap_token_parts(token)
        if parts is not None:
            who = self.bootstrap_user(*parts)
            # Not audience-aware: good for the apiserver's own audiences only
            # (WrapAudienceAgnosticToken).
            good_for = [a for a in audiences if a in API_AUDIENCES]
            if who is not None and good_for:
                return who, good_for, ""
            return None, [], "[invalid bearer token, token lookup failed]"
        claims = self.issuer.claims_of(token) if token.count(".") == 2 else None
        if claims is None:
            return None, [], "[invalid bearer token, token lookup failed]"
        why = self._token_invalid(claims, audiences)
        if why:
            return None, [], f"[invalid bearer token, {why}]"
        k = claims["kubernetes.io"]
        ns, sa = k["namespace"], k["serviceaccount"]
        extra = {"authentication.kubernetes.io/credential-id": [f"JTI={claims['jti']}"]}
        for what in ("pod", "node"):
            if what in k:
                extra[f"authentication.kubernetes.io/{what}-name"] = [k[what]["name"]]
                if k[what].get("uid"):
                    extra[f"authentication.kubernetes.io/{what}-uid"] = [k[what]["uid"]]
        user = User(f"system:serviceaccount:{ns}:{sa['name']}",
                    ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"],
                    uid=sa["uid"], extra=extra)
        return user, [a for a in claims["aud"] if a in audiences], ""

    def bootstrap_user(self, token_id, token_secret):
        """The bootstrap token authenticator: the user of the `bootstrap-token-<id>` Secret in
        kube-system that holds this token and allows authentication, else None."""
        secret = self.store.get("secrets", tokens.BOOTSTRAP_NAMESPACE, tokens.BOOTSTRAP_SECRET_PREFIX + token_id)
        found = tokens.bootstrap_identity(secret, token_id, token_secret, time.time())
        if found is None:
            return None
        name, groups = found
        return User(name, groups + ["system:authenticated"])

    def _token_invalid(self, claims, audiences):
        """Why a service account token issued here is no longer good (serviceaccount's
        validator), or ""."""
        now = time.time()
        if claims["exp"] + TOKEN_LEEWAY_SECONDS < now:
            return "square/go-jose/jwt: validation failed, token is expired (exp)"
        if claims["nbf"] - TOKEN_LEEWAY_SECONDS > now:
            return "square/go-jose/jwt: validation failed, token not valid yet (nbf)"
        if not set(claims["aud"]) & set(audiences):
            return f"token audiences {json.dumps(claims['aud'])} is invalid for the target audiences {json.dumps(audiences)}"
        k = claims["kubernetes.io"]
        ns = k["namespace"]
        sa = self.store.get("serviceaccounts", ns, k["serviceaccount"]["name"])
        if sa is None or sa["metadata"]["uid"] != k["serviceaccount"]["uid"]:
            return "service account token has been invalidated"
        bound = [("pods", ns, k.get("pod")), ("secrets", ns, k.get("secret"))]
        if "pod" not in k:  # a node-bound token; a pod-bound one names its node for information only
            bound.append(("nodes", "", k.get("node")))
        for resource, namespace, ref in bound:
            if not ref or not ref.get("uid"):
                continue
            obj = self.store.get(resource, namespace, ref["name"])
            if obj is None or obj["metadata"]["uid"] != ref["uid"]:
                return "service account token has been invalidated"
            deleted = obj["metadata"].get("deletionTimestamp")
            if deleted and k8s.parse_time(deleted) and k8s.parse_time(deleted).timestamp() < now - 60:
                return "service account token has been invalidated"
        return ""

    # ---- TokenReview and SubjectAccessReview -------------------------------------------------

    def review(self, method, path, body, user):
        """POST tokenreviews (authentication.k8s.io/v1) or subjectaccessreviews
        (authorization.k8s.io/v1): the caller needs `create` on them (nodes have it, as the
        system:node role grants); the answer (201) is the request with its status."""
        resource = path.rsplit("/", 1)[1]
        group = path.split("/")[2]
        kind = {"tokenreviews": "TokenReview", "subjectaccessreviews": "SubjectAccessReview"}[resource]
        verb = {"POST": "create"}.get(method)
        if verb is None:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        allowed = user.admin() or user.node() is not None or self.rule_decision(
            user.name, user.groups, verb, group, resource, "", "", "")[0] == "allow"
        if not allowed:
            raise ApiError(403, "Forbidden", f'{resource}.{group} is forbidden: User "{user.name}" cannot create resource '
                                             f'"{resource}" in API group "{group}" at the cluster scope',
                           {"group": group, "kind": resource})
        try:
            obj = json.loads(body or b"null")
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, "BadRequest", f"the body of the request could not be decoded as JSON: {e}")
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body of the request must be a JSON object")
        obj = {"apiVersion": obj.get("apiVersion", f"{group}/v1"), "kind": obj.get("kind", kind), **obj}
        if obj["kind"] != kind or obj["apiVersion"] != f"{group}/v1":
            raise ApiError(400, "BadRequest",
                           f'the object provided is unrecognized (must be of type {kind}): {obj["apiVersion"]}, Kind={obj["kind"]}')
        obj.pop("status", None)
        errors = self.schemas.validate(obj)
        if errors:
            with self.failures_lock:
                self.validation_failures.append({
                    "time": time.time(), "user": user.name, "verb": "create", "resource": resource, "subresource": "",
                    "namespace": "", "name": "", "what": "create",
                    "errors": [{"field": f, "message": m} for f, m in errors], "object": obj})
            raise k8s.invalid(kind, "", errors, group)
        spec = obj.setdefault("spec", {})
        obj["metadata"] = dict(obj.get("metadata") or {}, creationTimestamp=None)
        if kind == "TokenReview":
            obj["status"] = self._token_review(spec)
        else:
            obj["status"] = self._subject_access_review(spec)
        with self.auth_lock:
            self.reviews.append({"time": time.time(), "kind": kind, "user": user.name, "spec": spec,
                                 "status": obj["status"]})
        return Response(201, obj)

    def _token_review(self, spec):
        """TokenReview's REST: the token authenticators with the request's audiences (the
        apiserver's by default)."""
        if not spec.get("token"):
            raise ApiError(400, "BadRequest", "token is required for TokenReview in authentication")
        who, audiences, error = self.authenticate_token(spec["token"], spec.get("audiences"))
        status = {"authenticated": who is not None, "user": {}}
        if error:
            status["error"] = error
        if who is not None:
            status["user"] = {"username": who.name, "groups": who.groups}
            if who.uid:
                status["user"]["uid"] = who.uid
            if who.extra:
                status["user"]["extra"] = who.extra
            status["audiences"] = audiences
        return status

    def _subject_access_review(self, spec):
        """SubjectAccessReview: superusers, then the tests' rules (denies first), then the
        Node authorizer for node users on what the fake serves; RBAC's silence is
        allowed=false with no reason."""
        ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        errors = []
        if ra is not None and nra is not None:
            errors.append(("spec.nonResourceAttributes", f"Invalid value: {k8s.go_value(json.dumps(nra))}: "
                                                         "cannot be specified in combination with resourceAttributes"))
        if ra is None and nra is None:
            errors.append(("spec.resourceAttributes", 'Invalid value: "null": exactly one of nonResourceAttributes or '
                                                      "resourceAttributes must be specified"))
        if not spec.get("user") and not spec.get("groups"):
            errors.append(("spec.user", 'Invalid value: "": at least one of user or group must be specified'))
        if errors:
            raise k8s.invalid("SubjectAccessReview", "", errors, "authorization.k8s.io")
        name, groups = spec.get("user", ""), list(spec.get("groups") or [])
        if superuser(name, groups):
            return {"allowed": True}
        if ra is not None:
            verb, group, resource = ra.get("verb", ""), ra.get("group", ""), ra.get("resource", "")
            decision, reason = self.rule_decision(name, groups, verb, group, resource, ra.get("subresource", ""),
                                                  ra.get("namespace", ""), ra.get("name", ""))
        else:
            decision, reason = self.rule_decision(name, groups, nra.get("verb", ""), "", "", "", "", "",
                                                  path=nra.get("path", ""))
        if decision == "allow":
            return {"allowed": True, "reason": reason}
        if decision == "deny":
            return {"allowed": False, "denied": True, "reason": reason}
        user = User(name, groups)
        if ra is not None and user.node() is not None and ra.get("resource") in RESOURCES \
                and RESOURCES[ra["resource"]].group == ra.get("group", "") \
                and (not ra.get("subresource") or ra["subresource"] in RESOURCES[ra["resource"]].subresources):
            a = Attrs(ra.get("verb", ""), ra["resource"], ra.get("subresource", ""), ra.get("namespace") or None,
                      ra.get("name", ""))
            try:
                self.authorize(user, a, {})
                return {"allowed": True}
            except ApiError as e:
                return {"allowed": False, "reason": e.message.split(": ", 1)[1] if ": " in e.message else ""}
        return {"allowed": False}

    # ---- the kubelet's API, through the apiserver -----------------------------------------------

    def node_proxy(self, a, multi):
        """pods/log, exec, attach and portforward as the pod registry makes the kubelet's URL
        (LogLocation, streamLocation, PortForwardLocation): the pod, its container, its
        node's address and port, and the query the kubelet takes."""
        def one(key):
            return (multi.get(key) or [None])[-1]

        pod = self._existing(a)
        spec = pod.get("spec") or {}
        upgrade = a.sub != "log"
        container = None
        if a.sub != "portforward":
            container = self._pod_container(pod, one("container") or "")
        if a.sub == "log":
            params = self._log_params(a.name, one)
        elif a.sub == "portforward":
            params = []
            ports = []
            for v in multi.get("ports") or []:
                for p in v.split(","):
                    try:
                        ports.append(str(int(p)))
                    except ValueError:
                        raise ApiError(400, "BadRequest", f'strconv.ParseInt: parsing "{p}": invalid syntax')
            if ports:
                params.append(("port", ",".join(ports)))
        else:
            params = [(kubelet, "1") for mine, kubelet in (("stdin", "input"), ("stdout", "output"),
                                                           ("stderr", "error"), ("tty", "tty"))
                      if go_bool(one(mine), a.sub)]
            if a.sub == "exec":
                params += [("command", c) for c in multi.get("command") or []]
        node_name = spec.get("nodeName")
        if not node_name:
            if a.sub == "log":  # no location: an empty stream
                return NodeProxy(None, None, "", False, a.name)
            raise ApiError(400, "BadRequest", f"pod {a.name} does not have a host assigned")
        host, port = self._kubelet_endpoint(node_name)
        base = {"log": "containerLogs", "portforward": "portForward"}.get(a.sub, a.sub)
        path = f"/{base}/{pod['metadata']['namespace']}/{a.name}" + (f"/{container}" if container else "")
        # url.Values.Encode: sorted by key, the values of one key in order.
        query = urllib.parse.urlencode(sorted(params, key=lambda kv: kv[0]), quote_via=urllib.parse.quote)
        return NodeProxy(host, port, path + (f"?{query}" if query else ""), upgrade, a.name)

    def _pod_container(self, pod, container):
        """validateContainer: the one container when none is named, else a named one of the
        pod's (init, app or ephemeral)."""
        spec, name = pod.get("spec") or {}, pod["metadata"]["name"]
        names = [c.get("name") for kind in ("initContainers", "containers", "ephemeralContainers")
                 for c in spec.get(kind) or []]
        if not container:
            containers = spec.get("containers") or []
            if len(containers) == 1:
                return containers[0]["name"]
            if not containers:
                raise ApiError(400, "BadRequest", f"a container name must be specified for pod {name}")
            raise ApiError(400, "BadRequest", f"a container name must be specified for pod {name}, "
                                              f"choose one of: [{' '.join(names)}]")
        if container not in names:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        return container

    def _log_params(self, name, one):
        """PodLogOptions from the query, validated (ValidatePodLogOptions), as the kubelet's
        query: follow, previous, timestamps, sinceSeconds, sinceTime, tailLines, limitBytes."""
        params, errors = [], []
        for key in ("follow", "previous", "timestamps"):
            if go_bool(one(key), key):
                params.append((key, "true"))
        go_bool(one("insecureSkipTLSVerifyBackend"), "insecureSkipTLSVerifyBackend")  # never verified here anyway
        for key, least in (("sinceSeconds", 1), ("tailLines", 0), ("limitBytes", 1)):
            if one(key) is None:
                continue
            try:
                v = int(one(key))
            except ValueError:
                raise ApiError(400, "BadRequest", f'strconv.ParseInt: parsing "{one(key)}": invalid syntax')
            if v < least:
                errors.append((key, f"Invalid value: {v}: must be greater than {'or equal to ' if least == 0 else ''}0"))
            params.append((key, str(v)))
        if one("sinceTime") is not None:
            t = k8s.parse_time(one("sinceTime"))
            if t is None:
                raise ApiError(400, "BadRequest", f'parsing time "{one("sinceTime")}" as "2006-01-02T15:04:05Z07:00": '
                                                  "cannot parse")
            params.append(("sinceTime", k8s.fmt_time(t.astimezone(datetime.timezone.utc))))
            if one("sinceSeconds") is not None:
                errors.append(("", "at most one of `sinceTime` or `sinceSeconds` may be specified"))
        if errors:
            raise k8s.invalid("PodLogOptions", name, errors)
        return params

    def _kubelet_endpoint(self, node_name):
        """NodeConnectionInfoGetter: the Node's first address of the preferred types, in
        their order, and its daemonEndpoints.kubeletEndpoint.Port (10250 when unset)."""
        node = self.store.get("nodes", "", node_name)
        if node is None:
            raise k8s.not_found("nodes", node_name)
        st = node.get("status") or {}
        addresses = st.get("addresses") or []
        host = next((addr["address"] for t in PREFERRED_ADDRESS_TYPES for addr in addresses
                     if addr.get("type") == t and addr.get("address")), None)
        if host is None:
            known = " ".join("{%s %s}" % (addr.get("type", ""), addr.get("address", "")) for addr in addresses)
            raise ApiError(500, "", f"no preferred addresses found; known addresses: [{known}]")
        port = ((st.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port") or 0
        return host, port if port > 0 else DEFAULT_KUBELET_PORT

    # ---- NodeRestriction admission ---------------------------------------------------------

    def admit(self, user, a, obj, old):
        """NodeRestriction for a node's create/update/delete: `obj` the object to store,
        `old` the stored one (None on create)."""
        node = user.node()
        if node is None or user.admin():
            return

        def deny(msg):
            gr = f"{a.resource}.{a.res().group}" if a.res().group else a.resource
            name = a.name or ((obj or {}).get("metadata") or {}).get("name", "")
            raise ApiError(403, "Forbidden", f'{gr} "{name}" is forbidden: {msg}',
                           {"name": name, "group": a.res().group, "kind": a.resource})

        if a.resource == "pods" and a.sub == "":
            if a.verb == "create":
                self._admit_mirror_pod(node, obj, deny)
            elif a.verb == "delete":
                if (old.get("spec") or {}).get("nodeName") != node:
                    deny(f'node "{node}" can only delete pods with spec.nodeName set to itself')
            else:
                deny(f'unexpected operation "{a.verb}", node "{node}" can only create and delete mirror pods')
        elif a.resource == "pods" and a.sub == "status":
            if (old.get("spec") or {}).get("nodeName") != node:
                deny(f'node "{node}" can only update pod status for pods with spec.nodeName set to itself')
            if (obj["metadata"].get("labels") or {}) != (old["metadata"].get("labels") or {}):
                deny(f'node "{node}" cannot update labels through pod status')
        elif a.resource == "nodes":
            name = a.name or obj["metadata"].get("name")
            if name != node:
                deny(f'node "{node}" is not allowed to modify node "{name}"')
            spec = obj.get("spec") or {}
            labels = obj["metadata"].get("labels") or {}
            if old is None:
                if spec.get("configSource") is not None:
                    deny(f'node "{node}" is not allowed to create pods with a non-nil configSource')
                bad = forbidden_node_labels(labels, {})
                if bad:
                    deny(f'node "{node}" is not allowed to set the following labels: {", ".join(bad)}')
            else:
                old_spec = old.get("spec") or {}
                if spec.get("configSource") is not None and spec.get("configSource") != old_spec.get("configSource"):
                    deny(f'node "{node}" is not allowed to update configSource to a new non-nil configSource')
                if (spec.get("taints") or []) != (old_spec.get("taints") or []):
                    deny(f'node "{node}" is not allowed to modify taints')
                bad = forbidden_node_labels(labels, old["metadata"].get("labels") or {})
                if bad:
                    deny(f'is not allowed to modify labels: {", ".join(bad)}')
        elif a.resource == "serviceaccounts" and a.sub == "token":
            self._admit_token_request(node, a, obj, deny)
        elif a.resource == "leases":
            if a.namespace != NODE_LEASE_NAMESPACE:
                deny(f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace')
            name = obj["metadata"].get("name") if a.verb == "create" else a.name
            if name != node:
                deny("can only access node lease with the same name as the requesting node")

    def _admit_token_request(self, node, a, tr, deny):
        """NodeRestriction's admitServiceAccount: a node's token is bound to a pod of its own."""
        ref = (tr.get("spec") or {}).get("boundObjectRef")
        ref = ref if isinstance(ref, dict) else {}
        if ref.get("apiVersion") != "v1" or ref.get("kind") != "Pod" or not ref.get("name"):
            deny("node requested token not bound to a pod")
        if not ref.get("uid"):
            deny("node requested token with a pod binding without a uid")
        pod = self.store.get("pods", a.namespace, ref["name"])
        if pod is None:
            raise k8s.not_found("pods", ref["name"])
        if ref["uid"] != pod["metadata"]["uid"]:
            deny(f"the UID in the bound object reference ({ref['uid']}) does not match the UID in record. "
                 "The object might have been deleted and then recreated")
        if (pod.get("spec") or {}).get("nodeName") != node:
            deny("node requested token bound to a pod scheduled on a different node")

    # ---- ServiceAccount admission ----------------------------------------------------------------

    def _admit_service_account(self, a, pod):
        """The ServiceAccount admission plugin on a new pod (`--service-account-admission`):
        mirror pods may not use service accounts, secrets or token projections; other pods
        get `serviceAccountName: default` when unset, the account must exist, and unless
        automounting is off (the pod's word first, then the account's) every container gets
        the kube-api-access-* token volume; the account's imagePullSecrets when the pod has none."""
        meta, spec = pod["metadata"], pod.setdefault("spec", {})

        def deny(msg):
            name = meta.get("name", "")
            target = f'pods "{name}"' if name else "pods"
            raise ApiError(403, "Forbidden", f"{target} is forbidden: {msg}", {"name": name, "group": "", "kind": "pods"})

        if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            if spec.get("serviceAccountName"):
                deny("a mirror pod may not reference service accounts")
            if k8s.pod_secret_names(pod):
                deny("a mirror pod may not reference secrets")
            if any(src.get("serviceAccountToken") for v in spec.get("volumes") or []
                   for src in (v.get("projected") or {}).get("sources") or []):
                deny("a mirror pod may not use ServiceAccountToken volume projections")
            return
        name = spec.get("serviceAccountName") or "default"
        spec["serviceAccountName"] = name
        sa = self.store.get("serviceaccounts", a.namespace, name)
        if sa is None:
            deny(f'error looking up service account {a.namespace}/{name}: serviceaccount "{name}" not found')
        automount = spec.get("automountServiceAccountToken")
        if automount is None:
            automount = sa.get("automountServiceAccountToken")
        if automount is None or automount:
            k8s.mount_service_account_token(pod)
        if not spec.get("imagePullSecrets") and sa.get("imagePullSecrets"):
            spec["imagePullSecrets"] = [{"name": s.get("name")} for s in sa["imagePullSecrets"]]
        k8s.normalize_pod_service_account(pod)

    # ---- what kube-controller-manager does ------------------------------------------------------

    def _reconcile(self, resource, namespace, name):
        """The controllers that keep a namespace's `default` ServiceAccount (serviceaccounts
        controller) and its kube-root-ca.crt ConfigMap (root-ca-cert-publisher), at once
        after the change that concerns them, with the store locked."""
        if resource == "namespaces":
            namespace = name
        elif not ((resource == "configmaps" and name == ROOT_CA_CONFIG_MAP) or
                  (resource == "serviceaccounts" and name == "default")):
            return
        if self.store.get("namespaces", "", namespace) is None:
            return
        if resource in ("namespaces", "serviceaccounts") and self.store.get("serviceaccounts", namespace, "default") is None:
            self.store.write("serviceaccounts", self._new_meta({
                "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": namespace}}),
                "ADDED")
        if resource in ("namespaces", "configmaps"):
            data = {"ca.crt": self.ca_pem}
            cm = self.store.get("configmaps", namespace, ROOT_CA_CONFIG_MAP)
            if cm is None:
                self.store.write("configmaps", self._new_meta({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": ROOT_CA_CONFIG_MAP, "namespace": namespace,
                                 "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
                    "data": data}), "ADDED")
            elif (cm.get("data") != data or not (cm["metadata"].get("annotations") or {}).get("kubernetes.io/description")) \
                    and not cm.get("immutable"):  # an immutable one the publisher cannot update either
                cm["data"] = data
                cm["metadata"].setdefault("annotations", {})["kubernetes.io/description"] = ROOT_CA_DESCRIPTION
                self.store.write("configmaps", cm, "MODIFIED")

    def _admit_mirror_pod(self, node, pod, deny):
        meta, spec = pod["metadata"], pod.get("spec") or {}
        if MIRROR_ANNOTATION not in (meta.get("annotations") or {}):
            deny(f'pod does not have "{MIRROR_ANNOTATION}" annotation, node "{node}" can only create mirror pods')
        if spec.get("nodeName") != node:
            deny(f'node "{node}" can only create pods with spec.nodeName set to itself')
        owners = meta.get("ownerReferences") or []
        if len(owners) > 1:
            deny(f'node "{node}" can only create pods with a single owner reference set to itself')
        if not owners:
            deny(f'node "{node}" can only create pods with an owner reference set to itself')
        owner = owners[0]
        if owner.get("apiVersion") != "v1" or owner.get("kind") != "Node" or owner.get("name") != node:
            deny(f'node "{node}" can only create pods with an owner reference set to itself')
        if not owner.get("controller"):
            deny(f'node "{node}" can only create pods with a controller owner reference set to itself')
        if owner.get("blockOwnerDeletion"):
            deny(f'node "{node}" must not set blockOwnerDeletion on an owner reference')
        node_obj = self.store.get("nodes", "", node)
        if node_obj is None:
            raise k8s.not_found("nodes", node)
        if owner.get("uid") != node_obj["metadata"]["uid"]:
            deny(f"node {node} UID mismatch: expected {owner.get('uid')} got {node_obj['metadata']['uid']}")
        if spec.get("serviceAccountName"):
            deny(f'node "{node}" can not create pods that reference a service account')
        text = json.dumps(spec)
        if spec.get("imagePullSecrets") or '"secretKeyRef"' in text or '"secretRef"' in text or any(
                "secret" in v for v in spec.get("volumes") or []) or '"secret": {' in text:
            deny(f'node "{node}" can not create pods that reference secrets')
        if '"configMapKeyRef"' in text or '"configMapRef"' in text or '"configMap": {' in text:
            deny(f'node "{node}" can not create pods that reference configmaps')
        if '"clusterTrustBundle"' in text:
            deny(f'node "{node}" can not create pods that reference clustertrustbundles')
        if any("persistentVolumeClaim" in v for v in spec.get("volumes") or []):
            deny(f'node "{node}" can not create pods that reference persistentvolumeclaims')

    # ---- CertificateSigningRequests: the registry's strategies and admission ------------------------

    def _prepare_csr(self, obj, user):
        """PrepareForCreate: the requester's name, uid, groups and extra, whatever the request
        said, and no status (nobody creates a pre-approved request)."""
        if obj.get("spec") is None:
            obj["spec"] = {}
        spec = obj["spec"]
        obj["status"] = {}
        if not isinstance(spec, dict):
            return  # the schema says what is wrong with it
        for f in ("username", "uid", "groups", "extra"):
            spec.pop(f, None)
        spec["username"] = user.name
        if user.uid:
            spec["uid"] = user.uid
        spec["groups"] = list(user.groups)
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}

    @staticmethod
    def _csr_update_strategy(sub, old, new):
        """PrepareForUpdate of the resource (spec and status stay), of /status (spec stays,
        and the Approved and Denied conditions as they were) and of /approval (only the
        conditions change); conditions get their lastUpdateTime and lastTransitionTime."""
        new["spec"] = copy.deepcopy(old.get("spec"))
        old_status = old.get("status") or {}
        if not sub:
            new["status"] = copy.deepcopy(old_status)
            return
        status = new.get("status") if isinstance(new.get("status"), dict) else {}
        conditions = status.get("conditions") if isinstance(status.get("conditions"), list) else []
        if sub == "status":
            for typ in (csr.APPROVED, csr.DENIED):
                was = [c for c in old_status.get("conditions") or [] if c.get("type") == typ]
                at = [i for i, c in enumerate(conditions) if isinstance(c, dict) and c.get("type") == typ]
                if len(was) == len(at):
                    for i, c in zip(at, was):
                        conditions[i] = copy.deepcopy(c)
        now = k8s.fmt_time(k8s.now())
        for c in conditions:
            if not isinstance(c, dict):
                continue
            if not c.get("lastUpdateTime"):
                c["lastUpdateTime"] = now
            if not c.get("lastTransitionTime"):
                same = [o for o in old_status.get("conditions") or []
                        if o.get("type") == c.get("type") and o.get("status") == c.get("status")
                        and o.get("lastTransitionTime")]
                c["lastTransitionTime"] = same[0]["lastTransitionTime"] if same else now
        if sub == "approval":
            status = dict(copy.deepcopy(old_status), conditions=conditions)
        else:
            status["conditions"] = conditions
        if not status.get("conditions"):
            status.pop("conditions", None)
        new["status"] = status

    def _may_sign_as(self, user, verb, signer):
        """IsAuthorizedForSignerName: `verb` on the `signers` resource named `signer`, or
        `domain/*` of it."""
        if user.admin():
            return True
        for name in (signer, signer.split("/")[0] + "/*"):
            if self.rule_decision(user.name, user.groups, verb, CERTIFICATES_GROUP, "signers", "", "", name)[0] == "allow":
                return True
        return False

    def _admit_csr(self, user, a, new, old):
        """The CSR admission plugins: CertificateSubjectRestriction on create (no system:masters
        from the kube-apiserver-client signer), CertificateApproval on /approval (`approve` on
        the signer), CertificateSigning on a /status that changes the certificate or the
        conditions (`sign` on the signer)."""
        spec = (old if old is not None else new).get("spec") or {}
        signer, name = spec.get("signerName", ""), a.name or new["metadata"].get("name", "")

        def deny(msg):
            raise ApiError(403, "Forbidden", f'{CSRS}.{CERTIFICATES_GROUP} "{name}" is forbidden: {msg}',
                           {"name": name, "group": CERTIFICATES_GROUP, "kind": CSRS})

        if old is None:
            if signer == csr.KUBE_APISERVER_CLIENT:
                req = csr.parse_request(base64.b64decode(spec.get("request") or ""))
                if "system:masters" in req.organizations:
                    deny(f"use of {csr.KUBE_APISERVER_CLIENT} signer with system:masters group is not allowed")
            return
        if a.sub == "approval" and not self._may_sign_as(user, "approve", signer):
            deny(f'user not permitted to approve requests with signerName "{signer}"')
        if a.sub == "status":
            before, after = old.get("status") or {}, new.get("status") or {}
            changed = before.get("certificate") != after.get("certificate") or \
                before.get("conditions") != after.get("conditions")
            if changed and not self._may_sign_as(user, "sign", signer):
                deny(f'user not permitted to sign requests with signerName "{signer}"')

    def _csr_changed(self, old, new):
        """After a CSR was written (store locked): counts approvals, denials and issued
        certificates, and gives the controllers its name."""
        with self.csr_lock:
            for typ, key in ((csr.APPROVED, "csr_approved"), (csr.DENIED, "csr_denied")):
                if len(csr.conditions_of(new, typ)) > len(csr.conditions_of(old or {}, typ)):
                    self.csr_counts[key] += 1
            if (new.get("status") or {}).get("certificate") and not ((old or {}).get("status") or {}).get("certificate"):
                self.csr_counts["csr_signed"] += 1
        self.csr_queue.put(new["metadata"]["name"])

    # ---- kube-controller-manager: csrapproving, csrsigning, tokencleaner ------------------------------

    def run_controllers(self, stop):
        """The controller thread's loop until `stop` is set: each CSR name from the queue is
        synced (approved, then signed), and every TOKEN_CLEANER_PERIOD expired bootstrap tokens
        are deleted."""
        next_clean = 0.0
        while not stop.is_set():
            try:
                name = self.csr_queue.get(timeout=0.2)
            except queue.Empty:
                name = None
            try:
                if name is not None:
                    self.sync_csr(name)
                if time.time() >= next_clean:
                    next_clean = time.time() + TOKEN_CLEANER_PERIOD
                    self.clean_bootstrap_tokens()
            except Exception:  # a bug here must not end the controllers: it is counted and logged
                self.controller_errors.append(traceback.format_exc())
                sys.stderr.write(f"fake-apiserver: controller error:\n{traceback.format_exc()}")

    def sync_csr(self, name):
        """One look at CSR `name`, as csrapproving and then csrsigning handle it: a pending
        kubelet client request is approved when its requester may create
        `certificatesigningrequests/selfnodeclient` (a node renewing its own) or `/nodeclient`;
        an approved one that has not failed, for a signer served here, is checked
        (ValidateKubelet*CSR: a Failed condition, SignerValidationFailure, when it does not
        pass) and signed."""
        obj = self.store.get(CSRS, "", name)
        if obj is None or (obj.get("status") or {}).get("certificate"):
            return
        spec = obj.get("spec") or {}
        try:
            req = csr.parse_request(base64.b64decode(spec.get("request") or ""))
        except csr.CsrError:
            return  # "unable to parse csr": validation has let nothing like it in
        if not csr.conditions_of(obj, csr.APPROVED) and not csr.conditions_of(obj, csr.DENIED):
            condition = self._approver_decision(obj, req) if self.approver_on else None
            if condition is None:
                return
            obj = self._controller_update(obj, condition)
            if obj is None:
                return
        if not csr.conditions_of(obj, csr.APPROVED) or csr.conditions_of(obj, csr.FAILED):
            return
        signer = spec.get("signerName")
        if signer not in csr.SIGNED_HERE or self.authority is None:
            return
        usages = spec.get("usages") or []
        why = csr.SIGNER_CHECKS[signer](req, usages)
        if why:
            self._controller_update(obj, {"type": csr.FAILED, "status": "True", "reason": "SignerValidationFailure",
                                          "message": why})
            return
        with self.csr_lock:
            ttl = self.signing_seconds
        lifetime = csr.certificate_lifetime(ttl, spec.get("expirationSeconds"))
        try:
            not_before, not_after = csr.validity(int(time.time()), lifetime, self.authority.not_after)
            pem = self.authority.sign(req, usages, not_before, not_after)
        except csr.CsrError as e:  # the real signer logs it and retries; here it is recorded
            self.controller_errors.append(f"error auto signing csr: {e}")
            return
        self._controller_update(obj, None, base64.b64encode(pem).decode())

    def _approver_decision(self, obj, req):
        """sarApprover.handle: the Approved condition for a kubelet client CSR whose requester
        passes a SubjectAccessReview for one of the recognizers, else None. (Its reviews are
        answered here directly, and not counted with the tests' ones.)"""
        spec = obj.get("spec") or {}
        if not csr.is_kubelet_client(obj, req):
            return None
        for sub, message in APPROVER_RECOGNIZERS:
            if sub == "selfnodeclient" and spec.get("username") != req.common_name:
                continue
            review = {"user": spec.get("username", ""), "uid": spec.get("uid", ""),
                      "groups": list(spec.get("groups") or []), "extra": spec.get("extra") or {},
                      "resourceAttributes": {"group": CERTIFICATES_GROUP, "resource": CSRS, "verb": "create",
                                             "subresource": sub}}
            try:
                allowed = self._subject_access_review(review).get("allowed")
            except ApiError:
                allowed = False
            if allowed:
                return {"type": csr.APPROVED, "status": "True", "reason": "AutoApproved", "message": message}
        return None

    def _controller_update(self, seen, condition, certificate=None):
        """The controller's UpdateApproval (a condition) or UpdateStatus (a condition or the
        certificate) of CSR `seen`, unless it changed meanwhile (then it is looked at again
        from the queue): the stored object, or None."""
        name = seen["metadata"]["name"]
        with self.store.lock:
            old = self.store.get(CSRS, "", name)
            if old is None or old["metadata"]["resourceVersion"] != seen["metadata"]["resourceVersion"]:
                if old is not None:
                    self.csr_queue.put(name)
                return None
            new = copy.deepcopy(old)
            status = new.setdefault("status", {})
            now = k8s.fmt_time(k8s.now())
            if condition is not None:
                status.setdefault("conditions", []).append(dict(condition, lastUpdateTime=now, lastTransitionTime=now))
            if certificate is not None:
                status["certificate"] = certificate
            written = self.store.write(CSRS, new, "MODIFIED")
            self._csr_changed(old, written)
            return written

    def clean_bootstrap_tokens(self):
        """The tokencleaner: expired bootstrap token Secrets in kube-system are deleted."""
        now = time.time()
        with self.store.lock:
            secrets, _ = self.store.list("secrets", tokens.BOOTSTRAP_NAMESPACE, [("type", "=", tokens.BOOTSTRAP_SECRET_TYPE)])
            for secret in secrets:
                if tokens.bootstrap_expired(secret, now):
                    self.store.remove("secrets", tokens.BOOTSTRAP_NAMESPACE, secret["metadata"]["name"])

    def csr_report(self):
        """Every CSR, in the order they were created, for /control/csrs: name, requester,
        signerName, usages, expirationSeconds, conditions and the issued certificate as
        `openssl x509` reads it."""
        items, _ = self.store.list(CSRS, "")
        with self.csr_lock:
            order = dict(self.csr_order)
        items.sort(key=lambda o: (int(order.get(o["metadata"]["name"], 0)), o["metadata"]["name"]))
        out = []
        for o in items:
            spec, status = o.get("spec") or {}, o.get("status") or {}
            cert = status.get("certificate")
            out.append({
                "name": o["metadata"]["name"], "uid": o["metadata"]["uid"],
                "requester": {"username": spec.get("username", ""), "uid": spec.get("uid", ""),
                              "groups": spec.get("groups") or [], "extra": spec.get("extra") or {}},
                "signerName": spec.get("signerName", ""), "usages": spec.get("usages") or [],
                "expirationSeconds": spec.get("expirationSeconds"), "conditions": status.get("conditions") or [],
                "certificate": csr.describe_certificate(base64.b64decode(cert)) if cert else None,
            })
        return out

    # ---- validation ----------------------------------------------------------------------------

    def validate(self, user, a, obj, what, old=None):
        """422 unless `obj` is valid (and, for an update of a ConfigMap or Secret, a valid
        change of `old`); failures are recorded."""
        if a.resource == CSRS:
            # The registry's own validation first, with its words; the schema after it.
            errors = (csr.validation_errors(obj, old, a.sub) if csr.well_typed(obj) else []) or self.schemas.validate(obj)
        else:
            errors = k8s.update_errors(old, obj) if old is not None and a.resource in ("configmaps", "secrets") else []
            errors += self.schemas.validate(obj)
        if not errors:
            return
        meta = obj.get("metadata") or {}
        with self.failures_lock:
            self.validation_failures.append({
                "time": time.time(), "user": user.name, "verb": a.verb, "resource": a.resource, "subresource": a.sub,
                "namespace": a.namespace or "", "name": a.name or meta.get("name", ""), "what": what,
                "errors": [{"field": f, "message": m} for f, m in errors], "object": obj})
        name = meta.get("name") or a.name or ""
        api_version = str(obj.get("apiVersion") or a.res().api_version)
        group = api_version.split("/")[0] if "/" in api_version else ""
        raise k8s.invalid(obj.get("kind", a.res().kind), name, errors, group)

    # ---- helpers -----------------------------------------------------------------------------

    def _decode(self, a, body, expect_kind=None):
        try:
            obj = json.loads(body or b"null")
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, "BadRequest", f"the body of the request could not be decoded as JSON: {e}")
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body of the request must be a JSON object")
        if expect_kind is None:
            return obj
        res = a.res()
        api_version = {"Binding": "v1", "TokenRequest": "authentication.k8s.io/v1"}.get(expect_kind, res.api_version)
        # The apiserver fills in apiVersion and kind from the URL when they are missing.
        obj = {"apiVersion": obj.get("apiVersion", api_version), "kind": obj.get("kind", expect_kind), **obj}
        if obj["kind"] != expect_kind or obj["apiVersion"] != api_version:
            raise ApiError(400, "BadRequest",
                           f'the object provided is unrecognized (must be of type {expect_kind}): {obj["apiVersion"]}, Kind={obj["kind"]}')
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if res.namespaced and expect_kind != "Binding":
            if meta.get("namespace") and meta["namespace"] != a.namespace:
                raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the namespace sent on the request")
        if a.name and meta.get("name") and meta["name"] != a.name and expect_kind not in ("Binding", "TokenRequest"):
            raise ApiError(400, "BadRequest", f'the name of the object ({meta["name"]}) does not match the name on the URL ({a.name})')
        return obj

    def _new_meta(self, obj):
        meta = obj["metadata"]
        meta["uid"] = k8s.new_uid()
        meta["creationTimestamp"] = k8s.fmt_time(k8s.now())
        for f in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion", "selfLink", "managedFields"):
            meta.pop(f, None)
        return obj

    def _existing(self, a):
        obj = self.store.get(a.resource, a.namespace, a.name)
        if obj is None:
            raise k8s.not_found(a.resource, a.name, a.res().group)
        return obj

    def _check_preconditions(self, a, old, uid, rv):
        if uid and uid != old["metadata"]["uid"]:
            raise k8s.conflict(a.resource, a.name, f"Precondition failed: UID in precondition: {uid}, UID in object meta: {old['metadata']['uid']}", a.res().group)
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise k8s.conflict(a.resource, a.name, k8s.STALE, a.res().group)

    def _require_namespace(self, ns):
        if ns and self.store.get("namespaces", "", ns) is None:
            raise k8s.not_found("namespaces", ns)

    def _table_wanted(self, headers):
        return "as=Table" in (headers.get("Accept") or "")

    # ---- verbs ---------------------------------------------------------------------------------

    def do_get(self, a, query, headers, body, user):
        obj = self._existing(a)
        if self._table_wanted(headers):
            return Response(200, k8s.table(a.resource, [obj], obj["metadata"]["resourceVersion"], query.get("includeObject")))
        return Response(200, obj)

    def do_list(self, a, query, headers, body, user):
        fields = k8s.parse_field_selector(a.resource, query.get("fieldSelector"))
        labels = k8s.parse_label_selector(query.get("labelSelector"))
        items, rv = self.store.list(a.resource, a.namespace, fields, labels)
        if self._table_wanted(headers):
            return Response(200, k8s.table(a.resource, items, rv, query.get("includeObject")))
        meta = {"resourceVersion": rv}
        if query.get("limit") or query.get("continue"):
            items, meta = self._page(items, rv, query)
        for o in items:  # the real apiserver's list items carry no kind and apiVersion
            o.pop("kind", None)
            o.pop("apiVersion", None)
        return Response(200, {"kind": a.res().kind + "List", "apiVersion": a.res().api_version,
                              "metadata": meta, "items": items})

    def _page(self, items, rv, query):
        """One page of a list (`limit`, `continue`), as the real apiserver pages: the
        continue token (opaque, base64 JSON here as there) names where the next page starts
        and the list's resourceVersion, which every page answers; a token older than the
        store's window is 410 Expired."""
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise ApiError(400, "BadRequest", f'invalid limit "{query["limit"]}"')
        start = ""
        if query.get("continue"):
            try:
                token = json.loads(base64.b64decode(query["continue"]))
                rv, start = str(token["rv"]), token["start"]
            except (ValueError, KeyError, TypeError):
                raise ApiError(400, "BadRequest", "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
            if int(rv) < self.store.oldest:
                raise ApiError(410, "Expired", "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
        key = lambda o: o["metadata"].get("namespace", "") + "/" + o["metadata"]["name"]
        rest = [o for o in items if key(o) > start]
        meta = {"resourceVersion": rv}
        if limit > 0 and len(rest) > limit:
            rest = rest[:limit]
            token = json.dumps({"v": "meta.k8s.io/v1", "rv": int(rv), "start": key(rest[-1])})
            meta["continue"] = base64.b64encode(token.encode()).decode()
            meta["remainingItemCount"] = len([o for o in items if key(o) > key(rest[-1])])
        return rest, meta

    def do_watch(self, a, query, headers, body, user):
        fields = k8s.parse_field_selector(a.resource, query.get("fieldSelector"))
        labels = k8s.parse_label_selector(query.get("labelSelector"))
        w = Watch(a.resource, a.namespace, fields, labels, query.get("allowWatchBookmarks") in ("true", "1"),
                  user.name, "")
        timeout = None
        if query.get("timeoutSeconds"):
            try:
                timeout = float(query["timeoutSeconds"])
            except ValueError:
                raise ApiError(400, "BadRequest", f'invalid timeoutSeconds "{query["timeoutSeconds"]}"')
        return WatchRequest(w, query.get("resourceVersion", ""), timeout)

    def do_create(self, a, query, headers, body, user):
        if a.sub == "binding":
            return self._bind(a, body, user)
        if a.sub == "token":
            return self._token_request(a, body, user)
        if a.name:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if a.res().namespaced and not a.namespace:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        obj = self._decode(a, body, a.res().kind)
        meta = obj["metadata"]
        if a.res().namespaced:
            meta["namespace"] = a.namespace
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + k8s.random_suffix()
        self._prepare(a, obj)
        if a.resource == "pods" and self.service_account_admission:
            self._require_namespace(a.namespace)  # NamespaceLifecycle admits first
            self._admit_service_account(a, obj)
        if a.resource == CSRS:
            self._prepare_csr(obj, user)
        self.admit(user, a, obj, None)
        self.validate(user, a, obj, "create")
        if a.resource == CSRS:
            self._admit_csr(user, a, obj, None)
        with self.store.lock:
            self._require_namespace(a.namespace if a.res().namespaced else None)
            if self.store.get(a.resource, a.namespace, meta["name"]) is not None:
                gr = f"{a.resource}.{a.res().group}" if a.res().group else a.resource
                raise ApiError(409, "AlreadyExists", f'{gr} "{meta["name"]}" already exists',
                               {"name": meta["name"], "group": a.res().group, "kind": a.resource})
            self._new_meta(obj)
            if a.resource == "pods":
                k8s.default_pod(obj)
                # A new pod's status is the apiserver's, whatever the request said.
                obj["status"] = {"phase": "Pending", "qosClass": k8s.qos_class(obj)}
            if a.resource == "namespaces":
                obj.setdefault("spec", {"finalizers": ["kubernetes"]})
                obj["status"] = {"phase": "Active"}
            created = self.store.write(a.resource, obj, "ADDED")
            self._reconcile(a.resource, a.namespace, meta["name"])
            if a.resource == CSRS:
                with self.csr_lock:
                    self.csr_counts["csr_created"] += 1
                    self.csr_order[meta["name"]] = created["metadata"]["resourceVersion"]
                self._csr_changed(None, created)
            return Response(201, created)

    def _prepare(self, a, obj):
        """What decoding and conversion do to a written object before it is validated."""
        if a.resource in ("configmaps", "secrets", CSRS):
            k8s.decode_bytes_fields(obj)
        if a.resource in ("configmaps", "secrets"):
            (k8s.prepare_secret if a.resource == "secrets" else k8s.prepare_config_map)(obj)
        elif a.resource == "pods" and not a.sub:
            k8s.normalize_pod_service_account(obj)

    def _token_request(self, a, body, user):
        """TokenRequest (pkg/registry/core/serviceaccount/storage/token.go): after
        NodeRestriction, the service account must exist; audiences default to the
        apiserver's, expirationSeconds to 3600 (at least 600, at most 2^32); a Pod, Node or
        Secret binding must name an object that exists (and has that uid); the answer is the
        request with status.token and status.expirationTimestamp."""
        tr = self._decode(a, body, "TokenRequest")
        spec = tr.get("spec")
        if not isinstance(spec, dict):
            spec = tr["spec"] = {}
        if spec.get("expirationSeconds") is None:  # SetDefaults_TokenRequestSpec
            spec["expirationSeconds"] = 3600
        self.admit(user, a, tr, None)
        group = "authentication.k8s.io"
        meta = tr["metadata"]
        if meta.get("name") and meta["name"] != a.name:
            raise k8s.invalid("TokenRequest", a.name, [("metadata.name", f"Invalid value: {k8s.go_value(meta['name'])}: "
                                                                         "must match the service account name if specified")], group)
        sa = self.store.get("serviceaccounts", a.namespace, a.name)
        if sa is None:
            raise k8s.not_found("serviceaccounts", a.name)
        if not spec.get("audiences"):
            spec["audiences"] = list(API_AUDIENCES)
        meta.update(name=a.name, namespace=a.namespace)
        now = int(time.time())
        meta["creationTimestamp"] = k8s.fmt_time(datetime.datetime.fromtimestamp(now, datetime.timezone.utc))
        tr.pop("status", None)
        self.validate(user, a, tr, "create")
        exp = spec["expirationSeconds"]
        errors = []
        if exp < 600:
            errors.append(("spec.expirationSeconds", f"Invalid value: {exp}: may not specify a duration less than 10 minutes"))
        if exp > 1 << 32:
            errors.append(("spec.expirationSeconds", f"Invalid value: {exp}: may not specify a duration larger than 2^32 seconds"))
        if errors:
            raise k8s.invalid("TokenRequest", "", errors, group)
        pod = node = secret = None
        ref = spec.get("boundObjectRef")
        if ref:
            api_version, kind, name = ref.get("apiVersion") or "", ref.get("kind") or "", ref.get("name") or ""
            ref_group, _, ref_version = api_version.rpartition("/")
            if ref_group == "" and kind == "Pod":
                pod = self.store.get("pods", a.namespace, name)
                if pod is None:
                    raise k8s.not_found("pods", name)
                if a.name != pod_service_account(pod):
                    raise ApiError(400, "BadRequest", f'cannot bind token for serviceaccount "{a.name}" to pod running '
                                                      "with different serviceaccount name.")
                uid = pod["metadata"]["uid"]
                node_name = (pod.get("spec") or {}).get("nodeName")
                if node_name:
                    node_obj = self.store.get("nodes", "", node_name)
                    node = {"name": node_name, "uid": node_obj["metadata"]["uid"] if node_obj else None}
            elif ref_group == "" and kind == "Node":
                node_obj = self.store.get("nodes", "", name)
                if node_obj is None:
                    raise k8s.not_found("nodes", name)
                uid = node_obj["metadata"]["uid"]
                node = {"name": name, "uid": uid}
            elif ref_group == "" and kind == "Secret":
                secret = self.store.get("secrets", a.namespace, name)
                if secret is None:
                    raise k8s.not_found("secrets", name)
                uid = secret["metadata"]["uid"]
            else:
                raise ApiError(400, "BadRequest", f"cannot bind token to object of type {ref_group}/{ref_version}, Kind={kind}")
            if ref.get("uid") and ref["uid"] != uid:
                raise k8s.conflict(kind, name, f"the UID in the bound object reference ({ref['uid']}) does not match the "
                                               "UID in record. The object might have been deleted and then recreated")
        # --service-account-extend-token-expiration: a pod-bound token asked for 3607 s (the
        # admission plugin's volume) for the apiserver's audiences is valid a year, and says
        # when the 3607 s are over.
        lifetime, warn_after = exp, 0
        if (self.extend_token_expiration and pod is not None and exp == k8s.WARN_ONLY_TOKEN_SECONDS
                and set(spec["audiences"]) <= set(API_AUDIENCES)):
            lifetime, warn_after = EXPIRATION_EXTENSION_SECONDS, exp
        if self.max_token_seconds:
            exp = min(exp, self.max_token_seconds)
            lifetime, warn_after = min(lifetime, self.max_token_seconds), 0
        token = self.issuer.issue(sa, spec["audiences"], lifetime, warn_after, now, pod=pod, node=node, secret=secret,
                                  record={"time": time.time(), "user": user.name, "expirationSeconds": exp})
        expires = datetime.datetime.fromtimestamp(now + exp, datetime.timezone.utc)
        tr["status"] = {"token": token, "expirationTimestamp": k8s.fmt_time(expires)}
        return Response(201, tr)

    def _bind(self, a, body, user):
        binding = self._decode(a, body, "Binding")
        target = (binding.get("target") or {}).get("name")
        if not target:
            raise ApiError(422, "Invalid", "Binding is invalid: target.name: Required value")
        with self.store.lock:
            pod = self._existing(a)
            if (pod.get("spec") or {}).get("nodeName"):
                raise k8s.conflict("pods/binding", a.name, f'pod {a.name} is already assigned to node "{pod["spec"]["nodeName"]}"')
            pod["spec"]["nodeName"] = target
            self.store.write("pods", pod, "MODIFIED")
        return Response(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})

    def do_update(self, a, query, headers, body, user):
        obj = self._decode(a, body, a.res().kind)
        self._prepare(a, obj)
        with self.store.lock:
            old = self.store.get(a.resource, a.namespace, a.name)
            if old is None:
                if a.resource == "events" and not a.sub:  # events allow create on update
                    a.verb, a.name = "create", ""
                    return self.do_create(a, query, headers, body, user)
                raise k8s.not_found(a.resource, a.name, a.res().group)
            self._check_preconditions(a, old, obj["metadata"].get("uid"), obj["metadata"].get("resourceVersion"))
            new = self._merge_update(a, old, obj)
            self.admit(user, a, new, old)
            self.validate(user, a, new if a.resource == CSRS else obj, "update", old)
            if a.resource == CSRS:
                self._admit_csr(user, a, new, old)
            return self._store_update(a, old, new)

    def do_patch(self, a, query, headers, body, user):
        ctype = (headers.get("Content-Type") or "").split(";")[0].strip()
        patch = self._decode(a, body)
        with self.store.lock:
            old = self._existing(a)
            meta = patch.get("metadata") if isinstance(patch.get("metadata"), dict) else {}
            self._check_preconditions(a, old, meta.get("uid"), meta.get("resourceVersion"))
            if ctype == "application/strategic-merge-patch+json":
                patched = self.schemas.strategic_merge(old, patch, a.res().kind)
            elif ctype == "application/merge-patch+json":
                patched = k8s.json_merge_patch(old, patch)
            else:
                raise ApiError(415, "UnsupportedMediaType",
                               f'the body of the request was in an unknown format - accepted media types include: '
                               f'application/merge-patch+json, application/strategic-merge-patch+json (got "{ctype}")')
            if not isinstance(patched, dict):
                raise ApiError(422, "Invalid", "the patch removed the whole object")
            self._prepare(a, patched)
            new = self._merge_update(a, old, patched)
            self.admit(user, a, new, old)
            self.validate(user, a, new, "patch", old)
            if a.resource == CSRS:
                self._admit_csr(user, a, new, old)
            return self._store_update(a, old, new)

    def _merge_update(self, a, old, obj):
        """What an update stores: the request's object with the immutable metadata of the
        stored one; the main resource keeps the stored status and the status subresource
        the stored spec (as the apiserver's update strategies do)."""
        new = copy.deepcopy(obj)
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        meta = new.setdefault("metadata", {})
        for f in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                  "generateName"):
            if f in old["metadata"]:
                meta[f] = old["metadata"][f]
            else:
                meta.pop(f, None)
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        if a.resource in ("pods", "nodes", "namespaces"):
            if a.sub == "status":
                new["spec"] = copy.deepcopy(old.get("spec"))
                if a.resource == "pods":
                    meta["ownerReferences"] = copy.deepcopy(old["metadata"].get("ownerReferences"))
                    if meta["ownerReferences"] is None:
                        meta.pop("ownerReferences")
            else:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
        if a.resource == CSRS:
            self._csr_update_strategy(a.sub, old, new)
        if new.get("spec") is None:
            new.pop("spec", None)
        return new

    def _store_update(self, a, old, new):
        if a.resource == "pods" and not a.sub:
            errors = k8s.pod_spec_update_errors(old, new)
            if errors:
                raise ApiError(422, "Invalid", f'Pod "{a.name}" is invalid: {errors[0][0]}: {errors[0][1]}',
                               {"name": a.name, "kind": "Pod", "causes": [{"field": f, "message": m} for f, m in errors]})
        if new == old:  # a no-op update keeps the resourceVersion and sends no watch event
            return Response(200, old)
        written = self.store.write(a.resource, new, "MODIFIED")
        self._reconcile(a.resource, a.namespace, a.name)
        if a.resource == CSRS:
            self._csr_changed(old, written)
        return Response(200, written)

    def do_delete(self, a, query, headers, body, user):
        opts = self._decode(a, body) if body and body.strip() else {}
        grace = opts.get("gracePeriodSeconds")
        if query.get("gracePeriodSeconds") is not None:
            try:
                grace = int(query["gracePeriodSeconds"])
            except ValueError:
                raise ApiError(400, "BadRequest", f'invalid gracePeriodSeconds "{query["gracePeriodSeconds"]}"')
        pre = opts.get("preconditions") or {}
        with self.store.lock:
            old = self._existing(a)
            self._check_preconditions(a, old, pre.get("uid"), pre.get("resourceVersion"))
            self.admit(user, a, None, old)
            if a.resource != "pods":
                self.store.remove(a.resource, a.namespace, a.name)
                self._reconcile(a.resource, a.namespace, a.name)
                return Response(200, status_success(a, old))
            spec, st, meta = old.get("spec") or {}, old.get("status") or {}, old["metadata"]
            if grace is None:
                grace = spec.get("terminationGracePeriodSeconds", 30)
            # Pods not bound to a node, or already finished, go at once (podStrategy.CheckGracefulDelete).
            if not spec.get("nodeName") or st.get("phase") in ("Succeeded", "Failed"):
                grace = 0
            if grace <= 0:
                return Response(200, self.store.remove("pods", a.namespace, a.name))
            current = meta.get("deletionGracePeriodSeconds")
            if current is not None and grace >= current:
                return Response(200, old)  # a second delete may only shorten the grace period
            new = copy.deepcopy(old)
            new["metadata"]["deletionTimestamp"] = k8s.fmt_time(k8s.now() + datetime.timedelta(seconds=grace))
            new["metadata"]["deletionGracePeriodSeconds"] = grace
            return Response(200, self.store.write("pods", new, "MODIFIED"))

    def do_deletecollection(self, a, query, headers, body, user):
        raise ApiError(405, "MethodNotAllowed", "the fake apiserver does not serve deletecollection")


KUBELET_LABELS = {
    "kubernetes.io/hostname", "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region", "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type", "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
}


def forbidden_node_labels(new, old):
    """NodeRestriction: labels a node may not add, change or remove on its own Node."""
    def ns(key):
        return key.split("/", 1)[0] if "/" in key else ""

    def k8s_domain(n):
        return n in ("kubernetes.io", "k8s.io") or n.endswith(".kubernetes.io") or n.endswith(".k8s.io")

    def kubelet_label(key):
        n = ns(key)
        return key in KUBELET_LABELS or n in ("kubelet.kubernetes.io", "node.kubernetes.io") or n.endswith(
            ".kubelet.kubernetes.io") or n.endswith(".node.kubernetes.io")

    modified = {k for k in set(new) | set(old) if new.get(k) != old.get(k) or (k in new) != (k in old)}
    bad = set()
    for k in modified:
        n = ns(k)
        if n == "node-restriction.kubernetes.io" or n.endswith(".node-restriction.kubernetes.io"):
            bad.add(k)
        if k8s_domain(n) and not kubelet_label(k):
            bad.add(k)
    return sorted(bad)


def go_bool(value, key):
    """A query flag as the apiserver's conversion reads it (strconv.ParseBool); absent: false."""
    if value is None:
        return False
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False", ""):
        return False
    raise ApiError(400, "BadRequest", f'strconv.ParseBool: parsing "{value}": invalid syntax')


def pod_service_account(pod):
    """The ServiceAccount a pod runs as: its serviceAccountName, or `default` (what the
    ServiceAccount admission plugin would have set, for pods created without it)."""
    return (pod.get("spec") or {}).get("serviceAccountName") or "default"


# ---- faults and the request log --------------------------------------------------------------

class Faults:
    def __init__(self):
        self.lock = threading.Lock()
        self.slow_ms = 0
        self.fail_count = 0
        self.fail_code = 500
        self.fail_match = ""
        self.fail_after = False

    def take_failure(self, path):
        with self.lock:
            if self.fail_count > 0 and self.fail_match in path:
                self.fail_count -= 1
                return self.fail_code, self.fail_after
            return None


FAULT_STATUS = {
    500: ("InternalError", "Internal error occurred: injected by the fake apiserver"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request (injected)"),
    429: ("TooManyRequests", "the server has received too many requests and has asked us to try again later (injected)"),
    504: ("Timeout", "the server was unable to return a response in the time allotted (injected)"),
}


class Log:
    def __init__(self):
        self.lock = threading.Lock()
        self.entries = []
        self.tls_failures = 0
        self.watch_events = 0
        self.internal_errors = 0

    def add(self, entry):
        with self.lock:
            entry["seq"] = len(self.entries)
            self.entries.append(entry)
            return entry

    def counters(self, store):
        with self.lock:
            by_verb, by_status, by_user = {}, {}, {}
            for e in self.entries:
                by_verb[e["verb"]] = by_verb.get(e["verb"], 0) + 1
                by_status[str(e["status"])] = by_status.get(str(e["status"]), 0) + 1
                by_user[e["user"]] = by_user.get(e["user"], 0) + 1
            return {"requests": len(self.entries), "by_verb": by_verb, "by_status": by_status, "by_user": by_user,
                    "tls_handshake_failures": self.tls_failures, "watch_events_sent": self.watch_events,
                    "internal_errors": self.internal_errors, "open_watches": len(store.watches),
                    "resourceVersion": str(store.rv)}


# ---- the apiserver's connections to kubelets ----------------------------------------------------

class KubeletConnection:
    """TLS to a kubelet as the apiserver's client: the kubelet client certificate, the
    kubelet's serving certificate not verified (no --kubelet-certificate-authority), HTTP/1.1.
    TLS runs over memory BIOs so that one thread can serve both directions of an upgraded
    connection without blocking, and so that a half-close sends close_notify (Go's
    tls.Conn.CloseWrite) before the TCP FIN."""

    def __init__(self, host, port, ctx, timeout=10):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        try:
            ipaddress_literal = socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        except OSError:
            ipaddress_literal = None
        self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_hostname=None if ipaddress_literal else host)
        self.buf = b""  # plaintext read but not consumed yet
        self.eof = False
        # While a blocking read waits for the kubelet: (socket, closed()) of the client, so
        # that a client going away ends the wait (and the kubelet's request) as it does in
        # the apiserver, whose request context is cancelled.
        self.watch = None
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                if not self._feed():
                    raise ConnectionError("the kubelet closed the connection during the TLS handshake")
        self._flush()

    def _flush(self):
        data = self.outgoing.read()
        if data:
            self.sock.sendall(data)

    def _feed(self):
        """Blocking: one read of the socket into the TLS engine; False at EOF."""
        while self.watch is not None:
            r, _, _ = select.select([self.sock, self.watch[0]], [], [])
            if self.sock in r:
                break
            if self.watch[1]():
                raise ConnectionAbortedError("the client went away")
        data = self.sock.recv(65536)
        if not data:
            self.incoming.write_eof()
            return False
        self.incoming.write(data)
        return True

    def send(self, data):
        self.tls.write(data)
        self._flush()

    def decrypt(self):
        """Whatever plaintext the records already received hold (b"" if none); sets eof when
        the kubelet's side has ended (close_notify or a bare FIN)."""
        out = []
        while not self.eof:
            try:
                chunk = self.tls.read(65536)
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                self.eof = True
                break
            if not chunk:
                self.eof = True
                break
            out.append(chunk)
        return b"".join(out)

    def _more(self):
        """Blocking: more plaintext into buf; False at the end of the kubelet's side."""
        while True:
            data = self.decrypt()
            self._flush()  # a read may answer the peer (TLS 1.3 key updates)
            if data:
                self.buf += data
                return True
            if self.eof:
                return False
            self._feed()  # at EOF the engine's next read says so

    def take(self, limit=1 << 20):
        """Blocking: up to `limit` bytes of plaintext, b"" at the end."""
        if not self.buf and not self._more():
            return b""
        data, self.buf = self.buf[:limit], self.buf[limit:]
        return data

    def read_until(self, marker, limit=65536):
        while marker not in self.buf:
            if len(self.buf) > limit or not self._more():
                raise ConnectionError("the kubelet's answer ended early")
        head, _, self.buf = self.buf.partition(marker)
        return head + marker

    def read_exact(self, n):
        while len(self.buf) < n:
            if not self._more():
                raise ConnectionError("the kubelet's answer ended early")
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def body_chunks(self, head):
        """The body of an HTTP/1.1 answer with head `head`, piece by piece as it arrives:
        Content-Length, chunked, or up to the end of the connection."""
        headers = parse_head(head)[2]
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int(self.read_until(b"\r\n").split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.read_until(b"\r\n") != b"\r\n":  # trailers
                        pass
                    return
                while size:
                    piece = self.take(size)
                    if not piece:
                        raise ConnectionError("the kubelet's answer ended early")
                    size -= len(piece)
                    yield piece
                self.read_exact(2)
        elif "content-length" in headers:
            left = int(headers["content-length"])
            while left:
                piece = self.take(left)
                if not piece:
                    raise ConnectionError("the kubelet's answer ended early")
                left -= len(piece)
                yield piece
        else:
            while True:
                piece = self.take()
                if not piece:
                    return
                yield piece

    def close_notify(self):
        """The TLS records of close_notify (to send before the TCP FIN): the kubelet reads a
        clean end of the stream and may still write. Call with no received record pending
        (decrypt first): unwrap goes on to look for the kubelet's close_notify."""
        try:
            self.tls.unwrap()
        except (ssl.SSLWantReadError, ssl.SSLError):
            pass
        return self.outgoing.read()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def parse_head(head):
    """(status code, the head's lines, lowercased headers) of an HTTP/1.1 answer's head."""
    lines = head.decode("latin-1").split("\r\n")
    try:
        code = int(lines[0].split(" ", 2)[1])
    except (IndexError, ValueError):
        raise ConnectionError(f"malformed HTTP answer from the kubelet: {lines[0]!r}")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return code, lines, headers


def backend_error_status(code, body, resource, name):
    """The Status the apiserver answers when the kubelet answered a log request with `code`
    (GenericHttpResponseChecker, NewGenericServerResponse with no verb)."""
    text = body.decode("utf-8", "replace")
    if code == 500:
        return ApiError(500, "InternalError", f"Internal error occurred: {text}", {"causes": [{"message": text}]})
    if code == 400:
        return ApiError(400, "BadRequest", text)
    reason, message = {
        404: ("NotFound", "the server could not find the requested resource"),
        401: ("Unauthorized", "the server has asked for the client to provide credentials"),
        403: ("Forbidden", text),
        405: ("MethodNotAllowed", "the server does not allow this method on the requested resource"),
        409: ("Conflict", "the server reported a conflict"),
        422: ("Invalid", "the server rejected our request due to an error in our request"),
        429: ("TooManyRequests", "the server has received too many requests and has asked us to try again later"),
        503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
        504: ("Timeout", "the server was unable to return a response in the time allotted, but may still be processing the request"),
    }.get(code, ("InternalError" if code >= 500 else "", f"an error on the server ({json.dumps(text)}) has prevented the request from succeeding"
                 if code >= 500 else f"the server responded with the status code {code} but did not return more information"))
    return ApiError(code, reason, f"{message} ( {resource} {name})",
                    {"name": name, "kind": resource, "causes": [{"reason": "UnexpectedServerResponse", "message": text}]})


def shutdown_write(sock):
    """A TCP half-close (FIN) under an ssl socket, whose own shutdown() would drop its TLS
    state: Go's TLS reads a bare FIN at a record boundary as the end of the stream."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_WR)
    except OSError:
        pass


def go_dial_error(e, target):
    """A connection error as Go's dialer words it."""
    if isinstance(e, ConnectionRefusedError):
        return f"dial tcp {target}: connect: connection refused"
    if isinstance(e, (socket.timeout, TimeoutError)):
        return f"dial tcp {target}: i/o timeout"
    return str(e)


# ---- HTTP --------------------------------------------------------------------------------------

def verb_of(method, path, query):
    """The Kubernetes verb of a request, for the log and the counters."""
    parts = [p for p in path.split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else []
    if not rest:
        return "discovery"
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]
    if method == "GET":
        return "get" if len(rest) > 1 else ("watch" if query.get("watch") in ("true", "1") else "list")
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 120  # idle keep-alive connections

    def version_string(self):
        return "fake-kube-apiserver"

    # ---- connection ----

    def setup(self):
        self.tls_failed = False
        if self.server.tls:
            try:
                self.request.settimeout(10)
                self.request.do_handshake()
            except (ssl.SSLError, OSError) as e:
                self.tls_failed = True
                with self.server.app.log.lock:
                    self.server.app.log.tls_failures += 1
                self.server.app.debug(f"TLS handshake failed: {e}")
        super().setup()
        self.server.track(self.request, True)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        self.server.track(self.request, False)

    def handle(self):
        if not self.tls_failed:
            try:
                super().handle()
            except (OSError, ssl.SSLError):
                pass

    def log_message(self, fmt, *args):
        self.server.app.debug(fmt % args)

    # ---- request ----

    def do_GET(self):
        self.dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def user(self):
        """The client certificate's user (CN, O's), else the bearer token's (the tests'
        static tokens, service account tokens issued here), else None (401)."""
        if not self.server.tls:
            return CONTROL_USER
        cert = self.request.getpeercert()
        if not cert:
            auth = self.headers.get("Authorization") or ""
            if auth[:7].lower() != "bearer " or not auth[7:].strip():
                return None
            return self.server.app.api.authenticate_token(auth[7:].strip())[0]
        name, groups = "", []
        for rdn in cert.get("subject", ()):
            for k, v in rdn:
                if k == "commonName":
                    name = v
                elif k == "organizationName":
                    groups.append(v)
        return User(name, groups + ["system:authenticated"])

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
                if len(out) > MAX_BODY:
                    raise ApiError(413, "RequestEntityTooLarge", "the request is too large")
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise ApiError(413, "RequestEntityTooLarge", "the request is too large")
        return self.rfile.read(n) if n else b""

    def dispatch(self):
        app = self.server.app
        start = time.time()
        url = urllib.parse.urlsplit(self.path)
        multi = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        query = {k: v[-1] for k, v in multi.items()}
        user = self.user()
        entry = {"time": start, "method": self.command, "path": self.path, "user": user.name if user else "",
                 "verb": verb_of(self.command, url.path, query), "status": 0, "duration_ms": 0, "fault": None}
        try:
            body = self.read_body()
        except ApiError as e:
            self.respond(Response(e.code, e.status()), entry, start)
            return
        except (OSError, ValueError):
            self.close_connection = True
            return
        if not self.server.tls and url.path.startswith("/control/"):
            self.respond(app.control(self.command, url.path, query, body), None, start)
            return
        if user is None:  # no certificate, no good token: 401 (as with --anonymous-auth=false)
            self.respond(Response(401, ApiError(401, "Unauthorized", "Unauthorized").status()), entry, start)
            return
        fail = None
        if self.server.tls:
            if app.faults.slow_ms:
                time.sleep(app.faults.slow_ms / 1000)
                entry["fault"] = "slow"
            fail = app.faults.take_failure(url.path)
            if fail and not fail[1]:
                entry["fault"] = f"fail:{fail[0]}"
                self.respond(fault_response(fail[0]), entry, start)
                return
        try:
            result = app.api.handle(self.command, url.path, query, self.headers, body, user, multi)
        except ApiError as e:
            result = Response(e.code, e.status())
        except Exception:
            with app.log.lock:
                app.log.internal_errors += 1
            sys.stderr.write(f"fake-apiserver: internal error on {self.command} {self.path}:\n{traceback.format_exc()}")
            result = Response(500, ApiError(500, "InternalError", "fake apiserver bug: " + traceback.format_exc(limit=1)).status())
        if fail:
            entry["fault"] = f"fail-after:{fail[0]}"
            result = fault_response(fail[0])
        if isinstance(result, WatchRequest):
            self.stream(result, entry, start, user)
        elif isinstance(result, NodeProxy):
            self.proxy(result, entry, start, body)
        else:
            self.respond(result, entry, start)

    def respond(self, r, entry, start):
        data = r.body if isinstance(r.body, bytes) else (
            r.body.encode() if isinstance(r.body, str) else json.dumps(r.body).encode())
        ctype = "text/plain; charset=utf-8" if isinstance(r.body, str) else "application/json"
        if entry is not None and self.server.tls:
            entry["status"] = r.code
            entry["duration_ms"] = round((time.time() - start) * 1000, 3)
            self.server.app.log.add(entry)
        try:
            self.send_response(r.code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-cache, private")
            for k, v in r.headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def stream(self, wr, entry, start, user):
        app = self.server.app
        w = wr.watch
        w.path = self.path
        try:
            app.store.open_watch(w, wr.since)
            expired = None
        except ApiError as e:
            if e.code != 410:
                self.respond(Response(e.code, e.status()), entry, start)
                return
            expired = e  # as the watch cache does: HTTP 200, then one ERROR event
        if self.server.tls:
            entry["status"] = 200
            entry["watch"] = True
            app.log.add(entry)
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            if expired is not None:
                self.write_chunk(encode_event("ERROR", expired.status()))
                self.wfile.write(b"0\r\n\r\n")
                return
            deadline = time.time() + wr.timeout if wr.timeout else None
            while True:
                if deadline and time.time() >= deadline:
                    self.wfile.write(b"0\r\n\r\n")
                    return
                try:
                    kind, val = w.q.get(timeout=0.2)
                except queue.Empty:
                    if self.peer_closed():
                        return
                    continue
                if kind == "event":
                    self.write_chunk(val)
                    with app.log.lock:
                        app.log.watch_events += 1
                elif kind == "bookmark":
                    obj = {"kind": RESOURCES[w.resource].kind, "apiVersion": RESOURCES[w.resource].api_version,
                           "metadata": {"resourceVersion": str(app.store.rv)}}
                    self.write_chunk(encode_event("BOOKMARK", obj))
                elif kind == "cut":
                    self.cut(val)
                    return
                else:  # end: the stream closes cleanly, as at the apiserver's watch timeout
                    self.wfile.write(b"0\r\n\r\n")
                    return
        except (OSError, ssl.SSLError):
            pass
        finally:
            app.store.close_watch(w)
            entry["duration_ms"] = round((time.time() - start) * 1000, 3)

    def cut(self, mode):
        if mode == "clean":
            self.wfile.write(b"0\r\n\r\n")
            return
        if mode == "partial":  # half an event, then the connection drops
            data = encode_event("MODIFIED", {"kind": "Status", "apiVersion": "v1", "metadata": {}, "message": "x" * 64})
            self.wfile.write(b"%x\r\n%s" % (len(data), data[: len(data) // 2]))
        try:
            self.request.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def peer_closed(self):
        try:
            r, _, _ = select.select([self.request], [], [], 0)
            if not r:
                return False
            return self.request.recv(1) == b""
        except (OSError, ssl.SSLError, ValueError):
            return True

    # ---- the kubelet's API ----

    def proxy(self, p, entry, start, body):
        """pods/log, exec, attach, portforward: the request passed on to the pod's kubelet."""
        app = self.server.app
        self.close_connection = True
        if p.host is None:  # the log of a pod not bound yet: an empty stream
            self.respond(Response(200, ""), entry, start)
            return
        if p.upgrade and not self.is_upgrade():
            self.respond(Response(400, ApiError(400, "BadRequest", "Upgrade request required").status()), entry, start)
            return
        target = f"{p.host}:{p.port}" if ":" not in p.host else f"[{p.host}]:{p.port}"
        try:
            backend = KubeletConnection(p.host, p.port, app.kubelet_ctx)
        except (OSError, ssl.SSLError, ConnectionError) as e:
            err = go_dial_error(e, target)
            msg = f"error dialing backend: {err}" if p.upgrade else f'Get "https://{target}{p.path}": {err}'
            self.respond(Response(500, ApiError(500, "", msg).status()), entry, start)
            return
        try:
            if p.upgrade:
                self.proxy_upgrade(p, target, backend, body, entry, start)
            else:
                self.proxy_log(p, target, backend, entry, start)
        except (OSError, ssl.SSLError, ConnectionError) as e:
            app.debug(f"proxy to {target}{p.path}: {e}")
        finally:
            backend.close()
            entry["duration_ms"] = round((time.time() - start) * 1000, 3)

    def is_upgrade(self):
        connection = [t.strip().lower() for t in (self.headers.get("Connection") or "").split(",")]
        return "upgrade" in connection and bool(self.headers.get("Upgrade"))

    def log_proxied(self, entry, code):
        if entry is not None and self.server.tls:
            entry["status"] = code
            entry["proxied"] = True
            self.server.app.log.add(entry)

    def proxy_log(self, p, target, backend, entry, start):
        """The LocationStreamer: GET the kubelet's containerLogs; a 2xx body is streamed as it
        comes (each piece flushed), anything else becomes the apiserver's Status."""
        backend.watch = (self.request, self.peer_closed)
        backend.send(f"GET {p.path} HTTP/1.1\r\nHost: {target}\r\nUser-Agent: kube-apiserver (fake)\r\n\r\n".encode())
        head = backend.read_until(b"\r\n\r\n")
        code = parse_head(head)[0]
        if not 200 <= code <= 206:
            body = b""
            for piece in backend.body_chunks(head):
                body += piece
                if len(body) >= 50000:  # maxReadLength
                    body = body[:50000]
                    break
            e = backend_error_status(code, body, "pods/log", p.name)
            self.respond(Response(e.code, e.status()), entry, start)
            return
        self.log_proxied(entry, 200)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        for piece in backend.body_chunks(head):
            self.write_chunk(piece)
        self.wfile.write(b"0\r\n\r\n")

    def proxy_upgrade(self, p, target, backend, body, entry, start):
        """The UpgradeAwareHandler: the client's request (method, headers, without its
        Authorization, which the apiserver's authentication removes) to the kubelet's URL;
        the kubelet's answer head relayed as it is; a 101 then pipes bytes both ways, any
        other answer is relayed with its body and the connection closes."""
        lines = [f"{self.command} {p.path} HTTP/1.1", f"Host: {target}"]
        for k, v in self.headers.items():
            if k.lower() not in ("host", "authorization", "content-length", "transfer-encoding"):
                lines.append(f"{k}: {v}")
        forwarded = self.headers.get("X-Forwarded-For")
        if not forwarded:  # utilnet.AppendForwardedForHeader
            lines.append(f"X-Forwarded-For: {self.client_address[0]}")
        if body:
            lines.append(f"Content-Length: {len(body)}")
        backend.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        head = backend.read_until(b"\r\n\r\n")
        code = parse_head(head)[0]
        self.log_proxied(entry, code)
        self.wfile.write(head)
        if code != 101:
            chunked = parse_head(head)[2].get("transfer-encoding", "").lower() == "chunked"
            for piece in backend.body_chunks(head):
                self.write_chunk(piece) if chunked else self.wfile.write(piece)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
            return
        self.pipe(backend)

    def pipe(self, backend):
        """Bytes both ways between the client and the kubelet after a 101, in this one thread
        (an ssl socket is not safe to read and write from two threads). With mode `half`
        (default) an end of one side is passed on as a half-close of the other (close_notify
        and FIN to the kubelet, FIN to the client) and the pipe ends when both sides have
        ended; with `both` the first end closes everything, as the real UpgradeAwareHandler
        does."""
        app = self.server.app
        client, bsock = self.request, backend.sock
        client.setblocking(False)
        bsock.setblocking(False)
        to_backend = b""  # TLS records for the kubelet
        to_client = backend.buf  # plaintext for the client (what came with the 101)
        backend.buf = b""
        try:  # what the client sent with its request, read into the handler's buffer already
            while True:
                data = self.rfile.read1(65536)
                if not data:
                    break
                to_backend += self.encrypt_for(backend, data)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            pass
        client_eof = backend_fin = client_fin = False
        limit = 1 << 20
        while True:
            if client_eof and not backend_fin and not to_backend:
                if app.upgrade_close == "both":
                    return
                to_backend += backend.close_notify()
                backend_fin = "pending"
            if backend_fin == "pending" and not to_backend:
                shutdown_write(bsock)
                backend_fin = True
            if backend.eof and not to_client and not client_fin:
                if app.upgrade_close == "both":
                    return
                shutdown_write(client)
                client_fin = True
            if client_fin and backend_fin is True:
                return
            readers = [s for s, want in ((client, not client_eof and len(to_backend) < limit),
                                         (bsock, not backend.eof and len(to_client) < limit)) if want]
            writers = [s for s, data in ((client, to_client), (bsock, to_backend)) if data]
            if not readers and not writers:
                return
            ready_now = client in readers and client.pending()
            r, w, _ = select.select(readers, writers, [], 0 if ready_now else None)
            try:
                if client in r or ready_now:
                    try:
                        data = client.recv(65536)
                    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                        data = None
                    if data == b"":
                        client_eof = True
                    elif data:
                        to_backend += self.encrypt_for(backend, data)
                if bsock in r:
                    raw = bsock.recv(65536)
                    backend.incoming.write(raw) if raw else backend.incoming.write_eof()
                    to_client += backend.decrypt()
                    to_backend += backend.outgoing.read()
                if client in w:
                    try:
                        n = client.send(to_client[:16384])
                        to_client = to_client[n:]
                    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                        pass
                if bsock in w:
                    try:
                        n = bsock.send(to_backend)
                        to_backend = to_backend[n:]
                    except BlockingIOError:
                        pass
            except (OSError, ssl.SSLError) as e:  # a reset: both go
                app.debug(f"upgraded connection: {e}")
                return

    @staticmethod
    def encrypt_for(backend, data):
        backend.tls.write(data)
        return backend.outgoing.read()


def fault_response(code):
    reason, msg = FAULT_STATUS.get(code, ("InternalError", f"injected HTTP {code}"))
    headers = {"Retry-After": "1"} if code in (429, 503) else {}
    return Response(code, ApiError(code, reason, msg).status(), headers)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, app, ctx):
        self.app = app
        self.ctx = ctx
        self.tls = ctx is not None
        self.conns_lock = threading.Lock()
        self.conns = set()
        super().__init__(addr, Handler)

    def get_request(self):
        sock, addr = self.socket.accept()
        if self.ctx is None:
            return sock, addr
        # The handshake runs in the request's own thread (Handler.setup), never in the accept loop.
        return self.ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request, client_address):
        self.app.debug("connection error: " + traceback.format_exc(limit=2))

    def track(self, sock, add):
        with self.conns_lock:
            (self.conns.add if add else self.conns.discard)(sock)

    def drop_connections(self):
        with self.conns_lock:
            conns = list(self.conns)
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class App:
    def __init__(self, args):
        self.args = args
        self.store = Store(args.watch_window)
        with open(os.path.join(args.certs, "ca.crt")) as f:
            ca_pem = f.read()
        self.api = Api(self.store, k8s.Schemas(args.kube_version), args.kube_version, issuer=Issuer(args.certs),
                       ca_pem=ca_pem, service_account_admission=args.service_account_admission,
                       extend_token_expiration=args.extend_token_expiration,
                       max_token_seconds=args.max_token_seconds, authority=csr.Authority(args.certs))
        self.faults = Faults()
        self.log = Log()
        self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ctx.load_cert_chain(os.path.join(args.certs, "server.crt"), os.path.join(args.certs, "server.key"))
        self.ctx.load_verify_locations(os.path.join(args.certs, "ca.crt"))
        # A certificate is optional (bearer tokens); one that is there must be the CA's, or
        # the handshake fails.
        self.ctx.verify_mode = ssl.CERT_OPTIONAL
        # A bare FIN (no close_notify) is an end of stream, not a fatal error that would
        # answer with an alert and kill the way back of a half-closed upgraded connection.
        self.ctx.options |= ssl.OP_IGNORE_UNEXPECTED_EOF
        # The apiserver's client to kubelets: kubeadm's apiserver-kubelet-client certificate,
        # the kubelet's certificate not verified (no --kubelet-certificate-authority), HTTP/1.1.
        self.kubelet_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.kubelet_ctx.check_hostname = False
        self.kubelet_ctx.verify_mode = ssl.CERT_NONE
        self.kubelet_ctx.load_cert_chain(os.path.join(args.certs, "apiserver-kubelet-client.crt"),
                                         os.path.join(args.certs, "apiserver-kubelet-client.key"))
        self.kubelet_ctx.set_alpn_protocols(["http/1.1"])
        self.kubelet_ctx.options |= ssl.OP_IGNORE_UNEXPECTED_EOF
        self.upgrade_close = "half"  # how an upgraded connection's end passes (Handler.pipe)
        self.tls_lock = threading.Lock()
        self.tls_server = None
        self.port = args.port
        self.down = False

    def debug(self, msg):
        if self.args.verbose:
            sys.stderr.write(f"fake-apiserver: {msg}\n")

    def start_tls(self):
        with self.tls_lock:
            self.tls_server = Server(("127.0.0.1", self.port), self, self.ctx)
            self.port = self.tls_server.server_address[1]
            threading.Thread(target=self.tls_server.serve_forever, kwargs={"poll_interval": 0.05},
                             name="tls", daemon=True).start()
            self.down = False

    def stop_tls(self):
        """Down: the port refuses connections and every open one (watches too) drops."""
        with self.tls_lock:
            if self.tls_server is None:
                return
            srv, self.tls_server = self.tls_server, None
            self.down = True
            srv.shutdown()
            srv.server_close()
            self.store.signal_watches(("cut", "abrupt"))
            srv.drop_connections()

    # ---- the control port ----

    def issue_cert(self, params):
        """/control/issue-cert: a key and a certificate of the cluster CA with any validity."""
        groups = params.get("groups") or []
        groups = groups.split(",") if isinstance(groups, str) else list(groups)
        usages = params.get("usages") or ["digital signature", "client auth"]
        usages = usages.split(",") if isinstance(usages, str) else list(usages)
        times = [k8s.parse_time(params.get(k)) for k in ("not_before", "not_after")]
        if not params.get("cn") or None in times:
            return Response(400, {"error": "cn, not_before and not_after (RFC 3339) are required"})
        try:
            cert, key = self.api.authority.issue(params["cn"], [g for g in groups if g], int(times[0].timestamp()),
                                                 int(times[1].timestamp()), usages)
        except csr.CsrError as e:
            return Response(400, {"error": str(e)})
        return Response(200, {"cert": cert.decode(), "key": key.decode()})

    def control(self, method, path, query, body):
        try:
            params = dict(query)
            if body:
                params.update(json.loads(body))
        except ValueError:
            return Response(400, {"error": "the body must be a JSON object"})
        op = path[len("/control/"):]
        if (method, op) == ("POST", "down"):
            self.stop_tls()
            return Response(200, {"down": True})
        if (method, op) == ("POST", "up"):
            if self.tls_server is None:
                self.start_tls()
            return Response(200, {"down": False, "port": self.port})
        if (method, op) == ("POST", "slow"):
            self.faults.slow_ms = int(params.get("ms", 0))
            return Response(200, {"slow_ms": self.faults.slow_ms})
        if (method, op) == ("POST", "fail"):
            with self.faults.lock:
                self.faults.fail_count = int(params.get("count", 1))
                self.faults.fail_code = int(params.get("code", 500))
                self.faults.fail_match = params.get("path", "")
                self.faults.fail_after = str(params.get("after", "false")).lower() in ("true", "1")
            return Response(200, {"fail_count": self.faults.fail_count})
        if (method, op) == ("POST", "cut-watches"):
            mode = params.get("mode", "abrupt")
            if mode not in ("abrupt", "clean", "partial"):
                return Response(400, {"error": "mode: abrupt, clean or partial"})
            return Response(200, {"cut": self.store.signal_watches(("cut", mode))})
        if (method, op) == ("POST", "bookmark"):
            return Response(200, {"sent": self.store.signal_watches(("bookmark", None), only_bookmarks=True)})
        if (method, op) == ("POST", "compact"):
            return Response(200, {"compacted": str(self.store.compact())})
        if (method, op) == ("POST", "reset-faults"):
            with self.faults.lock:
                self.faults.slow_ms = self.faults.fail_count = 0
            if self.tls_server is None:
                self.start_tls()
            return Response(200, {})
        if (method, op) == ("GET", "requests"):
            since = int(params.get("since", 0))
            with self.log.lock:
                return Response(200, {"requests": self.log.entries[since:]})
        if (method, op) == ("GET", "counters"):
            counters = self.log.counters(self.store)
            with self.api.auth_lock:
                for kind, key in (("TokenReview", "tokenreviews"), ("SubjectAccessReview", "subjectaccessreviews")):
                    counters[key] = sum(1 for r in self.api.reviews if r["kind"] == kind)
            with self.api.csr_lock:
                counters.update(self.api.csr_counts)
            counters["controller_errors"] = len(self.api.controller_errors)
            return Response(200, counters)
        if (method, op) == ("GET", "reviews"):
            with self.api.auth_lock:
                return Response(200, {"reviews": list(self.api.reviews)})
        if (method, op) == ("POST", "static-token"):
            if not params.get("token") or not params.get("user"):
                return Response(400, {"error": "token and user are required"})
            groups = params.get("groups") or []
            groups = groups.split(",") if isinstance(groups, str) else list(groups)
            who = User(params["user"], [g for g in groups if g] + ["system:authenticated"], uid=params.get("uid", ""))
            with self.api.auth_lock:
                self.api.static_tokens[params["token"]] = who
            return Response(200, {"user": who.name, "groups": who.groups, "uid": who.uid})
        if (method, op) in (("POST", "allow"), ("POST", "deny")):
            try:
                return Response(200, self.api.add_rule(params, op))
            except ValueError as e:
                return Response(400, {"error": str(e)})
        if (method, op) == ("POST", "reset-rules"):
            with self.api.auth_lock:  # back to kubeadm's own bindings
                self.api.rules[:] = [dict(r, effect="allow") for r in KUBEADM_NODE_RULES]
            return Response(200, {})
        if (method, op) == ("POST", "csr-approver"):
            on = str(params.get("on", "true")).lower()
            if on not in ("true", "false"):
                return Response(400, {"error": "on: true or false"})
            self.api.approver_on = on == "true"
            if self.api.approver_on:  # it looks at every CSR again, as after a restart
                for o in self.store.list(CSRS, "")[0]:
                    self.api.csr_queue.put(o["metadata"]["name"])
            return Response(200, {"on": self.api.approver_on})
        if (method, op) == ("POST", "signing-duration"):
            try:
                seconds = int(params.get("seconds"))
                if seconds <= 0:
                    raise ValueError
            except (TypeError, ValueError):
                return Response(400, {"error": "seconds: a positive number of seconds"})
            with self.api.csr_lock:
                self.api.signing_seconds = seconds
            return Response(200, {"seconds": seconds})
        if (method, op) == ("POST", "issue-cert"):
            return self.issue_cert(params)
        if (method, op) == ("GET", "csrs"):
            return Response(200, {"csrs": self.api.csr_report()})
        if (method, op) == ("GET", "controller-errors"):
            return Response(200, {"errors": list(self.api.controller_errors)})
        if (method, op) == ("POST", "upgrade-close"):
            if params.get("mode") not in ("half", "both"):
                return Response(400, {"error": "mode: half or both"})
            self.upgrade_close = params["mode"]
            return Response(200, {"mode": self.upgrade_close})
        if (method, op) == ("GET", "objects"):
            return Response(200, self.store.dump())
        if (method, op) == ("GET", "tokens"):
            with self.api.issuer.lock:
                return Response(200, {"tokens": list(self.api.issuer.issued)})
        if (method, op) == ("GET", "validation-failures"):
            with self.api.failures_lock:
                return Response(200, {"failures": list(self.api.validation_failures)})
        if (method, op) == ("GET", "watches"):
            with self.store.lock:
                return Response(200, {"watches": [{"user": w.user, "path": w.path, "resource": w.resource}
                                                  for w in self.store.watches]})
        return Response(404, {"error": f"no control operation {method} {path}"})


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--certs", required=True, help="directory with ca.crt, server.crt, server.key (certs.sh)")
    p.add_argument("--port", type=int, default=0, help="TLS port on 127.0.0.1 (0: any free one)")
    p.add_argument("--control-port", type=int, default=0, help="plain-HTTP control port on 127.0.0.1")
    p.add_argument("--ready-file", help="written (atomically) with the ports as JSON once serving")
    p.add_argument("--kube-version", default="1.30", help="the Kubernetes version whose schemas validate objects")
    p.add_argument("--watch-window", type=int, default=1000, help="changes kept for watches to resume from")
    p.add_argument("--service-account-admission", action="store_true",
                   help="the ServiceAccount admission plugin: default service account and kube-api-access-* volume")
    p.add_argument("--max-token-seconds", type=int, default=0,
                   help="caps every token's lifetime (a test-only --service-account-max-token-expiration)")
    p.add_argument("--extend-token-expiration", action="store_true",
                   help="as --service-account-extend-token-expiration: pod-bound 3607 s tokens are valid a year")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()

    app = App(args)
    app.start_tls()
    threading.Thread(target=app.api.run_controllers, args=(threading.Event(),), name="controllers", daemon=True).start()
    control = Server(("127.0.0.1", args.control_port), app, None)
    threading.Thread(target=control.serve_forever, kwargs={"poll_interval": 0.05}, name="control", daemon=True).start()
    info = {"port": app.port, "control_port": control.server_address[1], "pid": os.getpid()}
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(info, f)
        os.rename(tmp, args.ready_file)
    print(f"fake-apiserver: ready port={info['port']} control_port={info['control_port']} pid={info['pid']}", flush=True)

    # Exit with the process that started us (a test binary killed mid-test leaves no server).
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.5)


if __name__ == "__main__":
    main()
