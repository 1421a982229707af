#!/usr/bin/env python3
"""Prints the two size limits of issue 35 for the simulator's sources and fails when one is broken.

  - no source file under sim/ over --max-file-lines lines (default 1,000);
  - at most --max-long-functions functions (default 15) over --function-lines lines (default 80).

A function's length is counted from the line of its opening brace to the line of its closing brace,
both included (what clang-tidy's readability-function-size calls LineThreshold counts the same
way, give or take the brace lines). Lambdas and local classes count as part of the function that
holds them. The scan is lexical: comments, string and character literals (raw strings included)
are blanked first; then a '{' opens a function body when the text before it since the last ';',
'{' or '}' ends like a function header: a ')' followed only by qualifiers (const, noexcept(...),
override, final, mutable, '-> type', '= ...' is excluded) or a constructor's initializer list.

Usage: tools/size_limits.py [--root DIR] [--list] [--self-test] [--max-file-lines N]
                            [--function-lines N] [--max-long-functions N]
Exit 0 when both limits hold, 1 when one is broken, 2 on bad arguments.
"""
import argparse
import os
import re
import sys

SOURCE_SUFFIXES = (".cpp", ".hpp", ".h", ".cc", ".def")


def blank_comments_and_literals(text):
    """Returns text with comments and literals replaced by spaces (newlines kept, so line numbers
    stay right)."""
    out = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and i + 1 < n and text[i + 1] == '"' and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            # A digit separator (1'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(n, j + 1)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


HEADER_TAIL = re.compile(
    r"\)\s*(?:const\s*|noexcept\s*(?:\([^()]*\))?\s*|override\s*|final\s*|mutable\s*|&\s*|&&\s*)*"
    r"(?:->\s*[\w:<>,\s*&]+)?\s*$")
NOT_FUNCTION = re.compile(r"\b(?:if|for|while|switch|catch|do|else|namespace|class|struct|union|enum)\b")
INITIALIZER_LIST = re.compile(r"\)\s*(?:noexcept\s*)?:\s*[\w:]+\s*[({]")
# A constructor's header up to a member's braced initializer: ") : a_(1), b_" before its '{'.
BRACED_MEMBER_INIT = re.compile(r"\)\s*(?:noexcept\s*)?:\s*(?:[^;{}]*[,])?\s*[\w:]+(?:<[^;{}]*>)?$")


def functions(text):
    """Yields (name, first_line, last_line) of every outermost function body in blanked text."""
    depth_stack = []  # for each open brace: True when it opens a function body
    inside_function = 0
    start = 0  # index after the last ';', '{' or '}'
    open_at = []
    for i, c in enumerate(text):
        if c == "{":
            head = text[start:i]
            is_function = False
            if inside_function == 0 and not BRACED_MEMBER_INIT.search(head.strip()):
                stripped = head.strip()
                if (HEADER_TAIL.search(stripped) or INITIALIZER_LIST.search(stripped)) and \
                        not NOT_FUNCTION.search(stripped.split("(")[0]) and \
                        not stripped.startswith("=") and "=" not in stripped.split("(")[0]:
                    is_function = True
            if not is_function and inside_function == 0 and BRACED_MEMBER_INIT.search(head.strip()):
                # A member's braced initializer in a constructor's initializer list (`: x_{0}`):
                # the header goes on after its closing brace.
                depth_stack.append("init")
                open_at.append((i, head))
                continue
            depth_stack.append(is_function)
            open_at.append((i, head))
            if is_function:
                inside_function += 1
            start = i + 1
        elif c == "}":
            if not depth_stack:
                start = i + 1
                continue
            was_function = depth_stack.pop()
            pos, head = open_at.pop()
            if was_function == "init":
                continue
            if was_function:
                inside_function -= 1
                first = text.count("\n", 0, pos) + 1
                last = text.count("\n", 0, i) + 1
                name_match = re.search(r"([~\w:]+(?:<[^<>]*>)?|operator\s*\S+)\s*\(", head)
                name = name_match.group(1) if name_match else "?"
                yield name, first, last
            start = i + 1
        elif c == ";" and inside_function == 0:
            start = i + 1
        elif c == ";":
            start = i + 1


SELF_TEST = r"""namespace a {
struct S {
    int f() const { return 1; }
    S() : x_(0), y_{1} {
        x_ = 2;
    }
    int x_, y_;
};
auto g(int v) -> int {
    auto lambda = [&](int y) {
        return y + v;
    };
    const char* text = R"x(
    "} { not a brace )x";
    char c = '}';
    // }
    return lambda(1'000) + (c == '{');
}
enum class E { A, B };
void h() noexcept {
    if (true) {
    }
}
}  // namespace a
"""
# (name, first line, last line) of every function in SELF_TEST: the in-class member on line 3, the
# constructor with its initializer list on lines 4-6, g on lines 9-18 with its lambda, raw string,
# character literals and comment inside, h on lines 20-23 with its if block. The struct, the enum
# and the namespace are not functions.
SELF_TEST_EXPECTED = [("f", 3, 3), ("S", 4, 6), ("g", 9, 18), ("h", 20, 23)]


def self_test():
    got = list(functions(blank_comments_and_literals(SELF_TEST)))
    if got != SELF_TEST_EXPECTED:
        print(f"size_limits self-test: expected {SELF_TEST_EXPECTED}, got {got}", file=sys.stderr)
        return 1
    print("size_limits self-test: ok")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--list", action="store_true", help="list every long file and function")
    parser.add_argument("--max-file-lines", type=int, default=1000)
    parser.add_argument("--function-lines", type=int, default=80)
    parser.add_argument("--max-long-functions", type=int, default=15)
    parser.add_argument("--self-test", action="store_true",
                        help="check the function scanner on a built-in sample, then scan")
    args = parser.parse_args()
    if args.self_test and self_test() != 0:
        return 1

    sim = os.path.join(args.root, "sim")
    if not os.path.isdir(sim):
        print(f"size_limits: {sim} is not a directory (give --root the repository)", file=sys.stderr)
        return 2
    long_files = []
    long_functions = []
    for directory, _, names in sorted(os.walk(sim)):
        for name in sorted(names):
            if not name.endswith(SOURCE_SUFFIXES):
                continue
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, args.root)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
            if lines > args.max_file_lines:
                long_files.append((lines, rel))
            for fn, first, last in functions(blank_comments_and_literals(text)):
                length = last - first + 1
                if length > args.function_lines:
                    long_functions.append((length, rel, first, fn))
    long_files.sort(reverse=True)
    long_functions.sort(key=lambda t: (-t[0], t[1], t[2]))
    files_ok = not long_files
    functions_ok = len(long_functions) <= args.max_long_functions
    print(f"files over {args.max_file_lines} lines: {len(long_files)} (limit 0) "
          f"{'ok' if files_ok else 'BROKEN'}")
    if args.list or not files_ok:
        for lines, rel in long_files:
            print(f"  {lines:6d}  {rel}")
    print(f"functions over {args.function_lines} lines: {len(long_functions)} "
          f"(limit {args.max_long_functions}) {'ok' if functions_ok else 'BROKEN'}")
    if args.list or not functions_ok:
        for length, rel, first, fn in long_functions:
            print(f"  {length:6d}  {rel}:{first}  {fn}")
    return 0 if files_ok and functions_ok else 1


if __name__ == "__main__":
    sys.exit(main())
