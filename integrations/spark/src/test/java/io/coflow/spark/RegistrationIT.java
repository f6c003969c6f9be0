package io.coflow.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.ServerSocket;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.spark.SparkEnv;
import org.apache.spark.metrics.source.Source;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import scala.collection.JavaConverters;

/** What registration does when the coordinator is not there, or refuses. In {@code local[2]}: one JVM. */
class RegistrationIT {
  static final int WORDS = 100_000;

  /** The plugin's configuration with the coordinator and the agent at a closed port. */
  static Map<String, String> unreachable(Path work) throws java.io.IOException {
    int closed;
    try (ServerSocket s = new ServerSocket(0)) {
      closed = s.getLocalPort();
    }
    Map<String, String> conf = new HashMap<>();
    conf.put("spark.shuffle.manager", CoflowShuffleManager.class.getName());
    conf.put("spark.shuffle.sort.io.plugin.class", CoflowShuffleDataIO.class.getName());
    conf.put(CoflowConf.COORDINATOR, "127.0.0.1:" + closed);
    conf.put(CoflowConf.AGENT, "127.0.0.1:" + closed);
    conf.put(CoflowConf.DATA_DIR, work.resolve("nowhere").toString());
    conf.put(CoflowConf.TOKEN, "t");
    return conf;
  }

  @Test
  @Timeout(value = 3, unit = TimeUnit.MINUTES)
  void an_unreachable_coordinator_leaves_the_shuffle_on_sparks_own_path() throws Exception {
    Path work = SparkRun.freshWork("unreachable");
    Map<String, String> conf = unreachable(work);
    conf.put(CoflowConf.REGISTER_TIMEOUT, "2s");
    try (SparkRun run = new SparkRun("unreachable-it", "local[2]", conf, Map.of(), work)) {
      // The agent address is a closed port too: only Spark's own path can get this job through.
      Jobs.Result got = Jobs.wordCount(WORDS).run(run, work);
      assertNull(got.difference(Jobs.Result.rows(Jobs.wordCountExpected(WORDS))), "word count on the fallback path");
      assertEquals(1, counter("shufflesFallback"), "the fallback, in Spark's metrics system");
      assertEquals(0, counter("shufflesThroughCoflow"));
      // The next shuffle, within the hold-down, takes Spark's path without asking again.
      Jobs.Result again = Jobs.wordCount(WORDS).run(run, work);
      assertNull(again.difference(Jobs.Result.rows(Jobs.wordCountExpected(WORDS))), "word count in the hold-down");
      assertEquals(2, counter("shufflesFallback"));
    }
  }

  @Test
  @Timeout(value = 3, unit = TimeUnit.MINUTES)
  void fallback_never_fails_the_job_when_the_coordinator_is_unreachable() throws Exception {
    Path work = SparkRun.freshWork("never");
    Map<String, String> conf = unreachable(work);
    conf.put(CoflowConf.REGISTER_TIMEOUT, "2s");
    conf.put(CoflowConf.FALLBACK, "never");
    try (SparkRun run = new SparkRun("never-it", "local[2]", conf, Map.of(), work)) {
      Exception e = assertThrows(Exception.class, () -> Jobs.wordCount(WORDS).run(run, work));
      String msg = String.valueOf(e.getMessage());
      assertTrue(msg.contains("unreachable") && msg.contains(CoflowConf.FALLBACK + " is never"),
          "the failure names the unreachable coordinator and the setting: " + e);
      assertEquals(0, counter("shufflesFallback"));
    }
  }

  @Test
  @Timeout(value = 3, unit = TimeUnit.MINUTES)
  void a_shuffle_wider_than_max_pieces_is_never_registered() throws Exception {
    Path work = SparkRun.freshWork("wide");
    Map<String, String> conf = unreachable(work);
    conf.put(CoflowConf.MAX_PIECES, "1");
    conf.put(CoflowConf.FALLBACK, "never");
    try (SparkRun run = new SparkRun("wide-it", "local[2]", conf, Map.of(), work)) {
      // Refused before the (unreachable) coordinator is asked: the error names the limit.
      Exception e = assertThrows(Exception.class, () -> Jobs.wordCount(WORDS).run(run, work));
      String msg = String.valueOf(e.getMessage());
      assertTrue(msg.contains("more than " + CoflowConf.MAX_PIECES + " (1, kept below the coordinator's"),
          "the failure names the limit: " + e);
      assertTrue(!msg.contains("unreachable"), "the coordinator was not asked: " + e);
    }
  }

  @Test
  @Timeout(value = 3, unit = TimeUnit.MINUTES)
  void fallback_always_runs_sparks_own_shuffle_with_the_plugin_installed() throws Exception {
    Path work = SparkRun.freshWork("always");
    Map<String, String> conf = new HashMap<>();
    conf.put("spark.shuffle.manager", CoflowShuffleManager.class.getName());
    conf.put("spark.shuffle.sort.io.plugin.class", CoflowShuffleDataIO.class.getName());
    // No coordinator, agent or credentials: nothing is asked of coflow.
    conf.put(CoflowConf.FALLBACK, "always");
    try (SparkRun run = new SparkRun("always-it", "local[2]", conf, Map.of(), work)) {
      Jobs.Result got = Jobs.wordCount(WORDS).run(run, work);
      assertNull(got.difference(Jobs.Result.rows(Jobs.wordCountExpected(WORDS))), "word count on Spark's path");
      assertEquals(1, counter("shufflesFallback"));
      assertEquals(0, counter("shufflesThroughCoflow"));
    }
  }

  /** A counter of the plugin's source in this JVM's Spark metrics system (the driver's). */
  static long counter(String name) {
    long sum = 0;
    for (Source s : JavaConverters.seqAsJavaList(
        SparkEnv.get().metricsSystem().getSourcesByName(CoflowMetrics.SOURCE))) {
      sum += s.metricRegistry().counter(name).getCount();
    }
    return sum;
  }

  @Test
  @Timeout(value = 3, unit = TimeUnit.MINUTES)
  void a_coordinator_that_refuses_fails_the_job_with_its_reason() throws Exception {
    Path work = SparkRun.freshWork("refused");
    try (CoflowCluster cluster = new CoflowCluster(work.resolve("cluster"), "varys", 1, "1GB/s")) {
      Map<String, String> conf = new HashMap<>(cluster.sparkConf());
      conf.put(CoflowConf.TOKEN, "not-the-cluster-token");
      try (SparkRun run = new SparkRun("refused-it", "local[2]", conf, Map.of(), work)) {
        Exception e = assertThrows(Exception.class, () -> Jobs.wordCount(WORDS).run(run, work));
        String msg = String.valueOf(e.getMessage());
        assertTrue(msg.contains("coflow") && msg.contains("refused to register") && msg.contains("UNAUTHENTICATED"),
            "a refusal names coflow, what was refused and why: " + e);
        assertEquals(0.0, cluster.coordinatorMetric("coflows_registered_total"));
        assertEquals(0, counter("shufflesThroughCoflow"));
      }
    }
  }
}
