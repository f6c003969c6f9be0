package io.coflow.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Arrays;
import java.util.List;
import java.util.Set;

import org.apache.spark.Dependency;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.rdd.RDD;
import org.junit.jupiter.api.Test;
import scala.Tuple2;

/** The parent shuffles of a shuffle's map side, on lineages built (never run) in {@code local[1]}. */
class LineageTest {
  /** The shuffle {@code shuffled} reads, behind the maps the Java API may put over it. */
  static int shuffleOf(JavaPairRDD<?, ?> shuffled) {
    Dependency<?> d = shuffled.rdd().dependencies().head();
    while (!(d instanceof ShuffleDependency)) {
      d = d.rdd().dependencies().head();
    }
    return ((ShuffleDependency<?, ?, ?>) d).shuffleId();
  }

  @Test
  void a_map_side_reads_the_shuffles_behind_its_narrow_dependencies_and_no_further() {
    SparkConf conf = new SparkConf().setMaster("local[1]").setAppName("lineage-test")
        .set("spark.ui.enabled", "false");
    try (JavaSparkContext sc = new JavaSparkContext(conf)) {
      List<Tuple2<Integer, Integer>> pairs = Arrays.asList(new Tuple2<>(1, 1), new Tuple2<>(2, 2));
      JavaPairRDD<Integer, Integer> input = sc.parallelizePairs(pairs, 2);
      JavaPairRDD<Integer, Integer> first = input.reduceByKey(Integer::sum);
      // Three partitions, not the first shuffle's two, so that this is a shuffle too.
      JavaPairRDD<Integer, Integer> second = first.mapValues(v -> v + 1).reduceByKey(Integer::sum, 3);
      JavaPairRDD<Integer, Iterable<Integer>> grouped = input.groupByKey();
      JavaPairRDD<Integer, Integer> other = grouped.mapValues(vs -> 0);
      // A map side over both: a map of the second shuffle's output, and a union with another.
      RDD<?> mapSide = second.mapValues(v -> v * 2).union(other).filter(t -> true).rdd();
      assertEquals(Set.of(shuffleOf(second), shuffleOf(grouped)), Lineage.parentShuffles(mapSide, 100),
          "the second shuffle and the other, not the first, which lies behind the second");
      assertEquals(Set.of(shuffleOf(first)), Lineage.parentShuffles(first.mapValues(v -> v).rdd(), 100));
      assertEquals(Set.of(), Lineage.parentShuffles(input.rdd(), 100), "the input reads no shuffle");
      // A persisted RDD ends the walk, computed or not: a stage reads it from the cache.
      JavaPairRDD<Integer, Integer> cached = first.mapValues(v -> v).cache();
      assertEquals(Set.of(), Lineage.parentShuffles(cached.mapValues(v -> v).rdd(), 100));
      // The second shuffle's own map side: the first shuffle's output behind one map. A walk that
      // may visit only the map side itself finds nothing; one more RDD reaches the first shuffle.
      RDD<?> secondMapSide = ((ShuffleDependency<?, ?, ?>) second.rdd().dependencies().head()).rdd();
      assertEquals(Set.of(), Lineage.parentShuffles(secondMapSide, 1));
      assertEquals(Set.of(shuffleOf(first)), Lineage.parentShuffles(secondMapSide, 2));
    }
  }
}
