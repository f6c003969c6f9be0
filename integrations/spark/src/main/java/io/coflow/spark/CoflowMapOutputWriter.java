package io.coflow.spark;

import java.io.BufferedOutputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import io.coflow.v1.FileSegment;
import io.coflow.v1.PutRequest;
import io.coflow.v1.PutResponse;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import org.apache.spark.shuffle.api.ShuffleMapOutputWriter;
import org.apache.spark.shuffle.api.ShufflePartitionWriter;
import org.apache.spark.shuffle.api.metadata.MapOutputCommitMessage;

/**
 * One map task's output: its partitions, in order, in one file inside the local agent's data
 * directory; on commit every non-empty partition is put through the agent as a file segment with
 * its exact length. Serialization, sorting, spilling, map-side combine and checksums stay Spark's.
 */
final class CoflowMapOutputWriter implements ShuffleMapOutputWriter {
  private final ExecutorSide side;
  private final long coflowId;
  private final int shuffleId;
  private final long mapTaskId;
  private final long[] lengths;
  private final Path file;
  private OutputStream out;
  private int lastPartition = -1;

  CoflowMapOutputWriter(ExecutorSide side, long coflowId, int shuffleId, long mapTaskId, int numPartitions)
      throws IOException {
    this.side = side;
    this.coflowId = coflowId;
    this.shuffleId = shuffleId;
    this.mapTaskId = mapTaskId;
    this.lengths = new long[numPartitions];
    Path dir = side.shuffleDir(shuffleId);
    try {
      Files.createDirectories(dir);
    } catch (IOException e) {
      // Most often the directory an operator makes for this identity (with TLS, clients/NAME).
      throw new IOException("coflow: cannot make " + dir + " beneath the agent's data directory " + side.dataDir
          + " (see spark-deploy.md, \"A data directory both can use\"): " + e, e);
    }
    this.file = dir.resolve(mapTaskId + ".data");
  }

  @Override
  public ShufflePartitionWriter getPartitionWriter(int reducePartitionId) throws IOException {
    if (reducePartitionId <= lastPartition || reducePartitionId >= lengths.length) {
      throw new IllegalArgumentException("coflow: partition " + reducePartitionId + " requested after "
          + lastPartition + " (of " + lengths.length + "); partitions must come in increasing order");
    }
    lastPartition = reducePartitionId;
    if (out == null) {
      out = new BufferedOutputStream(new FileOutputStream(file.toFile()), 1 << 16);
    }
    return new Partition(reducePartitionId);
  }

  @Override
  public MapOutputCommitMessage commitAllPartitions(long[] checksums) throws IOException {
    if (out != null) {
      out.close();
      out = null;
    }
    String path = side.relative(file);
    long timeoutMs = side.conf.putTimeout.toMillis();
    try {
      putAll(path, timeoutMs);
    } catch (IOException e) {
      CoflowMetrics.get().putFailures.inc();
      throw e;
    }
    return MapOutputCommitMessage.of(lengths.clone());
  }

