#!/usr/bin/env python3
"""The public API of the library crates, one line per item, checked in under api/.

Builds each crate's rustdoc JSON with the installed (stable) toolchain
(RUSTC_BOOTSTRAP=1 lets rustdoc emit it) and lists what an embedder can name: modules,
re-exports, structs with their public fields, enums with their variants, traits with
their methods, functions and inherent methods with their signatures, constants, type
aliases, and which structs and enums are #[non_exhaustive].

  python3 .ci/public_api.py          fails, showing the diff, when the API differs from api/
  python3 .ci/public_api.py --write  rewrites api/ (review the diff, then commit it)
"""

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
API_DIR = ROOT / "api"
# Crate, cargo package, features: what an embedder depends on.
CRATES = [
    ("cdc_core", "cdc-core", ["conformance"]),
    ("cdc_pgoutput", "cdc-pgoutput", []),
    ("cdc_postgres", "cdc-postgres", ["prometheus"]),
    ("cdc_sinks", "cdc-sinks", ["jetstream"]),
]


def rustdoc_json(package, features):
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    command = ["cargo", "rustdoc", "-q", "-p", package, "--lib"]
    if features:
        command += ["--features", ",".join(features)]
    command += ["--", "-Z", "unstable-options", "--output-format", "json", "-A", "warnings"]
    subprocess.run(command, cwd=ROOT, env=env, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return json.loads((target / "doc" / (package.replace("-", "_") + ".json")).read_text())


class Renderer:
    def __init__(self, doc):
        self.doc = doc
        self.index = doc["index"]

    def path_name(self, path):
        # A path as written in the source (last segment), with its generic arguments.
        name = path.get("path") or path.get("name") or "?"
        return name + self.args(path.get("args"))

    def args(self, args):
        if not args:
            return ""
        if "angle_bracketed" in args:
            parts = []
            for arg in args["angle_bracketed"].get("args", []):
                if "type" in arg:
                    parts.append(self.ty(arg["type"]))
                elif "lifetime" in arg:
                    parts.append(arg["lifetime"])
                elif "const" in arg:
                    parts.append(str(arg["const"].get("expr", "_")))
            for constraint in args["angle_bracketed"].get("constraints", []):
                binding = constraint.get("binding", {})
                if "equality" in binding and "type" in binding["equality"]:
                    parts.append(f"{constraint['name']} = {self.ty(binding['equality']['type'])}")
            return "<" + ", ".join(parts) + ">" if parts else ""
        if "parenthesized" in args:
            p = args["parenthesized"]
            out = "(" + ", ".join(self.ty(t) for t in p.get("inputs", [])) + ")"
            if p.get("output"):
                out += " -> " + self.ty(p["output"])
            return out
        return ""

    def bounds(self, bounds):
        out = []
        for bound in bounds:
            if "trait_bound" in bound:
                out.append(self.path_name(bound["trait_bound"]["trait"]))
            elif "outlives" in bound:
                out.append(bound["outlives"])
        return " + ".join(out)

    def ty(self, t):
        if t is None:
            return "()"
        if isinstance(t, str):
            return t
        kind, value = next(iter(t.items()))
        if kind == "resolved_path":
            return self.path_name(value)
        if kind in ("generic", "primitive"):
            return value
        if kind == "borrowed_ref":
            life = (value.get("lifetime") or "") + " " if value.get("lifetime") else ""
            return "&" + life + ("mut " if value.get("is_mutable") else "") + self.ty(value["type"])
        if kind == "slice":
            return "[" + self.ty(value) + "]"
        if kind == "array":
            return "[" + self.ty(value["type"]) + "; " + str(value["len"]) + "]"
        if kind == "tuple":
            return "(" + ", ".join(self.ty(x) for x in value) + ")"
        if kind == "impl_trait":
            return "impl " + self.bounds(value)
        if kind == "dyn_trait":
            traits = " + ".join(self.path_name(x["trait"]) for x in value.get("traits", []))
            return "dyn " + traits
        if kind == "raw_pointer":
            return ("*mut " if value.get("is_mutable") else "*const ") + self.ty(value["type"])
        if kind == "qualified_path":
            return "<" + self.ty(value["self_type"]) + ">::" + value["name"]
        if kind == "function_pointer":
            sig = value.get("sig", {})
            inputs = ", ".join(self.ty(x[1]) for x in sig.get("inputs", []))
            return f"fn({inputs}) -> {self.ty(sig.get('output'))}"
        return kind

    def generics(self, generics):
        params = []
        for p in generics.get("params", []):
            if "lifetime" in p.get("kind", {}):
                continue
            bounds = p.get("kind", {}).get("type", {}).get("bounds", [])
            params.append(p["name"] + (": " + self.bounds(bounds) if bounds else ""))
        return "<" + ", ".join(params) + ">" if params else ""

    def receiver(self, t):
        if t == {"generic": "Self"}:
            return "self"
        if isinstance(t, dict) and "borrowed_ref" in t and t["borrowed_ref"]["type"] == {"generic": "Self"}:
            return "&mut self" if t["borrowed_ref"].get("is_mutable") else "&self"
        return "self: " + self.ty(t)

    def signature(self, path, function):
        """`fn path(inputs) -> output`, `path` being the function's full path."""
        header = function.get("header", {})
        prefix = ("const " if header.get("is_const") else "") + (
            "async " if header.get("is_async") else ""
        ) + ("unsafe " if header.get("is_unsafe") else "")
        sig = function["sig"]
        inputs = ", ".join(
            self.receiver(t) if n == "self" else f"{n}: {self.ty(t)}" for n, t in sig["inputs"]
        )
        output = "" if sig.get("output") is None else " -> " + self.ty(sig["output"])
        return f"{prefix}fn {path}{self.generics(function.get('generics', {}))}({inputs}){output}"


def public(item):
    return item.get("visibility") == "public"


def walk(doc, crate):
    r = Renderer(doc)
    index = doc["index"]
    lines = set()
    seen = set()

    def item_lines(item, path):
        inner_kind, inner = next(iter(item["inner"].items()))
        marks = " #[non_exhaustive]" if any("non_exhaustive" in str(a) for a in item.get("attrs", [])) else ""
        if inner_kind == "struct":
            lines.add(f"pub struct {path}{r.generics(inner.get('generics', {}))}{marks}")
            kind = inner["kind"]
            if isinstance(kind, dict) and "plain" in kind:
                for fid in kind["plain"]["fields"]:
                    field = index.get(str(fid))
                    if field and public(field):
                        lines.add(f"pub {path}::{field['name']}: {r.ty(field['inner']['struct_field'])}")
            elif isinstance(kind, dict) and "tuple" in kind:
                fields = [index.get(str(f)) for f in kind["tuple"] if f is not None]
                types = ", ".join(r.ty(f["inner"]["struct_field"]) for f in fields if f and public(f))
                lines.add(f"pub struct {path}({types})")
            impls(inner.get("impls", []), path)
        elif inner_kind == "enum":
            lines.add(f"pub enum {path}{r.generics(inner.get('generics', {}))}{marks}")
            for vid in inner["variants"]:
                variant = index[str(vid)]
                vkind = variant["inner"]["variant"]["kind"]
                shape = ""
                if isinstance(vkind, dict) and "tuple" in vkind:
                    shape = "(" + ", ".join(
                        r.ty(index[str(f)]["inner"]["struct_field"]) for f in vkind["tuple"] if f is not None
                    ) + ")"
                elif isinstance(vkind, dict) and "struct" in vkind:
                    shape = " { " + ", ".join(
                        f"{index[str(f)]['name']}: {r.ty(index[str(f)]['inner']['struct_field'])}"
                        for f in vkind["struct"]["fields"]
                    ) + " }"
                lines.add(f"pub {path}::{variant['name']}{shape}")
            impls(inner.get("impls", []), path)
        elif inner_kind == "trait":
            lines.add(f"pub trait {path}{r.generics(inner.get('generics', {}))}")
            for mid in inner.get("items", []):
                member = index.get(str(mid))
                if member and "function" in member["inner"]:
                    lines.add(r.signature(f"{path}::{member['name']}", member["inner"]["function"]))
                elif member:
                    lines.add(f"{path}::{member['name']}")
        elif inner_kind == "function":
            lines.add("pub " + r.signature(path, inner))
        elif inner_kind == "type_alias":
            lines.add(f"pub type {path} = {r.ty(inner['type'])}")
        elif inner_kind in ("constant", "static"):
            ty = inner.get("type")
            lines.add(f"pub const {path}: {r.ty(ty)}")
        elif inner_kind == "macro":
            lines.add(f"pub macro {path}!")

    def impls(ids, path):
        for iid in ids:
            imp = index.get(str(iid))
            if not imp:
                continue
            inner = imp["inner"]["impl"]
            if inner.get("is_synthetic") or inner.get("blanket_impl") is not None:
                continue
            if inner.get("trait") is not None:
                lines.add(f"impl {r.path_name(inner['trait'])} for {path}")
                continue
            for mid in inner.get("items", []):
                member = index.get(str(mid))
                if member and public(member) and "function" in member["inner"]:
                    lines.add("pub " + r.signature(f"{path}::{member['name']}", member["inner"]["function"]))
                elif member and public(member) and "assoc_const" in member["inner"]:
                    lines.add(f"pub const {path}::{member['name']}")

    def module(mid, path):
        if mid in seen:
            return
        seen.add(mid)
        item = index[str(mid)]
        for cid in item["inner"]["module"]["items"]:
            child = index.get(str(cid))
            if not child or not public(child):
                continue
            kind = next(iter(child["inner"]))
            if kind == "module":
                lines.add(f"pub mod {path}::{child['name']}")
                module(cid, f"{path}::{child['name']}")
            elif kind == "use":
                use = child["inner"]["use"]
                target = use.get("id")
                name = use["name"]
                if use.get("is_glob"):
                    lines.add(f"pub use {use['source']}::*")
                    if target is not None and str(target) in index and "module" in index[str(target)]["inner"]:
                        module(target, path)
                    continue
                if target is not None and str(target) in index:
                    titem = index[str(target)]
                    if "module" in titem["inner"]:
                        lines.add(f"pub mod {path}::{name} (re-export of {use['source']})")
                        module(target, f"{path}::{name}")
                    else:
                        lines.add(f"pub use {path}::{name} = {use['source']}")
                        item_lines(dict(titem, name=name), f"{path}::{name}")
                else:
                    lines.add(f"pub use {path}::{name} = {use['source']}")
            else:
                item_lines(child, f"{path}::{child['name']}")

    module(doc["root"], crate)
    return sorted(lines)


def main():
    write = "--write" in sys.argv
    API_DIR.mkdir(exist_ok=True)
    changed = []
    for crate, package, features in CRATES:
        text = "\n".join(walk(rustdoc_json(package, features), crate)) + "\n"
        path = API_DIR / f"{crate}.txt"
        old = path.read_text() if path.exists() else ""
        if old != text:
            changed.append(crate)
            if write:
                path.write_text(text)
            else:
                sys.stdout.writelines(
                    difflib.unified_diff(
                        old.splitlines(True), text.splitlines(True), f"api/{crate}.txt", f"{crate} now"
                    )
                )
    if changed and not write:
        print(
            f"\nThe public API of {', '.join(changed)} differs from api/: review the change; "
            "if it is meant, run `python3 .ci/public_api.py --write` and commit api/.",
            file=sys.stderr,
        )
        return 1
    print("public API: " + ("written for " + ", ".join(changed) if changed else "unchanged"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
