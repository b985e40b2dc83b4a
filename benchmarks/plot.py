"""Plot allreduce sweeps written by benchmarks/allreduce.py --json.

    python benchmarks/plot.py run.json [more.json ...] -o allreduce.png [--title TEXT]

Top panel: bus bandwidth against message size (log2 axis) for ml_comm (solid) and
MPI_Allreduce (dashed), one colour per JSON file. Bottom panel: ratio = time_MPI / time_ml_comm
(above 1: ml_comm is faster). With a single rank busbw is 0 by definition, so algbw is plotted.
Needs only matplotlib (Agg backend, no display).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def load(path: str) -> dict:
    with open(path) as f:
        data = json.load(f)
    if "rows" not in data or "header" not in data:
        raise ValueError(f"{path}: not an allreduce.py --json file (no 'header'/'rows')")
    return data


def size_label(n: float) -> str:
    n = int(n)
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n // size}{unit}"
    return str(n)


def series_label(name: str, header: dict) -> str:
    chunk = header.get("chunk_bytes")
    chunk = size_label(chunk) if chunk else "default"
    settings = (
        f"{header.get('nranks')} ranks, {header.get('threads_per_team')} thr/team, "
        f"chunk {chunk}, {header.get('op')}"
    )
    return f"{Path(name).stem}: {settings}" if name.endswith(".json") else settings


def write_plot(results: list[tuple[str, dict]], out: str, title: str | None = None) -> None:
    """results: (name, data) pairs, data as written by allreduce.py; writes a PNG to out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    fig, (ax_bw, ax_ratio) = plt.subplots(
        2, 1, figsize=(10, 8), sharex=True, gridspec_kw={"height_ratios": [3, 1.4]}
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    all_sizes: list[int] = []
    bw_names = set()
    for i, (name, data) in enumerate(results):
        header, rows = data["header"], data["rows"]
        if not rows:
            continue
        color = colors[i % len(colors)]
        bw = "busbw" if int(header.get("nranks", 2)) > 1 else "algbw"
        bw_names.add(bw)
        sizes = [r["bytes"] for r in rows]
        all_sizes += sizes
        label = series_label(name, header)
        ax_bw.plot(sizes, [r[f"mlcomm_{bw}"] for r in rows], "-o", ms=3.5, color=color, label=label)
        ax_bw.plot(sizes, [r[f"mpi_{bw}"] for r in rows], "--s", ms=3, color=color, alpha=0.8)
        ax_ratio.plot(sizes, [r["ratio"] for r in rows], "-o", ms=3.5, color=color)
        latency = header.get("latency_bytes")
        if header.get("alg") == "auto" and latency and min(sizes) < latency <= max(sizes):
            for ax in (ax_bw, ax_ratio):
                ax.axvline(latency, color=color, ls=":", lw=1, alpha=0.7)
            ax_bw.annotate(
                f" ml_comm: ring from {size_label(latency)}",
                (latency, 0.02),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                color=color,
                rotation=90,
                va="bottom",
            )
        bad = [r for r in rows if r["mlcomm_wrong"] or r["mpi_wrong"]]
        if bad:
            ax_bw.plot(
                [r["bytes"] for r in bad],
                [r[f"mlcomm_{bw}"] for r in bad],
                "x",
                color="red",
                ms=10,
                mew=2,
                label=f"{label}: #wrong > 0",
            )

    ax_bw.set_xscale("log", base=2)
    ax_bw.set_yscale("log")
    ax_bw.set_ylabel(f"{' / '.join(sorted(bw_names)) or 'busbw'} (GB/s)")
    ax_bw.grid(True, which="major", alpha=0.4)
    ax_bw.grid(True, which="minor", axis="y", alpha=0.15)
    # Two legends: what the colours are (files/settings) and what the line styles are.
    first = ax_bw.legend(loc="upper left", fontsize=8, title="runs", title_fontsize=8)
    ax_bw.add_artist(first)
    styles = [
        Line2D([], [], color="black", ls="-", marker="o", ms=3.5, label="ml_comm"),
        Line2D([], [], color="black", ls="--", marker="s", ms=3, label="MPI_Allreduce"),
    ]
    ax_bw.legend(handles=styles, loc="lower right", fontsize=8)

    ax_ratio.axhline(1.0, color="gray", lw=1)
    ax_ratio.set_ylabel("time MPI / time ml_comm")
    ax_ratio.set_xlabel("message size (bytes)")
    ax_ratio.grid(True, alpha=0.4)
    ax_ratio.set_ylim(bottom=0)

    if all_sizes:
        lo, hi = min(all_sizes).bit_length() - 1, max(all_sizes).bit_length() - 1
        step = max(1, -(-(hi - lo) // 12))
        ax_ratio.xaxis.set_major_locator(FixedLocator([2**k for k in range(lo, hi + 1, step)]))
        ax_ratio.xaxis.set_minor_locator(NullLocator())
        ax_ratio.xaxis.set_major_formatter(FuncFormatter(lambda x, _: size_label(x)))

    if title is None and results:
        h = results[0][1]["header"]
        mpi = " ".join(str(h.get("mpi_library", "")).split())[:60]
        title = (
            f"allreduce {h.get('dtype', '')}: ml_comm {h.get('ml_comm_version', '')} vs "
            f"MPI_Allreduce ({mpi})"
        )
        if len(results) == 1:
            title += f"\n{h.get('hostname', '')}, {h.get('date', '')}"
    fig.suptitle(title or "allreduce", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("json", nargs="+", help="files written by allreduce.py --json")
    p.add_argument("-o", "--output", default="allreduce.png", help="PNG to write")
    p.add_argument("--title", help="figure title (default: from the first file's header)")
    args = p.parse_args(argv)
    try:
        results = [(path, load(path)) for path in args.json]
    except (OSError, ValueError) as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 2
    write_plot(results, args.output, args.title)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
