package io.coflow.spark;

import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import com.google.protobuf.ByteString;
import io.coflow.v1.AgentGrpc;
import io.coflow.v1.GetChunk;
import io.coflow.v1.GetRequest;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;

/**
 * A reduce task's gets through its local agent, as Spark's own fetcher does them: a get is opened
 * while the bytes in flight (blocks asked for and not yet taken by the task) stay within
 * {@code maxBytesInFlight} (one block is always allowed, however large) and at most
 * {@code maxStreams} are open; every open get is drained into memory as its bytes arrive, whatever
 * the task is doing, and a block is handed over only once it is complete. So a task that
 * deserializes slowly is a slow task, never a stalled stream: the agents close a data connection
 * on which nothing moves for their data idle timeout, and a get the client does not read stops
 * moving.
 *
 * <p>A block whose announced size exceeds {@code maxBlockInMemory} is written, chunk by chunk as it
 * arrives, to a file from {@code tempFiles} (as Spark's own fetcher streams a remote block over
 * {@code spark.network.maxRemoteBlockSizeFetchToMem} to disk) and handed over as a stream over
 * that file, which closing the stream deletes; once complete it no longer counts against
 * {@code maxBytesInFlight}. Closing the fetcher deletes every file it made that is still there,
 * and a get that fails or is asked again deletes its file at once (a retry writes a fresh one).
 *
 * <p>Every get is checked against the piece's size the agent announces on its first message: a
 * stream that ends short, runs long, or carries bytes before the size is a failure of that block,
 * never a short block.
 *
 * <p>A get the agent answers {@code agent-unreachable} (the source's agent, or the local agent
 * itself, out of reach or stopping), {@code coordinator-unreachable} (the local agent cannot reach
 * the coordinator) or {@code client-departed} (this executor read nothing of it for the agent's idle
 * timeout: a long pause of its JVM), and a get the local agent does not answer at all ({@code
 * UNAVAILABLE} without a kind: its process is down or restarting), is asked again after {@code
 * retryWaitMs}, at most {@code maxRetries} times, as Spark's own fetcher retries a fetch. Past the
 * retries, the kind says who is at fault: not the map output for {@code coordinator-unreachable}
 * ({@link Cause#COORDINATOR_UNREACHABLE}); else a fetch failure ({@link Cause#FETCH_FAILED}).
 *
 * @param <T> what the caller attaches to each block
 */
final class BlockFetcher<T> implements AutoCloseable {
  /** One block to fetch: its data id, the size Spark's map status gives for it, and the caller's tag. */
  record Want<T>(String dataId, long approxSize, T tag) {}

  /** Why a get failed. */
  enum Cause {
    /** The local agent did not answer at all: the map output may be fine, this executor cannot read. */
    LOCAL_AGENT_UNREACHABLE,
    /** {@code coordinator-unreachable} past the retries: the local agent cannot reach the coordinator. */
    COORDINATOR_UNREACHABLE,
    /** The agent answered that the block cannot be delivered, or its stream broke or was malformed. */
    FETCH_FAILED,
    /** The get did not complete within the fetch timeout. */
    TIMED_OUT,
    /** The block is larger than one buffer holds ({@link #MAX_BLOCK}): no fetch can bring it. */
    TOO_LARGE,
    /** The block could not be written to its local temporary file: the map output is not to blame. */
    LOCAL_FILE,
  }

  /** The largest block a get gathers: what one byte array (and so one {@link ByteString}) holds. */
  static final long MAX_BLOCK = Integer.MAX_VALUE - 8;

  /** Where a block fetched to disk is written: a new file, not yet created, in a local directory. */
  @FunctionalInterface
  interface TempFiles {
    File create() throws IOException;
  }

