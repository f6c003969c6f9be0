package io.coflow.spark;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.zip.CRC32;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.HashPartitioner;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.sql.SparkSession;
import scala.Tuple2;
import scala.collection.JavaConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * The driver of {@code coflow testbed spark}: one Spark application on the testbed's standalone
 * cluster, through coflow or on Spark's own shuffle (as its configuration says), running a plan
 * written by the testbed.
 *
 * <p>The plan's trace jobs each turn one coflow into a Spark job: one map task per mapper, placed on
 * the mapper's host (preferred location), writing for each reducer exactly the coflow's bytes from
 * that mapper to that reducer (incompressible records), and one reduce task per reducer, which
 * checks the bytes it read and returns their size and a checksum. Each is submitted at its arrival
 * time, in its own fair-scheduler pool, so that the shuffles of many jobs contend. Then the named
 * jobs (word count, sort, skewed join, DataFrame aggregation) run one after another.
 *
 * <p>Per job it writes: completion time (submission to end), shuffle read time (the sum of its
 * reduce tasks' fetch wait), communication-stage time (from the submission of the stages that read
 * a shuffle to their completion, the union of their spans), the shuffle bytes read and a digest of
 * its result, which the testbed compares with the same job on Spark's own shuffle.
 *
 * <p>Usage: {@code TestbedMix --master URL --plan plan.json --out out.json --work DIR [--conf k=v]...}
 */
public final class TestbedMix {
  private TestbedMix() {}

  /** One trace job as the plan gives it. */
  record TraceJob(String name, double arrivalS, List<String> mappers, int reducers, long[][] bytes) {
    long reducerBytes(int r) {
      long n = 0;
      for (long[] row : bytes) {
        n += row[r];
      }
      return n;
    }
  }

