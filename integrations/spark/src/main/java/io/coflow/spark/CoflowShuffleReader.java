package io.coflow.spark;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

import io.coflow.v1.GetChunk;
import io.coflow.v1.GetRequest;
import io.grpc.Context;
import io.grpc.StatusRuntimeException;
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
import org.apache.spark.storage.ShuffleBlockId;
import org.apache.spark.util.TaskCompletionListener;
import org.apache.spark.util.collection.ExternalSorter;
import scala.Option;
import scala.Product2;
import scala.Tuple2;
import scala.Tuple3;
import scala.collection.AbstractIterator;
import scala.jdk.javaapi.CollectionConverters;

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
            CollectionConverters.asJava(byAddress); it.hasNext();) {
      var entry = it.next();
      boolean local = entry._1().executorId().equals(self);
      for (Iterator<Tuple3<BlockId, Object, Object>> bs = CollectionConverters.asJava(entry._2().iterator());
          bs.hasNext();) {
        var b = bs.next();
        blocks.add(new Block(entry._1(), (ShuffleBlockId) b._1(), (Long) b._2(), (Integer) b._3(), local));
      }
    }
    Records records = new Records(blocks, env.serializerManager(), dep.serializer().newInstance());
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
   * The records of every block, one block after another. Up to {@code maxStreams} gets are open at
   * once, so the coordinator sees the task's flows together and they move while earlier blocks are
   * being deserialized.
   */
  private final class Records extends AbstractIterator<Tuple2<Object, Object>> {
    private final ArrayDeque<Block> pending;
    private final ArrayDeque<BlockStream> open = new ArrayDeque<>();
    private final SerializerManager serializers;
    private final SerializerInstance serializer;
    private scala.collection.Iterator<Tuple2<Object, Object>> current;
    private BlockStream currentStream;
    private boolean done;

    Records(List<Block> blocks, SerializerManager serializers, SerializerInstance serializer) {
      this.pending = new ArrayDeque<>(blocks);
      this.serializers = serializers;
      this.serializer = serializer;
      fill();
    }

    private void fill() {
      while (open.size() < side.conf.maxStreams && !pending.isEmpty()) {
        open.add(new BlockStream(pending.poll()));
      }
    }

    @Override
    public boolean hasNext() {
      while (current == null || !current.hasNext()) {
        if (currentStream != null) {
          currentStream.finish();
          currentStream = null;
          current = null;
        }
        if (open.isEmpty()) {
          if (!done) {
            done = true;
            context.taskMetrics().mergeShuffleReadMetrics();
          }
          return false;
        }
        currentStream = open.poll();
        fill();
        InputStream wrapped = serializers.wrapStream(currentStream.block.id(), currentStream);
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

    void cancel() {
      if (currentStream != null) {
        currentStream.cancel();
      }
      for (BlockStream s : open) {
        s.cancel();
      }
      open.clear();
      pending.clear();
    }
  }

  /** One block's bytes as the agent streams them; a failure is a fetch failure of that block. */
  private final class BlockStream extends InputStream {
    private final Block block;
    private final Context.CancellableContext call;
    private final Iterator<GetChunk> chunks;
    private ByteBuffer chunk = ByteBuffer.allocate(0);
    private long bytes;
    private boolean ended;

    BlockStream(Block block) {
      this.block = block;
      this.call = Context.current().withCancellation();
      Context previous = call.attach();
      try {
        GetRequest req = GetRequest.newBuilder()
            .setCoflowId(handle.coflowId())
            .setDataId(ExecutorSide.dataId(handle.shuffleId(), block.id().mapId(), block.id().reduceId()))
            .build();
        this.chunks = side.blocking.get(req);
      } finally {
        call.detach(previous);
      }
    }

    @Override
    public int read() throws IOException {
      byte[] one = new byte[1];
      int n = read(one, 0, 1);
      return n < 0 ? -1 : one[0] & 0xff;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      if (len == 0) {
        return 0;
      }
      while (!chunk.hasRemaining()) {
        if (ended || !advance()) {
          ended = true;
          return -1;
        }
      }
      int n = Math.min(len, chunk.remaining());
      chunk.get(b, off, n);
      return n;
    }

    private boolean advance() {
      long t0 = System.nanoTime();
      try {
        if (!chunks.hasNext()) {
          return false;
        }
        chunk = chunks.next().getData().asReadOnlyByteBuffer();
        bytes += chunk.remaining();
        return true;
      } catch (StatusRuntimeException e) {
        if (CoflowChannels.unreachable(e)) {
          // This executor cannot reach its own agent: the map output may well be fine, so the task
          // fails (and is retried, on another executor with spark.excludeOnFailure.enabled)
          // instead of blaming the mapper.
          throw sneaky(new IOException("coflow: the local agent " + side.agent + " is unreachable reading block "
              + block.id().name() + ": " + CoflowChannels.describe(e), e));
        }
        throw sneaky(fetchFailed(e));
      } finally {
        metrics.incFetchWaitTime((System.nanoTime() - t0) / 1_000_000);
      }
    }

    private FetchFailedException fetchFailed(Throwable e) {
      String msg = "coflow: block " + block.id().name() + " of coflow " + handle.coflowId() + " from executor "
          + block.address().executorId() + " could not be fetched through agent " + side.agent + ": "
          + CoflowChannels.describe(e);
      return new FetchFailedException(block.address(), handle.shuffleId(), block.id().mapId(), block.mapIndex(),
          block.id().reduceId(), msg, e);
    }

    /** The block was read to its end: count it. */
    void finish() {
      if (block.local()) {
        metrics.incLocalBlocksFetched(1);
        metrics.incLocalBytesRead(bytes);
      } else {
        metrics.incRemoteBlocksFetched(1);
        metrics.incRemoteBytesRead(bytes);
      }
      call.cancel(null);
    }

    void cancel() {
      call.cancel(null);
    }

    @Override
    public void close() {
      // The deserializer closes its stream at the end of the block; the call ends in finish().
    }
  }

  @SuppressWarnings("unchecked")
  private static <T extends Throwable> RuntimeException sneaky(Throwable t) throws T {
    throw (T) t;
  }
}
