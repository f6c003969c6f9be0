package io.coflow.spark;

import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;

/**
 * A driver for {@link LeaseIT}: runs a word count through coflow in {@code local[2]}, prints
 * {@link #READY} and its app id once its shuffle's coflow is registered and used, and then waits to
 * be killed, so that it dies without unregistering. Arguments: the work directory, then the
 * plugin's configuration as {@code key=value}.
 */
final class LeaseDriver {
  /** What the driver prints, with its application's id, once its shuffle went through coflow. */
  static final String READY = "lease driver ready:";

  private LeaseDriver() {}

  public static void main(String[] args) throws Exception {
    Path work = Path.of(args[0]);
    Map<String, String> conf = new HashMap<>();
    for (int i = 1; i < args.length; i++) {
      String[] kv = args[i].split("=", 2);
      conf.put(kv[0], kv[1]);
    }
    // The shuffle stays registered until the driver dies: no cleaner unregisters it after a GC.
    conf.put("spark.cleaner.referenceTracking", "false");
    SparkRun run = new SparkRun("lease-driver", "local[2]", conf, Map.of(), work);
    Jobs.Result got = Jobs.wordCount(RegistrationIT.WORDS).run(run, work);
    if (got.difference(Jobs.Result.rows(Jobs.wordCountExpected(RegistrationIT.WORDS))) != null) {
      throw new IllegalStateException("the word count through coflow is wrong");
    }
    System.out.println(READY + " " + run.appId());
    System.out.flush();
    Thread.sleep(Long.MAX_VALUE);
  }
}
