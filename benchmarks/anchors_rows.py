"""The rows of ``benchmarks/anchors.py``: how result files merge and print (standard library
only: it runs where the anchors run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# one model on one processor of one machine at one thread count: measured together
GROUP = ("model", "processor", "machine", "threads")
KEY = (*GROUP, "anchor")


def merge(path: str, rows: list[dict]) -> list[dict]:
    """Rows into ``path`` (atomically): a (model, processor, machine) in ``rows`` replaces all
    of its old rows, so a baseline no longer built leaves no stale row."""
    from codl_tvm.outputs import write_json

    old = json.loads(Path(path).read_text())["rows"] if Path(path).exists() else []
    fresh = {tuple(r.get(k) for k in GROUP) for r in rows}
    kept = [r for r in old if tuple(r.get(k) for k in GROUP) not in fresh]
    new = list({tuple(r.get(k) for k in KEY): r for r in kept + rows}.values())
    write_json(path, {"rows": new}, dumps=lambda d: json.dumps(d, indent=1) + "\n")
    return new


def table(rows: list[dict]) -> str:
    def f(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    head = ["model", "proc", "machine", "thr", "codl ms", "anchor", "anchor ms",
            "anchor / codl", "rel_err", "anchor rel_err", "rounds"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        c, a = r.get("codl_ms"), r.get("anchor_ms")
        out.append("| " + " | ".join([
            r["model"], r["processor"], r["machine"], str(r.get("threads", "-")),
            f(c, ".2f"), r["anchor"], f(a, ".2f"), f(a / c if a and c else None, ".2f"),
            f(r.get("rel_err"), ".1e"), f(r.get("anchor_rel_err"), ".1e"),
            str(r.get("rounds", "-"))]) + " |" + (f" {r['skipped']}" if "skipped" in r else ""))
    return "\n".join(out)