  public static void main(String[] args) throws Exception {
    String master = null;
    Path plan = null;
    Path out = null;
    Path work = null;
    Map<String, String> conf = new LinkedHashMap<>();
    for (int i = 0; i < args.length; i++) {
      String v = i + 1 < args.length ? args[i + 1] : null;
      if (v == null) {
        throw new IllegalArgumentException(args[i] + " needs a value");
      }
      switch (args[i]) {
        case "--master" -> master = v;
        case "--plan" -> plan = Path.of(v);
        case "--out" -> out = Path.of(v);
        case "--work" -> work = Path.of(v);
        case "--conf" -> {
          int eq = v.indexOf('=');
          if (eq <= 0) {
            throw new IllegalArgumentException("--conf needs key=value, got " + v);
          }
          conf.put(v.substring(0, eq), v.substring(eq + 1));
        }
        default -> throw new IllegalArgumentException("unknown argument " + args[i]);
      }
      i++;
    }
    if (master == null || plan == null || out == null || work == null) {
      throw new IllegalArgumentException("usage: TestbedMix --master URL --plan F --out F --work DIR [--conf k=v]...");
    }
    ObjectMapper json = new ObjectMapper();
    JsonNode p = json.readTree(plan.toFile());
    List<TraceJob> trace = new ArrayList<>();
    for (JsonNode j : p.get("trace")) {
      List<String> mappers = new ArrayList<>();
      j.get("mappers").forEach(m -> mappers.add(m.asText()));
      int reducers = j.get("reducers").asInt();
      long[][] bytes = new long[mappers.size()][reducers];
      for (int m = 0; m < mappers.size(); m++) {
        for (int r = 0; r < reducers; r++) {
          bytes[m][r] = j.get("bytes").get(m).get(r).asLong();
        }
      }
      trace.add(new TraceJob(j.get("name").asText(), j.get("arrival_s").asDouble(), mappers, reducers, bytes));
    }
    int executors = p.get("executors").asInt();
    long sortRecords = p.get("sort_records").asLong();

    SparkConf sc = new SparkConf().setAppName("coflow-testbed").setMaster(master);
    conf.forEach(sc::set);
    SparkSession spark = SparkSession.builder().config(sc).getOrCreate();
    JavaSparkContext jsc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    Timing timing = new Timing();
    spark.sparkContext().addSparkListener(timing);
    waitExecutors(jsc, executors, 120_000);
    SparkRun run = new SparkRun(spark);
    Example.warm(run);

    ArrayNode jobs = json.createArrayNode();
    long t0 = System.nanoTime();
    long t0Ms = System.currentTimeMillis();
    ExecutorService pool = Executors.newCachedThreadPool();
    List<Future<ObjectNode>> futures = new ArrayList<>();
    for (TraceJob j : trace) {
      futures.add(pool.submit(() -> {
        long due = t0 + (long) (j.arrivalS() * 1e9);
        long wait = due - System.nanoTime();
        if (wait > 0) {
          Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
        }
        jsc.setLocalProperty("spark.scheduler.pool", j.name());
        ObjectNode row = json.createObjectNode().put("name", j.name()).put("kind", "trace")
            .put("arrival_s", (System.nanoTime() - t0) / 1e9);
        return timed(jsc, timing, j.name(), row, () -> traceJob(jsc, j));
      }));
    }
    for (Future<ObjectNode> f : futures) {
      jobs.add(f.get());
    }
    pool.shutdown();
    double mixS = (System.nanoTime() - t0) / 1e9;
    jsc.setLocalProperty("spark.scheduler.pool", null);
    for (Jobs.Job job : Jobs.all(sortRecords)) {
      Path dir = work.resolve(job.name());
      ObjectNode row = json.createObjectNode().put("name", job.name()).put("kind", "named")
          .put("arrival_s", (System.nanoTime() - t0) / 1e9);
      jobs.add(timed(jsc, timing, job.name(), row, () -> digest(job.run(run, dir))));
    }
    ObjectNode result = json.createObjectNode();
    result.put("mix_start_ms", t0Ms);
    result.put("mix_s", mixS);
    result.put("app_id", spark.sparkContext().applicationId());
    result.set("jobs", jobs);
    Files.writeString(out, json.writerWithDefaultPrettyPrinter().writeValueAsString(result));
    spark.stop();
    System.exit(0);
  }

  interface Body {
    String run() throws Exception;
  }

  /** Runs {@code body} as job group {@code group}; fills the row with its figures or its error. */
  static ObjectNode timed(JavaSparkContext jsc, Timing timing, String group, ObjectNode row, Body body) {
    jsc.setJobGroup(group, group, false);
    long t = System.nanoTime();
    try {
      row.put("digest", body.run());
    } catch (Exception e) {
      row.put("error", e.toString());
    } finally {
      jsc.clearJobGroup();
    }
    row.put("jct_s", (System.nanoTime() - t) / 1e9);
    try {
      jsc.sc().listenerBus().waitUntilEmpty(60_000);
    } catch (java.util.concurrent.TimeoutException e) {
      throw new IllegalStateException("Spark's listener bus did not drain in 60 s", e);
    }
    Group g = timing.groups.computeIfAbsent(group, k -> new Group());
    synchronized (g) {
      row.put("shuffle_read_s", g.fetchWaitMs / 1e3);
      row.put("shuffle_bytes", g.bytesRead);
      row.put("remote_bytes", g.remoteBytesRead);
      row.put("comm_stage_s", g.commStageMs() / 1e3);
      row.put("failed_tasks", g.failedTasks);
    }
    return row;
  }

  /** Waits until {@code n} executors have registered. */
  static void waitExecutors(JavaSparkContext jsc, int n, long timeoutMs) throws InterruptedException {
    long until = System.currentTimeMillis() + timeoutMs;
    while (jsc.sc().getExecutorMemoryStatus().size() - 1 < n) {
      if (System.currentTimeMillis() > until) {
        throw new IllegalStateException((jsc.sc().getExecutorMemoryStatus().size() - 1) + " of " + n
            + " executors registered within " + timeoutMs + " ms");
      }
      Thread.sleep(200);
    }
  }

