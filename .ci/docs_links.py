#!/usr/bin/env python3
"""Checks the links of the project's Markdown documentation.

Every Markdown link and image (`[text](target)`, `![alt](target)`, reference definitions
`[name]: target`) in README.md, ARCHITECTURE.md, benches/README.md and docs/*.md is
checked, outside fenced code blocks and inline code:

- a relative target must name an existing file or directory, relative to the linking file
  (a target starting with `/` is relative to the repository root, as on GitHub);
- a `#fragment`, on its own (same file) or after a Markdown file's path, must be the anchor
  of one of that file's headings under GitHub's rules: the heading's text (inline code
  kept, link and emphasis syntax removed), lower-cased, every character that is not a
  letter, digit, mark, space, hyphen or underscore removed, every space turned into a
  hyphen; a slug already taken gets `-1`, `-2`, ... (HTML `id`/`name` anchors count too);
- external links (http, https, mailto, ...) are not fetched; `--verbose` lists them.

Prints every broken link as `file:line: target: reason` and exits 1 if there is any, 0
otherwise.

Usage: docs_links.py [--root DIR] [--verbose] [FILE ...]
  (default files: the ones above under the repository root, the parent of .ci/)
"""

import argparse
import glob
import html
import os
import re
import sys
import unicodedata
import urllib.parse

DEFAULT_FILES = ["README.md", "ARCHITECTURE.md", os.path.join("benches", "README.md")]
DEFAULT_GLOBS = [os.path.join("docs", "*.md")]
MARKDOWN_SUFFIXES = (".md", ".markdown")

FENCE_OPEN = re.compile(r"^ *(`{3,}|~{3,})(.*)$")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[([^\]]+)\]:[ \t]*(<[^>]*>|\S+)")
HTML_ANCHOR = re.compile(r"""<[A-Za-z][^>]*?\s(?:id|name)\s*=\s*["']([^"']+)["']""")
AUTOLINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*)>")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def blank_fenced_code(lines):
    """The lines with fenced code blocks (fences included) replaced by empty lines."""
    out, fence = [], None
    for line in lines:
        if fence is None:
            m = FENCE_OPEN.match(line)
            if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                fence = m.group(1)
                out.append("")
                continue
            out.append(line)
        else:
            stripped = line.strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                fence = None
            out.append("")
    return out


def blank_code_spans(text):
    """Replaces inline code by spaces, keeping line breaks (and so line numbers)."""

    def blank(m):
        if "\n\n" in m.group(0):  # a code span never crosses a paragraph
            return m.group(0)
        return re.sub(r"[^\n]", " ", m.group(0))

    # Paragraph by paragraph, so that a stray backtick cannot pair with one further on.
    chunks = re.split(r"(\n[ \t]*\n)", text)
    return "".join(CODE_SPAN.sub(blank, chunk) for chunk in chunks)


def heading_text(raw):
    """The text GitHub renders for a heading's Markdown source."""
    parts, last = [], 0
    for m in CODE_SPAN.finditer(raw):
        parts.append(_plain(raw[last:m.start()]))
        parts.append(m.group(2).strip() if m.group(2).strip() else m.group(2))
        last = m.end()
    parts.append(_plain(raw[last:]))
    return "".join(parts).strip()


def _plain(text):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images
    text = re.sub(r"!?\[([^\]]*)\]\[[^\]]*\]", r"\1", text)  # reference links
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)  # backslash escapes
    text = re.sub(r"(\*+|(?<!\w)_+|_+(?!\w))", "", text)  # emphasis markers
    return html.unescape(text)


def slug(raw_heading):
    """GitHub's anchor for a heading, before duplicates are numbered."""
    out = []
    for ch in heading_text(raw_heading).lower():
        if ch in " -_" or unicodedata.category(ch)[0] in "LMN":
            out.append(ch)
    return "".join(out).replace(" ", "-")


def anchors(path, cache={}):
    """Every anchor a Markdown file defines: its headings' slugs and HTML ids/names."""
    if path in cache:
        return cache[path]
    lines = blank_fenced_code(read(path).split("\n"))
    raw_headings = []
    for i, line in enumerate(lines):
        m = ATX_HEADING.match(line)
        if m:
            text = re.sub(r"[ \t]+#+[ \t]*$", "", m.group(2) or "")
            text = "" if re.fullmatch(r"#+", text) else text
            raw_headings.append(text)
            continue
        if SETEXT_UNDERLINE.match(line) and i > 0 and _is_paragraph_line(lines[i - 1]):
            # The whole paragraph above the underline is the heading.
            start = i - 1
            while start > 0 and _is_paragraph_line(lines[start - 1]):
                start -= 1
            raw_headings.append(" ".join(l.strip() for l in lines[start:i]))
    found, occurrences = set(), {}
    for raw in raw_headings:
        base = slug(raw)
        result = base
        while result in occurrences:
            occurrences[base] += 1
            result = f"{base}-{occurrences[base]}"
        occurrences[result] = 0
        found.add(result)
    for line in lines:
        found.update(HTML_ANCHOR.findall(line))
    cache[path] = found
    return found


def _is_paragraph_line(line):
    s = line.strip()
    if not s or ATX_HEADING.match(line) or SETEXT_UNDERLINE.match(line):
        return False
    if re.match(r"^ {0,3}([-*+]|\d+[.)])\s", line) or s.startswith(("|", ">", "<")):
        return False
    return True


