"""`make repro` scored on the cluster-log corpus (tests/cluster_logs/, its README says the case
format): each case, rebuilt from a public failure report, and its variants, read as `make repro`
reads them (the same `clusterlogs.judge`), against the truth its report shows.

    .venv/bin/python benchmarks/repro_corpus.py [--corpus DIR] [--case ID] [--out FILE.json]

Each case is scored: right (its culprits, with its world size), right rank with a wrong world,
a wrong rank (one its report does not allow), none named, or, where the report shows no culprit,
a "cannot tell" that was right. Each variant (no pods.yaml, no timestamps, no [rankN]: prefixes,
the pods in another order, the pods named as each operator names them) must give its case's
verdict. Prints the table in docs/repro.md; --out writes every verdict.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from corpus_variants import variants, write  # noqa: E402  (beside this file)

from tuning.harness.clusterlogs import judge  # noqa: E402

CORPUS = ROOT / "tests" / "cluster_logs"


@dataclass
class Case:
    id: str
    path: Path
    meta: dict

    @property
    def truth(self) -> dict:
        return self.meta.get("truth") or {}

    @property
    def culprits(self) -> list[int]:
        return sorted(self.truth.get("culprits") or [])

    @property
    def allowed(self) -> set[int]:
        return set(self.truth.get("allowed") or self.culprits)

    def logs(self) -> dict[str, str]:
        """file name -> text, every file but case.yaml and pods.yaml."""
        return {
            p.name: p.read_text()
            for p in sorted(self.path.iterdir())
            if p.is_file() and p.name not in ("case.yaml", "pods.yaml")
        }

    def pods(self) -> list[dict] | None:
        path = self.path / "pods.yaml"
        if not path.is_file():
            return None
        doc = yaml.safe_load(path.read_text())
        return list(doc.get("items") or []) if isinstance(doc, dict) else None


def cases(corpus: Path = CORPUS) -> list[Case]:
    out = []
    for d in sorted(p for p in corpus.iterdir() if (p / "case.yaml").is_file()):
        out.append(Case(d.name, d, yaml.safe_load((d / "case.yaml").read_text()) or {}))
    return out


def verdict_of(folder: Path) -> dict:
    """What make repro says of the folder: its culprits, its world size, its class."""
    rec, _, _ = judge.judge(folder)
    v = rec.verdict
    return {
        "culprits": sorted(v.culprits) if v else [],
        "world": rec.read.world_size,
        "world_stated": rec.read.world_stated,
        "class": v.kind if v else None,
        "evidence": v.evidence if v else None,
        "could_not_tell": rec.could_not_tell,
    }


def score(case: Case, got: dict) -> str:
    named, truth = got["culprits"], case.culprits
    if any(r not in case.allowed for r in named):
        return "wrong rank"
    if not truth:
        return "cannot tell, right" if not named else "named, allowed"
    if not named:
        return "none named"
    if named != truth:
        return "named, allowed"
    return "right" if got["world"] == case.truth.get("world") else "right rank, wrong world"


# What a variant takes away that a verdict may need, as make repro says it lacks it ("naming a
# rank here takes the world size"), and whether the variant took it
LOST = {
    "world size": lambda variant, got, base: base["world_stated"] and not got["world_stated"],
    "lines' times": lambda variant, got, base: variant == "no timestamps",
    "pods' objects": lambda variant, got, base: variant.endswith("no pods.yaml"),
}


def keeps(got: dict, base: dict, variant: str = "") -> bool:
    """A variant keeps its case's verdict: the same culprits, and the same world size, or, where
    the variant's lines no longer state it (no pods.yaml), a floor that does not pass it, or
    "cannot tell" that says naming a rank takes what the variant took away (LOST)."""
    if got["culprits"] != base["culprits"]:
        return not got["culprits"] and any(
            f"naming a rank here takes the {what}" in x and lost(variant, got, base)
            for what, lost in LOST.items()
            for x in got["could_not_tell"]
        )
    if got["world_stated"] or not base["world_stated"]:
        return got["world"] == base["world"]
    return got["world"] <= base["world"]


def run(corpus: Path = CORPUS, only: str | None = None) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases(corpus):
            if only and case.id != only:
                continue
            got = {}
            for i, (name, (logs, pods)) in enumerate(variants(case).items()):
                folder = write(Path(tmp) / case.id / str(i), logs, pods)
                got[name] = verdict_of(folder)
                shutil.rmtree(folder)
            base = got["as reported"]
            kept = {k: keeps(g, base, k) for k, g in got.items()}
            rows.append(
                {
                    "case": case.id,
                    "source": case.meta.get("source"),
                    "sure": case.meta.get("sure"),
                    "truth": {"culprits": case.culprits, "world": case.truth.get("world")},
                    "verdict": base,
                    "score": score(case, base),
                    "variants": {k: {**got[k], "kept": kept[k]} for k in got},
                }
            )
    return rows


def _ranks(rs: list[int]) -> str:
    return ", ".join(map(str, rs)) or "none"


def table(rows: list[dict]) -> str:
    out = [
        "| case | report | world | culprit(s) | make repro | score | variants kept |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        v, t = r["verdict"], r["truth"]
        kept = [k for k, x in r["variants"].items() if x["kept"]]
        lost = [k for k, x in r["variants"].items() if not x["kept"]]
        said = f"{v['class'] or 'cannot tell'}: {_ranks(v['culprits'])} of {v['world']}"
        out.append(
            f"| {r['case']} | [{r['sure']}]({r['source']}) | {t['world']} | "
            f"{_ranks(t['culprits'])} | {said} | {r['score']} | {len(kept)}/{len(r['variants'])}"
            + (f" (not: {'; '.join(lost)})" if lost else "")
            + " |"
        )
    return "\n".join(out)


def summary(rows: list[dict]) -> str:
    shown = [r for r in rows if r["truth"]["culprits"]]
    blind = [r for r in rows if not r["truth"]["culprits"]]
    count = {s: sum(r["score"] == s for r in rows) for s in {r["score"] for r in rows}}
    variants = [x for r in rows for x in r["variants"].values()]
    return (
        f"{len(rows)} cases: of the {len(shown)} whose report shows the culprit, "
        f"{sum(r['score'] == 'right' for r in shown)} named right with the world size; "
        f"of the {len(blind)} it cannot show, {count.get('cannot tell, right', 0)} said so; "
        f"{count.get('wrong rank', 0)} named a rank the report does not allow; "
        f"{sum(x['kept'] for x in variants)} of {len(variants)} variants gave their case's verdict."
    )


# What fills a long job's log before it fails: NCCL's INFO lines, the Trainer's bar, warnings
NOISE = (
    "gpu-3:1201:1388 [{r}] NCCL INFO Channel 03/0 : {r}[{r}] -> {n}[{n}] via P2P/IPC/read",
    "[rank{r}]:[W1205 01:{m:02d}:00.1 ProcessGroupNCCL.cpp:4115] [PG ID 0 PG GUID 0 Rank {r}] "
    "using GPU {r} to perform barrier as devices used by this process are currently unknown.",
    " {p:2d}%|##        | {s}/100000 [10:02<39:48,  2.62s/it]",
    "{{'loss': '1.3{r}', 'grad_norm': '0.41', 'learning_rate': '1e-05', 'epoch': '0.{p}'}}",
)


def speed(case_id: str, mb: int) -> dict:
    """The case's logs, each pod's padded at its front with a long job's lines to `mb` MB in
    all, read as make repro reads them: the time, and whether the verdict held."""
    import time

    case = next(c for c in cases() if c.id == case_id)
    logs, pods = case.logs(), case.pods()
    per = (mb << 20) // len(logs)
    padded = {}
    for name, text in logs.items():
        lines, i = [], 0
        size = 0
        while size < per:
            x = NOISE[i % len(NOISE)].format(r=i % 8, n=(i + 1) % 8, m=i % 60, p=i % 100, s=i)
            lines.append(x)
            size += len(x) + 1
            i += 1
        padded[name] = "\n".join(lines) + "\n" + text
    with tempfile.TemporaryDirectory() as tmp:
        base = verdict_of(write(Path(tmp) / "base", logs, pods))
        folder = write(Path(tmp) / "big", padded, pods)
        total = sum(p.stat().st_size for p in folder.iterdir())
        t0 = time.perf_counter()
        got = verdict_of(folder)
        took = time.perf_counter() - t0
    held = (got["culprits"], got["world"]) == (base["culprits"], base["world"])
    return {"case": case_id, "mb": round(total / 1e6, 1), "seconds": round(took, 2), "held": held}


DOCS = ROOT / "docs" / "repro.md"
RECORDS = ROOT / "docs" / "records"
BEGIN, END = "<!-- corpus: benchmarks/repro_corpus.py --docs -->", "<!-- end corpus -->"


def record(rows: list[dict]) -> list[dict]:
    """The scoring trimmed to what the table reads: docs/records/repro_corpus.json."""
    return [
        {
            "case": r["case"],
            "source": r["source"],
            "sure": r["sure"],
            "truth": r["truth"],
            "verdict": {k: r["verdict"][k] for k in ("class", "culprits", "world")},
            "score": r["score"],
            "variants": {k: v["kept"] for k, v in r["variants"].items()},
        }
        for r in rows
    ]


def docs_section(rows: list[dict]) -> str:
    return f"{BEGIN}\n{table(rows)}\n\n{summary(rows)}\n{END}"


def write_docs(rows: list[dict]) -> None:
    text = DOCS.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    DOCS.write_text(text[:start] + docs_section(rows) + text[end:])
    RECORDS.mkdir(exist_ok=True)
    (RECORDS / "repro_corpus.json").write_text(json.dumps(record(rows), indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, default=CORPUS)
    p.add_argument("--case", help="score one case")
    p.add_argument("--out", type=Path, help="write every verdict (or the speed) as JSON")
    p.add_argument(
        "--docs",
        action="store_true",
        help="remake docs/repro.md's table and its record, docs/records/repro_corpus.json",
    )
    p.add_argument(
        "--speed", type=int, metavar="MB", help="time the read of --case padded to MB megabytes"
    )
    a = p.parse_args(argv)
    if a.speed:
        r = speed(a.case or "ds-galactica-30b-4node-cuda-oom", a.speed)
        print(
            f"{r['case']}: {r['mb']} MB read in {r['seconds']} s "
            f"({r['mb'] / r['seconds']:.1f} MB/s); verdict held: {r['held']}"
        )
        if a.out:
            a.out.write_text(json.dumps(r) + "\n")
        return 0 if r["held"] else 1
    rows = run(a.corpus, a.case)
    print(table(rows))
    print()
    print(summary(rows))
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1) + "\n")
    if a.docs:
        write_docs(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
