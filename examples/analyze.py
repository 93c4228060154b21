# The demo's guest code: it runs inside the airlock sandbox. It reads the
# staged workspace from /input with pandas, summarises revenue per region,
# and leaves a CSV and a bar chart drawn by matplotlib in /output, which
# airlock returns as results.
import matplotlib.pyplot as plt
import pandas as pd

sales = pd.read_csv("/input/sales.csv", parse_dates=["date"])
sales["revenue"] = sales["units"] * sales["unit_price"]
revenue = sales.groupby("region")["revenue"].sum().sort_values(ascending=False)
revenue.round(2).to_csv("/output/summary.csv", header=["revenue"])

fig, ax = plt.subplots(figsize=(6, 3.5))
bars = ax.bar(revenue.index, revenue.values, color="#4a7fb5")
ax.bar_label(bars, fmt="%.2f")
ax.set_title(f"Revenue by region, {sales.date.min():%d %b} to {sales.date.max():%d %b %Y}")
ax.set_ylabel("revenue")
ax.margins(y=0.15)
fig.tight_layout()
# Saved by name here; a figure left open (or shown with plt.show()) would
# come back as /output/figure-1.png without this line.
fig.savefig("/output/chart.png", dpi=120)

for region, value in revenue.items():
    print(f"{region:>6}  {value:8.2f}")
print(f"total   {revenue.sum():8.2f}")
