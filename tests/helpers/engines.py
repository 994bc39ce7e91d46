"""Engines under test, all with the reference replay's signature.

Every entry maps a name to ``engine(streams, windows, policy) -> ReferenceResult``
where ``streams[i]`` is stream *i*'s list of :class:`RefTuple` (row = index),
``windows[i]`` is ``W_i`` in microseconds and ``policy`` a :class:`PolicySpec`.
Golden and property tests loop over this dict, so a new engine is checked
against the same hand-computed answers by adding one line here.
"""

from __future__ import annotations

from collections.abc import Callable

from streamjoin.pipelines.policies import PolicySpec
from helpers.adapters import local_engine, local_engine_bucketed

from streamjoin.pipelines.replay.reference import RefTuple, ReferenceResult, replay

Engine = Callable[[list[list[RefTuple]], tuple[int, ...], PolicySpec], ReferenceResult]

ENGINES: dict[str, Engine] = {
    "reference": replay,
    "local": local_engine,
    "local-bucketed": local_engine_bucketed,
}