  /** Record size of the trace jobs' shuffles. */
  static final int RECORD = 64 << 10;

  /** One coflow as a Spark job; its result is each reducer's bytes and checksum. */
  static String traceJob(JavaSparkContext jsc, TraceJob j) throws Exception {
    List<Tuple2<Integer, scala.collection.immutable.List<String>>> placed = new ArrayList<>();
    for (int m = 0; m < j.mappers().size(); m++) {
      placed.add(new Tuple2<>(m, JavaConverters.asScalaBuffer(List.of(j.mappers().get(m))).toList()));
    }
    ClassTag<Integer> tag = ClassTag$.MODULE$.apply(Integer.class);
    // An immutable list is the Seq makeRDD takes under Scala 2.12 and 2.13 alike.
    @SuppressWarnings({"unchecked", "rawtypes"})
    JavaRDD<Integer> maps = JavaRDD.fromRDD(
        jsc.sc().makeRDD((scala.collection.immutable.Seq) JavaConverters.asScalaBuffer(placed).toList(), tag), tag);
    long[][] bytes = j.bytes();
    String name = j.name();
    int reducers = j.reducers();
    List<String> rows = JavaPairRDD.fromJavaRDD(maps.flatMap(m -> new Records(name, m, bytes[m])))
        .partitionBy(new HashPartitioner(reducers))
        .mapPartitionsWithIndex((r, it) -> {
          long n = 0;
          long sum = 0;
          CRC32 crc = new CRC32();
          while (it.hasNext()) {
            byte[] b = it.next()._2();
            crc.reset();
            crc.update(b);
            sum += crc.getValue();
            n += b.length;
          }
          return List.of(r + "\t" + n + "\t" + sum).iterator();
        }, true)
        .collect();
    List<String> sorted = Jobs.sorted(rows);
    for (int r = 0; r < reducers; r++) {
      long got = Long.parseLong(sorted.get(r).split("\t")[1]);
      if (got != j.reducerBytes(r)) {
        throw new IllegalStateException(name + ": reducer " + r + " read " + got + " bytes, expected "
            + j.reducerBytes(r));
      }
    }
    return sha256(sorted);
  }

  /** A mapper's records: for each reducer, its bytes in records of {@link #RECORD}, pseudo-random. */
  static final class Records implements Iterator<Tuple2<Integer, byte[]>> {
    private final long[] bytes;
    private final long seed;
    private int r = -1;
    private long left;
    private SplittableRandom rnd;

    Records(String job, int mapper, long[] bytes) {
      this.bytes = bytes;
      this.seed = job.hashCode() * 1_000_003L + mapper;
      advance();
    }

    private void advance() {
      while (left == 0 && r + 1 < bytes.length) {
        r++;
        left = bytes[r];
        rnd = new SplittableRandom(seed * 4099 + r);
      }
    }

    @Override
    public boolean hasNext() {
      return left > 0;
    }

    @Override
    public Tuple2<Integer, byte[]> next() {
      if (left == 0) {
        throw new NoSuchElementException();
      }
      byte[] b = new byte[(int) Math.min(RECORD, left)];
      for (int k = 0; k + 8 <= b.length; k += 8) {
        long x = rnd.nextLong();
        for (int s = 0; s < 8; s++) {
          b[k + s] = (byte) (x >>> (8 * s));
        }
      }
      for (int k = b.length & ~7; k < b.length; k++) {
        b[k] = (byte) rnd.nextInt();
      }
      left -= b.length;
      Tuple2<Integer, byte[]> t = new Tuple2<>(r, b);
      advance();
      return t;
    }
  }

