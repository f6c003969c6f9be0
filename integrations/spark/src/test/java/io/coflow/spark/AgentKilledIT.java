package io.coflow.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.spark.SparkException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import scala.Tuple2;

/**
 * An agent killed while reducers read through it: the job either completes with the right result
 * (Spark recomputes the lost map output elsewhere) or fails with an error that names coflow; never
 * a wrong or partial result.
 */
class AgentKilledIT {
  static final int PARTS = 8;
  static final int PER_PART = 75_000;
  static final int KEYS = 97;

  @Test
  @Timeout(value = 5, unit = TimeUnit.MINUTES)
  void an_agent_killed_during_the_reduce_stage_never_gives_a_wrong_result() throws Exception {
    Path work = SparkRun.freshWork("agent-killed");
    Map<String, String> extra = Map.of(
        // A task that failed on an executor whose agent is gone is retried on another one.
        "spark.excludeOnFailure.enabled", "true",
        "spark.excludeOnFailure.timeout", "10min");
    // Ports capped low enough that the reduce stage lasts seconds.
    try (CoflowCluster cluster = new CoflowCluster(work.resolve("cluster"), "varys", 2, "25MB/s");
        SparkRun run = new SparkRun("coflow-kill-it", SparkThroughAgentsIT.MASTER, cluster.sparkConf(), extra,
            work.resolve("spark"))) {
      AtomicBoolean killed = run.duringTheReduceStage(() -> {
        cluster.kill(1);
        System.out.println("killed agent 1 during the reduce stage");
      });
      List<Tuple2<Integer, Tuple2<Long, Long>>> got;
      try {
        got = job(run);
      } catch (Exception e) {
        if (!(e instanceof SparkException)) {
          throw e;
        }
        assertTrue(killed.get(), "the job failed before the agent was killed: " + e);
        assertTrue(String.valueOf(e.getMessage()).contains("coflow"), "a failure that does not name coflow: " + e);
        System.out.println("clear failure after the kill: " + e.getMessage().lines().findFirst().orElse(""));
        return;
      }
      assertTrue(killed.get(), "the agent was never killed");
      TreeMap<Integer, Tuple2<Long, Long>> byKey = new TreeMap<>();
      for (var t : got) {
        if (byKey.put(t._1(), t._2()) != null) {
          fail("key " + t._1() + " appears twice");
        }
      }
      TreeMap<Integer, Tuple2<Long, Long>> expected = expected();
      assertEquals(expected, byKey, "the job completed after the kill, so its result must be exact");
      System.out.println("completed after the kill with the exact result (" + byKey.size() + " keys)");
    }
  }

  /** The job: records per key and the sum of their hashes, as (key, (count, hash sum)). */
  static List<Tuple2<Integer, Tuple2<Long, Long>>> job(SparkRun run) {
    return run.jsc.parallelize(Jobs.range(PARTS), PARTS)
        .flatMapToPair(i -> records(i).iterator())
        .groupByKey(PARTS)
        .mapValues(vs -> {
          long n = 0;
          long h = 0;
          for (String v : vs) {
            n++;
            h += v.hashCode();
          }
          return new Tuple2<>(n, h);
        })
        .collect();
  }

  static List<Tuple2<Integer, String>> records(int part) {
    Random rnd = new Random(4000 + part);
    List<Tuple2<Integer, String>> rs = new ArrayList<>(PER_PART);
    for (int k = 0; k < PER_PART; k++) {
      rs.add(new Tuple2<>(rnd.nextInt(KEYS), Jobs.text(rnd, 100)));
    }
    return rs;
  }

  /** The result computed in plain Java from the same records. */
  static TreeMap<Integer, Tuple2<Long, Long>> expected() {
    long[] n = new long[KEYS];
    long[] h = new long[KEYS];
    for (int p = 0; p < PARTS; p++) {
      for (var r : records(p)) {
        n[r._1()]++;
        h[r._1()] += r._2().hashCode();
      }
    }
    TreeMap<Integer, Tuple2<Long, Long>> m = new TreeMap<>();
    for (int k = 0; k < KEYS; k++) {
      if (n[k] > 0) {
        m.put(k, new Tuple2<>(n[k], h[k]));
      }
    }
    return m;
  }
}
