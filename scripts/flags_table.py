#!/usr/bin/env python3
"""Print the trainer's flags as a markdown table, from llmc/train_config.h's train_flags[].

Usage: python3 scripts/flags_table.py [path/to/train_config.h]

README.md holds this script's output between <!-- flags:begin --> and <!-- flags:end -->;
rerun it after changing a flag, so that the table cannot drift from the code. Deterministic:
the rows come in the order of the C table, nothing depends on the environment.
"""
import re
import sys
from pathlib import Path

KINDS = {"i": "int", "f": "float", "s": "string", "k": "schedule"}

# one C string literal, with its escapes
STRING = r'"((?:[^"\\]|\\.)*)"'
# {"-x", 'k', TRAIN_FIELD_(field), min, max, "help" "more help" ...},
ENTRY = re.compile(
    r'\{\s*"(-[A-Za-z]+)"\s*,\s*\'(.)\'\s*,\s*TRAIN_FIELD_\(\w+\)\s*,\s*([^,]+),\s*([^,]+),\s*'
    r'((?:' + STRING + r'\s*)+)\}', re.S)


def c_string(body):
    return bytes(body, "utf-8").decode("unicode_escape")


def help_text(literals):
    text = "".join(c_string(m.group(1)) for m in re.finditer(STRING, literals))
    text = re.sub(r"\|\s*\n\s*", "|", text)
    text = re.sub(r"\s*\n\s*", " ", text).strip()
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|")


def main():
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "llmc" / "train_config.h"
    src = path.read_text(encoding="utf-8")
    start = src.index("train_flags[] = {")
    end = src.index("\n};", start)
    table = src[start:end]
    rows = ["| flag | value | meaning |", "|---|---|---|"]
    for m in ENTRY.finditer(table):
        flag, kind, _, _, literals = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)
        rows.append(f"| `{flag}` | {KINDS.get(kind, kind)} | {help_text(literals)} |")
    if len(rows) == 2:
        sys.exit(f"{path}: no train_flags entries found")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
