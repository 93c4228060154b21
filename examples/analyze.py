# The demo's guest code: it runs inside the airlock sandbox. It reads the
# staged workspace from /input, summarises revenue per region, and leaves a
# CSV and an SVG bar chart in /output, which airlock returns as results.
import csv
from collections import defaultdict

revenue = defaultdict(float)
with open("/input/sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        revenue[row["region"]] += int(row["units"]) * float(row["unit_price"])

regions = sorted(revenue, key=revenue.get, reverse=True)
with open("/output/summary.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["region", "revenue"])
    for r in regions:
        w.writerow([r, f"{revenue[r]:.2f}"])

# A bar chart as SVG, drawn by hand: the standard library is all we need.
width, bar_h, gap, left = 420, 28, 10, 70
top = max(revenue.values())
bars = []
for i, r in enumerate(regions):
    y = 20 + i * (bar_h + gap)
    w = (width - left - 80) * revenue[r] / top
    bars.append(f'<text x="{left - 8}" y="{y + 19}" text-anchor="end">{r}</text>'
                f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="#4a7fb5"/>'
                f'<text x="{left + w + 6:.1f}" y="{y + 19}">{revenue[r]:.2f}</text>')
height = 40 + len(regions) * (bar_h + gap)
with open("/output/chart.svg", "w") as f:
    f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="sans-serif" font-size="14">{"".join(bars)}</svg>\n')

for r in regions:
    print(f"{r:>6}  {revenue[r]:8.2f}")
print(f"total   {sum(revenue.values()):8.2f}")