  /** A named job's result as a digest: its rows, or its output's lines in order. */
  static String digest(Jobs.Result r) throws IOException {
    if (r.count() == 0) {
      throw new IllegalStateException("empty result");
    }
    if (r.rows != null) {
      return sha256(r.rows);
    }
    List<String> lines = new ArrayList<>();
    try (var s = Files.list(r.dir)) {
      for (Path part : s.filter(f -> f.getFileName().toString().startsWith("part-")).sorted().toList()) {
        lines.addAll(Files.readAllLines(part));
      }
    }
    return sha256(lines);
  }

  static String sha256(List<String> rows) {
    try {
      MessageDigest d = MessageDigest.getInstance("SHA-256");
      for (String row : rows) {
        d.update(row.getBytes(java.nio.charset.StandardCharsets.UTF_8));
        d.update((byte) '\n');
      }
      StringBuilder s = new StringBuilder();
      for (byte b : d.digest()) {
        s.append(String.format("%02x", b));
      }
      return s.toString();
    } catch (java.security.NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  /** What one job group's tasks and stages did. */
  static final class Group {
    long fetchWaitMs;
    long bytesRead;
    long remoteBytesRead;
    int failedTasks;
    /** Spans (submission, completion) of the stages that read a shuffle, in ms since the epoch. */
    final List<long[]> readSpans = new ArrayList<>();

    /** The length of the union of the reading stages' spans. */
    long commStageMs() {
      List<long[]> s = new ArrayList<>(readSpans);
      s.sort((a, b) -> Long.compare(a[0], b[0]));
      long total = 0;
      long end = Long.MIN_VALUE;
      for (long[] x : s) {
        long from = Math.max(x[0], end);
        if (x[1] > from) {
          total += x[1] - from;
        }
        end = Math.max(end, x[1]);
      }
      return total;
    }
  }

  /** Per job group: task metrics and the spans of stages that read a shuffle. */
  static final class Timing extends SparkListener {
    final Map<String, Group> groups = new ConcurrentHashMap<>();
    private final Map<Integer, String> stageGroup = new HashMap<>();
    private final Set<Integer> reading = new HashSet<>();

    @Override
    public synchronized void onJobStart(SparkListenerJobStart e) {
      String g = e.properties() == null ? null : e.properties().getProperty("spark.jobGroup.id");
      if (g == null) {
        return;
      }
      for (Object s : JavaConverters.seqAsJavaList(e.stageIds())) {
        stageGroup.putIfAbsent((Integer) s, g);
      }
    }

    @Override
    public synchronized void onTaskEnd(SparkListenerTaskEnd e) {
      String g = stageGroup.get(e.stageId());
      if (g == null) {
        return;
      }
      Group m = groups.computeIfAbsent(g, k -> new Group());
      synchronized (m) {
        if (!e.taskInfo().successful()) {
          m.failedTasks++;
        }
        TaskMetrics t = e.taskMetrics();
        if (t == null) {
          return;
        }
        long read = t.shuffleReadMetrics().remoteBytesRead() + t.shuffleReadMetrics().localBytesRead();
        if (read > 0 || t.shuffleReadMetrics().fetchWaitTime() > 0) {
          reading.add(e.stageId());
        }
        m.fetchWaitMs += t.shuffleReadMetrics().fetchWaitTime();
        m.bytesRead += read;
        m.remoteBytesRead += t.shuffleReadMetrics().remoteBytesRead();
      }
    }

    @Override
    public synchronized void onStageCompleted(SparkListenerStageCompleted e) {
      StageInfo s = e.stageInfo();
      String g = stageGroup.get(s.stageId());
      if (g == null || !reading.contains(s.stageId())) {
        return;
      }
      if (s.submissionTime().isDefined() && s.completionTime().isDefined()) {
        Group m = groups.computeIfAbsent(g, k -> new Group());
        synchronized (m) {
          m.readSpans.add(new long[] {(Long) s.submissionTime().get(), (Long) s.completionTime().get()});
        }
      }
    }
  }
}
