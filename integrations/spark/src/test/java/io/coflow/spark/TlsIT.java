package io.coflow.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Mutual TLS end to end: a coordinator and two agents with certificates from {@code coflow certs},
 * no token anywhere, and a Spark {@code local-cluster} whose driver and executors present one
 * client certificate (the application is one coflow owner). The driver registers over TLS, map
 * tasks put and reducers get through their agents over TLS, and the agents move the blocks to each
 * other over TLS.
 */
class TlsIT {
  @Test
  @Timeout(value = 4, unit = TimeUnit.MINUTES)
  void a_job_runs_through_coflow_over_mutual_tls() throws Exception {
    Path work = SparkRun.freshWork("tls");
    int words = 200_000;
    try (CoflowCluster cluster = new CoflowCluster(work.resolve("cluster"), "varys", 2, "400MB/s", null, true);
        SparkRun run = new SparkRun("tls-it", SparkThroughAgentsIT.MASTER, cluster.sparkConf(), Map.of(),
            work.resolve("spark"))) {
      assertTrue(!cluster.sparkConf().containsKey(CoflowConf.TOKEN), "no token under TLS");
      Jobs.Result[] got = new Jobs.Result[1];
      run.timed("word-count", () -> got[0] = SparkThroughAgentsIT.unchecked(
          () -> Jobs.wordCount(words).run(run, work.resolve("out"))));
      assertNull(got[0].difference(Jobs.Result.rows(Jobs.wordCountExpected(words))), "word count over TLS");
      SparkRun.GroupMetrics m = run.metrics("word-count");
      assertEquals(m.shuffles.size(), (long) cluster.coordinatorMetric("coflows_registered_total"),
          "one coflow per shuffle, registered over TLS");
      assertTrue(m.remoteBytesRead > 0, "some blocks crossed between executors");
      assertEquals(m.remoteBytesRead, (long) cluster.agentsMetric("rx_bytes_total"),
          "every remote block crossed between the agents");
    }
  }
}
