"""Golden cases: tiny inputs whose full answer was computed by hand from SPEC §2–§4.

Each case states the input, every field of the expected result and, in the
comment above it, the step-by-step reasoning.  Notation: stream 0 = A (rows
a0, a1, ...), stream 1 = B (b0, ...), stream 2 = C; ``idx`` is the arrival
index in replay order ``(arrival, stream, row)``; "mem" = memory after idx.
Every engine in :data:`engine_adapters.ENGINES` must reproduce them exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from helpers.engines import ENGINES

from streamjoin.pipelines.policies import PolicySpec
from streamjoin.pipelines.replay.reference import RefTuple


def make_streams(*streams: list[tuple]) -> list[list[RefTuple]]:
    """Build streams from ``(ts, arrival)`` or ``(ts, arrival, key)`` tuples; rows are list positions."""
    out = []
    for i, rows in enumerate(streams):
        out.append(
            [RefTuple(stream=i, row=r, ts=t[0], arrival=t[1], key=t[2] if len(t) > 2 else ()) for r, t in enumerate(rows)]
        )
    return out


@dataclass(frozen=True)
class Golden:
    name: str
    streams: list[list[RefTuple]]
    windows: tuple[int, ...]
    policy: PolicySpec
    truth: set
    emitted: dict
    memory: list
    order: list
    dropped: set = frozenset()
    expired: set = frozenset()


CASES = [
    # --- none: an out-of-order tuple is dropped; the survivors flush at the end ---------
    # A: a0 ts0@0, a1 ts10@10   B: b0 ts2@2, b1 ts1@15     W=(10,10), K=0
    # order a0,b0,a1,b1.  R(a) = running max of min(M_A, M_B).
    # idx0 a0: M=(0,-inf) R=-inf, nothing released.                       mem 1 {a0}
    # idx1 b0: M=(0,2) R=0 -> release a0 (B state empty).                  mem 2 {b0 | a0}
    # idx2 a1: M=(10,2) R=2 -> release b0, meets a0: (0,0) valid (2-0<=10)
    #          emitted at arrival[2]=10, latency 10-max(0,2)=8.             mem 3 {a1 | a0,b0}
    # idx3 b1: ts1 < R(2)=2 -> dropped; R stays 2, nothing released.       mem 3
    # end: flush a1 at last arrival 15, meets b0: (1,0) 10-2<=10, latency 15-10=5.
    # truth: all 4 pairs are within 10; (0,1),(1,1) lost because b1 was dropped.
    Golden(
        name="none_drops_late_tuple",
        streams=make_streams([(0, 0), (10, 10)], [(2, 2), (1, 15)]),
        windows=(10, 10),
        policy=PolicySpec("none"),
        truth={(0, 0), (0, 1), (1, 0), (1, 1)},
        emitted={(0, 0): (10, 8), (1, 0): (15, 5)},
        memory=[1, 2, 3, 3],
        order=[(0, 0), (1, 0), (0, 1), (1, 1)],
        dropped={(1, 1)},
    ),
    # --- kslack: K=2 absorbs a delay-2 tuple that `none` would drop ----------------------
    # A: a0 ts3@3, a1 ts8@8, a2 ts20@20   B: b0 ts4@4, b1 ts2@5, b2 ts9@9, b3 ts21@21
    # W=(5,5), K=(2,2).  order a0,b0,b1,a1,b2,a2,b3.  R = running max of min(M_i - 2).
    # idx0 a0: R=-inf.                                           mem 1 {a0}
    # idx1 b0: M=(3,4) R=min(1,2)=1, nothing <=1.                mem 2 {a0,b0}
    # idx2 b1: ts2 >= R(1)=1 -> kept (with K=0, R(1)=3 would drop it). R=1.  mem 3
    # idx3 a1: M=(8,4) R=min(6,2)=2 -> release b1 (A state empty).  mem 4 {a0,b0,a1 | b1}
    # idx4 b2: M=(8,9) R=min(6,7)=6 -> release a0 (ts3) then b0 (ts4):
    #          a0 meets b1: (0,1) 3-2<=5, at 9, latency 9-max(3,5)=4;
    #          b0 meets a0: (0,0), at 9, latency 9-4=5. No purge (x.ts+5 >= 6). mem 5 {a1,b2 | a0,b1,b0}
    # idx5 a2: M=(20,9) R=min(18,7)=7, nothing released; purge x.ts+5<7: none
    #          (b1: 2+5=7 is not < 7).                                          mem 6
    # idx6 b3: M=(20,21) R=min(18,19)=18 -> release a1 (8) then b2 (9):
    #          a1 meets b0: (1,0) 8-4<=5 at 21, latency 21-8=13; a1 vs b1: 8-2=6>5 invalid;
    #          b2 meets a1: (1,2) at 21, latency 21-9=12; b2 vs a0: 9-3=6>5 invalid.
    #          purge x.ts+5<18: a0,b1,b0 and the just-released a1,b2 (their windows had
    #          already passed when released: they joined, but do not count).   mem 2 {a2,b3}
    # end: flush at 21: (2,3) 21-20<=5, latency 21-21=0.
    # truth = pairs with |ts diff| <= 5 = exactly what was emitted: recall 1, nothing dropped.
    Golden(
        name="kslack_absorbs_disorder",
        streams=make_streams([(3, 3), (8, 8), (20, 20)], [(4, 4), (2, 5), (9, 9), (21, 21)]),
        windows=(5, 5),
        policy=PolicySpec("kslack", k=(2, 2)),
        truth={(0, 0), (0, 1), (1, 0), (1, 2), (2, 3)},
        emitted={(0, 1): (9, 4), (0, 0): (9, 5), (1, 0): (21, 13), (1, 2): (21, 12), (2, 3): (21, 0)},
        memory=[1, 2, 3, 4, 5, 6, 2],
        order=[(0, 0), (1, 0), (1, 1), (0, 1), (1, 2), (0, 2), (1, 3)],
    ),
    # --- mpkslack: the first late tuple is dropped, K learns its delay and saves a later one
    # A: a0 ts0@0, a1 ts5@5, a2 ts10@10   B: b0 ts0@1, b1 ts5@6, b2 ts3@7, b3 ts10@11, b4 ts9@12
    # W=(4,4).  order a0,b0,a1,b1,b2,a2,b3,b4.  K_i = running max delay of stream i.
    # idx0 a0: R=-inf.                                                mem 1
    # idx1 b0: M=(0,0) R=0 -> release a0, b0; b0 meets a0: (0,0) at 1, latency 0.  mem 2
    # idx2 a1: M=(5,0) R=0.                                           mem 3 {a1 | a0,b0}
    # idx3 b1: M=(5,5) R=5 -> release a1, b1: a1 vs b0: 5-0>4 invalid; b1 meets a1:
    #          (1,1) at 6, latency 0 (b1 vs a0 invalid). Purge x.ts+4<5: a0, b0.   mem 2 {a1,b1}
    # idx4 b2: ts3 < R(3)=5 -> dropped. delay 5-3=2 -> K_B=2. R=max(5,min(5,3))=5.  mem 2
    # idx5 a2: M=(10,5) R=max(5,min(10,3))=5.                           mem 3
    # idx6 b3: M=(10,10) R=min(10,8)=8: nothing <=8 waits; purge x.ts+4<8: none (a1,b1: 9). mem 4
    # idx7 b4: ts9 >= R(6)=8 -> kept (K=0 would give R=10 and drop it). delay 1, K_B stays 2. mem 5
    # end (time 12): flush a2, b3, b4 with join state {a1,b1}:
    #   (1,4) a1=5,b4=9: 9-5=4<=W_A -> latency 12-12=0; (2,3) latency 12-11=1; (2,4) latency 0;
    #   a2 vs b1: 10-5>4 invalid.
    # truth (|diff|<=4): (0,0),(0,2),(1,1),(1,2),(1,4),(2,3),(2,4); (0,2),(1,2) need the dropped b2.
    Golden(
        name="mpkslack_learns_k",
        streams=make_streams([(0, 0), (5, 5), (10, 10)], [(0, 1), (5, 6), (3, 7), (10, 11), (9, 12)]),
        windows=(4, 4),
        policy=PolicySpec("mpkslack"),
        truth={(0, 0), (0, 2), (1, 1), (1, 2), (1, 4), (2, 3), (2, 4)},
        emitted={(0, 0): (1, 0), (1, 1): (6, 0), (1, 4): (12, 0), (2, 3): (12, 1), (2, 4): (12, 0)},
        memory=[1, 2, 3, 2, 2, 3, 4, 5],
        order=[(0, 0), (1, 0), (0, 1), (1, 1), (1, 2), (0, 2), (1, 3), (1, 4)],
        dropped={(1, 2)},
    ),
    # --- static: a purge loses a result, a tuple expires on arrival but still joins once --
    # A: a0 ts0@0, a1 ts10@10, a2 ts5@12   B: b0 ts1@1, b1 ts9@11, b2 ts2@13
    # W=(3,3), d=(2,2).  order a0,b0,a1,b1,a2,b2.  H_i = running max of T - 2.
    # idx0 a0: T=-inf, H=-inf; buffered.                                    mem 1
    # idx1 b0: T=0, H=-2; b0 meets a0: (0,0) at 1, latency 0; buffered.     mem 2
    # idx2 a1: T=min(10,1)=1, H=-1; a1 vs b0: 10-1>3 invalid; buffered.     mem 3
    # idx3 b1: T=9, H=7: purge x.ts+3<7 -> a0 (3), b0 (4). b1 meets a1: (1,1) at 11. mem 2 {a1 | b1}
    # idx4 a2: H=7; a2 vs b1: 9-5=4>W_A=3 invalid; 5+3=8>=7 -> buffered.      mem 3 {a1,a2 | b1}
    # idx5 b2: H=7; b2 meets a2: (2,2) max 5, 5-2=3<=W_B, at 13 latency 0 (vs a1 invalid);
    #          then 2+3=5<7 -> expired on arrival, not buffered.               mem 3
    # truth: (0,0),(0,2) [a0=0,b2=2],(1,1),(2,2); (0,2) lost: a0 was purged at idx3
    # (closed form: 0+3 < H_A(5)=7).
    Golden(
        name="static_purge_and_expire",
        streams=make_streams([(0, 0), (10, 10), (5, 12)], [(1, 1), (9, 11), (2, 13)]),
        windows=(3, 3),
        policy=PolicySpec("static", retention=(2, 2)),
        truth={(0, 0), (0, 2), (1, 1), (2, 2)},
        emitted={(0, 0): (1, 0), (1, 1): (11, 0), (2, 2): (13, 0)},
        memory=[1, 2, 3, 2, 3, 3],
        order=[(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)],
        expired={(1, 2)},
    ),
    # --- ties in arrival time: the order is (arrival, stream, row), so that decides drops --
    # A: a0 ts4@10, a1 ts2@10   B: b0 ts3@10, b1 ts1@10     W=(5,5), none.
    # All arrive at 10: order a0,a1,b0,b1 (stream 0 first, then row order).
    # idx0 a0, idx1 a1: B unseen, R=-inf.                                   mem 1, 2
    # idx2 b0: M=(4,3) R=3 -> release a1 (2) then b0 (3): b0 meets a1: (1,0) at 10, lat 0. mem 3 {a0 | a1,b0}
    # idx3 b1: ts1 < R(2)=3 -> dropped (it is "late" only because A came first in the tie). mem 3
    # end: flush a0 at 10, meets b0: (0,0) latency 0.
    # truth: all 4 pairs (|diff|<=3); those with b1 are lost.
    Golden(
        name="tie_in_arrival_breaks_by_stream_then_row",
        streams=make_streams([(4, 10), (2, 10)], [(3, 10), (1, 10)]),
        windows=(5, 5),
        policy=PolicySpec("none"),
        truth={(0, 0), (0, 1), (1, 0), (1, 1)},
        emitted={(1, 0): (10, 0), (0, 0): (10, 0)},
        memory=[1, 2, 3, 3],
        order=[(0, 0), (0, 1), (1, 0), (1, 1)],
        dropped={(1, 1)},
    ),
    # --- keys: only equal keys join; in-order input still waits for the slower stream -----
    # A: a0 ts0@0 key x, a1 ts2@2 key y   B: b0 ts1@1 key x, b1 ts3@3 key z   W=(10,10), none.
    # order a0,b0,a1,b1.
    # idx0 a0: R=-inf.                                         mem 1
    # idx1 b0: R=min(0,1)=0 -> release a0.                     mem 2 {b0 | a0}
    # idx2 a1: R=min(2,1)=1 -> release b0, meets a0 (x==x): (0,0) at 2, latency 2-1=1
    #          (in-order input, yet latency > 0: b0 waited for A to pass ts 1). mem 3 {a1 | a0,b0}
    # idx3 b1: R=min(2,3)=2 -> release a1: key y vs x -> nothing.  mem 4 {b1 | a0,b0,a1}
    # end: flush b1 (key z) -> nothing.
    # truth: only (0,0); all pairs are within the window but keys differ.
    Golden(
        name="keys_must_match",
        streams=make_streams([(0, 0, ("x",)), (2, 2, ("y",))], [(1, 1, ("x",)), (3, 3, ("z",))]),
        windows=(10, 10),
        policy=PolicySpec("none"),
        truth={(0, 0)},
        emitted={(0, 0): (2, 1)},
        memory=[1, 2, 3, 4],
        order=[(0, 0), (1, 0), (0, 1), (1, 1)],
    ),
    # --- asymmetric windows: A tuples stay joinable for 2, B tuples for 6 ----------------
    # A: a0 ts0@0, a1 ts5@5, a2 ts10@10   B: b0 ts1@1, b1 ts4@4, b2 ts9@9
    # W=(2,6), static d=(0,0), in-order.  A pair (a,b) is valid iff b.ts-a.ts <= 2 when b is
    # newer, a.ts-b.ts <= 6 when a is newer.  order a0,b0,b1,a1,b2,a2.
    # idx0 a0: H=-inf.                                          mem 1
    # idx1 b0: T=0,H=0; (0,0) 1-0<=2 at 1.                       mem 2
    # idx2 b1: T=0; a0 vs b1: 4-0>2 invalid.                    mem 3
    # idx3 a1: T=4,H=4: purge a0 (0+2<4); a1 meets b0 (5-1<=6) and b1: (1,0),(1,1) at 5. mem 3 {a1 | b0,b1}
    # idx4 b2: T=5,H=5: no purge (a1: 7, b0: 7); b2 vs a1: 9-5>2 invalid.  mem 4
    # idx5 a2: T=9,H=9: purge a1 (7), b0 (7); a2 meets b1 (10-4=6<=6) and b2: (2,1),(2,2) at 10. mem 3
    # truth = emitted (in-order with d=0 loses nothing); with W swapped, (1,0) and (2,1) would be invalid.
    Golden(
        name="asymmetric_windows",
        streams=make_streams([(0, 0), (5, 5), (10, 10)], [(1, 1), (4, 4), (9, 9)]),
        windows=(2, 6),
        policy=PolicySpec("static", retention=(0, 0)),
        truth={(0, 0), (1, 0), (1, 1), (2, 1), (2, 2)},
        emitted={(0, 0): (1, 0), (1, 0): (5, 0), (1, 1): (5, 0), (2, 1): (10, 0), (2, 2): (10, 0)},
        memory=[1, 2, 3, 3, 4, 3],
        order=[(0, 0), (1, 0), (1, 1), (0, 1), (1, 2), (0, 2)],
    ),
    # --- three streams, none --------------------------------------------------------------
    # A: a0 ts0@0, a1 ts4@4   B: b0 ts1@1, b1 ts0@5, b2 ts6@6   C: c0 ts2@2, c1 ts3@3, c2 ts7@7
    # W=(3,3,3): valid iff max ts - min ts <= 3.  order a0,b0,c0,c1,a1,b1,b2,c2.
    # idx0-1: some stream unseen, R=-inf.                                 mem 1, 2
    # idx2 c0: M=(0,1,2) R=0 -> release a0 (nothing to meet).             mem 3 {b0,c0 | a0}
    # idx3 c1: R=0.                                                       mem 4
    # idx4 a1: M=(4,1,3) R=1 -> release b0; C state empty -> nothing.     mem 5 {c0,c1,a1 | a0,b0}
    # idx5 b1: ts0 < R(4)=1 -> dropped; R=1.                              mem 5
    # idx6 b2: M=(4,6,3) R=3 -> release c0, c1: (0,0,0) latency 6-2=4, (0,0,1) latency 6-3=3.
    #          purge x.ts+3<3: none.                                     mem 6 {a1,b2 | a0,b0,c0,c1}
    # idx7 c2: M=(4,6,7) R=4 -> release a1: (1,0,0),(1,0,1) at 7, latency 7-4=3.
    #          purge x.ts+3<4: a0.                                       mem 6 {b2,c2 | b0,c0,c1,a1}
    # end (7): flush b2, c2: (1,2,1) [4,6,3] latency 7-6=1; (1,2,2) [4,6,7] latency 0;
    #          (1,2,0) spans 2..6 and (1,0,2) spans 1..7: invalid.
    # truth adds (0,1,0),(0,1,1) through the dropped b1 (a1 with b1: 4-0>3).
    Golden(
        name="three_streams",
        streams=make_streams(
            [(0, 0), (4, 4)],
            [(1, 1), (0, 5), (6, 6)],
            [(2, 2), (3, 3), (7, 7)],
        ),
        windows=(3, 3, 3),
        policy=PolicySpec("none"),
        truth={(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 2, 1), (1, 2, 2)},
        emitted={
            (0, 0, 0): (6, 4),
            (0, 0, 1): (6, 3),
            (1, 0, 0): (7, 3),
            (1, 0, 1): (7, 3),
            (1, 2, 1): (7, 1),
            (1, 2, 2): (7, 0),
        },
        memory=[1, 2, 3, 4, 5, 5, 6, 6],
        order=[(0, 0), (1, 0), (2, 0), (2, 1), (0, 1), (1, 1), (1, 2), (2, 2)],
        dropped={(1, 1)},
    ),
    # --- released with its window already passed: joins its step-mates, not counted -----
    # A: a0 ts0@0, a1 ts20@3   B: b0 ts1@1, b1 ts21@4     W=(1,1), K=(5,5).
    # order a0,b0,a1,b1.
    # idx0-2: R = -inf, -5 (min(-5,-4)), -4 (min(15,-4)): nothing released.  mem 1, 2, 3
    # idx3 b1: M=(20,21) R=min(15,16)=15 -> release a0, b0 together; b0 meets a0: (0,0),
    #          at 4, latency 4-1=3. Then purge x.ts+1<15: a0, b0 (both windows had passed
    #          at release; purging only after the step's releases lets them still meet).  mem 2 {a1,b1}
    # end (4): flush a1, b1: (1,1) latency 0.  Cross pairs are 19+ apart: invalid.
    Golden(
        name="released_after_window_passed",
        streams=make_streams([(0, 0), (20, 3)], [(1, 1), (21, 4)]),
        windows=(1, 1),
        policy=PolicySpec("kslack", k=(5, 5)),
        truth={(0, 0), (1, 1)},
        emitted={(0, 0): (4, 3), (1, 1): (4, 0)},
        memory=[1, 2, 3, 2],
        order=[(0, 0), (1, 0), (0, 1), (1, 1)],
    ),
]


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden(engine: str, case: Golden) -> None:
    result = ENGINES[engine](case.streams, case.windows, case.policy)
    assert result.order == case.order, "replay order"
    assert result.truth == set(case.truth), "truth"
    assert result.dropped == set(case.dropped), "dropped as late"
    assert result.expired == set(case.expired), "expired on arrival"
    assert result.emitted == case.emitted, "emitted combinations, emission times, latencies"
    assert result.memory == case.memory, "memory after each arrival"