def links(path):
    """(line, target) for every link, image and reference definition in a Markdown file."""
    lines = blank_fenced_code(read(path).split("\n"))
    found = []
    body = []
    for number, line in enumerate(lines, 1):
        m = REFERENCE_DEFINITION.match(line)
        if m and not m.group(1).startswith("^"):
            found.append((number, m.group(2).strip("<>")))
            body.append("")
        else:
            body.append(line)
    text = blank_code_spans("\n".join(body))
    line_starts = [0]
    for m in re.finditer("\n", text):
        line_starts.append(m.end())

    def line_of(offset):
        lo, hi = 0, len(line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    i = 0
    while True:
        i = text.find("[", i)
        if i < 0:
            break
        if i > 0 and text[i - 1] == "\\":
            i += 1
            continue
        close = _matching_bracket(text, i)
        if close is None:
            i += 1
            continue
        if close + 1 < len(text) and text[close + 1] == "(":
            target, end = _destination(text, close + 2)
            if target is not None:
                found.append((line_of(i), target))
                i = end
                continue
        i += 1
    for m in AUTOLINK.finditer(text):
        found.append((line_of(m.start()), m.group(1)))
    return sorted(found)


def _matching_bracket(text, start):
    depth = 0
    for j in range(start, len(text)):
        c = text[j]
        if c == "\\":
            continue
        if c == "[" and (j == start or text[j - 1] != "\\"):
            depth += 1
        elif c == "]" and text[j - 1] != "\\":
            depth -= 1
            if depth == 0:
                return j
        elif c == "\n" and text[j + 1:j + 2] == "\n":
            return None  # a link's text never crosses a paragraph
    return None


def _destination(text, j):
    """Parses `dest "title")` from text[j:]; returns (dest, index after ')') or (None, j)."""
    n = len(text)
    while j < n and text[j] in " \t\n":
        j += 1
    if j < n and text[j] == "<":
        end = text.find(">", j)
        if end < 0 or "\n" in text[j:end]:
            return None, j
        dest, j = text[j + 1:end], end + 1
    else:
        start, depth = j, 0
        while j < n and not text[j].isspace():
            if text[j] == "(":
                depth += 1
            elif text[j] == ")":
                if depth == 0:
                    break
                depth -= 1
            j += 1
        dest = text[start:j]
    while j < n and text[j] in " \t\n":
        j += 1
    if j < n and text[j] in "\"'(":
        closer = ")" if text[j] == "(" else text[j]
        end = text.find(closer, j + 1)
        if end < 0:
            return None, j
        j = end + 1
        while j < n and text[j] in " \t\n":
            j += 1
    if j < n and text[j] == ")":
        return dest, j + 1
    return None, j


def check_file(path, root):
    """(broken, external): broken is [(line, target, reason)], external [(line, target)]."""
    broken, external = [], []
    here = os.path.dirname(path)
    for line, target in links(path):
        if not target:
            broken.append((line, target, "empty link target"))
            continue
        if SCHEME.match(target):
            external.append((line, target))
            continue
        target_path, _, fragment = target.partition("#")
        target_path = urllib.parse.unquote(target_path.split("?", 1)[0])
        fragment = urllib.parse.unquote(fragment)
        if target_path:
            if target_path.startswith("/"):
                resolved = os.path.normpath(os.path.join(root, target_path.lstrip("/")))
            else:
                resolved = os.path.normpath(os.path.join(here, target_path))
            shown = os.path.relpath(resolved, root)
            if os.path.relpath(resolved, root).startswith(os.pardir):
                broken.append((line, target, f"points outside the repository ({shown})"))
                continue
            if not os.path.exists(resolved):
                broken.append((line, target, f"no such file: {shown}"))
                continue
        else:
            resolved, shown = path, os.path.relpath(path, root)
        if fragment and os.path.isfile(resolved) and resolved.lower().endswith(MARKDOWN_SUFFIXES):
            if fragment not in anchors(resolved):
                hint = ""
                if fragment.lower() in anchors(resolved):
                    hint = f" (anchors are lower-case: #{fragment.lower()})"
                broken.append((line, target, f"no heading with anchor #{fragment} in {shown}{hint}"))
    return broken, external


def default_files(root):
    files = [os.path.join(root, f) for f in DEFAULT_FILES]
    for pattern in DEFAULT_GLOBS:
        files.extend(sorted(glob.glob(os.path.join(root, pattern))))
    return files


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.path.dirname(here), help="repository root")
    parser.add_argument("--verbose", "-v", action="store_true", help="list external links too")
    parser.add_argument("files", nargs="*", help="Markdown files (default: the project's docs)")
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    files = [os.path.abspath(f) for f in args.files] or default_files(root)

    problems, checked = [], 0
    for path in files:
        name = os.path.relpath(path, root)
        if not os.path.isfile(path):
            problems.append(f"{name}: file to check does not exist")
            continue
        broken, external = check_file(path, root)
        checked += 1
        for line, target, reason in broken:
            problems.append(f"{name}:{line}: ({target}): {reason}")
        if args.verbose:
            for line, target in external:
                print(f"{name}:{line}: external, not fetched: {target}")
    if problems:
        print(f"{len(problems)} broken link(s):", file=sys.stderr)
        for p in problems:
            print(p)
        return 1
    if args.verbose:
        print(f"{checked} file(s) checked, no broken link", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
