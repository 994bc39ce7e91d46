// Test driver for tests/engines/test_flink_sql_real.py: runs Flink SQL's row-time
// interval join operator (RowTimeIntervalJoin in a KeyedCoProcessOperatorWithWatermarkDelay,
// built with the arguments StreamExecIntervalJoin gives it: allowedLateness 0,
// the min cleanup interval, the join type) on a local mini-cluster, one job per
// case file, in arrival order, deterministically.  Not part of streamjoin.
//
// Usage: SqlIntervalJoinReplay CASE OUT [CASE OUT ...]  (compiled with IntervalJoinReplay.java,
// whose source, gate, watermark generators and counters it reuses)
// Case file: as IntervalJoinReplay's, the first line followed by " JOIN MINCLEANUP_MS"
// (JOIN: INNER | LEFT | RIGHT | FULL).  Gated end of input as there (its END markers).
// Output: "P leftRow rightRow index" per joined pair, "LP leftRow index" / "RP rightRow index"
// per null-padded row (index: arrival index of the last record released when it came out).
//
// The planner's SQL join differs only in how the operator is built (generated code for the
// join condition, here a class that accepts every pair: the key equality is the keyBy and
// the time bounds are enforced by TimeIntervalJoin itself) and in where the rows come from.
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.binary.BinaryRowData;
import org.apache.flink.table.data.writer.BinaryRowWriter;
import org.apache.flink.table.runtime.generated.GeneratedJoinCondition;
import org.apache.flink.table.runtime.operators.join.FlinkJoinType;
import org.apache.flink.table.runtime.operators.join.KeyedCoProcessOperatorWithWatermarkDelay;
import org.apache.flink.table.runtime.operators.join.interval.IntervalJoinFunction;
import org.apache.flink.table.runtime.operators.join.interval.RowTimeIntervalJoin;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.logical.BigIntType;

public class SqlIntervalJoinReplay {
    static final InternalTypeInfo<RowData> ROW =
            InternalTypeInfo.ofFields(new BigIntType(), new BigIntType(), new BigIntType());   // row, key, ts (ms)
    static final InternalTypeInfo<RowData> KEY = InternalTypeInfo.ofFields(new BigIntType());
    static final InternalTypeInfo<RowData> OUT_TYPE = InternalTypeInfo.ofFields(
            new BigIntType(), new BigIntType(), new BigIntType(), new BigIntType(), new BigIntType(), new BigIntType());
    static final String CONDITION = "public class AcceptAll extends org.apache.flink.api.common.functions.AbstractRichFunction"
            + " implements org.apache.flink.table.runtime.generated.JoinCondition {"
            + " public AcceptAll(Object[] references) {}"
            + " public boolean apply(org.apache.flink.table.data.RowData a, org.apache.flink.table.data.RowData b) { return true; } }";

    /** Flink SQL's operator, counting what it has processed (for the gate). */
    public static class CountingSqlJoin extends KeyedCoProcessOperatorWithWatermarkDelay<RowData, RowData, RowData, RowData> {
        CountingSqlJoin(RowTimeIntervalJoin f) { super(f, f.getMaxOutputDelay()); }
        public void processElement1(StreamRecord<RowData> r) throws Exception { super.processElement1(r); IntervalJoinReplay.PROCESSED.incrementAndGet(); }
        public void processElement2(StreamRecord<RowData> r) throws Exception { super.processElement2(r); IntervalJoinReplay.PROCESSED.incrementAndGet(); }
        public void processWatermark1(org.apache.flink.streaming.api.watermark.Watermark m) throws Exception {
            super.processWatermark1(m);
            IntervalJoinReplay.PROCESSED.incrementAndGet();
        }
        public void processWatermark2(org.apache.flink.streaming.api.watermark.Watermark m) throws Exception {
            super.processWatermark2(m);
            IntervalJoinReplay.PROCESSED.incrementAndGet();
        }
        protected void processWatermarkStatus(WatermarkStatus status, int index) throws Exception {
            super.processWatermarkStatus(status, index);
            IntervalJoinReplay.PROCESSED.incrementAndGet();
        }
    }

    public static class ToRow implements MapFunction<IntervalJoinReplay.E, RowData> {
        public RowData map(IntervalJoinReplay.E e) { return GenericRowData.of(e.f1, e.f2, e.f3); }
    }