  /** A block fetched in full, or why it was not. */
  static final class Fetched<T> {
    final Want<T> want;
    /** The block's bytes, exactly the announced piece size, when it is held in memory; else null. */
    final ByteString bytes;
    /** The file holding exactly the block's bytes, when it was fetched to disk; else null. */
    final File file;
    /** The block's size, when fetched. */
    final long size;
    final Cause cause;
    final String message;
    final Throwable error;
    /** Whether its size still counts against {@code maxBytesInFlight} until the task takes it. */
    final boolean countsInFlight;
    /** The fetcher that made {@link #file}, which deletes it. */
    private final BlockFetcher<T> from;

    private Fetched(Want<T> want, ByteString bytes, File file, long size, Cause cause, String message,
        Throwable error, boolean countsInFlight, BlockFetcher<T> from) {
      this.from = from;
      this.want = want;
      this.bytes = bytes;
      this.file = file;
      this.size = size;
      this.cause = cause;
      this.message = message;
      this.error = error;
      this.countsInFlight = countsInFlight;
    }

    /** A block held in memory. */
    private Fetched(Want<T> want, ByteString bytes) {
      this(want, bytes, null, bytes.size(), null, null, null, true, null);
    }

    /** A failed block. */
    private Fetched(Want<T> want, Cause cause, String message, Throwable error) {
      this(want, null, null, 0, cause, message, error, true, null);
    }

    boolean ok() {
      return bytes != null || file != null;
    }

    /**
     * The block's bytes as a stream; for a block fetched to disk, closing the stream deletes its
     * file (as does closing the fetcher).
     */
    InputStream open() throws IOException {
      if (bytes != null) {
        return bytes.newInput();
      }
      File f = file;
      return new FilterInputStream(new FileInputStream(f)) {
        private boolean shut;

        @Override
        public void close() throws IOException {
          if (!shut) {
            shut = true;
            try {
              super.close();
            } finally {
              from.discard(f);
            }
          }
        }
      };
    }
  }

  private final AgentGrpc.AgentStub stub;
  private final long coflowId;
  private final long maxBytesInFlight;
  private final int maxStreams;
  private final long timeoutMs;
  private final int maxRetries;
  private final long retryWaitMs;
  private final long maxBlockInMemory;
  private final TempFiles tempFiles;
  /**
   * Held while gets start, while the bytes in flight change, while a temporary file is made and
   * while the fetcher closes, so no get starts and no file is made after it closed.
   */
  private final Object starting = new Object();
  private final ArrayDeque<Want<T>> pending;
  private final LinkedBlockingQueue<Fetched<T>> done = new LinkedBlockingQueue<>();
  private final Set<Get> open = ConcurrentHashMap.newKeySet();
  /** The temporary files made and not yet deleted. */
  private final Set<File> files = ConcurrentHashMap.newKeySet();
  // Guarded by starting: a block fetched to disk stops counting on gRPC's thread.
  private long bytesInFlight;
  private int inFlight;
  // Touched by the task's thread only.
  private int remaining;
  private volatile boolean closed;

  /**
   * Starts the first gets at once, so the coordinator sees the task's flows together.
   *
   * @param timeoutMs the longest a get may take, end to end
   */
  BlockFetcher(AgentGrpc.AgentStub stub, long coflowId, List<Want<T>> wants, long maxBytesInFlight, int maxStreams,
      long timeoutMs) {
    this(stub, coflowId, wants, maxBytesInFlight, maxStreams, timeoutMs, 0, 0);
  }

  /**
   * As below, every block held in memory.
   */
  BlockFetcher(AgentGrpc.AgentStub stub, long coflowId, List<Want<T>> wants, long maxBytesInFlight, int maxStreams,
      long timeoutMs, int maxRetries, long retryWaitMs) {
    this(stub, coflowId, wants, maxBytesInFlight, maxStreams, timeoutMs, maxRetries, retryWaitMs, Long.MAX_VALUE,
        null);
  }

