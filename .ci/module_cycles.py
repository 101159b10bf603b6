#!/usr/bin/env python3
"""Finds cycles between the source files of each crate in the workspace.

A file depends on another when its code names an item of the other's module through a
`crate::`, `super::` or `self::` path, or a path that starts with the name of one of its
own child modules (`start::start(..)` in the parent of `start`, as Rust 2018 resolves
it), in `use` declarations (globs included: `use super::*` depends on the parent) or
inline. Not counted:
`mod` declarations, re-exports (`pub use`, a facade is not a dependency of the facade's own
code), and `#[cfg(test)]` modules (tests may look anywhere). Each crate root (lib.rs,
main.rs, src/bin/*) is analysed on its own, at two levels: files, and top-level modules
(everything under `src/conn/` counts as `conn`). Prints every strongly connected component of
more than one file, with one example reference per edge, and exits 1 if there is any.

Usage: module_cycles.py [workspace-root]
"""

import os
import re
import sys
from collections import defaultdict

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"

# Cycles known and being removed, each with the work that removes it: (crate, sorted
# module names of the cycle). Any other cycle fails; so does a listed one that is gone
# (take it off the list), so the list only shrinks.
KNOWN_CYCLES = set()


def strip_comments_and_strings(text):
    """Removes comments, string and char literals, keeping line structure."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or (c == "'" and re.match(r"'\\[xu]", text[i:i + 3])):
            j = text.find("'", i + 2)
            i = j + 1
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def remove_test_modules(text):
    """Drops `#[cfg(test)] mod name { ... }` blocks and `#[cfg(test)]` items on one line."""
    result = []
    pos = 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+" + IDENT + r"\s*\{", text):
        if m.start() < pos:
            continue
        result.append(text[pos:m.start()])
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        result.append("\n" * text.count("\n", m.start(), i))
        pos = i
    result.append(text[pos:])
    return "".join(result)


def module_files(src_root, root_file):
    """Maps module path (tuple) -> file for the crate rooted at root_file."""
    files = {}

    def visit(path, module, is_dir_owner):
        files[module] = path
        original = open(path, encoding="utf-8").read()
        text = strip_comments_and_strings(original)
        # `#[path = "..."]` names a file in a string, which the stripped text no longer
        # holds: read it from the original.
        path_attrs = {
            m.group(2): m.group(1)
            for m in re.finditer(
                r'#\[path\s*=\s*"([^"]*)"\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+('
                + IDENT
                + r")\s*;",
                original,
            )
        }
        base = os.path.dirname(path)
        if not is_dir_owner:
            base = os.path.join(base, os.path.splitext(os.path.basename(path))[0])
        for m in re.finditer(r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", text):
            attrs, name = m.group(1), m.group(2)
            if "cfg(test)" in attrs:
                continue
            child = None
            if re.search(r"#\[path\b", attrs) and name in path_attrs:
                child = os.path.join(os.path.dirname(path), path_attrs[name])
            else:
                for cand in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
                    if os.path.exists(cand):
                        child = cand
                        break
            if child and os.path.isfile(child):
                visit(child, module + (name,), child.endswith("mod.rs"))

    visit(root_file, (), True)
    return files


def use_paths(tree, prefix=""):
    """Expands a use tree like `super::{a, b::{c, d}}` into full paths."""
    tree = tree.strip()
    depth = 0
    for i, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                head = tree[:i]
                body = tree[i + 1:tree.rfind("}")]
                parts, d, start = [], 0, 0
                for j, c in enumerate(body):
                    if c == "{":
                        d += 1
                    elif c == "}":
                        d -= 1
                    elif c == "," and d == 0:
                        parts.append(body[start:j])
                        start = j + 1
                parts.append(body[start:])
                paths = []
                for p in parts:
                    if p.strip():
                        paths.extend(use_paths(p, prefix + head))
                return paths
            depth += 1
    path = (prefix + tree).split(" as ")[0].strip()
    return [path]


def references(text, children=()):
    """Yields (path, line) for each crate/super/self path the code uses, and each path
    starting with one of `children` (the module's own child modules, as `self::…`)."""
    local = set(children)
    # `use` declarations, except re-exports.
    for m in re.finditer(r"(^|[;{}\n])\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]*);", text):
        if m.group(2):
            continue
        line = text.count("\n", 0, m.start(3)) + 1
        for p in use_paths(re.sub(r"\s+", " ", m.group(3))):
            if re.match(r"(crate|super|self)\b", p):
                yield p, line
            elif p.split("::")[0] in local:
                yield "self::" + p, line
    body = re.sub(r"(^|[;{}\n])\s*(pub(?:\([^)]*\))?\s+)?use\s+[^;]*;", lambda m: "\n" * m.group(0).count("\n"), text)
    for m in re.finditer(r"\b(?:crate|super|self)(?:::(?:" + IDENT + r"|\*))+", body):
        prev = body[max(0, m.start() - 2):m.start()]
        if prev == "::":
            continue
        yield m.group(0), body.count("\n", 0, m.start()) + 1
    if local:
        for m in re.finditer(r"\b(" + IDENT + r")(?:::(?:" + IDENT + r"))+", body):
            if m.group(1) not in local:
                continue
            prev = body[max(0, m.start() - 2):m.start()]
            if prev == "::":
                continue
            yield "self::" + m.group(0), body.count("\n", 0, m.start()) + 1


def resolve(path, module, files):
    parts = path.split("::")
    if parts[0] == "crate":
        target = ()
        parts = parts[1:]
    else:
        target = module
        while parts and parts[0] in ("self", "super"):
            if parts[0] == "super":
                target = target[:-1]
            parts = parts[1:]
    full = target + tuple(p for p in parts if p != "self")
    # The longest prefix that is a file's module.
    for k in range(len(full), -1, -1):
        if full[:k] in files:
            return full[:k]
    return None


def sccs(graph):
    index, low, stack, on, result = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            result.append(comp)

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            strong(v)
    return result


def crate_roots(workspace):
    for crate in sorted(os.listdir(workspace)):
        src = os.path.join(workspace, crate, "src")
        if not os.path.isfile(os.path.join(workspace, crate, "Cargo.toml")) or not os.path.isdir(src):
            continue
        for name in ("lib.rs", "main.rs"):
            if os.path.isfile(os.path.join(src, name)):
                yield crate, os.path.join(src, name)
        bins = os.path.join(src, "bin")
        if os.path.isdir(bins):
            for entry in sorted(os.listdir(bins)):
                p = os.path.join(bins, entry)
                if entry.endswith(".rs"):
                    yield crate, p
                elif os.path.isfile(os.path.join(p, "main.rs")):
                    yield crate, os.path.join(p, "main.rs")


def main():
    workspace = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = 0
    known_seen, crates = set(), set()
    for crate, root in crate_roots(workspace):
        crates.add(crate)
        files = module_files(os.path.dirname(root), root)
        graph, example = defaultdict(set), {}
        for module, path in files.items():
            text = remove_test_modules(strip_comments_and_strings(open(path, encoding="utf-8").read()))
            children = [m[-1] for m in files if len(m) == len(module) + 1 and m[:-1] == module]
            for ref, line in references(text, children):
                target = resolve(ref, module, files)
                if target is None or target == module:
                    continue
                graph[module].add(target)
                example.setdefault((module, target), f"{os.path.relpath(path, workspace)}:{line}: {ref}")
        # Files, and then whole top-level modules (a directory may not lean on a sibling
        # directory that leans back on it, even through different files).
        top, top_example = defaultdict(set), {}
        for (a, b), where in example.items():
            if a[:1] and b[:1] and a[:1] != b[:1]:
                top[a[:1]].add(b[:1])
                top_example.setdefault((a[:1], b[:1]), where)
        for level, g, ex in (("files", graph, example), ("top-level modules", top, top_example)):
            for comp in sccs(g):
                if len(comp) < 2:
                    continue
                names = sorted("::".join(m) or "(root)" for m in comp)
                if (crate, tuple(names)) in KNOWN_CYCLES:
                    known_seen.add((crate, tuple(names)))
                    print(f"known cycle (being removed) between {level} of {crate}: {', '.join(names)}")
                    continue
                found += 1
                print(f"cycle between {level} of {crate} ({os.path.relpath(root, workspace)}): {', '.join(names)}")
                members = set(comp)
                for a in sorted(comp):
                    for b in sorted(g[a] & members):
                        print(f"    {ex[(a, b)]}")
    for crate, names in sorted(KNOWN_CYCLES - known_seen):
        if crate not in crates:
            continue
        found += 1
        print(f"the known cycle of {crate} between {', '.join(names)} is gone: take it off KNOWN_CYCLES")
    if found:
        print(f"{found} module cycle(s); break them by moving the shared item to where both sides can depend on it")
        return 1
    print("no module cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
