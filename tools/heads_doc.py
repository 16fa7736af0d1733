"""The heads study's write-up from its data (issue 31). docs/heads-study.md is
rendered from docs/heads-study/heads-study.md.in, whose numbers are
placeholders into the reports of the committed grids, so every number in the
doc is one the data give; `check` rebuilds each report from the committed
records (no checkpoint needed) and the doc from the template, and fails on any
difference.

    /usr/bin/python3 tools/heads_doc.py render   # the reports, then docs/heads-study.md
    /usr/bin/python3 tools/heads_doc.py check    # CI: exit 1 with a diff when anything is stale

A placeholder is {{GRID:PATH}} or {{GRID:PATH|FORMAT}}. GRID is a study
directory under docs/heads-study (lm, translate-fr); PATH a dotted path into its
report's JSON (<program>-heads.json, written by `heads_study.py report`), where
a list is indexed by position ([0]) or by its one element whose fields match
([H=4,G=4,causal=true]: values read as JSON, bare words as strings; a dotted
key reaches into a field, [b.H=8,b.G=2]); FORMAT a
Python format spec (.4f, +.3f, d). Without FORMAT a number prints as
JSON writes it and a string as it is.
"""
from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "docs" / "heads-study"
TEMPLATE = STUDY / "heads-study.md.in"
DOC = ROOT / "docs" / "heads-study.md"
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_-]+):([^}|]+?)\s*(?:\|\s*([^}]*?)\s*)?\}\}")
SEGMENT = re.compile(r"([^.\[\]]+)((?:\[[^\]]*\])*)")


def _value(text):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _field(x, key):
    """x's value at a dotted key (b.H: x["b"]["H"]), or None."""
    for part in key.split("."):
        if not isinstance(x, dict) or part not in x:
            return None
        x = x[part]
    return x


def lookup(data, path, where="heads_doc"):
    """The value at a dotted PATH (module docstring) in `data`; a missing key, an
    index out of range or a selection matching other than one element is an
    error naming `where` and the segment."""
    seen = []
    for name, selectors in SEGMENT.findall(path):
        seen.append(name + selectors)
        if not isinstance(data, dict) or name not in data:
            keys = ", ".join(sorted(data)) if isinstance(data, dict) else type(data).__name__
            raise KeyError(f"{where}: {'.'.join(seen)}: no key {name!r} (there: {keys})")
        data = data[name]
        for sel in re.findall(r"\[([^\]]*)\]", selectors):
            if not isinstance(data, list):
                raise KeyError(f"{where}: {'.'.join(seen)}: [{sel}] selects from a list, got {type(data).__name__}")
            if re.fullmatch(r"-?\d+", sel):
                i = int(sel)
                if not -len(data) <= i < len(data):
                    raise KeyError(f"{where}: {'.'.join(seen)}: index {i} out of a list of {len(data)}")
                data = data[i]
                continue
            want = {}
            for pair in sel.split(","):
                k, sep, v = pair.partition("=")
                if not sep:
                    raise KeyError(f"{where}: {'.'.join(seen)}: expected [KEY=VALUE,...] or [INDEX], got [{sel}]")
                want[k.strip()] = _value(v.strip())
            hits = [x for x in data if isinstance(x, dict) and all(_field(x, k) == v for k, v in want.items())]
            if len(hits) != 1:
                raise KeyError(f"{where}: {'.'.join(seen)}: [{sel}] matches {len(hits)} of {len(data)} elements, "
                               "expected exactly one")
            data = hits[0]
    return data


def render(template, report_of):
    """The template with each placeholder replaced; report_of(grid) gives a grid's
    report dict. Errors name the template line."""
    out = []
    for n, line in enumerate(template.splitlines(keepends=True), 1):
        def one(m):
            grid, path, spec = m.group(1), m.group(2).strip(), m.group(3)
            where = f"heads-study.md.in:{n}: {{{{{grid}:{path}}}}}"
            value = lookup(report_of(grid), path, where)
            if spec:
                try:
                    return format(value, spec)
                except (TypeError, ValueError) as e:
                    raise ValueError(f"{where}: format {spec!r} does not apply to {value!r}: {e}") from None
            if isinstance(value, (dict, list)):
                raise ValueError(f"{where}: names a {type(value).__name__}, not a value; hint: a longer path")
            return value if isinstance(value, str) else json.dumps(value)
        out.append(PLACEHOLDER.sub(one, line))
    return "".join(out)


