"""Kernel launches per execution of a compiled XLA program, read off its optimised HLO text.

Each `while` body's top-level instructions that are not bookkeeping (parameters,
tuples, get-tuple-element, constants, bitcasts) count as one launch each, times
the loop's known trip count, nested loops multiplied; a `conditional` counts
one launch plus its largest branch, a `call` (a command buffer on a GPU) its
callee. A count, not a timing: on a GPU, where small per-step kernels are
bound by their launches, it says where a program launches more than another
(BENCHMARKS.md section 6 compares ours, PureJaxRL's and rejax's PPO so).

Reads the biggest `*after_optimizations.txt` of an XLA dump folder, as
`XLA_FLAGS=--xla_dump_to=DIR python ...` writes it on any backend:

    XLA_FLAGS=--xla_dump_to=/tmp/dump python -m benchmarks.vs_purejaxrl --child 1
    python -m benchmarks.hlo_launches /tmp/dump --label ours [--json out.json]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys

BOOKKEEPING = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast", "after-all", "partition-id",
               "replica-id", "opt-barrier", "add-dependency"}
# not launched: bookkeeping, and the halves of an async pair after the one that starts it
_NOT_LAUNCHED = BOOKKEEPING | {"async-update", "async-done"}
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*)$")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"')


def _opcode(rhs: str) -> str:
    """The opcode of an instruction's right-hand side "<shape> opcode(operands), attributes"."""
    depth = 0
    for i, c in enumerate(rhs):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == " " and depth == 0:
            m = re.match(r"([a-z][a-z0-9\-]*)\(", rhs[i + 1:])
            if m:
                return m.group(1)
    return "?"


def parse(text: str) -> tuple[dict[str, list[tuple[str, str]]], str | None]:
    """({computation: [(opcode, rhs)]}, the entry computation's name) of an HLO module's text."""
    computations, entry, current = {}, None, None
    for line in text.splitlines():
        if current is None:
            m = _COMPUTATION.match(line)
            if m and "=" not in line.split("{")[0].split("(")[0]:
                current = m.group(2)
                computations[current] = []
                entry = current if m.group(1) else entry
            continue
        if line.strip() == "}":
            current = None
            continue
        m = _INSTRUCTION.match(line)
        if m:
            computations[current].append((_opcode(m.group(1)), m.group(1)))
    return computations, entry


def _ref(rhs: str, attribute: str) -> str:
    return re.search(attribute + r"=%?([\w.\-]+)", rhs).group(1)


def count(text: str) -> dict:
    """Launches per execution of the module in `text`, and its loops (depth, trips, launches per trip, opcodes)."""
    computations, entry = parse(text)
    memo: dict[str, int] = {}

    def launches(name: str) -> int:
        if name not in memo:
            total = 0
            for op, rhs in computations.get(name, []):
                if op in _NOT_LAUNCHED:
                    continue
                if op == "while":
                    trips = _TRIPS.search(rhs)
                    total += (int(trips.group(1)) if trips else 1) * (
                        launches(_ref(rhs, "body")) + launches(_ref(rhs, "condition")))
                elif op == "conditional":
                    branches = re.search(r"branch_computations=\{([^}]*)\}", rhs)
                    names = (re.findall(r"%?([\w.\-]+)", branches.group(1)) if branches else
                             [_ref(rhs, "true_computation"), _ref(rhs, "false_computation")])
                    total += 1 + max(launches(b) for b in names)
                elif op == "call":
                    total += launches(_ref(rhs, "to_apply"))
                else:
                    total += 1
            memo[name] = total
        return memo[name]

    loops = []

    def walk(name: str, times: int, depth: int) -> None:
        for op, rhs in computations.get(name, []):
            if op == "while":
                body, trips = _ref(rhs, "body"), _TRIPS.search(rhs)
                trips = int(trips.group(1)) if trips else 1
                ops: dict[str, int] = {}
                for o, _ in computations.get(body, []):
                    if o not in _NOT_LAUNCHED:
                        ops[o] = ops.get(o, 0) + 1
                loops.append({"depth": depth, "trips": trips, "total_trips": times * trips,
                              "launches_per_trip": launches(body), "top_level_ops": ops})
                walk(body, times * trips, depth + 1)
            elif op == "call":
                walk(_ref(rhs, "to_apply"), times, depth)

    if entry is None:
        raise ValueError("no ENTRY computation in the HLO text")
    walk(entry, 1, 0)
    return {"launches": launches(entry), "loops": loops}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dump", help="an XLA dump folder (XLA_FLAGS=--xla_dump_to=DIR) or one *after_optimizations.txt")
    p.add_argument("--label", default=None, help="a name for the program in the output")
    p.add_argument("--json", metavar="PATH", help="also write the counts as JSON here")
    args = p.parse_args(argv)
    files = [args.dump] if os.path.isfile(args.dump) else glob.glob(os.path.join(args.dump, "*after_optimizations.txt"))
    if not files:
        sys.exit(f"hlo_launches: no *after_optimizations.txt in {args.dump} (was XLA_FLAGS=--xla_dump_to set?)")
    path = max(files, key=os.path.getsize)  # the train program, not the small helper modules
    with open(path) as f:
        result = dict(count(f.read()), label=args.label or path, file=os.path.basename(path))
    print(f"{result['label']}: {result['launches']:,} launches per execution; loops:")
    for loop in result["loops"]:
        top = sorted(loop["top_level_ops"].items(), key=lambda kv: -kv[1])[:6]
        print(f"  {'  ' * loop['depth']}{loop['trips']} trips (x{loop['total_trips']:,} in all), "
              f"{loop['launches_per_trip']} launches a trip; {top}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