  /**
   * Asks a get answered {@code agent-unreachable} or {@code coordinator-unreachable}, or not
   * answered by the local agent, again after {@code retryWaitMs}, at most {@code maxRetries} times;
   * writes a block whose announced size exceeds {@code maxBlockInMemory} to a file from
   * {@code tempFiles}.
   */
  BlockFetcher(AgentGrpc.AgentStub stub, long coflowId, List<Want<T>> wants, long maxBytesInFlight, int maxStreams,
      long timeoutMs, int maxRetries, long retryWaitMs, long maxBlockInMemory, TempFiles tempFiles) {
    if (maxBlockInMemory != Long.MAX_VALUE && tempFiles == null) {
      throw new IllegalArgumentException("a block size above which blocks go to disk needs a place for their files");
    }
    this.maxBlockInMemory = maxBlockInMemory;
    this.tempFiles = tempFiles;
    this.maxRetries = maxRetries;
    this.retryWaitMs = retryWaitMs;
    this.stub = stub;
    this.coflowId = coflowId;
    this.maxBytesInFlight = maxBytesInFlight;
    this.maxStreams = maxStreams;
    this.timeoutMs = timeoutMs;
    this.pending = new ArrayDeque<>(wants);
    this.remaining = wants.size();
    startGets();
  }

  private void startGets() {
    synchronized (starting) {
      while (!closed && !pending.isEmpty() && inFlight < maxStreams
          && (inFlight == 0 || bytesInFlight + Math.max(0, pending.peek().approxSize()) <= maxBytesInFlight)) {
        Want<T> w = pending.poll();
        inFlight++;
        bytesInFlight += Math.max(0, w.approxSize());
        start(new Get(w, 0));
      }
    }
  }

  /** A block now wholly on disk: its size no longer counts as bytes in flight, so more gets may open. */
  private void onDisk(Want<T> w) {
    synchronized (starting) {
      bytesInFlight -= Math.max(0, w.approxSize());
      startGets();
    }
  }

  /** A new temporary file, unless the fetcher closed; every file made is deleted by {@link #close}. */
  private File newFile() throws IOException {
    synchronized (starting) {
      if (closed) {
        return null;
      }
      File f = tempFiles.create();
      files.add(f);
      return f;
    }
  }

  /** Deletes a temporary file of this fetcher. */
  private void discard(File f) {
    if (files.remove(f)) {
      f.delete();
    }
  }

  private void start(Get g) {
    open.add(g);
    GetRequest req = GetRequest.newBuilder().setCoflowId(coflowId).setDataId(g.want.dataId()).build();
    stub.withDeadlineAfter(timeoutMs, TimeUnit.MILLISECONDS).get(req, g);
  }

  /** Asks for a block again, on the retry timer's thread, unless the fetcher closed meanwhile. */
  private void retry(Want<T> want, int attempt) {
    Get g = new Get(want, attempt);
    RuntimeException failed = null;
    synchronized (starting) {
      if (closed) {
        return;
      }
      if (stub.getChannel() instanceof ManagedChannel) {
        // A restarted agent is asked at once, not after gRPC's reconnect backoff (up to two minutes).
        ((ManagedChannel) stub.getChannel()).resetConnectBackoff();
      }
      try {
        start(g);
      } catch (RuntimeException e) {
        failed = e;
      }
    }
    if (failed != null) {
      // On the timer's thread: unless it is reported, the task would wait for this block forever.
      g.finish(new Fetched<>(want, Cause.FETCH_FAILED, "could not ask again: " + failed, failed));
    }
  }

  /** The one thread that waits out retries, for every fetcher of the process. */
  private static final ScheduledExecutorService RETRIES = Executors.newSingleThreadScheduledExecutor(r -> {
    Thread t = new Thread(r, "coflow-get-retry");
    t.setDaemon(true);
    return t;
  });

  /** Whether blocks remain to be taken. */
  boolean hasNext() {
    return remaining > 0;
  }

