package io.coflow.spark;

import java.io.IOException;
import java.util.Map;
import java.util.Optional;

import org.apache.spark.SparkConf;
import org.apache.spark.shuffle.api.ShuffleDataIO;
import org.apache.spark.shuffle.api.ShuffleDriverComponents;
import org.apache.spark.shuffle.api.ShuffleExecutorComponents;
import org.apache.spark.shuffle.api.ShuffleMapOutputWriter;
import org.apache.spark.shuffle.api.SingleSpillShuffleMapOutputWriter;
import org.apache.spark.shuffle.sort.io.LocalDiskShuffleDataIO;

/**
 * Where Spark's sort shuffle writes map output ({@code spark.shuffle.sort.io.plugin.class}): a
 * coflow shuffle's map output goes to a file in the local agent's data directory and is put through
 * the agent on commit; a shuffle on Spark's own path (the fallback) goes to Spark's local disk.
 */
public final class CoflowShuffleDataIO implements ShuffleDataIO {
  private final LocalDiskShuffleDataIO local;

  public CoflowShuffleDataIO(SparkConf conf) {
    this.local = new LocalDiskShuffleDataIO(conf);
  }

  @Override
  public ShuffleExecutorComponents executor() {
    return new Executor(local.executor());
  }

  @Override
  public ShuffleDriverComponents driver() {
    return local.driver();
  }

  private static final class Executor implements ShuffleExecutorComponents {
    private final ShuffleExecutorComponents local;

    Executor(ShuffleExecutorComponents local) {
      this.local = local;
    }

    @Override
    public void initializeExecutor(String appId, String execId, Map<String, String> extraConfigs) {
      local.initializeExecutor(appId, execId, extraConfigs);
    }

    @Override
    public ShuffleMapOutputWriter createMapOutputWriter(int shuffleId, long mapTaskId, int numPartitions)
        throws IOException {
      ExecutorSide side = ExecutorSide.peek();
      Long coflow = side == null ? null : side.coflowOf(shuffleId);
      if (coflow == null) {
        return local.createMapOutputWriter(shuffleId, mapTaskId, numPartitions);
      }
      return new CoflowMapOutputWriter(side, coflow, shuffleId, mapTaskId, numPartitions);
    }

    @Override
    public Optional<SingleSpillShuffleMapOutputWriter> createSingleFileMapOutputWriter(int shuffleId, long mapId)
        throws IOException {
      ExecutorSide side = ExecutorSide.peek();
      if (side != null && side.coflowOf(shuffleId) != null) {
        return Optional.empty();
      }
      return local.createSingleFileMapOutputWriter(shuffleId, mapId);
    }
  }
}