  /**
   * Puts every non-empty partition and waits until the agent has stored each, each ask within the
   * put timeout. The puts answered {@code coordinator-unreachable} (the coordinator out of reach,
   * the agent not registered with it yet; the agent withdraws such a put, so asking again is no
   * duplicate), {@code agent-unreachable} (the agent stopping) or not answered by the agent at all
   * (restarting) are asked again together after
   * {@code spark.shuffle.io.retryWait}, at most {@code spark.shuffle.io.maxRetries} times, as the
   * reader's gets are.
   */
  private void putAll(String path, long timeoutMs) throws IOException {
    List<Integer> partitions = new ArrayList<>();
    long[] offsets = new long[lengths.length];
    long offset = 0;
    for (int r = 0; r < lengths.length; r++) {
      offsets[r] = offset;
      if (lengths[r] > 0) {
        partitions.add(r);
      }
      offset += lengths[r];
    }
    int total = partitions.size();
    for (int attempt = 0; ; attempt++) {
      List<Future<PutResponse>> puts = new ArrayList<>();
      for (int r : partitions) {
        PutRequest req = PutRequest.newBuilder()
            .setCoflowId(coflowId)
            .setDataId(ExecutorSide.dataId(shuffleId, mapTaskId, r))
            .setFile(FileSegment.newBuilder().setPath(path).setOffset(offsets[r]).setLength(lengths[r]))
            .build();
        puts.add(side.futures.withDeadlineAfter(timeoutMs, TimeUnit.MILLISECONDS).put(req));
      }
      List<Integer> again = new ArrayList<>();
      Throwable last = null;
      for (int i = 0; i < puts.size(); i++) {
        int r = partitions.get(i);
        try {
          long stored = puts.get(i).get(timeoutMs, TimeUnit.MILLISECONDS).getSize();
          if (stored != lengths[r]) {
            throw new IOException("coflow: agent " + side.agent + " stored " + stored + " bytes of partition " + r
                + ", " + lengths[r] + " were written");
          }
        } catch (ExecutionException e) {
          Throwable why = e.getCause();
          if (retryable(why) && attempt < side.conf.maxRetries) {
            again.add(r);
            last = why;
            continue;
          }
          throw new IOException("coflow: putting " + ExecutorSide.dataId(shuffleId, mapTaskId, r) + " through agent "
              + side.agent + " failed: " + CoflowChannels.describe(why)
              + (attempt > 0 ? " (asked " + (attempt + 1) + " times)" : ""), why);
        } catch (TimeoutException e) {
          throw new IOException("coflow: agent " + side.agent + " did not store partition " + r + " within "
              + timeoutMs + " ms (" + CoflowConf.PUT_TIMEOUT + ")", e);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new IOException("coflow: interrupted while putting map output", e);
        }
      }
      if (again.isEmpty()) {
        break;
      }
      partitions = again;
      try {
        Thread.sleep(side.conf.retryWait.toMillis());
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IOException("coflow: interrupted while waiting to put map output again after "
            + CoflowChannels.describe(last), e);
      }
      // A restarted agent is asked at once, not after gRPC's reconnect backoff (up to two minutes).
      side.channel.resetConnectBackoff();
    }
    CoflowMetrics.get().piecesPut.inc(total);
  }

  /**
   * Whether a put is asked again: {@code coordinator-unreachable} or {@code agent-unreachable}, or
   * no answer from the agent before the put timeout.
   */
  private static boolean retryable(Throwable t) {
    if (CoflowChannels.retriedKind(t)) {
      return true;
    }
    return CoflowChannels.unreachable(t)
        && ((StatusRuntimeException) t).getStatus().getCode() == Status.Code.UNAVAILABLE;
  }

  @Override
  public void abort(Throwable error) throws IOException {
    try {
      if (out != null) {
        out.close();
        out = null;
      }
    } finally {
      Files.deleteIfExists(file);
    }
  }

  /** One partition's bytes, appended to the map task's file. */
  private final class Partition implements ShufflePartitionWriter {
    private final int reduceId;
    private long written;

    Partition(int reduceId) {
      this.reduceId = reduceId;
    }

    @Override
    public OutputStream openStream() {
      return new OutputStream() {
        private boolean closed;

        @Override
        public void write(int b) throws IOException {
          check();
          out.write(b);
          count(1);
        }

        @Override
        public void write(byte[] b, int off, int len) throws IOException {
          check();
          out.write(b, off, len);
          count(len);
        }

        @Override
        public void flush() throws IOException {
          check();
          out.flush();
        }

        @Override
        public void close() {
          // The map task's file stays open for the next partition.
          closed = true;
        }

        private void check() throws IOException {
          if (closed) {
            throw new IOException("coflow: partition " + reduceId + "'s stream is closed");
          }
        }
      };
    }

    private void count(long n) {
      written += n;
      lengths[reduceId] += n;
    }

    @Override
    public long getNumBytesWritten() {
      return written;
    }
  }
}
