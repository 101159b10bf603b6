#!/usr/bin/env python3
"""Checks that docs_links.py reports exactly the broken links of a small fixture tree: one
good link (a file and a heading's anchor), one link to a missing file and one to a missing
anchor; a link-like text inside a code block and inline code is not a link. Builds the
tree in a temporary directory and runs the script on it, then checks a few of GitHub's
slug rules directly."""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "docs_links.py")
sys.path.insert(0, HERE)
import docs_links  # noqa: E402

FIXTURE = {
    "README.md": (
        "# Fixture\n"
        "\n"
        "Good: [the guide's usage](docs/guide.md#usage).\n"
        "Missing file: [gone](docs/missing.md).\n"
        "Missing anchor: [nowhere](docs/guide.md#no-such-heading).\n"
        "\n"
        "```sh\n"
        "echo '[not a link](nothing.md)'\n"
        "```\n"
        "\n"
        "Nor is `[this](nothing.md)`.\n"
    ),
    "ARCHITECTURE.md": "# Architecture\n",
    "benches/README.md": "# Benchmarks\n",
    "docs/guide.md": "# Guide\n\n## Usage\n\nSee [the README](../README.md#fixture).\n",
}


def build(root):
    for name, text in FIXTURE.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def check(condition, message, failures):
    if not condition:
        failures.append(message)


def main():
    failures = []
    with tempfile.TemporaryDirectory() as root:
        build(root)
        out = subprocess.run([sys.executable, SCRIPT, "--root", root], capture_output=True, text=True)
        reported = [line for line in out.stdout.splitlines() if line.strip()]
        check(out.returncode == 1, f"exit code {out.returncode}, expected 1", failures)
        check(len(reported) == 2, f"{len(reported)} broken links reported, expected 2: {reported}", failures)
        check(any(r.startswith("README.md:4:") and "docs/missing.md" in r and "no such file" in r
                  for r in reported), f"the missing file is not reported: {reported}", failures)
        check(any(r.startswith("README.md:5:") and "#no-such-heading" in r for r in reported),
              f"the missing anchor is not reported: {reported}", failures)
        check(not any("#usage" in r or "nothing.md" in r for r in reported),
              f"a good link or a code block is reported: {reported}", failures)

        # With the two broken links fixed, the tree passes.
        with open(os.path.join(root, "README.md"), "w", encoding="utf-8") as f:
            f.write("# Fixture\n\n[the guide's usage](docs/guide.md#usage)\n")
        out = subprocess.run([sys.executable, SCRIPT, "--root", root], capture_output=True, text=True)
        check(out.returncode == 0, f"a clean tree fails: {out.stdout}{out.stderr}", failures)

    # GitHub's slugs.
    for heading, expected in [
        ("`pgcdc stream` against your own database, step by step",
         "pgcdc-stream-against-your-own-database-step-by-step"),
        ("Feldera's Debezium input", "felderas-debezium-input"),
        ("4. Watch and clean up", "4-watch-and-clean-up"),
        ("Latency (issue 23) — commit to arrival, default settings",
         "latency-issue-23--commit-to-arrival-default-settings"),
        ("The `pgcdc_changes` **metric**", "the-pgcdc_changes-metric"),
        ("[Linked](x.md) heading", "linked-heading"),
    ]:
        got = docs_links.slug(heading)
        check(got == expected, f"slug({heading!r}) = {got!r}, expected {expected!r}", failures)
    with tempfile.TemporaryDirectory() as root:
        path = os.path.join(root, "dup.md")
        with open(path, "w", encoding="utf-8") as f:
            f.write("# A\n\n## A\n\n```\n# A\n```\n\nA\n---\n")
        got = docs_links.anchors(path)
        check(got == {"a", "a-1", "a-2"}, f"duplicate headings give {sorted(got)}, expected a, a-1, a-2", failures)

    for f in failures:
        print("FAIL:", f)
    print("docs_links_test:", "failed" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
