#!/usr/bin/env python3
"""Doxygen INPUT_FILTER: the headers' plain // comments become doc comments.

attograd's headers document themselves with ordinary // comments, and the API
reference (docs/Doxyfile, scripts/docs) is made from them, so there is one
copy of the docs. This filter prints FILE with, at namespace and class scope:
  - the comment block that opens the file (before #pragma once) -> the file's
    page (/// @file), or the front page for attograd/attograd.h;
  - a // block directly above a declaration (no blank line between) -> ///,
    and the same text for the overloads (same name, or operators) that
    follow it line after line;
  - a trailing // after a declaration, and the indented // lines that
    continue it -> ///< (documents that declaration).
In the text, indented runs (shape tables, code) are kept preformatted and
Doxygen's special characters are escaped. Left alone: section banners
(// ---- ... --; a comment under one is doc), blocks followed by a blank
line, a preprocessor line, namespace or a closing brace, and every comment
inside a function body.
fmt::formatter specializations are blanked out. The line count never
changes, so Doxygen's warnings give the header's own line numbers.
Usage: doxygen_filter.py FILE  (Doxygen appends FILE)
"""
import re
import sys

COMMENT = re.compile(r"^(\s*)//(?!/)\s?(.*)$")
TRAILING = re.compile(r"^(\s*\S.*?[;,{}])(\s+)//(?!/)\s?(.*)$")
BANNER = re.compile(r"^\s*//\s*-{3,}")
NOT_DECL = re.compile(r"^\s*(#|namespace\b|}|public:|private:|protected:|$)")
SCOPE = re.compile(r"\b(namespace|class|struct|enum|union)\b[^;()]*$")
NAME = re.compile(r"(operator\s*\S+?|~?\w+)\s*(<[^()]*>)?\s*\(")


def strip_strings(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return line.split("//", 1)[0]


def decl_name(line):
    """The function name a declaration line declares ('operator' for any operator)."""
    code = re.sub(r"^\s*template\s*<[^<>]*>", "", strip_strings(line))
    m = NAME.search(code)
    if not m:
        return None
    return "operator" if m.group(1).startswith("operator") else m.group(1)


def main(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = list(lines)
    n = len(lines)

    # The file's opening comment block.
    i = 0
    while i < n and COMMENT.match(lines[i]):
        i += 1
    if i > 0:
        doc(out, lines, 0, i)
        # The umbrella header's comment is the reference's front page.
        out[i - 1] += " @mainpage attograd API reference" if path.endswith("attograd/attograd.h") else " @file"

    # fmt::formatter specializations (outside namespace attograd) are left out:
    # Doxygen cannot place them ("scope not found"); they only make fmt print.
    for k in range(n - 1):
        if lines[k].startswith("template <>") and lines[k + 1].startswith("struct fmt::formatter"):
            e = k
            while e < n and lines[e] != "};":
                e += 1
            for t in range(k, min(e + 1, n)):
                out[t] = lines[t] = ""

    # Scope stack: True where a doc comment may stand (namespace/class scope).
    doc_scope = [True]
    pending = ""  # text since the last ';', '{' or '}' (a declaration in progress)
    k = i
    trailing_indent = None  # column of a trailing comment that may continue below
    while k < n:
        line = lines[k]
        m = COMMENT.match(line)
        if m and doc_scope[-1] and not pending.strip():
            # Continuation of a trailing comment: more indented than code, right below it.
            if trailing_indent is not None and len(m.group(1)) >= trailing_indent:
                out[k] = m.group(1) + "///< " + escape(m.group(2))
                k += 1
                continue
            j = k
            while j < n and COMMENT.match(lines[j]):
                j += 1
            if BANNER.match(line):  # a banner (to its line ending in --) heads the block; the rest may be doc
                while k < j and not lines[k].rstrip().endswith("--"):
                    k += 1
                k += 1
            if k < j and j < n and not NOT_DECL.match(lines[j]):
                block = [COMMENT.match(lines[t]) for t in range(k, j)]
                doc(out, lines, k, j)
                # Overloads right below share the block: a /** copy */ in front of each.
                name = decl_name(lines[j])
                text = escape(" ".join(c.group(2).strip() for c in block))
                t = j + 1
                while name and t < n and lines[t].strip() and not COMMENT.match(lines[t]):
                    if not pending_ends(lines[t - 1]):
                        t += 1
                        continue
                    if decl_name(lines[t]) != name:
                        break
                    e = t
                    while e < n and not pending_ends(lines[e]):
                        e += 1
                    if e < n and "//" not in lines[e]:
                        out[t] = "/** " + text + " */ " + out[t]
                    t = e + 1
            trailing_indent = None
            k = j
            continue
        if m:
            k += 1
            continue
        trailing_indent = None
        tm = TRAILING.match(line)
        if tm and doc_scope[-1] and not NOT_DECL.match(line):
            out[k] = tm.group(1) + tm.group(2) + "///< " + escape(tm.group(3))
            trailing_indent = len(tm.group(1)) + len(tm.group(2))
        # Braces and declarations in progress.
        code = strip_strings(line)
        for ch in code:
            if ch == "{":
                doc_scope.append(doc_scope[-1] and bool(SCOPE.search(pending + " ")))
                pending = ""
            elif ch == "}":
                if len(doc_scope) > 1:
                    doc_scope.pop()
                pending = ""
            elif ch == ";":
                pending = ""
            else:
                pending += ch
        if code.strip().startswith("#") or re.match(r"^\s*(public|private|protected):\s*$", code):
            pending = ""
        pending += " "
        k += 1
    sys.stdout.write("\n".join(out))


def escape(text):
    """Prose for Doxygen: its command and HTML characters stay literal (not in `code spans`)."""
    parts = re.split(r"(`[^`]*`)", text)
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"([\\@<>&$#%])", r"\\\1", parts[i])
    return "".join(parts)


def escape_pre(text):
    """A line inside <pre>: HTML entities, and Doxygen's command characters escaped."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    return re.sub(r"([\\@])", r"\\\1", text)


def doc(out, lines, start, end):
    """Lines [start, end) of // comments become ///; indented runs that are not
    list items (shape tables, code examples) are kept preformatted."""
    texts = [COMMENT.match(lines[t]) for t in range(start, end)]
    in_list = False
    run = None
    for t, c in zip(range(start, end), texts):
        text = c.group(2)
        indent = len(text) - len(text.lstrip())
        if re.match(r"^\s*[-*] ", text):
            in_list = True
        elif indent < 2 or not text.strip():
            in_list = False
        pre = indent >= 2 and not in_list and text.strip()
        if pre and run is None:
            run = t
            out[t] = c.group(1) + "/// <pre>" + escape_pre(text)
        elif pre:
            out[t] = c.group(1) + "/// " + escape_pre(text)
        else:
            out[t] = c.group(1) + "/// " + escape(text)
        if not pre and run is not None:
            out[t - 1] += "</pre>"
            run = None
    if run is not None:
        out[end - 1] += "</pre>"


def pending_ends(line):
    """Whether LINE ends a declaration (so the next line starts a new one)."""
    code = strip_strings(line).rstrip()
    return code.endswith(";") or code.endswith("}")


if __name__ == "__main__":
    main(sys.argv[1])