def grids_of(template):
    return sorted({m.group(1) for m in PLACEHOLDER.finditer(template)})


def close(a, b, rel=1e-9):
    """JSON values equal, floats to a relative tolerance (numpy's sums may take
    another vector path on another CPU)."""
    if isinstance(a, float) or isinstance(b, float):
        return (isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool)
                and (a == b or math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)
                     or (math.isnan(a) and math.isnan(b))))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, rel) for x, y in zip(a, b))
    return a == b


def diff(old, new, name):
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        f"{name} (committed)", f"{name} (from the data)", n=1))


def check(template_path=TEMPLATE, doc_path=DOC, study=STUDY):
    """The problems found: each grid's committed report against the report its
    committed records give, and the committed doc against the template rendered
    from those reports. An empty list: everything matches."""
    import heads_report
    from heads_grids import saved_grid
    template = Path(template_path).read_text(encoding="utf-8")
    problems, reports = [], {}
    for grid in grids_of(template):
        out = Path(study) / grid
        res, md = heads_report.build_report(out)
        res = json.loads(json.dumps(res))
        md_path, json_path = heads_report.report_paths(saved_grid(out), out)
        if not json_path.exists():
            problems.append(f"{json_path} missing; hint: tools/heads_doc.py render")
        elif not close(json.loads(json_path.read_text()), res):
            problems.append(f"{json_path} is not what the committed records give; hint: tools/heads_doc.py render")
        if md_path.exists() and md_path.read_text() != md:
            problems.append(diff(md_path.read_text(), md, str(md_path)))
        reports[grid] = res
    try:
        doc = render(template, reports.__getitem__)
    except (KeyError, ValueError) as e:   # a placeholder the reports cannot fill
        return problems + [str(e).strip("'\"")]
    committed = Path(doc_path).read_text(encoding="utf-8") if Path(doc_path).exists() else ""
    if committed != doc:
        problems.append(diff(committed, doc, str(doc_path)))
    return problems


def cmd_render(args):
    import heads_report
    from heads_grids import saved_grid
    template = Path(args.template).read_text(encoding="utf-8")
    reports = {}
    for grid in grids_of(template):
        out = Path(args.study) / grid
        res, md = heads_report.build_report(out)
        md_path, json_path = heads_report.report_paths(saved_grid(out), out)
        md_path.write_text(md)
        json_path.write_text(json.dumps(res, indent=1) + "\n")
        reports[grid] = json.loads(json.dumps(res))
        print(f"wrote {md_path} and {json_path}")
        try:
            import heads_plots
            print(f"drew {', '.join(str(p) for p in heads_plots.draw(reports[grid], out))}")
        except ImportError as e:
            print(f"heads_doc: the figures are not redrawn: {e}; hint: scripts/setup --with-torch "
                  "(python3-matplotlib)", file=sys.stderr)
    Path(args.doc).write_text(render(template, reports.__getitem__), encoding="utf-8")
    print(f"wrote {args.doc}")
    return 0


def cmd_check(args):
    problems = check(args.template, args.doc, args.study)
    for p in problems:
        print(p)
    print(f"heads_doc check: {'ok' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("render", "check"):
        p = sub.add_parser(name)
        p.add_argument("--template", default=str(TEMPLATE))
        p.add_argument("--doc", default=str(DOC))
        p.add_argument("--study", default=str(STUDY), help="the directory of the grids (default docs/heads-study)")
    args = ap.parse_args(argv)
    try:
        import numpy  # noqa: F401
        import scipy  # noqa: F401
    except ImportError as e:
        print(f"heads_doc: needs Debian's python3-numpy and python3-scipy (scripts/setup): {e}", file=sys.stderr)
        return 77
    return {"render": cmd_render, "check": cmd_check}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
