#!/usr/bin/python3
"""Draws bench/results/latest.svg from the benchmark's data: latency per system
and workload as horizontal bars on a log scale (bar: median, whisker: p90).
Standard library only; `chart.py latest.json > latest.svg` redraws it."""
import json
import math
import sys
from xml.sax.saxutils import escape

ROW, LABEL_W, PLOT_W, TOP = 18, 330, 520, 56
COLORS = {"airlock": "#1b7f3b", "airlock-run": "#3fa35f", "airlock-mcp": "#6cc489"}


def svg(data):
    from bench import SYSTEMS, WORKLOADS  # the labels live with the benchmark

    groups = []
    for w, title in WORKLOADS.items():
        got = data["results"].get(w, {})
        rows = [(k, got[k]) for k in SYSTEMS if "median_ms" in got.get(k, {})]
        if rows:
            groups.append((title, rows))
    vals = [r["p90_ms"] for _, rows in groups for _, r in rows] or [1]
    lo = 10 ** math.floor(math.log10(max(min(r["median_ms"] for _, rows in groups
                                                for _, r in rows), 1e-3)))
    hi = 10 ** math.ceil(math.log10(max(vals)))
    span = math.log10(hi) - math.log10(lo)

    def x(v):
        v = min(max(v, lo), hi)
        return LABEL_W + PLOT_W * (math.log10(v) - math.log10(lo)) / span

    n_rows = sum(len(rows) + 1.5 for _, rows in groups)
    height = int(TOP + n_rows * ROW + 40)
    width = LABEL_W + PLOT_W + 80
    m = data["machine"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20" font-size="15" font-weight="bold">airlock vs alternatives: '
           f'latency per run (ms, log scale; bar = median, line = p90)</text>',
           f'<text x="10" y="38" fill="#555">{escape(m["cpu"])}, {m["cores"]} cores, Linux '
           f'{escape(m["kernel"])}, {escape(m["date"])}{" (QUICK)" if data["quick"] else ""}'
           f'</text>']
    e = math.log10(lo)
    while e <= math.log10(hi) + 1e-9:
        gx = x(10 ** e)
        out.append(f'<line x1="{gx:.1f}" y1="{TOP - 6}" x2="{gx:.1f}" y2="{height - 30}" '
                   f'stroke="#ddd"/>')
        label = f"{10 ** e:g}"
        out.append(f'<text x="{gx:.1f}" y="{height - 14}" text-anchor="middle" '
                   f'fill="#555">{label}</text>')
        e += 1
    y = TOP
    for title, rows in groups:
        out.append(f'<text x="10" y="{y + 12}" font-weight="bold">{escape(title)}</text>')
        y += ROW * 1.2
        for k, r in rows:
            c = COLORS.get(k, "#7a8ca3")
            out.append(f'<text x="20" y="{y + 12}">{escape(SYSTEMS.get(k, k))}</text>')
            out.append(f'<rect x="{LABEL_W}" y="{y + 3}" width="{x(r["median_ms"]) - LABEL_W:.1f}" '
                       f'height="{ROW - 6}" fill="{c}"/>')
            out.append(f'<line x1="{x(r["median_ms"]):.1f}" y1="{y + ROW / 2}" '
                       f'x2="{x(r["p90_ms"]):.1f}" y2="{y + ROW / 2}" stroke="#222"/>')
            out.append(f'<text x="{x(r["p90_ms"]) + 4:.1f}" y="{y + 12}" fill="#333">'
                       f'{r["median_ms"]:.3g}</text>')
            y += ROW
        y += ROW * 0.3
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        sys.stdout.write(svg(json.load(f)))
