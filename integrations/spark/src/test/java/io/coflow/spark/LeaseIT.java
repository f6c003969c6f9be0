package io.coflow.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * What becomes of a driver's coflows when it cannot unregister them: killed (SIGKILL) after its
 * shuffle registered, its renewals keep the coflow while it lives and the coordinator drops it a
 * lease after it died; stopping while the coordinator is frozen costs one register timeout, not
 * one per shuffle.
 */
class LeaseIT {
  @Test
  @Timeout(value = 5, unit = TimeUnit.MINUTES)
  void a_killed_drivers_coflows_are_dropped_a_lease_after_it_died() throws Exception {
    Path work = SparkRun.freshWork("lease");
    try (CoflowCluster cluster = new CoflowCluster(work.resolve("cluster"), "varys", 1, "1GB/s")) {
      List<String> cmd = new ArrayList<>();
      cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
      cmd.addAll(ManagementFactory.getRuntimeMXBean().getInputArguments());
      for (String p : new String[] {"coflow.test.jar", "coflow.plugin.jar", "coflow.spark.compat"}) {
        cmd.add("-D" + p + "=" + System.getProperty(p, ""));
      }
      cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), LeaseDriver.class.getName(),
          work.resolve("driver").toString()));
      Map<String, String> conf = cluster.localConf();
      conf.put(CoflowConf.LEASE, "2s");
      for (Map.Entry<String, String> e : conf.entrySet()) {
        cmd.add(e.getKey() + "=" + e.getValue());
      }
      Path log = work.resolve("driver.log");
      Files.createDirectories(work);
      Process driver = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
      try {
        long until = System.nanoTime() + TimeUnit.MINUTES.toNanos(3);
        while (!Files.readString(log, StandardCharsets.UTF_8).contains(LeaseDriver.READY)) {
          assertTrue(driver.isAlive(), "the driver exited:\n" + Files.readString(log, StandardCharsets.UTF_8));
          assertTrue(System.nanoTime() < until, "the driver's job did not end in 3 minutes");
          Thread.sleep(200);
        }
        double live = cluster.coordinatorMetric("live_coflows");
        assertTrue(live >= 1, "the driver's shuffle is a live coflow");
        // Three leases later the renewals have kept it.
        Thread.sleep(6_000);
        assertEquals(live, cluster.coordinatorMetric("live_coflows"), "renewed while the driver lives");
        assertEquals(0.0, cluster.coordinatorMetric("coflows_expired_total"));
      } finally {
        driver.destroyForcibly();
        driver.waitFor();
      }
      long died = System.nanoTime();
      while (cluster.coordinatorMetric("live_coflows") > 0 && System.nanoTime() - died < 20_000_000_000L) {
        Thread.sleep(100);
      }
      double after = (System.nanoTime() - died) / 1e9;
      assertEquals(0.0, cluster.coordinatorMetric("live_coflows"), "the dead driver's coflows are still live");
      assertTrue(after < 5, "dropped " + after + " s after the driver died, with a lease of 2 s");
      assertTrue(cluster.coordinatorMetric("coflows_expired_total") >= 1);
      System.out.printf("the killed driver's coflows were dropped %.1f s after it died (lease 2 s)%n", after);
    }
  }

  @Test
  @Timeout(value = 5, unit = TimeUnit.MINUTES)
  void stop_unregisters_what_is_left_and_a_frozen_coordinator_costs_one_timeout_not_one_per_shuffle()
      throws Exception {
    Path work = SparkRun.freshWork("frozen-stop");
    try (CoflowCluster cluster = new CoflowCluster(work.resolve("cluster"), "varys", 1, "1GB/s")) {
      Map<String, String> conf = cluster.localConf();
      conf.put(CoflowConf.REGISTER_TIMEOUT, "2s");
      conf.put(CoflowConf.LEASE, "2s");
      // Every shuffle stays registered until the application stops.
      conf.put("spark.cleaner.referenceTracking", "false");
      // Stopped with the coordinator there: it unregisters what is left, and nothing expires.
      try (SparkRun run = new SparkRun("stop-it", "local[2]", conf, Map.of(), work)) {
        for (int i = 0; i < 2; i++) {
          Jobs.wordCount(1000).run(run, work.resolve("plain-" + i));
        }
        assertEquals(2.0, cluster.coordinatorMetric("live_coflows"), "one coflow per shuffle");
      }
      assertEquals(0.0, cluster.coordinatorMetric("live_coflows"), "stop unregisters the shuffles left");
      assertEquals(0.0, cluster.coordinatorMetric("coflows_expired_total"), "unregistered, not expired");

      int shuffles = 8;
      SparkRun run = new SparkRun("frozen-stop-it", "local[2]", conf, Map.of(), work);
      try {
        for (int i = 0; i < shuffles; i++) {
          Jobs.wordCount(1000).run(run, work.resolve("job-" + i));
        }
        assertEquals(shuffles, cluster.coordinatorMetric("live_coflows"), "one coflow per shuffle");
        cluster.freezeCoordinator();
        long t0 = System.nanoTime();
        run.close();
        double took = (System.nanoTime() - t0) / 1e9;
        System.out.printf("stop with the coordinator frozen and %d coflows registered: %.1f s%n", shuffles, took);
        assertTrue(took >= 1.9, "stop took " + took + " s: it did not wait for its unregisters' 2 s timeout");
        assertTrue(took < 8, "stop took " + took + " s: a 2 s timeout per shuffle would be 16 s");
      } finally {
        cluster.thawCoordinator();
        run.close(); // a no-op once stopped
      }
      // Thawed, it drops them: the unregisters it reads late, or their leases.
      long thawed = System.nanoTime();
      while (cluster.coordinatorMetric("live_coflows") > 0 && System.nanoTime() - thawed < 20_000_000_000L) {
        Thread.sleep(100);
      }
      assertEquals(0.0, cluster.coordinatorMetric("live_coflows"), "the frozen stop's coflows stay");
    }
  }
}
