// Test driver for tests/engines/test_flink_real.py: runs Flink's own DataStream
// interval join (IntervalJoinOperator) on a local mini-cluster, one job per case
// file, in arrival order, deterministically.  Not part of streamjoin.
//
// Usage: IntervalJoinReplay CASE OUT [CASE OUT ...]
// Case file (text): first line "lower upper delay0 delay1 idleness" (bounds and
// delays in ms, idleness in us, 0 = none); then one line per element in arrival
// order, "tag row key ts_ms": tag 0 = left record, 1 = right record, 2 / 3 = a
// periodic-emission tick of the left / right generator (ts: the tick's time in
// us, the idleness clock).  Tags 4 / 5 are the driver's own end-of-input markers.
// Output file: "P leftRow rightRow index" per joined pair (index: arrival index
// of the record being processed when the pair came out) and "L side row" per
// late record (Flink's sideOutputLeftLateData / sideOutputRightLateData).
//
// Determinism: parallelism 1, one source, buffer timeout 0, periodic emission
// off (pipeline.auto-watermark-interval 0); each input's watermark generator
// wraps Flink's BoundedOutOfOrdernessWatermarks (inside Flink's
// WatermarksWithIdleness when idleness > 0, its clock the tick's time) and asks
// it to emit after each of its records (tag 0/1) or at its ticks (tag 2/3).  A gate after the source
// releases the next element only once the join operator has processed every
// record and watermark released before it (counters shared in this JVM), so
// the join sees its two inputs in exactly the source's order.
// End of input: the driver appends two markers after the case file's elements
// (tag 4 / 5: the left / right generator emits Long.MAX_VALUE, through the gate,
// the left one first).  Without them the end is not gated: the source's
// end-of-input MAX watermark goes down both inputs right behind the last record,
// and the join may take the OTHER input's MAX before that record; the combined
// watermark then jumps to the record's own input's watermark first, so the last
// record can be late, or expire the rows it would have joined (seen once in
// five runs on a loaded machine).  Flink's own MAX that follows is dropped by
// TimestampsAndWatermarksOperator (not above the MAX already emitted).
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.flink.api.common.eventtime.BoundedOutOfOrdernessWatermarks;
import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkOutput;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.eventtime.WatermarksWithIdleness;
import org.apache.flink.api.common.functions.FilterFunction;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.api.java.tuple.Tuple4;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.co.ProcessJoinFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.operators.co.IntervalJoinOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;
import org.apache.flink.util.Collector;
import org.apache.flink.util.clock.RelativeClock;
import org.apache.flink.util.OutputTag;

public class IntervalJoinReplay {
    /** (tag, row, key, ts in ms) */
    public static class E extends Tuple4<Integer, Long, Long, Long> {
        public E() {}
        public E(int tag, long row, long key, long ts) { super(tag, row, key, ts); }
    }

    static final TypeInformation<E> TYPE = TypeInformation.of(E.class);
    // shared by the gate (source task) and the join (join task): one JVM
    static final AtomicLong RELEASED = new AtomicLong();   // records + watermarks sent to the join
    static final AtomicLong PROCESSED = new AtomicLong();  // records + watermarks the join processed
    static final AtomicLong RECORDS = new AtomicLong();    // records released so far
    static final List<String> OUT = Collections.synchronizedList(new ArrayList<>());