  /** The next block to complete (in full, or failed), waiting for it; then opens more gets. */
  Fetched<T> next() throws InterruptedException {
    if (remaining == 0) {
      throw new java.util.NoSuchElementException();
    }
    Fetched<T> f = done.take();
    remaining--;
    synchronized (starting) {
      inFlight--;
      if (f.countsInFlight) {
        bytesInFlight -= Math.max(0, f.want.approxSize());
      }
      startGets();
    }
    return f;
  }

  /** Gets open (streaming or complete and not yet taken). */
  int inFlight() {
    synchronized (starting) {
      return inFlight;
    }
  }

  /** Bytes asked for and not yet taken, less those of blocks wholly on disk. */
  long bytesInFlight() {
    synchronized (starting) {
      return bytesInFlight;
    }
  }

  /**
   * Cancels every open get, forgets what was not taken, and deletes every temporary file still
   * there (the files of blocks handed over included).
   */
  @Override
  public void close() {
    synchronized (starting) {
      closed = true;
      pending.clear();
    }
    for (Get g : new ArrayList<>(open)) {
      g.cancel();
      g.dropFile();
    }
    open.clear();
    done.clear();
    for (File f : new ArrayList<>(files)) {
      discard(f);
    }
  }

  /** One get, drained into memory, or into its file, on gRPC's threads. */
  private final class Get implements ClientResponseObserver<GetRequest, GetChunk> {
    private final Want<T> want;
    /** How many times this block was asked for before. */
    private final int attempt;
    private final long started = System.nanoTime();
    private final List<ByteString> chunks = new ArrayList<>();
    /** The file this block is written to, when its size exceeds what is held in memory. */
    private File file;
    private OutputStream out;
    private ClientCallStreamObserver<GetRequest> call;
    private Long size;
    private long received;
    private boolean finished;

    Get(Want<T> want, int attempt) {
      this.want = want;
      this.attempt = attempt;
    }

    @Override
    public void beforeStart(ClientCallStreamObserver<GetRequest> requestStream) {
      this.call = requestStream;
    }

    @Override
    public synchronized void onNext(GetChunk chunk) {
      if (finished) {
        return;
      }
      if (chunk.hasPieceSize() && size == null) {
        size = chunk.getPieceSize();
        if (size > maxBlockInMemory) {
          try {
            file = newFile();
            if (file == null) {
              finished = true; // the fetcher closed, and cancels this get
              return;
            }
            out = new FileOutputStream(file);
          } catch (IOException | RuntimeException e) {
            finish(new Fetched<>(want, Cause.LOCAL_FILE, "cannot write the block's " + size + " bytes to a local"
                + " file: " + e, e));
            call.cancel("coflow: no local file for the block", null);
            return;
          }
        } else if (size < 0 || size > MAX_BLOCK) {
          // Told before a byte comes: refused at once rather than failing when gathered.
          finish(new Fetched<>(want, Cause.TOO_LARGE, "the block holds " + Long.toUnsignedString(size)
              + " bytes, more than the " + MAX_BLOCK + " a reader holds in memory; split the stage into more"
              + " partitions", null));
          call.cancel("coflow: block too large", null);
          return;
        }
      }
      ByteString data = chunk.getData();
      if (size == null) {
        if (!data.isEmpty()) {
          malformed("the agent sent bytes before the piece's size");
        }
        return;
      }
      received += data.size();
      if (received > size) {
        malformed("the agent sent more than the piece's " + size + " bytes");
        return;
      }
      if (data.isEmpty()) {
        return;
      }
      if (out != null) {
        try {
          data.writeTo(out);
        } catch (IOException e) {
          finish(new Fetched<>(want, Cause.LOCAL_FILE, "cannot write the block to " + file + ": " + e, e));
          call.cancel("coflow: cannot write the block to a local file", null);
        }
      } else {
        chunks.add(data);
      }
    }

