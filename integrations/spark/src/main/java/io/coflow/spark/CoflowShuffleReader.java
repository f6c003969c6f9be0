package io.coflow.spark;

import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

import org.apache.spark.Aggregator;
import org.apache.spark.InterruptibleIterator;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.serializer.SerializerInstance;
import org.apache.spark.serializer.SerializerManager;
import org.apache.spark.shuffle.FetchFailedException;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.shuffle.ShuffleReader;
import org.apache.spark.storage.BlockId;
import org.apache.spark.storage.BlockManagerId;
import org.apache.spark.storage.DiskBlockManager;
import org.apache.spark.storage.ShuffleBlockId;
import org.apache.spark.util.TaskCompletionListener;
import org.apache.spark.util.collection.ExternalSorter;
import scala.Option;
import scala.Product2;
import scala.Tuple2;
import scala.Tuple3;
import scala.collection.AbstractIterator;
import scala.collection.JavaConverters;

/**
 * A reduce task's reader: every block comes through the local agent's streaming get (the agent
 * fetches it from the mapper's agent at the rate the coordinator assigns), then Spark's own
 * decompression, deserialization, aggregation and sorting run on the stream. A block that cannot be
 * fetched becomes a {@link FetchFailedException}, so Spark recomputes the map output.
 */
final class CoflowShuffleReader<K, C> implements ShuffleReader<K, C> {
  private final CoflowShuffleHandle handle;
  private final ShuffleDependency<K, ?, C> dep;
  private final int startMap;
  private final int endMap;
  private final int startPartition;
  private final int endPartition;
  private final TaskContext context;
  private final ShuffleReadMetricsReporter metrics;
  private final ExecutorSide side;

  @SuppressWarnings("unchecked")
  CoflowShuffleReader(CoflowShuffleHandle handle, int startMap, int endMap, int startPartition, int endPartition,
      TaskContext context, ShuffleReadMetricsReporter metrics, ExecutorSide side) {
    this.handle = handle;
    this.dep = (ShuffleDependency<K, ?, C>) handle.inner().dependency();
    this.startMap = startMap;
    this.endMap = endMap;
    this.startPartition = startPartition;
    this.endPartition = endPartition;
    this.context = context;
    this.metrics = metrics;
    this.side = side;
  }

  @Override
  @SuppressWarnings({"unchecked", "rawtypes"})
  public scala.collection.Iterator<Product2<K, C>> read() {
    SparkEnv env = SparkEnv.get();
    List<Block> blocks = new ArrayList<>();
    var byAddress = env.mapOutputTracker()
        .getMapSizesByExecutorId(handle.shuffleId(), startMap, endMap, startPartition, endPartition);
    String self = env.blockManager().blockManagerId().executorId();
    for (Iterator<Tuple2<BlockManagerId, scala.collection.Seq<Tuple3<BlockId, Object, Object>>>> it =
            JavaConverters.asJavaIterator(byAddress); it.hasNext();) {
      var entry = it.next();
      boolean local = entry._1().executorId().equals(self);
      for (Iterator<Tuple3<BlockId, Object, Object>> bs = JavaConverters.asJavaIterator(entry._2().iterator());
          bs.hasNext();) {
        var b = bs.next();
        blocks.add(new Block(entry._1(), (ShuffleBlockId) b._1(), (Long) b._2(), (Integer) b._3(), local));
      }
    }
    // Spark's own key, read as Spark's fetcher reads it: a block over it goes to a temporary file in
    // one of the executor's local directories rather than the heap.
    long maxBlockInMemory = (Long) env.conf().get(
        org.apache.spark.internal.config.package$.MODULE$.MAX_REMOTE_BLOCK_SIZE_FETCH_TO_MEM());
    DiskBlockManager disk = env.blockManager().diskBlockManager();
    Records records = new Records(blocks, env.serializerManager(), dep.serializer().newInstance(), maxBlockInMemory,
        () -> disk.createTempLocalBlock()._2());
    context.addTaskCompletionListener(new TaskCompletionListener() {
      @Override
      public void onTaskCompletion(TaskContext c) {
        records.cancel();
      }
    });
    InterruptibleIterator<Product2<K, Object>> interruptible =
        new InterruptibleIterator<>(context, (scala.collection.Iterator) records);
    scala.collection.Iterator<Product2<K, C>> result;
    if (dep.keyOrdering().isDefined()) {
      ExternalSorter sorter;
      if (dep.aggregator().isDefined()) {
        Aggregator<K, ?, C> agg = dep.aggregator().get();
        if (dep.mapSideCombine()) {
          Aggregator<K, C, C> merge = new Aggregator<>(c -> c, agg.mergeCombiners(), agg.mergeCombiners());
          sorter = new ExternalSorter(context, Option.apply(merge), Option.empty(), dep.keyOrdering(),
              dep.serializer());
        } else {
          sorter = new ExternalSorter(context, dep.aggregator(), Option.empty(), dep.keyOrdering(), dep.serializer());
        }
      } else {
        sorter = new ExternalSorter(context, Option.empty(), Option.empty(), dep.keyOrdering(), dep.serializer());
      }
      result = sorter.insertAllAndUpdateMetrics(interruptible);
    } else if (dep.aggregator().isDefined()) {
      Aggregator agg = dep.aggregator().get();
      result = dep.mapSideCombine()
          ? agg.combineCombinersByKey(interruptible, context)
          : agg.combineValuesByKey(interruptible, context);
    } else {
      return (scala.collection.Iterator) interruptible;
    }
    return new InterruptibleIterator<>(context, result);
  }

  /** One block to fetch: where Spark says it is, and its id. */
  private record Block(BlockManagerId address, ShuffleBlockId id, long approxSize, int mapIndex, boolean local) {}