    /** Blocks each element until the join has processed everything released before it. */
    public static class Gate implements MapFunction<E, E> {
        public E map(E e) throws Exception {
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (PROCESSED.get() != RELEASED.get()) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("gate: join did not catch up, released " + RELEASED.get()
                            + " processed " + PROCESSED.get());
                }
                Thread.onSpinWait();
            }
            if (e.f0 < 2) {
                RELEASED.incrementAndGet();
                RECORDS.incrementAndGet();
            }
            return e;
        }
    }

    /** Flink's BoundedOutOfOrdernessWatermarks (with WatermarksWithIdleness), asked to emit after each
     *  record or at ticks. */
    public static class Generator implements WatermarkGenerator<E> {
        final WatermarkGenerator<E> inner;
        long now;                     // the current tick's time (ns): the idleness clock
        long last = Long.MIN_VALUE;   // mirrors TimestampsAndWatermarksOperator's emitter: increasing only
        boolean idle;                 // and its status

        Generator(long delayMs, long idleUs) {
            WatermarkGenerator<E> bounded = new BoundedOutOfOrdernessWatermarks<>(Duration.ofMillis(delayMs));
            RelativeClock clock = new RelativeClock() {
                public long relativeTimeMillis() { return now / 1_000_000L; }
                public long relativeTimeNanos() { return now; }
            };
            inner = idleUs > 0 ? new WatermarksWithIdleness<>(bounded, Duration.ofNanos(idleUs * 1000L), clock) : bounded;
        }

        public void onEvent(E e, long ts, WatermarkOutput out) {
            if (e.f0 >= 4) {          // end of input: what Flink emits there, but gated
                counted(out).emitWatermark(Watermark.MAX_WATERMARK);
                return;
            }
            if (e.f0 < 2) {
                inner.onEvent(e, ts, out);
            } else {
                now = e.f3 * 1000L;
            }
            if (e.f0 < 2 && TICKS) {
                return;
            }
            inner.onPeriodicEmit(counted(out));
        }

        /** {@code out}, counting in RELEASED what reaches the join: increasing watermarks, status changes. */
        WatermarkOutput counted(WatermarkOutput out) {
            return new WatermarkOutput() {
                public void emitWatermark(Watermark w) {
                    if (w.getTimestamp() > last) {
                        last = w.getTimestamp();
                        markActive();
                        RELEASED.incrementAndGet();
                    }
                    out.emitWatermark(w);
                }
                public void markIdle() {
                    if (!idle) { idle = true; RELEASED.incrementAndGet(); }
                    out.markIdle();
                }
                public void markActive() {
                    if (idle) { idle = false; RELEASED.incrementAndGet(); }
                    out.markActive();
                }
            };
        }

        public void onPeriodicEmit(WatermarkOutput out) {}
    }

    static boolean TICKS;

    /** Flink's IntervalJoinOperator, counting what it has processed (for the gate). */
    public static class CountingJoin extends IntervalJoinOperator<Long, E, E, String> {
        CountingJoin(long lower, long upper, OutputTag<E> lateLeft, OutputTag<E> lateRight, ProcessJoinFunction<E, E, String> f) {
            super(lower, upper, true, true, lateLeft, lateRight, TYPE.createSerializer(new org.apache.flink.api.common.serialization.SerializerConfigImpl()),
                  TYPE.createSerializer(new org.apache.flink.api.common.serialization.SerializerConfigImpl()), f);
        }
        public void processElement1(StreamRecord<E> r) throws Exception { super.processElement1(r); PROCESSED.incrementAndGet(); }
        public void processElement2(StreamRecord<E> r) throws Exception { super.processElement2(r); PROCESSED.incrementAndGet(); }
        public void processWatermark1(org.apache.flink.streaming.api.watermark.Watermark m) throws Exception {
            super.processWatermark1(m);
            PROCESSED.incrementAndGet();
        }
        public void processWatermark2(org.apache.flink.streaming.api.watermark.Watermark m) throws Exception {
            super.processWatermark2(m);
            PROCESSED.incrementAndGet();
        }
        protected void processWatermarkStatus(WatermarkStatus status, int index) throws Exception {
            super.processWatermarkStatus(status, index);
            PROCESSED.incrementAndGet();
        }
    }

    public static class Pairs extends ProcessJoinFunction<E, E, String> {
        public void processElement(E l, E r, Context ctx, Collector<String> out) {
            OUT.add("P " + l.f1 + " " + r.f1 + " " + (RECORDS.get() - 1));
        }
    }

    public static class Side implements FilterFunction<E> {
        final int tag;
        Side(int tag) { this.tag = tag; }
        public boolean filter(E e) { return e.f0 == tag || e.f0 == tag + 2 || e.f0 == tag + 4; }
    }

    public static class NoTicks implements FilterFunction<E> {
        public boolean filter(E e) { return e.f0 < 2; }
    }

    public static class Key implements KeySelector<E, Long> {
        public Long getKey(E e) { return e.f2; }
    }

    public static class Late implements MapFunction<E, String> {
        public String map(E e) { OUT.add("L " + e.f0 + " " + e.f1); return ""; }
    }

    static void runCase(Path in, Path outFile) throws Exception {
        List<String> lines = Files.readAllLines(in);
        String[] head = lines.get(0).trim().split(" ");
        long lower = Long.parseLong(head[0]), upper = Long.parseLong(head[1]);
        long[] delay = {Long.parseLong(head[2]), Long.parseLong(head[3])};
        long idleUs = head.length > 4 ? Long.parseLong(head[4]) : 0;
        List<E> elements = new ArrayList<>();
        TICKS = false;
        for (String line : lines.subList(1, lines.size())) {
            String[] f = line.trim().split(" ");
            elements.add(new E(Integer.parseInt(f[0]), Long.parseLong(f[1]), Long.parseLong(f[2]), Long.parseLong(f[3])));
            TICKS |= Integer.parseInt(f[0]) == 2 || Integer.parseInt(f[0]) == 3;
        }
        elements.addAll(END);
        RELEASED.set(0); PROCESSED.set(0); RECORDS.set(0); OUT.clear();

        Configuration conf = new Configuration();
        conf.setString("pipeline.auto-watermark-interval", "0 ms");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(1, conf);
        env.setBufferTimeout(0);
        DataStream<E> gated = env.fromData(elements, TYPE).map(new Gate()).returns(TYPE);
        List<DataStream<E>> sides = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            final long d = delay[i];
            WatermarkStrategy<E> strategy = WatermarkStrategy.<E>forGenerator(ctx -> new Generator(d, idleUs))
                    .withTimestampAssigner((e, previous) -> e.f0 >= 2 ? Long.MIN_VALUE + 1 : e.f3);
            sides.add(gated.filter(new Side(i)).assignTimestampsAndWatermarks(strategy).filter(new NoTicks()));
        }
        OutputTag<E> lateLeft = new OutputTag<>("late-left", TYPE), lateRight = new OutputTag<>("late-right", TYPE);
        SingleOutputStreamOperator<String> joined = sides.get(0).connect(sides.get(1)).keyBy(new Key(), new Key())
                .transform("Interval Join", Types.STRING, new CountingJoin(lower, upper, lateLeft, lateRight, new Pairs()));
        joined.sinkTo(new DiscardingSink<>());
        joined.getSideOutput(lateLeft).map(new Late()).sinkTo(new DiscardingSink<>());
        joined.getSideOutput(lateRight).map(new Late()).sinkTo(new DiscardingSink<>());
        env.execute("interval join replay");
        Files.write(outFile, checked(OUT));
    }

    /** The end-of-input markers, the left generator's then the right one's. */
    static final List<E> END = List.of(new E(4, -1, 0, 0), new E(5, -1, 0, 0));

    /** A copy of {@code out}, once the job has processed everything released, the markers' MAX watermarks
     *  included (else the end was not gated). */
    static List<String> checked(List<String> out) {
        if (PROCESSED.get() != RELEASED.get()) {
            throw new IllegalStateException("join processed " + PROCESSED.get() + " of " + RELEASED.get()
                    + " released records, watermarks and status changes");
        }
        return new ArrayList<>(out);
    }

    public static void main(String[] args) throws Exception {
        for (int i = 0; i + 1 < args.length; i += 2) {
            runCase(Path.of(args[i]), Path.of(args[i + 1]));
        }
    }
}