    public static class Key implements KeySelector<RowData, RowData> {
        public RowData getKey(RowData r) {   // the planner's keys are BinaryRowData (IntervalJoinFunction.setJoinKey)
            BinaryRowData key = new BinaryRowData(1);
            BinaryRowWriter writer = new BinaryRowWriter(key);
            writer.writeLong(0, r.getLong(1));
            writer.complete();
            return key;
        }
    }

    public static class Record implements MapFunction<RowData, String> {
        public String map(RowData r) {
            long index = IntervalJoinReplay.RECORDS.get() - 1;
            String line = r.isNullAt(3) ? "LP " + r.getLong(0) + " " + index
                    : r.isNullAt(0) ? "RP " + r.getLong(3) + " " + index
                    : "P " + r.getLong(0) + " " + r.getLong(3) + " " + index;
            IntervalJoinReplay.OUT.add(line);
            return line;
        }
    }

    static void runCase(Path in, Path outFile) throws Exception {
        List<String> lines = Files.readAllLines(in);
        String[] head = lines.get(0).trim().split(" ");
        long lower = Long.parseLong(head[0]), upper = Long.parseLong(head[1]);   // -W_right, W_left (ms)
        long[] delay = {Long.parseLong(head[2]), Long.parseLong(head[3])};
        FlinkJoinType join = FlinkJoinType.valueOf(head[5]);
        long minCleanUp = Long.parseLong(head[6]);
        List<IntervalJoinReplay.E> elements = new ArrayList<>();
        IntervalJoinReplay.TICKS = false;
        for (String line : lines.subList(1, lines.size())) {
            String[] f = line.trim().split(" ");
            elements.add(new IntervalJoinReplay.E(Integer.parseInt(f[0]), Long.parseLong(f[1]), Long.parseLong(f[2]),
                    Long.parseLong(f[3])));
            IntervalJoinReplay.TICKS |= Integer.parseInt(f[0]) == 2 || Integer.parseInt(f[0]) == 3;
        }
        elements.addAll(IntervalJoinReplay.END);
        IntervalJoinReplay.RELEASED.set(0); IntervalJoinReplay.PROCESSED.set(0); IntervalJoinReplay.RECORDS.set(0);
        IntervalJoinReplay.OUT.clear();

        Configuration conf = new Configuration();
        conf.setString("pipeline.auto-watermark-interval", "0 ms");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(1, conf);
        env.setBufferTimeout(0);
        DataStream<IntervalJoinReplay.E> gated = env.fromData(elements, IntervalJoinReplay.TYPE)
                .map(new IntervalJoinReplay.Gate()).returns(IntervalJoinReplay.TYPE);
        List<DataStream<RowData>> sides = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            final long d = delay[i];
            WatermarkStrategy<IntervalJoinReplay.E> strategy = WatermarkStrategy.<IntervalJoinReplay.E>forGenerator(
                            ctx -> new IntervalJoinReplay.Generator(d, 0))
                    .withTimestampAssigner((e, previous) -> e.f0 >= 2 ? Long.MIN_VALUE + 1 : e.f3);
            sides.add(gated.filter(new IntervalJoinReplay.Side(i)).assignTimestampsAndWatermarks(strategy)
                    .filter(new IntervalJoinReplay.NoTicks()).map(new ToRow()).returns(ROW));
        }
        // the SQL condition r.ts BETWEEN l.ts - W_right AND l.ts + W_left is
        // l.ts BETWEEN r.ts - W_left AND r.ts + W_right: leftLowerBound = -W_left, leftUpperBound = W_right
        RowTimeIntervalJoin function = new RowTimeIntervalJoin(join, -upper, -lower, 0L, minCleanUp, ROW, ROW,
                new IntervalJoinFunction(new GeneratedJoinCondition("AcceptAll", CONDITION, new Object[0]), OUT_TYPE,
                        new boolean[] {true}),
                2, 2);
        SingleOutputStreamOperator<RowData> joined = sides.get(0).connect(sides.get(1))
                .keyBy(new Key(), new Key(), KEY)
                .transform("Interval Join (SQL)", OUT_TYPE, new CountingSqlJoin(function));
        joined.map(new Record()).sinkTo(new DiscardingSink<>());
        env.execute("sql interval join replay");
        Files.write(outFile, IntervalJoinReplay.checked(IntervalJoinReplay.OUT));
    }

    public static void main(String[] args) throws Exception {
        for (int i = 0; i + 1 < args.length; i += 2) {
            runCase(Path.of(args[i]), Path.of(args[i + 1]));
        }
    }
}
