"""Records per second and memory of the data path, from 10 thousand to a million records.

    .venv/bin/python benchmarks/data_scale.py [--sizes 10000,100000,1000000]
        [--formats jsonl,json,parquet] [--ranks 8 --rank-sizes 100000,1000000] [--work DIR]

For each format and size, in a fresh process each (so peaks are their own):
- host: the harness's data check (tuning/harness/checks/preflight.py ``check_data``), as
  ``make up`` runs it before anything starts;
- rank: one rank's load-and-tokenize, the trainer's own ``_load_data`` and ``_tokenize``
  (tuning/container/sft_trainer.py), with the tiny model's tokenizer.
Seconds count the work alone (not imports or loading the tokenizer), as CPU seconds of the
process (the per-record figures: on a shared machine wall time swings with its neighbours' load)
and as wall seconds; peak RSS is the process's high-water mark (VmHWM), base RSS what it held
before the work. With --ranks N, N ranks on one
node (torch.distributed.run, gloo) load and tokenize together, as in one container: each
rank's peak, its private and proportional memory after reading every row once (an epoch's
reads), and the node's total (the sum of the ranks' PSS, sampled every 0.2 s). What the child
processes run: data_scale_children.py.
Records: the demo data's input/output shape, 32 words a side (73 tokens), ~340 bytes of JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from data_scale_children import child_host, child_rank, status

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MIB = 1 << 20


def make_data(work: Path, fmt: str, n: int) -> Path:
    path = work / f"d{n}.{fmt}"
    if path.exists():
        return path
    from tuning.container.demo_data import records

    base = records(min(n, 20000), seed=0, words=32)
    rows = (base[i % len(base)] for i in range(n))
    tmp = path.with_name(path.name + ".tmp")
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(list(rows)), tmp)
    else:
        with tmp.open("w") as fh:
            if fmt == "jsonl":
                fh.writelines(json.dumps(r) + "\n" for r in rows)
            else:  # a JSON array as people save one: indented, a field a line
                fh.write(json.dumps(list(rows), indent=2))
    tmp.rename(path)
    return path


def run_child(kind: str, data: Path, work: Path, ranks: int = 1) -> list[dict]:
    """One fresh process (or `ranks` under torch.distributed.run); their result lines, and for
    ranks the node's peak PSS (sampled)."""
    out = work / f"out-{kind}-{data.stem}-{data.suffix[1:]}-{ranks}"
    for old in out.glob("result-*.json"):  # a run before this one's
        old.unlink()
    args = [__file__, "--child", kind, str(data), str(out), str(work / "model")]
    if ranks > 1:
        args = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    node_peak = [0]

    def sample():
        while proc.poll() is None:
            pids = descendants(proc.pid)
            node_peak[0] = max(node_peak[0], sum(status("Pss", p) for p in pids))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, stderr = proc.communicate()
    sampler.join()
    if proc.returncode != 0:
        sys.exit(f"{kind} {data}: exit {proc.returncode}\n{stderr[-3000:]}")
    results = [json.loads(f.read_text()) for f in sorted(out.glob("result-*.json"))]
    for r in results:
        r["node_pss_peak"] = node_peak[0]
    return results


def descendants(pid: int) -> list[str]:
    found, todo = [], [str(pid)]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += task.read_text().split()
            except OSError:
                pass
    return found


