package io.coflow.spark;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import org.apache.spark.HashPartitioner;
import scala.Tuple2;

/**
 * What {@code integrations/spark/run-example} runs.
 *
 * <p>Default: the test jobs once through coflow and once on Spark's own shuffle, with per job:
 * identical or not, coflows registered, bytes through the agents, wall time both ways.
 *
 * <p>{@code --concurrent}: several jobs with concurrent shuffles sharing the cluster, under the
 * coordinator policies {@code varys} and {@code fair} (agents' ports capped) and on Spark's own
 * shuffle (uncapped: Spark's transfers bypass the agents): shuffle read time and job completion
 * time per job.
 */
public final class Example {
  private Example() {}

  public static void main(String[] args) throws Exception {
    String json = null;
    boolean concurrent = false;
    long sortRecords = 1_100_000;
    String portRate = null;
    String modes = "varys,fair,spark";
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--json" -> json = value(args, ++i, "--json");
        case "--concurrent" -> concurrent = true;
        case "--sort-records" -> sortRecords = Long.parseLong(value(args, ++i, "--sort-records"));
        case "--port-rate" -> portRate = value(args, ++i, "--port-rate");
        case "--modes" -> modes = value(args, ++i, "--modes");
        default -> throw new IllegalArgumentException("unknown argument " + args[i]
            + " (usage: run-example [--json F] [--concurrent [--modes varys,fair,spark]] [--sort-records N] [--port-rate R])");
      }
    }
    Path work = Path.of(System.getProperty("coflow.work", "target/example-work"));
    ExecutorSide.deleteTree(work);
    String out = concurrent
        ? concurrent(work, portRate == null ? "10MB/s" : portRate, modes.split(","))
        : jobs(work, sortRecords, portRate == null ? "400MB/s" : portRate);
    if (json != null) {
      Files.writeString(Path.of(json), out);
      System.out.println("wrote " + json);
    }
    System.exit(0);
  }

  private static String value(String[] args, int i, String flag) {
    if (i >= args.length) {
      throw new IllegalArgumentException(flag + " needs a value");
    }
    return args[i];
  }

  /** Every test job both ways. */
  static String jobs(Path work, long sortRecords, String portRate) throws Exception {
    List<Jobs.Job> jobs = Jobs.all(sortRecords);
    Map<String, Jobs.Result> results = new LinkedHashMap<>();
    Map<String, double[]> figures = new LinkedHashMap<>(); // coflows, bytes, wall coflow, wall spark
    try (CoflowCluster cluster = new CoflowCluster(work.resolve("cluster"), "varys", 2, portRate);
        SparkRun run = new SparkRun("coflow-example", SparkThroughAgentsIT.MASTER, cluster.sparkConf(), Map.of(),
            work.resolve("coflow"))) {
      warm(run);
      for (Jobs.Job job : jobs) {
        double before = cluster.coordinatorMetric("coflows_registered_total");
        double wall = run.timed(job.name(), () -> results.put(job.name(),
            SparkThroughAgentsIT.unchecked(() -> job.run(run, work.resolve("coflow").resolve(job.name())))));
        SparkRun.GroupMetrics m = run.metrics(job.name());
        double coflows = cluster.coordinatorMetric("coflows_registered_total") - before;
        figures.put(job.name(), new double[] {coflows, m.bytesRead(), wall, 0});
      }
    }
    Map<String, Boolean> identical = new LinkedHashMap<>();
    try (SparkRun run = new SparkRun("spark-example", SparkThroughAgentsIT.MASTER, null, Map.of(),
        work.resolve("spark"))) {
      warm(run);
      for (Jobs.Job job : jobs) {
        Jobs.Result[] own = new Jobs.Result[1];
        double wall = run.timed(job.name(), () -> own[0] =
            SparkThroughAgentsIT.unchecked(() -> job.run(run, work.resolve("spark").resolve(job.name()))));
        figures.get(job.name())[3] = wall;
        identical.put(job.name(), results.get(job.name()).difference(own[0]) == null && own[0].count() > 0);
      }
    }
    System.out.printf("%-24s %-9s %7s %22s %10s %10s%n", "job", "identical", "coflows", "bytes through agents",
        "coflow s", "spark s");
    StringBuilder js = new StringBuilder("{\n  \"jobs\": [\n");
    int i = 0;
    for (var e : figures.entrySet()) {
      double[] f = e.getValue();
      boolean same = identical.get(e.getKey());
      System.out.printf(Locale.ROOT, "%-24s %-9s %7d %22d %10.1f %10.1f%n", e.getKey(), same ? "yes" : "NO",
          (long) f[0], (long) f[1], f[2], f[3]);
      js.append(String.format(Locale.ROOT,
          "    {\"name\": \"%s\", \"identical\": %s, \"coflows\": %d, \"bytes_through_agents\": %d, "
              + "\"wall_s_coflow\": %.3f, \"wall_s_spark\": %.3f}%s%n",
          e.getKey(), same, (long) f[0], (long) f[1], f[2], f[3], ++i < figures.size() ? "," : ""));
    }
    return js.append("  ]\n}\n").toString();
  }

  /**
   * Waits for the executors and warms them and the driver (class loading, the SQL planner's first
   * use), so that the first job timed in either mode pays no start-up cost.
   */
  static void warm(SparkRun run) {
    run.jsc.parallelize(Jobs.range(8), 8).mapToPair(i -> new Tuple2<>(i % 2, i)).reduceByKey(Integer::sum).count();
    run.spark.range(0, 1000, 1, 4).selectExpr("id % 7 as k").groupBy("k").count().collectAsList();
  }

  /** The concurrent jobs' shuffle sizes in MiB: one small, one medium, one large, one huge. */
  static final int[] CONCURRENT_MIB = {8, 16, 32, 64};

  /** Several jobs with concurrent shuffles under varys, fair and Spark's own shuffle. */
  static String concurrent(Path work, String portRate, String[] modes) throws Exception {
    Map<String, String> extra = Map.of("spark.scheduler.mode", "FAIR");
    String master = "local-cluster[2,2,1024]";
    StringBuilder js = new StringBuilder("{\n  \"port_rate\": \"" + portRate + "\",\n  \"concurrent\": [\n");
    System.out.printf("%-8s %-10s %10s %16s %12s%n", "shuffle", "job", "MiB", "shuffle read s", "JCT s");
    for (int m = 0; m < modes.length; m++) {
      String mode = modes[m];
      Path dir = work.resolve("concurrent-" + mode);
      CoflowCluster cluster = mode.equals("spark") ? null : new CoflowCluster(dir.resolve("cluster"), mode, 2, portRate);
      try (SparkRun run = new SparkRun("concurrent-" + mode, master, cluster == null ? null : cluster.sparkConf(),
          extra, dir)) {
        warm(run);
        List<double[]> rows = runConcurrently(run);
        for (int j = 0; j < rows.size(); j++) {
          double[] r = rows.get(j);
          System.out.printf(Locale.ROOT, "%-8s %-10s %10d %16.2f %12.2f%n", mode, "job-" + j, CONCURRENT_MIB[j],
              r[0], r[1]);
          js.append(String.format(Locale.ROOT,
              "    {\"shuffle\": \"%s\", \"job\": \"job-%d\", \"mib\": %d, \"shuffle_read_s\": %.3f, \"jct_s\": %.3f}%s%n",
              mode, j, CONCURRENT_MIB[j], r[0], r[1], m == modes.length - 1 && j == rows.size() - 1 ? "" : ","));
        }
      } finally {
        if (cluster != null) {
          cluster.close();
        }
      }
    }
    return js.append("  ]\n}\n").toString();
  }

  /** Starts every job at once, each in its own fair-scheduler pool; per job: shuffle read time and JCT, in s. */
  static List<double[]> runConcurrently(SparkRun run) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(CONCURRENT_MIB.length);
    try {
      List<Future<Double>> walls = new ArrayList<>();
      for (int j = 0; j < CONCURRENT_MIB.length; j++) {
        int job = j;
        walls.add(pool.submit(() -> {
          run.jsc.setLocalProperty("spark.scheduler.pool", "job-" + job);
          return run.timed("job-" + job, () -> shuffleOf(run, CONCURRENT_MIB[job], job));
        }));
      }
      List<double[]> rows = new ArrayList<>();
      for (int j = 0; j < walls.size(); j++) {
        double wall = walls.get(j).get();
        SparkRun.GroupMetrics g = run.metrics("job-" + j);
        rows.add(new double[] {g.fetchWaitMs / 1e3, wall});
      }
      return rows;
    } finally {
      pool.shutdownNow();
    }
  }

  /** A shuffle of {@code mib} MiB of incompressible records, 4 maps × 4 reduces, checked by count. */
  static void shuffleOf(SparkRun run, int mib, int seed) {
    int parts = 4;
    int recordBytes = 1024;
    long perPart = (long) mib * (1 << 20) / recordBytes / parts;
    long n = run.jsc.parallelize(Jobs.range(parts), parts).flatMapToPair(i -> {
      Random rnd = new Random(seed * 100L + i);
      List<Tuple2<Integer, byte[]>> rs = new ArrayList<>();
      for (long k = 0; k < perPart; k++) {
        byte[] b = new byte[recordBytes];
        rnd.nextBytes(b);
        rs.add(new Tuple2<>(rnd.nextInt(), b));
      }
      return rs.iterator();
    }).partitionBy(new HashPartitioner(parts)).count();
    if (n != perPart * parts) {
      throw new IllegalStateException("job of " + mib + " MiB counted " + n + " records, expected " + perPart * parts);
    }
  }
}
