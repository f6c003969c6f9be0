package io.coflow.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Random;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import java.util.stream.Stream;

import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.functions;
import scala.Tuple2;

/**
 * The jobs run both through coflow and on Spark's own shuffle, with seeded data, so that the two
 * results can be compared row for row.
 */
final class Jobs {
  private Jobs() {}

  /** A job's output: its rows in order, or (for outputs too large to collect) the directory of its text files. */
  static final class Result {
    final List<String> rows;
    final Path dir;

    private Result(List<String> rows, Path dir) {
      this.rows = rows;
      this.dir = dir;
    }

    static Result rows(List<String> rows) {
      return new Result(rows, null);
    }

    static Result dir(Path dir) {
      return new Result(null, dir);
    }

    /** Null when identical, else where the two first differ. */
    String difference(Result other) throws IOException {
      if (rows != null) {
        if (rows.size() != other.rows.size()) {
          return rows.size() + " rows against " + other.rows.size();
        }
        for (int i = 0; i < rows.size(); i++) {
          if (!rows.get(i).equals(other.rows.get(i))) {
            return "row " + i + ": " + rows.get(i) + " against " + other.rows.get(i);
          }
        }
        return null;
      }
      // The output in order: the part files one after another (how Spark splits it may differ).
      try (Stream<String> x = lines(dir); Stream<String> y = lines(other.dir)) {
        Iterator<String> a = x.iterator();
        Iterator<String> b = y.iterator();
        for (long i = 0; a.hasNext() || b.hasNext(); i++) {
          if (!a.hasNext() || !b.hasNext()) {
            return "one output ends at line " + i + ", the other goes on";
          }
          String l = a.next();
          String r = b.next();
          if (!l.equals(r)) {
            return "line " + i + ": " + l + " against " + r;
          }
        }
      }
      return null;
    }

    private static Stream<String> lines(Path dir) throws IOException {
      Stream<String> all = Stream.empty();
      for (Path p : parts(dir)) {
        all = Stream.concat(all, Stream.of(p).flatMap(f -> {
          try {
            return Files.lines(f);
          } catch (IOException e) {
            throw new UncheckedIOException(e);
          }
        }));
      }
      return all;
    }

    /** How many rows (lines) the result holds. */
    long count() throws IOException {
      if (rows != null) {
        return rows.size();
      }
      long n = 0;
      for (Path p : parts(dir)) {
        try (Stream<String> lines = Files.lines(p)) {
          n += lines.count();
        }
      }
      return n;
    }

    private static List<Path> parts(Path dir) throws IOException {
      try (Stream<Path> s = Files.list(dir)) {
        return s.filter(p -> p.getFileName().toString().startsWith("part-")).sorted().toList();
      }
    }
  }

  /** A named job. */
  interface Job {
    String name();

    Result run(SparkRun run, Path out) throws Exception;
  }

  static List<Job> all(long sortRecords) {
    return List.of(wordCount(400_000), sortByKey(sortRecords), skewedJoin(200_000), groupByAqe(3_000_000));
  }

  /** A word count over a Zipf-like vocabulary: reduceByKey, so the sort writer with map-side combine. */
  static Job wordCount(int words) {
    return new Job() {
      public String name() {
        return "word-count";
      }

      public Result run(SparkRun r, Path out) {
        int parts = 8;
        JavaRDD<String> text = r.jsc.parallelize(range(parts), parts).flatMap(i -> words(i, words / parts).iterator());
        List<String> rows = text.mapToPair(w -> new Tuple2<>(w, 1L))
            .reduceByKey(Long::sum, 6)
            .map(t -> t._1() + "\t" + t._2())
            .collect();
        return Result.rows(sorted(rows));
      }
    };
  }

  /** The words of one partition of the word count: a Zipf-like draw from 5,000 words. */
  static List<String> words(int part, int n) {
    Random rnd = new Random(1000 + part);
    List<String> ws = new ArrayList<>(n);
    for (int k = 0; k < n; k++) {
      ws.add("w" + (int) Math.floor(Math.pow(5000, rnd.nextDouble())));
    }
    return ws;
  }

