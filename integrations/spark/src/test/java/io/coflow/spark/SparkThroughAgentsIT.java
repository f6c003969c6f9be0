package io.coflow.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.spark.api.java.JavaPairRDD;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import scala.Tuple2;

/**
 * Four jobs on a Spark local-cluster (two executor JVMs, each with its own agent), once through
 * coflow and once on Spark's own shuffle in the same run: identical results, one coflow per
 * shuffle, and every shuffle byte through the agents.
 */
class SparkThroughAgentsIT {
  static final String MASTER = "local-cluster[2,1,1024]";

  @Test
  @Timeout(value = 8, unit = TimeUnit.MINUTES)
  void jobs_through_coflow_match_spark_row_for_row() throws Exception {
    Path work = SparkRun.freshWork("through-agents");
    // 1.1 M records of 100 bytes: 110 MB into the sort.
    List<Jobs.Job> jobs = Jobs.all(1_100_000);
    Map<String, Jobs.Result> viaCoflow = new LinkedHashMap<>();
    try (CoflowCluster cluster = new CoflowCluster(work.resolve("cluster"), "varys", 2, "400MB/s");
        // The sort's blocks (about 1.7 MB) exceed this and reach its reducers through temporary
        // files; the other jobs' blocks stay in memory.
        SparkRun run = new SparkRun("coflow-it", MASTER, cluster.sparkConf(),
            Map.of("spark.network.maxRemoteBlockSizeFetchToMem", "1m"), work.resolve("coflow"))) {
      for (Jobs.Job job : jobs) {
        double coflowsBefore = cluster.coordinatorMetric("coflows_registered_total");
        long countedBefore = RegistrationIT.counter("shufflesThroughCoflow");
        double rxBefore = cluster.agentsMetric("rx_bytes_total");
        double txBefore = cluster.agentsMetric("tx_bytes_total");
        double[] wall = new double[1];
        wall[0] = run.timed(job.name(), () -> viaCoflow.put(job.name(), unchecked(() -> job.run(run,
            work.resolve("coflow").resolve(job.name())))));
        SparkRun.GroupMetrics m = run.metrics(job.name());
        double coflows = cluster.coordinatorMetric("coflows_registered_total") - coflowsBefore;
        double rx = cluster.agentsMetric("rx_bytes_total") - rxBefore;
        double tx = cluster.agentsMetric("tx_bytes_total") - txBefore;
        System.out.printf("coflow %s: %.1f s, %d shuffles, %.0f coflows, %d bytes read (%d remote), agents rx %.0f%n",
            job.name(), wall[0], m.shuffles.size(), coflows, m.bytesRead(), m.remoteBytesRead, rx);
        assertTrue(m.shuffles.size() >= 1, job.name() + " ran no shuffle");
        assertEquals(m.shuffles.size(), (long) coflows, job.name() + ": one coflow per shuffle");
        assertEquals((long) coflows, RegistrationIT.counter("shufflesThroughCoflow") - countedBefore,
            job.name() + ": the driver's coflow.shufflesThroughCoflow counts them");
        assertTrue(m.bytesRead() > 0, job.name() + " read nothing");
        // Every remote block crossed between agents exactly once; local ones were served in place.
        assertEquals(m.remoteBytesRead, (long) rx, job.name() + ": bytes received by agents");
        assertEquals((long) tx, (long) rx, job.name() + ": bytes sent and received by agents");
        assertEquals(0, m.failedTasks, job.name() + " had failed tasks");
      }
      String status = cluster.status();
      assertTrue(status.contains(run.appId() + "/shuffle-"), "coflow status names the shuffles:\n" + status);
      // A shuffle whose map side reads another's output names that shuffle's coflow as its parent,
      // and joins its job.
      JavaPairRDD<Integer, Integer> first = run.jsc.parallelize(List.of(1, 2, 3, 4), 2)
          .mapToPair(x -> new Tuple2<>(x % 3, x)).reduceByKey(Integer::sum);
      JavaPairRDD<Integer, Integer> second = first.mapToPair(t -> new Tuple2<>(t._2() % 2, t._1()))
          .reduceByKey(Integer::sum);
      assertEquals(2, second.count());
      String after = cluster.status();
      String parent = coflowOf(after, run.appId() + "/shuffle-" + LineageTest.shuffleOf(first));
      String child = lineOf(after, run.appId() + "/shuffle-" + LineageTest.shuffleOf(second));
      assertTrue(child.endsWith(" job " + parent), "the second shuffle's coflow in the first's job:\n" + after);
    }
    try (SparkRun run = new SparkRun("spark-it", MASTER, null, Map.of(), work.resolve("spark"))) {
      for (Jobs.Job job : jobs) {
        Jobs.Result own = job.run(run, work.resolve("spark").resolve(job.name()));
        Jobs.Result coflow = viaCoflow.get(job.name());
        assertTrue(own.count() > 0, job.name() + " produced nothing");
        assertNull(coflow.difference(own), job.name() + ": coflow's result against Spark's");
        System.out.printf("%s: identical, %d rows%n", job.name(), own.count());
      }
    }
  }

  /** The line of {@code coflow status} of the coflow named {@code name}. */
  static String lineOf(String status, String name) {
    return status.lines().filter(l -> l.contains(" " + name + " ")).findFirst()
        .orElseThrow(() -> new AssertionError("no coflow " + name + " in\n" + status)).strip();
  }

  /** The id of the coflow named {@code name} in {@code coflow status}. */
  static String coflowOf(String status, String name) {
    return lineOf(status, name).split("\\s+")[1];
  }

  interface Body<T> {
    T get() throws Exception;
  }

  static <T> T unchecked(Body<T> b) {
    try {
      return b.get();
    } catch (RuntimeException e) {
      throw e;
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }
}
