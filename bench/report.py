"""One place for how benchmarks report: a table on stdout, JSON and Markdown files, a PNG plot."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

RESULTS_DIR = Path(os.environ.get("RMQ_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")


def format_number(value) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(format_number(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def machine() -> dict:
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}


def write(name: str, rows: list[dict], columns: list[str], notes: list[str], plot=None) -> list[Path]:
    """Print the table and notes; write ``name``-TIMESTAMP .json / .md (and .png when ``plot``,
    a function taking a matplotlib Axes, is given and matplotlib is installed)."""
    table = markdown_table(rows, columns)
    print()
    print(table)
    for note in notes:
        print(note)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stem = RESULTS_DIR / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    paths = [stem.with_suffix(".json"), stem.with_suffix(".md")]
    paths[0].write_text(json.dumps({"benchmark": name, "machine": machine(), "rows": rows, "notes": notes}, indent=1))
    paths[1].write_text(f"# {name}\n\n{table}\n\n" + "\n".join(f"- {n}" for n in notes) + "\n")
    if plot is not None:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("(matplotlib is not installed: no plot)")
        else:
            fig, ax = plt.subplots(figsize=(9, 4.5))
            plot(ax)
            fig.tight_layout()
            paths.append(stem.with_suffix(".png"))
            fig.savefig(paths[-1], dpi=110)
            plt.close(fig)
    print("written: " + ", ".join(str(p) for p in paths))
    return paths