def table(rows: list[list], head: list[str]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--formats", default="jsonl,json,parquet")
    parser.add_argument("--ranks", type=int, default=0, help="N ranks on one node (0: none)")
    parser.add_argument("--rank-sizes", default="100000,1000000")
    parser.add_argument("--rank-format", default="jsonl")
    parser.add_argument("--work", default="/tmp/data-scale")
    parser.add_argument("--child", nargs=4, metavar=("KIND", "DATA", "OUT", "MODEL"))
    args = parser.parse_args()
    if args.child:
        kind, data, out, model = args.child
        result = (child_host if kind == "host" else child_rank)(data, out, model)
        # a file a rank: ranks sharing one stdout can run their lines together
        Path(out).mkdir(parents=True, exist_ok=True)
        rank = os.environ.get("RANK", "0")
        (Path(out) / f"result-{rank}.json").write_text(json.dumps(result))
        return
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "model").exists():
        from tuning.container.tiny_model import build

        build(work / "model", arch="llama", seed=0)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows, per_record = [], {}
    for fmt in args.formats.split(","):
        for n in sizes:
            data = make_data(work, fmt, n)
            (host,) = run_child("host", data, work)
            (rank,) = run_child("rank", data, work)
            assert rank["records"] == n, rank
            per_record[(fmt, n)] = (host["cpu"] / n, rank["cpu"] / n)
            rows.append(
                [
                    fmt,
                    f"{n:,}",
                    f"{data.stat().st_size / MIB:,.0f}",
                    f"{host['cpu']:.2f} ({host['seconds']:.2f})",
                    f"{n / host['cpu']:,.0f}",
                    f"{host['peak'] / MIB:,.0f}",
                    f"{rank['load_cpu']:.2f}",
                    f"{rank['tokenize_cpu']:.2f}",
                    f"{n / rank['cpu']:,.0f} ({n / rank['seconds']:,.0f})",
                    f"{rank['peak'] / MIB:,.0f} ({rank['base'] / MIB:,.0f})",
                    f"{rank['tokenized'] / MIB:,.1f}",
                ]
            )
            print(rows[-1], flush=True)
    print(
        table(
            rows,
            [
                "format",
                "records",
                "file MiB",
                "host check CPU s (wall)",
                "host records/s",
                "host peak RSS MiB",
                "rank load CPU s",
                "rank tokenize CPU s",
                "rank records/s CPU (wall)",
                "rank peak RSS MiB (base)",
                "tokenized MiB",
            ],
        )
    )
    small, large = min(sizes), max(sizes)
    print(f"\nper-record CPU time at {large:,} / at {small:,} (goal <= 1.5):")
    for fmt in args.formats.split(","):
        (h0, r0), (h1, r1) = per_record[(fmt, small)], per_record[(fmt, large)]
        print(f"  {fmt}: host check {h1 / h0:.2f}, rank load-and-tokenize {r1 / r0:.2f}")
    if args.ranks > 1:
        ranks_table(work, args)


def ranks_table(work: Path, args) -> None:
    rows = []
    for n in (int(s) for s in args.rank_sizes.split(",")):
        data = make_data(work, args.rank_format, n)
        t0 = time.perf_counter()
        results = run_child("rank", data, work, args.ranks)
        wall = time.perf_counter() - t0
        assert len(results) == args.ranks and all(r["records"] == n for r in results)
        peak = max(r["peak"] - r["base"] for r in results)
        private = max(r["after_epoch"]["Private"] for r in results)
        pss = sum(r["after_epoch"]["Pss"] for r in results)
        rows.append(
            [
                f"{n:,}",
                args.ranks,
                f"{wall:.1f}",
                f"{max(r['cpu'] for r in results):.1f}",
                f"{peak / MIB:,.0f}",
                f"{peak / n:,.0f}",
                f"{private / MIB:,.0f}",
                f"{pss / MIB:,.0f}",
                f"{results[0]['node_pss_peak'] / MIB:,.0f}",
                f"{results[0]['tokenized'] / MIB:,.1f}",
                f"{results[0]['tokenized'] / n:,.0f}",
            ]
        )
        print(rows[-1], flush=True)
    print(
        table(
            rows,
            [
                "records",
                "ranks",
                "wall s",
                "most CPU s of a rank",
                "per-rank peak growth MiB",
                "per-rank peak growth B/record",
                "per-rank private after epoch MiB",
                "node PSS after epoch MiB",
                "node PSS peak MiB",
                "tokenized MiB (one copy)",
                "tokenized B/record",
            ],
        )
    )


if __name__ == "__main__":
    main()
