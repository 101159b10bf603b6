#!/usr/bin/env python3
"""Checks that module_cycles.py sees the dependencies it promises to: a parent naming a
child module by a bare path (`start::start(..)`), a child's `use super::*` glob and a
`use super::Item`, a child module in the file a `#[path]` attribute names, and that a
crate without a cycle passes. Builds throwaway crates in a
temporary directory and runs the script on them."""

import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_cycles.py")


def crate(root, files):
    os.makedirs(os.path.join(root, "c", "src"), exist_ok=True)
    with open(os.path.join(root, "c", "Cargo.toml"), "w") as f:
        f.write('[package]\nname = "c"\n')
    for name, text in files.items():
        path = os.path.join(root, "c", "src", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def run(files):
    with tempfile.TemporaryDirectory() as root:
        crate(root, files)
        out = subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True)
        return out.returncode, out.stdout


CASES = [
    ("a bare child path and a super:: item", {
        "lib.rs": "mod source;\n",
        "source/mod.rs": "mod start;\npub struct Source;\nfn run(s: &mut Source) { start::start(s) }\n",
        "source/start.rs": "use super::Source;\npub fn start(_: &mut Source) {}\n",
    }, 1),
    ("a use of a child and a super glob", {
        "lib.rs": "mod a;\n",
        "a/mod.rs": "mod b;\nuse b::Thing;\npub struct Owner(Thing);\n",
        "a/b.rs": "use super::*;\npub struct Thing;\nfn f(_: Owner) {}\n",
    }, 1),
    ("a child named by a #[path] attribute", {
        "lib.rs": "mod a;\n",
        "a.rs": "#[path = \"a_inner.rs\"]\nmod inner;\npub struct Owner(inner::Thing);\n",
        "a_inner.rs": "use super::Owner;\npub struct Thing;\nfn f(_: Owner) {}\n",
    }, 1),
    ("no cycle: the child is a leaf", {
        "lib.rs": "mod a;\n",
        "a/mod.rs": "mod b;\nuse b::Thing;\npub struct Owner(Thing);\n",
        "a/b.rs": "pub struct Thing;\n",
    }, 0),
]


def main():
    failed = 0
    for name, files, expected in CASES:
        code, out = run(files)
        # A cycle is reported as one (a crash also exits non-zero).
        if code != expected or (expected == 1 and "cycle between" not in out):
            failed += 1
            print(f"module_cycles.py on {name}: exit {code}, expected {expected}\n{out}")
    if failed:
        return 1
    print(f"module_cycles.py: {len(CASES)} fixture cases as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