  /** The word count's rows computed in plain Java. */
  static List<String> wordCountExpected(int words) {
    java.util.TreeMap<String, Long> counts = new java.util.TreeMap<>();
    for (int i = 0; i < 8; i++) {
      for (String w : words(i, words / 8)) {
        counts.merge(w, 1L, Long::sum);
      }
    }
    return sorted(counts.entrySet().stream().map(e -> e.getKey() + "\t" + e.getValue()).toList());
  }

  /** A total sort of {@code records} records of 100 bytes (key and text): the serialized writer, 8 × 8. */
  static Job sortByKey(long records) {
    return new Job() {
      public String name() {
        return "sort-by-key";
      }

      public Result run(SparkRun r, Path out) {
        int parts = 8;
        long per = records / parts;
        JavaPairRDD<Long, String> data = r.jsc.parallelize(range(parts), parts).flatMapToPair(i -> {
          Random rnd = new Random(2000 + i);
          List<Tuple2<Long, String>> rs = new ArrayList<>((int) per);
          for (long k = 0; k < per; k++) {
            rs.add(new Tuple2<>(rnd.nextLong(), text(rnd, 90)));
          }
          return rs.iterator();
        });
        Path dir = out.resolve("sorted");
        data.sortByKey(true, parts).map(t -> t._1() + "\t" + t._2()).saveAsTextFile(dir.toUri().toString());
        return Result.dir(dir);
      }
    };
  }

  /** A join where half the left side has one key: one reducer gets half the data (bypass writer, 4 partitions). */
  static Job skewedJoin(int leftRows) {
    return new Job() {
      public String name() {
        return "skewed-join";
      }

      public Result run(SparkRun r, Path out) {
        int parts = 8;
        JavaPairRDD<Integer, String> left = r.jsc.parallelize(range(parts), parts).flatMapToPair(i -> {
          Random rnd = new Random(3000 + i);
          List<Tuple2<Integer, String>> rs = new ArrayList<>();
          for (int k = 0; k < leftRows / parts; k++) {
            int key = rnd.nextBoolean() ? 0 : 1 + rnd.nextInt(2000);
            rs.add(new Tuple2<>(key, i + ":" + k));
          }
          return rs.iterator();
        });
        List<Tuple2<Integer, String>> small = new ArrayList<>();
        for (int k = 0; k <= 2000; k += 2) {
          small.add(new Tuple2<>(k, "r" + k));
        }
        JavaPairRDD<Integer, String> right = r.jsc.parallelizePairs(small, 3);
        List<String> rows = left.join(right, 4).map(t -> t._1() + "\t" + t._2()._1() + "\t" + t._2()._2()).collect();
        return Result.rows(sorted(rows));
      }
    };
  }

  /** A DataFrame aggregation with adaptive query execution on (partitions coalesced at run time). */
  static Job groupByAqe(long rows) {
    return new Job() {
      public String name() {
        return "dataframe-groupby-aqe";
      }

      public Result run(SparkRun r, Path out) {
        List<Row> got = r.spark.range(0, rows, 1, 8)
            .selectExpr("id % 1009 as k", "(id * 7) % 1000003 as v")
            .groupBy("k")
            .agg(functions.count("*"), functions.sum("v"), functions.max("v"), functions.min("v"))
            .collectAsList();
        return Result.rows(sorted(got.stream().map(row -> row.mkString("\t")).collect(Collectors.toList())));
      }
    };
  }

  static List<Integer> range(int n) {
    return IntStream.range(0, n).boxed().toList();
  }

  static String text(Random rnd, int n) {
    char[] c = new char[n];
    for (int i = 0; i < n; i++) {
      c[i] = (char) ('a' + rnd.nextInt(26));
    }
    return new String(c);
  }

  static List<String> sorted(List<String> rows) {
    List<String> s = new ArrayList<>(rows);
    Collections.sort(s);
    return s;
  }
}
