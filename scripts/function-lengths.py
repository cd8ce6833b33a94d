#!/usr/bin/env python3
"""Lines per function definition in C++ files, longest first: a function starts at a line in
column 0 that is not a namespace, class, struct or enum and whose braces open, and ends at the line
its braces close. Good enough for this tree's style (namespaces not indented, one definition per
top-level block). Usage: scripts/function-lengths.py report/*.cpp [--over N]"""
import re
import sys


def functions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if (line and not line[0].isspace() and not line.startswith(("//", "#", "}", "namespace", "using"))
                and not re.match(r"(struct|class|enum|union|template\s*<[^>]*>\s*(struct|class))\b", line)
                and "(" in line):
            depth, j, opened = 0, i, False
            while j < len(lines):
                code = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'|//.*', "", lines[j])
                depth += code.count("{") - code.count("}")
                opened = opened or "{" in code
                if code.rstrip().endswith(";") and not opened:
                    break  # a declaration
                if opened and depth == 0:
                    name = re.search(r"([A-Za-z_][\w:~<>]*)\s*\(", line)
                    yield j - i + 1, path, i + 1, name.group(1) if name else line.strip()
                    break
                j += 1
            i = j + 1
            continue
        i += 1


def main():
    args = sys.argv[1:]
    over = 0
    if "--over" in args:
        k = args.index("--over")
        over = int(args[k + 1])
        del args[k:k + 2]
    found = sorted((f for p in args for f in functions(p)), reverse=True)
    for length, path, line, name in found:
        if length > over:
            print(f"{length:5d}  {path}:{line}  {name}")


if __name__ == "__main__":
    main()
