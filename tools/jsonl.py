"""JSON-lines files as the plotting tools read them: one record per line."""
import json
import sys


def read_jsonl(path, program):
    """The records of `path` in order (blank lines skipped); a line that is not JSON
    exits with "<program>: <path>:<line>: not JSON (...)"."""
    records = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"{program}: {path}:{lineno}: not JSON ({e.msg})")
    return records
