"""The fake kube-apiserver's storage: objects in memory under one global, increasing
resourceVersion (as etcd's revision), a bounded history of changes for watches to resume
from, and the open watches themselves."""

import collections
import copy
import json
import queue
import threading

from k8s import ApiError, selected


class Watch:
    """One open watch: the events for its resource, namespace and selectors go into `q`
    as ("event", bytes), ("bookmark", rv), ("cut", mode) or ("end", None)."""

    def __init__(self, resource, namespace, fields, labels, bookmarks, user, path):
        self.resource = resource
        self.namespace = namespace
        self.fields = fields
        self.labels = labels
        self.bookmarks = bookmarks
        self.user = user
        self.path = path
        self.min_rv = 0
        self.q = queue.Queue()

    def matches(self, obj):
        if obj is None:
            return False
        if self.namespace and (obj.get("metadata") or {}).get("namespace") != self.namespace:
            return False
        return selected(obj, self.fields, self.labels)

    def offer(self, rv, etype, old, new):
        """Queues what this watch sees of one change: an object that starts matching its
        selector is ADDED, one that stops matching is DELETED, as the real watch cache does."""
        if rv <= self.min_rv:
            return
        was, now = self.matches(old), self.matches(new)
        if etype == "DELETED":
            out = ("DELETED", old) if was else None
        elif was and now:
            out = ("MODIFIED", new)
        elif now:
            out = ("ADDED", new)
        elif was:
            out = ("DELETED", new)
        else:
            out = None
        if out:
            self.q.put(("event", encode_event(*out)))


def encode_event(etype, obj):
    return (json.dumps({"type": etype, "object": obj}, separators=(",", ":")) + "\n").encode()


class Store:
    def __init__(self, window):
        self.lock = threading.RLock()
        self.rv = 0
        self.objects = {}  # (resource, namespace, name) -> object
        self.history = collections.deque()  # (rv, resource, type, old, new)
        self.window = window
        # Watches may start from any resourceVersion >= this (older ones get 410 Gone).
        self.oldest = 0
        self.watches = set()

    def get(self, resource, namespace, name):
        with self.lock:
            o = self.objects.get((resource, namespace or "", name))
            return copy.deepcopy(o) if o is not None else None

    def list(self, resource, namespace, fields=(), labels=()):
        """(items, resourceVersion) of the objects of `resource` (in `namespace`, or all)."""
        with self.lock:
            items = [
                copy.deepcopy(o)
                for (r, ns, _), o in sorted(self.objects.items())
                if r == resource and (not namespace or ns == namespace) and selected(o, fields, labels)
            ]
            return items, str(self.rv)

    def write(self, resource, obj, etype):
        """Stores `obj` (ADDED or MODIFIED) under a new resourceVersion; returns a copy."""
        with self.lock:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            key = (resource, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
            old = self.objects.get(key)
            self.objects[key] = copy.deepcopy(obj)
            self._record(resource, etype, old, obj)
            return copy.deepcopy(obj)

    def remove(self, resource, namespace, name):
        with self.lock:
            old = self.objects.pop((resource, namespace or "", name), None)
            if old is None:
                return None
            self.rv += 1
            # A deleted object carries the resourceVersion of its deletion (as from etcd).
            old["metadata"]["resourceVersion"] = str(self.rv)
            self._record(resource, "DELETED", old, None)
            return copy.deepcopy(old)

    def _record(self, resource, etype, old, new):
        change = (self.rv, resource, etype, copy.deepcopy(old), copy.deepcopy(new))
        self.history.append(change)
        while len(self.history) > self.window:
            self.oldest = self.history.popleft()[0]
        for w in list(self.watches):
            if w.resource == resource:
                w.offer(*change[:1], *change[2:])

    def compact(self):
        """Forgets the change history (as an etcd compaction): every older resourceVersion
        is now too old to watch from."""
        with self.lock:
            self.history.clear()
            self.oldest = self.rv
            return self.rv

    def open_watch(self, w, since):
        """Registers `w` from resourceVersion `since` ("" or "0": the current objects as
        ADDED first). Raises 410 Expired when `since` is older than the retained history."""
        with self.lock:
            if since in ("", "0", None):
                items, _ = self.list(w.resource, w.namespace, w.fields, w.labels)
                for o in items:
                    w.q.put(("event", encode_event("ADDED", o)))
                w.min_rv = self.rv
            else:
                try:
                    rv = int(since)
                except ValueError:
                    raise ApiError(400, "BadRequest", f'invalid resource version "{since}"')
                if rv < self.oldest:
                    raise ApiError(410, "Expired", f"too old resource version: {rv} ({self.oldest + 1})")
                for change_rv, resource, etype, old, new in self.history:
                    if resource == w.resource and change_rv > rv:
                        w.offer(change_rv, etype, old, new)
                w.min_rv = max(rv, self.rv)
            self.watches.add(w)

    def close_watch(self, w):
        with self.lock:
            self.watches.discard(w)

    def signal_watches(self, item, only_bookmarks=False):
        with self.lock:
            for w in list(self.watches):
                if not only_bookmarks or w.bookmarks:
                    w.q.put(item)
            return len(self.watches)

    def dump(self):
        with self.lock:
            return {"resourceVersion": str(self.rv), "objects": [copy.deepcopy(o) for _, o in sorted(self.objects.items())]}
