package io.coflow.spark;

import com.codahale.metrics.Counter;
import com.codahale.metrics.MetricRegistry;
import org.apache.spark.SparkEnv;
import org.apache.spark.metrics.MetricsSystem;
import org.apache.spark.metrics.source.Source;

/**
 * The plugin's counters in Spark's metrics system, as the source {@code coflow} of the driver and
 * of every executor (so any configured sink shows them, e.g. {@code <app>.driver.coflow.shufflesFallback}).
 * The driver counts shuffles; executors count blocks, puts and failures.
 */
final class CoflowMetrics implements Source {
  static final String SOURCE = "coflow";

  private static CoflowMetrics current;
  private static MetricsSystem registeredWith;

  private final MetricRegistry registry = new MetricRegistry();
  /** Shuffles registered as coflows (driver). */
  final Counter shufflesThroughCoflow = registry.counter("shufflesThroughCoflow");
  /** Shuffles on Spark's own path: coordinator unreachable under {@code auto}, or {@code always} (driver). */
  final Counter shufflesFallback = registry.counter("shufflesFallback");
  /** Blocks that could not be fetched through the agents and became fetch failures (executors). */
  final Counter fetchFailures = registry.counter("fetchFailures");
  /** Blocks read through the local agent (executors). */
  final Counter blocksFetched = registry.counter("blocksFetched");
  /** Bytes of those blocks. */
  final Counter bytesFetched = registry.counter("bytesFetched");
  /** Map output partitions put through the local agent (executors). */
  final Counter piecesPut = registry.counter("piecesPut");
  /** Map tasks whose puts failed (executors). */
  final Counter putFailures = registry.counter("putFailures");

  @Override
  public String sourceName() {
    return SOURCE;
  }

  @Override
  public MetricRegistry metricRegistry() {
    return registry;
  }

  /**
   * This process's counters, registered with its current Spark metrics system (a new application
   * in the same JVM, as in tests, gets fresh counters in its own metrics system).
   */
  static synchronized CoflowMetrics get() {
    SparkEnv env = SparkEnv.get();
    MetricsSystem ms = env == null ? null : env.metricsSystem();
    if (current == null || (ms != null && ms != registeredWith)) {
      current = new CoflowMetrics();
      registeredWith = ms;
      if (ms != null) {
        ms.registerSource(current);
      }
    }
    return current;
  }
}
