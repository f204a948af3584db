"""Decodes kubelet's /metrics/resource page as metrics-server does
(sigs.k8s.io/metrics-server, pkg/scraper/client/resource/decode.go), for the stats tests.

Reads the page on stdin; argv[1] is the scrape time in milliseconds (the timestamp of a
sample that has none, as metrics-server's default time). Prints one JSON object:

  node:      {"cpu_ns", "memory", "timestamp_ms"}, or null when metrics-server drops the node
             (no timestamp, or its CPU or memory sample missing or 0);
  pods:      {"namespace/name": {container: {"cpu_ns", "memory", "timestamp_ms", "start_ns"}}}
             of the pods metrics-server keeps (one whose container lacks CPU or memory, or
             has either at 0, is dropped whole);
  dropped:   the pods it dropped;
  pod_series: the pod_* samples, which metrics-server does not read (for comparing with
             the pod's cgroup): {"namespace/name": {"cpu_ns", "memory", "timestamp_ms"}};
  scrape_error: resource_scrape_error's value;
  types:     {family: type}, from the # TYPE lines.

The text format is parsed strictly (as Prometheus' text parser): a line that is not a
comment, a blank line or `name{labels} value [timestamp]` is an error, as is a sample of a
family without a # TYPE line before it, or the same series twice. Errors go to stderr and
exit 1.
"""
import json
import re
import sys

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def fail(lineno, line, why):
    sys.stderr.write("line %d: %s: %r\n" % (lineno, why, line))
    sys.exit(1)


def parse_labels(text, lineno, line):
    """`{a="x",b="y"}` at the start of text: the labels and the rest of the text."""
    labels = {}
    i = 1
    while True:
        if text[i] == "}":
            return labels, text[i + 1:]
        m = LABEL.match(text, i)
        if not m or text[m.end():m.end() + 2] != '="':
            fail(lineno, line, "bad label")
        name, i = m.group(0), m.end() + 2
        value = []
        while text[i] != '"':
            if text[i] == "\\":
                esc = text[i + 1]
                if esc not in '\\"n':
                    fail(lineno, line, "bad escape in a label value")
                value.append("\n" if esc == "n" else esc)
                i += 2
            else:
                value.append(text[i])
                i += 1
        if name in labels:
            fail(lineno, line, "label %s twice" % name)
        labels[name] = "".join(value)
        i += 1
        if text[i] == ",":
            i += 1
        elif text[i] != "}":
            fail(lineno, line, "expected , or }")


def parse_value(s, lineno, line):
    try:
        return float(s)
    except ValueError:
        fail(lineno, line, "bad value %r" % s)


def main():
    default_ms = int(sys.argv[1])
    types, seen = {}, set()
    node = {"cpu_ns": 0, "memory": 0, "timestamp_ms": 0}
    containers, pod_series, scrape_error = {}, {}, None
    for lineno, line in enumerate(sys.stdin.read().split("\n"), 1):
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] == "TYPE":
                if parts[3] not in ("counter", "gauge", "histogram", "summary", "untyped"):
                    fail(lineno, line, "bad type")
                types[parts[2]] = parts[3]
            elif len(parts) >= 3 and parts[1] == "HELP":
                pass
            continue
        m = NAME.match(line)
        if not m:
            fail(lineno, line, "no metric name")
        name, rest = m.group(0), line[m.end():]
        labels = {}
        try:
            if rest.startswith("{"):
                labels, rest = parse_labels(rest, lineno, line)
        except IndexError:
            fail(lineno, line, "unterminated labels")
        fields = rest.split(" ")
        if fields[0] != "" or len(fields) not in (2, 3):
            fail(lineno, line, "expected ' value [timestamp]'")
        value = parse_value(fields[1], lineno, line)
        ts = int(fields[2]) if len(fields) == 3 else default_ms
        if name not in types:
            fail(lineno, line, "sample before its family's # TYPE line")
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            fail(lineno, line, "the same series twice")
        seen.add(key)

        if name == "node_cpu_usage_seconds_total":
            node["cpu_ns"], node["timestamp_ms"] = int(value * 1e9), ts
        elif name == "node_memory_working_set_bytes":
            node["memory"], node["timestamp_ms"] = int(value), ts
        elif name.startswith("container_") and name in (
            "container_cpu_usage_seconds_total",
            "container_memory_working_set_bytes",
            "container_start_time_seconds",
        ):
            pod = "%s/%s" % (labels.get("namespace", ""), labels.get("pod", ""))
            c = containers.setdefault(pod, {}).setdefault(
                labels.get("container", ""), {"cpu_ns": 0, "memory": 0, "timestamp_ms": 0, "start_ns": 0}
            )
            if name == "container_cpu_usage_seconds_total":
                c["cpu_ns"], c["timestamp_ms"] = int(value * 1e9), ts
            elif name == "container_memory_working_set_bytes":
                c["memory"], c["timestamp_ms"] = int(value), ts
            else:
                # The start time sets no timestamp, as metrics-server's.
                c["start_ns"] = int(value * 1e9)
        elif name in ("pod_cpu_usage_seconds_total", "pod_memory_working_set_bytes"):
            pod = "%s/%s" % (labels.get("namespace", ""), labels.get("pod", ""))
            p = pod_series.setdefault(pod, {})
            p["cpu_ns" if "cpu" in name else "memory"] = int(value * 1e9) if "cpu" in name else int(value)
            p["timestamp_ms"] = ts
        elif name == "resource_scrape_error":
            scrape_error = value

    kept_node = node if node["timestamp_ms"] and node["cpu_ns"] and node["memory"] else None
    pods, dropped = {}, []
    for pod, cs in containers.items():
        if any(c["cpu_ns"] == 0 or c["memory"] == 0 for c in cs.values()):
            dropped.append(pod)
        else:
            pods[pod] = cs
    json.dump(
        {
            "node": kept_node,
            "pods": pods,
            "dropped": sorted(dropped),
            "pod_series": pod_series,
            "scrape_error": scrape_error,
            "types": types,
        },
        sys.stdout,
        sort_keys=True,
    )


main()
