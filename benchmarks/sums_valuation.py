"""The bias of valuing each record at its bucket's value, on the RAND HIE incomes.

A ``sum`` or ``prefix_sum`` group counts a record in bucket b at ``min(D_b, θ)``: its
bucket's midpoint (``valuation: midpoint``, the default) or upper edge (``upper``, seed
003's). This prints, per site, how far each valuation's total is from the true total of the
records' values capped at θ — the bias a release carries before any noise — for buckets of
several widths from 0 to 100,000 (records above go in the top bucket), θ = 60,000.

Records: the data's rows (person-years), or with ``--persons`` one per person, its income
summed over the years observed (seed 003's unit, ``dpmm.sums.person_totals``; the site is
the person's first).

Usage:
    python benchmarks/sums_valuation.py [--persons] [--widths 500,1000,2500] [--theta 60000]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow.csv

from dpmm.sums import person_totals
from dpmm.workload.prefix_sum import VALUATIONS, bucket_values

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "randhie" / "randhie.csv"
TOP = 100_000


def records(persons: bool) -> tuple[np.ndarray, np.ndarray]:
    """Each record's income and site."""
    table = pyarrow.csv.read_csv(DATA)
    income, site = table["income"].to_numpy(), table["site"].to_numpy()
    if not persons:
        return income, site
    person = table["zper"].to_numpy()
    _, first = np.unique(person, return_index=True)
    return person_totals(income, person), site[np.sort(first)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", action="store_true", help="one record per person")
    parser.add_argument("--widths", default="500,1000,2500")
    parser.add_argument("--theta", type=float, default=60_000)
    args = parser.parse_args()
    income, site = records(args.persons)
    truth = np.minimum(income, args.theta)
    sites = np.unique(site)
    unit = "persons" if args.persons else "person-years"
    print(f"RAND HIE, {income.size:,} {unit}, θ = {args.theta:,.0f}: total over true capped total")
    print()
    print("| bucket width | valuation | " + " | ".join(f"site {s}" for s in sites) + " | all |")
    print("|---" * (len(sites) + 3) + "|")
    for width in (int(w) for w in args.widths.split(",")):
        edges = np.arange(0, TOP + width, width, dtype=np.float64)
        bucket = np.clip(np.searchsorted(edges, income, side="right") - 1, 0, edges.size - 2)
        for valuation in VALUATIONS:
            valued = np.minimum(bucket_values(edges, valuation)[bucket], args.theta)
            shares = [valued[site == s].sum() / truth[site == s].sum() - 1 for s in sites]
            overall = valued.sum() / truth.sum() - 1
            cells = " | ".join(f"{100 * share:+.2f} %" for share in [*shares, overall])
            print(f"| {width:,} | {valuation} | {cells} |")


if __name__ == "__main__":
    main()
