#!/usr/bin/env python3
"""Checks that docs/api.md documents every public symbol of include/tensorgrad.h.

  tests/api_docs.py include/tensorgrad.h docs/api.md

Three rules, each failure printed as the exact thing to add:
  - every function's prototype is in a ```c block of api.md, as the header
    declares it (an op builder as its macro: tg_add(a, b) without the _at
    function's file and line), and no block keeps a prototype the header
    no longer has;
  - every tg_/TG_ name the header defines (types, enum values, macros) is
    named somewhere in api.md;
  - every struct with a body has a heading naming it, followed by a table
    whose rows name each of its fields in their first cell ("| `field` |",
    or "| `in`, `out` |" for fields of one kind).
Prints "ok N" (the checks made) or one "missing: ..." line per gap; exits 1
on any gap.
"""
import re
import sys


def blank_comments(text):
    """Comments replaced by spaces, so offsets and line numbers stay."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)


def c_only(code):
    """The C side of every #ifdef __cplusplus / #ifndef __cplusplus block."""
    out, stack = [], []
    for line in code.split("\n"):
        s = line.strip()
        m = re.match(r"#\s*(ifdef|ifndef)\s+__cplusplus\b", s)
        if m:
            stack.append("cpp" if m.group(1) == "ifdef" else "c")
            out.append("")
            continue
        if stack and re.match(r"#\s*if", s):
            stack.append("other")
        elif stack and re.match(r"#\s*else", s) and stack[-1] != "other":
            stack[-1] = "c" if stack[-1] == "cpp" else "cpp"
            out.append("")
            continue
        elif stack and re.match(r"#\s*endif", s):
            kind = stack.pop()
            out.append("" if kind != "other" else line)
            continue
        out.append("" if "cpp" in stack else line)
    return "\n".join(out)


def norm(s):
    s = re.sub(r"\s+", " ", s).strip()
    s = re.sub(r"\(\s+", "(", s)
    s = re.sub(r"\s+\)", ")", s)
    s = re.sub(r"\s+,", ",", s)
    return re.sub(r"\*\s+", "*", s)


def header(path):
    text = open(path, encoding="utf-8").read()
    code = c_only(blank_comments(text))
    line_of = lambda pos: code.count("\n", 0, pos) + 1
    wrappers = {m.group(2): m.group(1) for m in re.finditer(r"#define (tg_\w+)\([^)]*\)\s+(tg_\w+_at)\(", code)}
    decls = re.sub(r"#[^\n]*", lambda m: " " * len(m.group(0)), code)
    protos = {}
    for m in re.finditer(r"([A-Za-z_][\w \t\n*]*?)\b(tg_\w+)\s*\(([^;{}]*?)\)\s*;", decls):
        ret, name, params = norm(m.group(1)), m.group(2), norm(m.group(3))
        if ret.startswith("typedef") or not ret:
            continue
        if name in wrappers:
            name, params = wrappers[name], norm(re.sub(r",?\s*TG_AT\s*$", "", params))
        protos[name] = (norm(f"{ret} {name}({params});"), line_of(m.start(2)))
    names = {}
    for m in re.finditer(r"\b(tg_[a-z0-9_]+|TG_[A-Z0-9_]+)\b", code):
        names.setdefault(m.group(1), line_of(m.start()))
    structs = {}
    for m in re.finditer(r"typedef struct(?:\s+\w+)?\s*\{(.*?)\}\s*(tg_\w+)\s*;", code, flags=re.S):
        fields = []
        for decl in m.group(1).split(";"):
            d = norm(decl)
            if not d:
                continue
            fp = re.search(r"\(\s*\*\s*(\w+)\s*\)", d)
            if fp:
                fields.append(fp.group(1))
                continue
            d = re.sub(r"\[[^\]]*\]", "", d)
            parts = d.split(",")
            fields.append(parts[0].split()[-1].lstrip("*"))
            fields += [p.strip().lstrip("*") for p in parts[1:]]
        structs[m.group(2)] = ([f for f in fields if not f.endswith("_")], line_of(m.start(2)))
    return protos, names, structs, set(wrappers)


def main(hpath, dpath):
    protos, names, structs, wrapped = header(hpath)
    doc = open(dpath, encoding="utf-8").read()
    blocks = re.findall(r"^```c\n(.*?)^```", doc, flags=re.S | re.M)
    documented = {norm(s) + ";" for b in blocks for s in re.sub(r"/\*.*?\*/", "", b, flags=re.S).split(";") if norm(s)}
    problems, checks = [], 0
    hname = hpath.split("/")[-1]
    for name, (proto, line) in sorted(protos.items(), key=lambda x: x[1][1]):
        checks += 1
        if proto not in documented:
            problems.append(f"missing: the prototype of {name} ({hname}:{line}); add to a ```c block of the api: {proto}")
    known = {p for p, _ in protos.values()}
    for proto in sorted(documented - known):
        if re.search(r"\btg_\w+\s*\(", proto):
            problems.append(f"missing: {proto} is in a ```c block of the api but the header declares no such function")
    doc_names = set(re.findall(r"\b(tg_[a-z0-9_]+|TG_[A-Z0-9_]+)\b", doc))
    for name, line in sorted(names.items(), key=lambda x: x[1]):
        if name == "TENSORGRAD_H" or name.startswith("TG__") or name.endswith("_") or name in wrapped:
            continue
        checks += 1
        if name not in doc_names:
            problems.append(f"missing: {name} ({hname}:{line}) is named nowhere in the api")
    heads = [(m.start(), m.group(0)) for m in re.finditer(r"^#+ .*$", doc, flags=re.M)] + [(len(doc), "")]
    for struct, (fields, line) in sorted(structs.items(), key=lambda x: x[1][1]):
        checks += 1
        at = [k for k, (_, h) in enumerate(heads[:-1]) if f"`{struct}`" in h]
        if not at:
            problems.append(f"missing: a heading naming `{struct}` ({hname}:{line}) above a table of its fields")
            continue
        section = doc[heads[at[0]][0]:heads[at[0] + 1][0]]
        rows = {f for cell in re.findall(r"^\|([^|\n]*)\|", section, flags=re.M)
                for f in re.findall(r"`([A-Za-z_]\w*)`", cell)}
        lacking = [f for f in fields if f not in rows]
        checks += len(fields)
        if lacking:
            problems.append(f"missing: rows for the fields of {struct} ({hname}:{line}) under its heading: "
                            + ", ".join(f"| `{f}` |" for f in lacking))
    for p in problems:
        print(p)
    print(f"ok {checks - len(problems)} of {checks}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
