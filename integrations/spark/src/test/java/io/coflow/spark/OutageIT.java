package io.coflow.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import scala.Tuple2;

/**
 * Outages a job outlives under Spark's defaults (no spark.excludeOnFailure): a restart of an
 * executor's own agent, and a coordinator that answers nothing for a while, each during the
 * reduce stage. The job completes with the exact result.
 */
class OutageIT {
  /** AgentKilledIT's job, by key: records per key and the sum of their hashes, which must be exact. */
  private static TreeMap<Integer, Tuple2<Long, Long>> job(SparkRun run) {
    TreeMap<Integer, Tuple2<Long, Long>> byKey = new TreeMap<>();
    for (var t : AgentKilledIT.job(run)) {
      byKey.put(t._1(), t._2());
    }
    return byKey;
  }

  @Test
  @Timeout(value = 5, unit = TimeUnit.MINUTES)
  void a_job_outlives_a_3s_restart_of_an_executors_own_agent() throws Exception {
    Path work = SparkRun.freshWork("agent-restart");
    try (CoflowCluster cluster = new CoflowCluster(work.resolve("cluster"), "varys", 2, "25MB/s");
        SparkRun run = new SparkRun("coflow-agent-restart-it", SparkThroughAgentsIT.MASTER, cluster.sparkConf(),
            Map.of(), work.resolve("spark"))) {
      AtomicBoolean restarted = run.duringTheReduceStage(() -> {
        cluster.kill(1);
        Thread.sleep(3_000);
        cluster.restart(1, "25MB/s");
      });
      TreeMap<Integer, Tuple2<Long, Long>> got = job(run);
      assertTrue(restarted.get(), "the agent was never restarted");
      assertEquals(AgentKilledIT.expected(), got, "the job outlived the restart, so its result must be exact");
    }
  }

  @Test
  @Timeout(value = 5, unit = TimeUnit.MINUTES)
  void a_job_outlives_a_coordinator_that_answers_nothing_for_30s() throws Exception {
    Path work = SparkRun.freshWork("coordinator-frozen");
    // The agents give up on the coordinator after 2 s rather than 30, so that each task attempt
    // meets the outage within seconds, as a longer one would with the default grace: an attempt
    // fails after about 12 s (4 asks of 3 s each), so the outage spans two or three
    // attempts of each reduce task, and a map stage run again meanwhile would fail its 4 attempts.
    try (CoflowCluster cluster = new CoflowCluster(work.resolve("cluster"), "varys", 2, "25MB/s",
            "coordinator_grace_ms = 2000\n");
        SparkRun run = new SparkRun("coflow-coordinator-frozen-it", SparkThroughAgentsIT.MASTER, cluster.sparkConf(),
            Map.of("spark.shuffle.io.retryWait", "1s", "spark.shuffle.io.maxRetries", "3"), work.resolve("spark"))) {
      AtomicBoolean frozen = run.duringTheReduceStage(() -> {
        cluster.freezeCoordinator();
        try {
          Thread.sleep(30_000);
        } finally {
          cluster.thawCoordinator();
        }
      });
      TreeMap<Integer, Tuple2<Long, Long>> got;
      try {
        got = job(run);
      } finally {
        cluster.thawCoordinator();
      }
      assertTrue(frozen.get(), "the coordinator was never frozen");
      assertEquals(AgentKilledIT.expected(), got, "the job outlived the outage, so its result must be exact");
    }
  }
}
