"""Validates a /stats/summary body (stdin) against summary.schema.json (beside this file):
prints each violation as `path: message` and exits 1 if there is any."""
import json
import os
import sys

import jsonschema

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "summary.schema.json")) as f:
    schema = json.load(f)
jsonschema.Draft202012Validator.check_schema(schema)
errors = list(jsonschema.Draft202012Validator(schema).iter_errors(json.load(sys.stdin)))
for e in errors:
    print("%s: %s" % ("/".join(str(p) for p in e.absolute_path) or "(root)", e.message))
sys.exit(1 if errors else 0)
