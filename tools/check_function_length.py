#!/usr/bin/env python3
"""Fails when a C++ function in the given files or folders is longer than --max lines.

A function's length is the number of lines from its opening brace to its closing brace, both
included (its signature is not counted; a lambda or a local class counts towards the function
it sits in). Functions are found by matching braces after comments, string and character
literals and preprocessor lines are blanked, so no compiler is needed: a brace opens a function
body when the text before it (since the last ';', '{' or '}' of the same scope) has a parameter
list and ends in one (or in qualifiers: const, override, noexcept, '-> type', or a constructor's
initialiser list); namespaces, classes, structs, unions and enums are scopes looked into;
any other brace (an initialiser) is skipped.

Usage: check_function_length.py [--max N] PATH...  (a folder: its *.cc and *.h files, its
sub-folders included). Prints one line per function over the limit ("file:line: Name is 95 lines (max
80)") and exits 1 when there is one, 0 otherwise, 2 on a usage error (a path that does not
exist). python3 standard library only.
"""

import argparse
import os
import re
import sys

SCOPE_RE = re.compile(r"\b(namespace|class|struct|union|enum|extern)\b")
QUALIFIERS_RE = re.compile(
    r"^(\s|const\b|volatile\b|override\b|final\b|mutable\b|noexcept\b(\s*\(\))?|&&?|"
    r"->\s*[\w:<>,\s\*&\[\]]+)*$")
NAME_RE = re.compile(r"(operator\s*(\(\)|[^\s(]+)|~?[A-Za-z_]\w*(::~?[A-Za-z_]\w*)*)\s*$")


def blank_source(text):
    """Comments, string/char literals and preprocessor lines replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append("  \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if c == "\n":
            line_start = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            close = ")" + m.group(1) + '"'
            end = text.find(close, i + m.end())
            end = n if end < 0 else end + len(close)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:end]))
            i = end
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            end = min(j + 1, n)
            out.append(c + " " * (end - i - 2) + c if end - i >= 2 else c)
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_groups(head):
    """The head with every (...), [...] and {...} group emptied, and whether it has a top-level
    (...) group and no group left open (a brace inside an open parenthesis is an argument)."""
    depth = 0
    flat = []
    had_parens = False
    for ch in head:
        if ch in "({[":
            if depth == 0:
                flat.append(ch)
                had_parens = had_parens or ch == "("
            depth += 1
        elif ch in ")}]":
            depth -= 1
            if depth == 0:
                flat.append(ch)
        elif depth == 0:
            flat.append(ch)
    return "".join(flat), had_parens and depth == 0


def classify(head):
    """'scope', 'function' or 'other' for the text before a '{' at scope level."""
    h = re.sub(r"\s+", " ", head).strip()
    h = re.sub(r"\b(public|private|protected)\s*:", " ", h).strip()
    if not h:
        return "other", ""
    # A template head's <...> may hold 'class' or 'typename': drop it first.
    no_template = re.sub(r"^template\s*<.*?>\s*", "", h)
    if SCOPE_RE.match(no_template) or re.match(r"^(typedef|using)\b.*\b(struct|enum)\b",
                                               no_template):
        return "scope", ""
    flat, had_parens = strip_groups(h)
    if not had_parens:
        return "other", ""
    # The parameter list is the first top-level (...) with a name before it, no '=' (an
    # initialiser or a lambda) and only qualifiers or a constructor's initialiser list after it.
    for first in [i for i, ch in enumerate(flat) if flat.startswith("()", i)]:
        before, after = flat[:first], flat[first + 2:]
        if "=" in re.sub(r"operator\s*[^\s(]*", "", before):
            return "other", ""
        m = NAME_RE.search(before)
        if m and tail_ok(after):
            return "function", m.group(1)
    return "other", ""


def tail_ok(after):
    """Whether the text after a parameter list can end a function head."""
    stripped = after.lstrip()
    if stripped.startswith(":") and not stripped.startswith("::"):
        init = stripped[1:]
        return bool(init.strip()) and bool(
            re.fullmatch(r"\s*[\w:<>]+\s*[({][)}](\s*,\s*[\w:<>]+\s*[({][)}])*\s*", init))
    return bool(QUALIFIERS_RE.match(after))


def functions(text):
    """Yields (name, first_line, lines) for each function body in C++ source `text`."""
    src = blank_source(text)
    stack = []  # per open brace: ('scope'|'function'|'other'|'inner', line, name)
    head = []
    line = 1
    for ch in src:
        if ch == "\n":
            line += 1
        in_function = any(kind == "function" for kind, _, _ in stack)
        if ch == "{":
            if in_function:
                stack.append(("inner", line, ""))
            else:
                kind, name = classify("".join(head))
                stack.append((kind, line, name))
                if kind == "other":
                    head.append("{")
                    continue
            head = []
        elif ch == "}":
            if not stack:
                head = []
                continue
            kind, start, name = stack.pop()
            if kind == "function":
                yield name, start, line - start + 1
            if kind == "other" and not in_function_stack(stack):
                head.append("}")
                continue
            head = []
        elif ch == ";":
            head = []
        elif not in_function:
            head.append(ch)


def in_function_stack(stack):
    return any(kind == "function" for kind, _, _ in stack)


def source_files(paths):
    for p in paths:
        if os.path.isdir(p):
            for top, dirs, names in os.walk(p):
                dirs.sort()
                for name in sorted(names):
                    if name.endswith((".cc", ".h", ".cpp", ".hpp")):
                        yield os.path.join(top, name)
        elif os.path.isfile(p):
            yield p
        else:
            raise FileNotFoundError(p)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=80, help="most lines a function may have")
    parser.add_argument("--list", action="store_true", help="print every function's length")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    over = 0
    try:
        files = list(source_files(args.paths))
    except FileNotFoundError as e:
        print(f"check_function_length: {e.args[0]}: no such file or folder", file=sys.stderr)
        return 2
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for name, start, lines in functions(text):
            if args.list:
                print(f"{path}:{start}: {name} {lines}")
            if lines > args.max:
                over += 1
                print(f"{path}:{start}: {name} is {lines} lines (max {args.max})")
    if over:
        print(f"check_function_length: {over} function(s) over {args.max} lines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