    /** Closes and deletes this get's file, if it has one. */
    synchronized void dropFile() {
      closeFile();
      if (file != null) {
        discard(file);
        file = null;
      }
    }

    /** Closes this get's file, keeping it; whether it closed cleanly. */
    private boolean closeFile() {
      if (out == null) {
        return true;
      }
      try {
        out.close();
        return true;
      } catch (IOException e) {
        return false;
      } finally {
        out = null;
      }
    }

    @Override
    public synchronized void onError(Throwable t) {
      if (finished) {
        return;
      }
      String kind = CoflowChannels.kind(t);
      boolean timedOut = t instanceof StatusRuntimeException
          && ((StatusRuntimeException) t).getStatus().getCode() == Status.Code.DEADLINE_EXCEEDED
          && kind == null
          && System.nanoTime() - started >= TimeUnit.MILLISECONDS.toNanos(timeoutMs);
      boolean retry = !timedOut && (CoflowChannels.retriedKind(t) || CoflowChannels.unreachable(t));
      if (retry && attempt < maxRetries && !closed) {
        finished = true;
        chunks.clear();
        dropFile();
        open.remove(this);
        RETRIES.schedule(() -> retry(want, attempt + 1), retryWaitMs, TimeUnit.MILLISECONDS);
        return;
      }
      String msg = CoflowChannels.describe(t) + (attempt > 0 ? " (asked " + (attempt + 1) + " times)" : "");
      if (timedOut) {
        finish(new Fetched<>(want, Cause.TIMED_OUT,
            "not fetched within " + timeoutMs + " ms (" + CoflowConf.FETCH_TIMEOUT + ")", t));
      } else if (CoflowChannels.unreachable(t)) {
        finish(new Fetched<>(want, Cause.LOCAL_AGENT_UNREACHABLE, msg, t));
      } else if (CoflowChannels.COORDINATOR_UNREACHABLE.equals(kind)) {
        finish(new Fetched<>(want, Cause.COORDINATOR_UNREACHABLE, msg, t));
      } else {
        finish(new Fetched<>(want, Cause.FETCH_FAILED, msg, t));
      }
    }

    @Override
    public synchronized void onCompleted() {
      if (finished) {
        return;
      }
      if (size == null) {
        finish(new Fetched<>(want, Cause.FETCH_FAILED, "the agent's stream ended before the piece's size", null));
      } else if (received != size) {
        finish(new Fetched<>(want, Cause.FETCH_FAILED,
            "the agent's stream ended after " + received + " of the piece's " + size + " bytes", null));
      } else if (file != null) {
        File f = file;
        if (!closeFile()) {
          finish(new Fetched<>(want, Cause.LOCAL_FILE, "cannot write the block to " + f, null));
          return;
        }
        file = null; // handed over: the stream over it, or the fetcher's close, deletes it
        onDisk(want);
        finish(new Fetched<>(want, null, f, size, null, null, null, false, BlockFetcher.this));
      } else {
        ByteString block;
        try {
          block = ByteString.copyFrom(chunks);
        } catch (RuntimeException | OutOfMemoryError e) {
          // On gRPC's thread: unless it is reported, the task would wait for this block forever.
          finish(new Fetched<>(want, Cause.TOO_LARGE, "cannot gather the block's " + size + " bytes: " + e, e));
          return;
        }
        finish(new Fetched<>(want, block));
      }
    }

    private void malformed(String msg) {
      finish(new Fetched<>(want, Cause.FETCH_FAILED, msg, null));
      call.cancel("coflow: " + msg, null);
    }

    private void finish(Fetched<T> f) {
      finished = true;
      chunks.clear();
      dropFile();
      open.remove(this);
      if (!closed) {
        done.add(f);
      } else if (f.file != null) {
        discard(f.file);
      }
    }

    void cancel() {
      if (call != null) {
        call.cancel("coflow: the task no longer needs this block", null);
      }
    }
  }
}