  /**
   * The records of every block, block after block in the order they arrive. The gets are
   * {@link BlockFetcher}'s: drained as their bytes come, within
   * {@code spark.coflow.reader.maxBytesInFlight}, so the coordinator sees the task's flows together
   * and they keep moving while earlier blocks are being deserialized; a block over
   * {@code spark.network.maxRemoteBlockSizeFetchToMem} is drained into a temporary file, which is
   * deleted when its block has been read or the task completes.
   */
  private final class Records extends AbstractIterator<Tuple2<Object, Object>> {
    private final BlockFetcher<Block> fetcher;
    private final SerializerManager serializers;
    private final SerializerInstance serializer;
    private scala.collection.Iterator<Tuple2<Object, Object>> current;
    /** The stream of the block being read. */
    private InputStream currentStream;
    private boolean done;

    Records(List<Block> blocks, SerializerManager serializers, SerializerInstance serializer, long maxBlockInMemory,
        BlockFetcher.TempFiles tempFiles) {
      List<BlockFetcher.Want<Block>> wants = new ArrayList<>(blocks.size());
      for (Block b : blocks) {
        wants.add(new BlockFetcher.Want<>(
            ExecutorSide.dataId(handle.shuffleId(), b.id().mapId(), b.id().reduceId()), b.approxSize(), b));
      }
      this.serializers = serializers;
      this.serializer = serializer;
      this.fetcher = new BlockFetcher<>(side.async, handle.coflowId(), wants, side.conf.maxBytesInFlight,
          side.conf.maxStreams, side.conf.fetchTimeout.toMillis(), side.conf.maxRetries, side.conf.retryWait.toMillis(),
          maxBlockInMemory, tempFiles);
    }

    @Override
    public boolean hasNext() {
      while (current == null || !current.hasNext()) {
        current = null;
        closeCurrent();
        if (!fetcher.hasNext()) {
          if (!done) {
            done = true;
            context.taskMetrics().mergeShuffleReadMetrics();
          }
          return false;
        }
        BlockFetcher.Fetched<Block> f;
        long t0 = System.nanoTime();
        try {
          f = fetcher.next();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw sneaky(new IOException("coflow: interrupted while fetching shuffle blocks", e));
        } finally {
          metrics.incFetchWaitTime((System.nanoTime() - t0) / 1_000_000);
        }
        Block block = f.want.tag();
        if (!f.ok()) {
          throw sneaky(failure(block, f));
        }
        long bytes = f.size;
        if (block.local()) {
          metrics.incLocalBlocksFetched(1);
          metrics.incLocalBytesRead(bytes);
        } else {
          metrics.incRemoteBlocksFetched(1);
          metrics.incRemoteBytesRead(bytes);
        }
        CoflowMetrics.get().blocksFetched.inc();
        CoflowMetrics.get().bytesFetched.inc(bytes);
        try {
          currentStream = f.open();
        } catch (IOException e) {
          throw sneaky(new IOException("coflow: cannot read block " + block.id().name() + " from " + f.file, e));
        }
        InputStream wrapped = serializers.wrapStream(block.id(), currentStream);
        current = serializer.deserializeStream(wrapped).asKeyValueIterator();
      }
      return true;
    }

    @Override
    public Tuple2<Object, Object> next() {
      if (!hasNext()) {
        throw new java.util.NoSuchElementException();
      }
      metrics.incRecordsRead(1);
      return current.next();
    }

    /** Closes the stream of the block read last (deleting its file, if it has one). */
    private void closeCurrent() {
      if (currentStream != null) {
        try {
          currentStream.close();
        } catch (IOException e) {
          // The stream deletes its file whether or not it closes cleanly.
        }
        currentStream = null;
      }
    }

    void cancel() {
      fetcher.close();
    }
  }

  /**
   * A block that could not be fetched: a fetch failure (Spark recomputes the map output), or, when
   * this executor cannot reach its own agent or its agent cannot reach the coordinator, an I/O
   * error that fails the task (the map output may well be fine, and a fetch failure would have
   * Spark drop every map output of the mapper's executor; the task is retried, on another
   * executor with spark.excludeOnFailure.enabled), as does a block too large to hold, which no
   * recomputation would change, and a block that could not be written to its local temporary file.
   */
  private Throwable failure(Block block, BlockFetcher.Fetched<Block> f) {
    if (f.cause == BlockFetcher.Cause.LOCAL_AGENT_UNREACHABLE) {
      return new IOException("coflow: the local agent " + side.agent + " is unreachable reading block "
          + block.id().name() + ": " + f.message, f.error);
    }
    if (f.cause == BlockFetcher.Cause.COORDINATOR_UNREACHABLE) {
      return new IOException("coflow: the coordinator is out of reach of the local agent " + side.agent
          + " reading block " + block.id().name() + " of coflow " + handle.coflowId() + ": " + f.message, f.error);
    }
    if (f.cause == BlockFetcher.Cause.TOO_LARGE || f.cause == BlockFetcher.Cause.LOCAL_FILE) {
      // The map output is not to blame (recomputing it would make the same block again, and a local
      // file's failure is this executor's): the task fails instead.
      return new IOException("coflow: block " + block.id().name() + ": " + f.message, f.error);
    }
    CoflowMetrics.get().fetchFailures.inc();
    String msg = "coflow: block " + block.id().name() + " of coflow " + handle.coflowId() + " from executor "
        + block.address().executorId() + " could not be fetched through agent " + side.agent + ": " + f.message;
    return new FetchFailedException(block.address(), handle.shuffleId(), block.id().mapId(), block.mapIndex(),
        block.id().reduceId(), msg, f.error);
  }

  @SuppressWarnings("unchecked")
  private static <T extends Throwable> RuntimeException sneaky(Throwable t) throws T {
    throw (T) t;
  }
}
