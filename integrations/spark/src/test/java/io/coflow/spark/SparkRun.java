package io.coflow.spark;

import java.nio.file.Path;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.SparkListenerTaskStart;
import org.apache.spark.sql.SparkSession;
import scala.collection.JavaConverters;

/**
 * One Spark application on a {@code local-cluster} (real executor JVMs), either through coflow
 * (given a cluster's configuration) or on Spark's own shuffle, with per-job-group metrics.
 */
final class SparkRun implements AutoCloseable {
  final SparkSession spark;
  final JavaSparkContext jsc;
  final Listener listener = new Listener();

  /** What the tasks of one job group did. */
  static final class GroupMetrics {
    final Set<Integer> shuffles = ConcurrentHashMap.newKeySet();
    long fetchWaitMs;
    long remoteBytesRead;
    long localBytesRead;
    long shuffleBytesWritten;
    int failedTasks;

    long bytesRead() {
      return remoteBytesRead + localBytesRead;
    }
  }

  /**
   * Starts an application on {@code master} ({@code local-cluster[2,1,1024]} in tests). {@code coflow}
   * is the plugin's configuration, or null for Spark's own shuffle.
   */
  SparkRun(String name, String master, Map<String, String> coflow, Map<String, String> extra, Path work) {
    SparkConf conf = new SparkConf()
        .setAppName(name)
        .setMaster(master)
        .set("spark.ui.enabled", "false")
        .set("spark.driver.host", "127.0.0.1")
        .set("spark.driver.bindAddress", "127.0.0.1")
        .set("spark.local.dir", work.resolve("spark-local").toString())
        .set("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        // Below the default (200), so that each of Spark's three sort writers runs in the jobs:
        // bypass (<= 4 partitions), serialized (more, no map-side combine), sort (map-side combine).
        .set("spark.shuffle.sort.bypassMergeThreshold", "4")
        .set("spark.sql.adaptive.enabled", "true")
        .set("spark.sql.shuffle.partitions", "16")
        .set("spark.executor.memory", "900m")
        .set("spark.network.timeout", "60s")
        .set("spark.executor.heartbeatInterval", "5s");
    String testJar = System.getProperty("coflow.test.jar");
    if (testJar == null) {
      throw new IllegalStateException("-Dcoflow.test.jar (the jar of these jobs, for the executors) is not set");
    }
    if (coflow != null) {
      coflow.forEach(conf::set);
      if (System.getProperty("coflow.spark.compat", "4.0").startsWith("3.")) {
        // Spark 3.5 builds an executor's shuffle manager before it loads user jars.
        conf.set("spark.executor.extraClassPath", pluginJar());
        conf.set("spark.jars", testJar);
      } else {
        conf.set("spark.jars", pluginJar() + "," + testJar);
      }
    } else {
      conf.set("spark.jars", testJar);
    }
    extra.forEach(conf::set);
    spark = SparkSession.builder().config(conf).getOrCreate();
    jsc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    spark.sparkContext().addSparkListener(listener);
  }

  /** Wraps an application started elsewhere (the testbed's driver, {@link TestbedMix}). */
  SparkRun(SparkSession spark) {
    this.spark = spark;
    this.jsc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    spark.sparkContext().addSparkListener(listener);
  }

  /** What a test does to the cluster while a job runs, by {@link #duringTheReduceStage}. */
  interface Fault {
    void run() throws Exception;
  }

  /**
   * Runs {@code fault} on a thread of its own 400 ms after the first task of the next job's result
   * stage starts (its first attempt); the flag turns true as it starts.
   */
  AtomicBoolean duringTheReduceStage(Fault fault) {
    AtomicBoolean started = new AtomicBoolean();
    spark.sparkContext().addSparkListener(new SparkListener() {
      private volatile int resultStage = -1;

      @Override
      public void onStageSubmitted(SparkListenerStageSubmitted e) {
        if (e.stageInfo().shuffleDepId().isEmpty() && e.stageInfo().attemptNumber() == 0) {
          resultStage = e.stageInfo().stageId();
        }
      }

      @Override
      public void onTaskStart(SparkListenerTaskStart e) {
        if (e.stageId() == resultStage && started.compareAndSet(false, true)) {
          Thread t = new Thread(() -> {
            try {
              Thread.sleep(400);
              fault.run();
            } catch (Exception ex) {
              throw new IllegalStateException(ex);
            }
          }, "fault");
          t.setDaemon(true);
          t.start();
        }
      }
    });
    return started;
  }

  /** An integration test's own work directory, {@code name} under {@code -Dcoflow.work}, emptied. */
  static Path freshWork(String name) {
    Path work = Path.of(System.getProperty("coflow.work", "target/it-work")).resolve(name);
    ExecutorSide.deleteTree(work);
    return work;
  }

  /** The shaded plugin jar the executors load: {@code -Dcoflow.plugin.jar}. */
  static String pluginJar() {
    String p = System.getProperty("coflow.plugin.jar");
    if (p == null) {
      throw new IllegalStateException("-Dcoflow.plugin.jar (the shaded plugin jar) is not set");
    }
    return p;
  }

  String appId() {
    return spark.sparkContext().applicationId();
  }

  /** Runs {@code body} as job group {@code group} and returns its wall time in seconds. */
  double timed(String group, Runnable body) {
    jsc.setJobGroup(group, group, false);
    long t0 = System.nanoTime();
    try {
      body.run();
    } finally {
      jsc.clearJobGroup();
    }
    return (System.nanoTime() - t0) / 1e9;
  }

  /** The metrics of a job group, once Spark's listener bus has delivered every event. */
  GroupMetrics metrics(String group) {
    try {
      spark.sparkContext().listenerBus().waitUntilEmpty(60_000);
    } catch (java.util.concurrent.TimeoutException e) {
      throw new IllegalStateException("Spark's listener bus did not drain in 60 s", e);
    }
    return listener.groups.computeIfAbsent(group, g -> new GroupMetrics());
  }

  @Override
  public void close() {
    spark.stop();
  }

  /** Sums task metrics per job group. */
  static final class Listener extends SparkListener {
    final Map<String, GroupMetrics> groups = new ConcurrentHashMap<>();
    private final Map<Integer, String> stageGroup = new HashMap<>();
    private final Set<Integer> seen = new HashSet<>();

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
    public synchronized void onStageSubmitted(SparkListenerStageSubmitted e) {
      String g = stageGroup.get(e.stageInfo().stageId());
      if (g != null && e.stageInfo().shuffleDepId().isDefined() && seen.add(e.stageInfo().stageId())) {
        groups.computeIfAbsent(g, k -> new GroupMetrics()).shuffles.add((Integer) e.stageInfo().shuffleDepId().get());
      }
    }

    @Override
    public synchronized void onTaskEnd(SparkListenerTaskEnd e) {
      String g = stageGroup.get(e.stageId());
      if (g == null) {
        return;
      }
      GroupMetrics m = groups.computeIfAbsent(g, k -> new GroupMetrics());
      if (!e.taskInfo().successful()) {
        m.failedTasks++;
      }
      TaskMetrics t = e.taskMetrics();
      if (t == null) {
        return;
      }
      m.fetchWaitMs += t.shuffleReadMetrics().fetchWaitTime();
      m.remoteBytesRead += t.shuffleReadMetrics().remoteBytesRead();
      m.localBytesRead += t.shuffleReadMetrics().localBytesRead();
      m.shuffleBytesWritten += t.shuffleWriteMetrics().bytesWritten();
    }
  }
}
