package io.coflow.spark;

import java.util.ArrayDeque;
import java.util.Deque;
import java.util.HashSet;
import java.util.Set;
import java.util.SortedSet;
import java.util.TreeSet;

import org.apache.spark.Dependency;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.rdd.RDD;
import org.apache.spark.storage.StorageLevel;

/**
 * The shuffles a shuffle's map side reads: its parents, which the driver names when it registers
 * the shuffle's coflow, so that job-aware policies ({@code aalo-job}) rank the shuffles connected
 * by lineage together.
 */
final class Lineage {
  /** The most RDDs one walk visits: a lineage longer than that names the parents found within it. */
  static final int MOST_VISITED = 10_000;

  private Lineage() {}

  /**
   * The ids of the shuffles {@code rdd} reads, through its narrow dependencies (a map, a union, a
   * checkpoint), stopping at each shuffle: those of its stage, not their ancestors'. Stops at a
   * persisted RDD too: what is read from a cache is no stage's output, and a cached dataset would
   * otherwise join every later query over it to the job that built it. Visits at most {@code most}
   * RDDs.
   */
  static SortedSet<Integer> parentShuffles(RDD<?> rdd, int most) {
    SortedSet<Integer> found = new TreeSet<>();
    Set<Integer> seen = new HashSet<>();
    Deque<RDD<?>> todo = new ArrayDeque<>();
    seen.add(rdd.id());
    todo.push(rdd);
    while (!todo.isEmpty()) {
      scala.collection.Iterator<Dependency<?>> deps = todo.pop().dependencies().iterator();
      while (deps.hasNext()) {
        Dependency<?> d = deps.next();
        if (d instanceof ShuffleDependency) {
          found.add(((ShuffleDependency<?, ?, ?>) d).shuffleId());
        } else if (d.rdd().getStorageLevel() == StorageLevel.NONE() && seen.size() < most
            && seen.add(d.rdd().id())) {
          todo.push(d.rdd());
        }
      }
    }
    return found;
  }
}
