"""Regenerate samples/nightly/ (same seed, same bytes): python samples/nightly/make_sample.py"""

from pathlib import Path

from streamjoin.pipelines.tools.nightly_sample import generate_nightly

if __name__ == "__main__":
    for path in generate_nightly(Path(__file__).parent):
        print(path)
