#!/usr/bin/env python3
"""Mutation scores from cargo-mutants' own outcome files.

Reads docs/mutants/<area>/outcomes.json (kept by `scripts/mutants.sh AREA --keep`; an
area run in shards keeps outcomes-shard-K-of-N.json files instead, read together) and
docs/mutants/verdicts.tsv (one line per surviving mutant: its name as cargo-mutants
prints it, a verdict — `equivalent`, `outside` (outside what the area's tests are for),
`killed` (a test added since catches it) or `open` — and a one-line reason), and prints
the scores as a Markdown table, with every survivor and its verdict. With `--write`, it
replaces the block between `<!-- mutants:begin -->` and `<!-- mutants:end -->` in
docs/conformance.md instead, so the scores there are computed, never transcribed.

The score of an area is caught / (caught + missed - equivalent - outside), where a
survivor marked `killed` still counts as missed in the run it came from and is shown
as caught since.
"""

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = ROOT / "docs" / "mutants"
DOC = ROOT / "docs" / "conformance.md"
BEGIN, END = "<!-- mutants:begin -->", "<!-- mutants:end -->"
VERDICTS = {"equivalent", "outside", "killed", "open"}


def verdicts():
    out = {}
    path = MUTANTS / "verdicts.tsv"
    if not path.exists():
        return out
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3 or parts[1] not in VERDICTS:
            sys.exit(f"{path}:{n}: want `name<TAB>verdict<TAB>reason`, verdict one of {sorted(VERDICTS)}")
        out[parts[0]] = (parts[1], parts[2])
    return out


def mutant_name(outcome):
    scenario = outcome.get("scenario")
    if not isinstance(scenario, dict) or "Mutant" not in scenario:
        return None
    m = scenario["Mutant"]
    if "name" in m:
        return m["name"]
    span = m.get("span", {}).get("start", {})
    return f'{m.get("file")}:{span.get("line")}:{span.get("column")}: replace {m.get("function", {}).get("function_name", "?")} with {m.get("replacement")}'


def outcome_files(area_dir):
    return sorted(area_dir.glob("outcomes*.json"))


def label(area):
    """The area's name, with the shards run when an area run in shards is incomplete."""
    shards = [re.fullmatch(r"outcomes-shard-(\d+)-of-(\d+)\.json", p.name) for p in outcome_files(MUTANTS / area)]
    shards = [m for m in shards if m]
    if not shards:
        return area
    n = int(shards[0].group(2))
    done = sorted(int(m.group(1)) for m in shards)
    if len(done) == n:
        return area
    return f"{area} (shards {', '.join(map(str, done))} of 0–{n - 1} only)"


def summarize(area, known):
    outcomes = []
    for path in outcome_files(MUTANTS / area):
        outcomes.extend(json.loads(path.read_text(encoding="utf-8")).get("outcomes", []))
    counts = {"caught": 0, "missed": 0, "timeout": 0, "unviable": 0}
    survivors = []
    for o in outcomes:
        name = mutant_name(o)
        if name is None:
            continue
        summary = o.get("summary", "")
        kind = {
            "CaughtMutant": "caught",
            "MissedMutant": "missed",
            "Timeout": "timeout",
            "Unviable": "unviable",
        }.get(summary)
        if kind is None:
            sys.exit(f"{area}: unknown outcome {summary!r} for {name}")
        counts[kind] += 1
        if kind == "missed":
            survivors.append((name, *known.get(name, ("open", "no verdict yet"))))
    excluded = sum(1 for _, v, _ in survivors if v in ("equivalent", "outside"))
    killed = sum(1 for _, v, _ in survivors if v == "killed")
    # A timeout is a mutant the tests stopped (an endless loop): detected.
    detected = counts["caught"] + counts["timeout"]
    judged = detected + counts["missed"] - excluded
    return counts, survivors, detected, killed, judged, excluded


def table():
    known = verdicts()
    areas = sorted(p.name for p in MUTANTS.iterdir() if outcome_files(p)) if MUTANTS.exists() else []
    if not areas:
        return "No mutation run is kept yet (`scripts/mutants.sh AREA --keep`).\n"
    lines = [
        "| area | mutants | caught | timed out | missed | unviable | equivalent or outside | score in the run | score now (killed since) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    details = []
    for area in areas:
        counts, survivors, detected, killed, judged, excluded = summarize(area, known)
        total = sum(counts.values())
        run = f"{100 * detected / judged:.0f}% ({detected}/{judged})" if judged else "—"
        now = f"{100 * (detected + killed) / judged:.0f}% ({detected + killed}/{judged})" if judged else "—"
        lines.append(
            f"| {label(area)} | {total} | {counts['caught']} | {counts['timeout']} | {counts['missed']} | "
            f"{counts['unviable']} | {excluded} | {run} | {now} |"
        )
        if survivors:
            details.append(f"\nSurvivors of `{area}`:\n\n| mutant | verdict | why |\n|---|---|---|")
            for name, verdict, why in survivors:
                details.append(f"| `{name}` | {verdict} | {why} |")
    return "\n".join(lines) + "\n" + "\n".join(details) + "\n"


def main():
    text = table()
    if "--write" not in sys.argv[1:]:
        print(text, end="")
        return
    doc = DOC.read_text(encoding="utf-8")
    if BEGIN not in doc or END not in doc:
        sys.exit(f"{DOC} has no {BEGIN} … {END} block")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{text}{END}{tail}", encoding="utf-8")
    print(f"wrote the scores of {DOC}")


if __name__ == "__main__":
    main()
