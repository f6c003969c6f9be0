package io.coflow.spark;

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
 * <p>Every get is checked against the piece's size the agent announces on its first message: a
 * stream that ends short, runs long, or carries bytes before the size is a failure of that block,
 * never a short block.
 *
 * <p>A get the agent answers {@code agent-unreachable} (the protocol's "retry": the source's agent,
 * the coordinator or the local agent itself is out of reach or restarting), and a get the local
 * agent does not answer at all ({@code UNAVAILABLE} without a kind: its process is down or
 * restarting), is asked again after {@code retryWaitMs}, at most {@code maxRetries} times, as
 * Spark's own fetcher retries a fetch.
 *
 * <p>An {@code agent-unreachable} past the retries does not say whose: the source's agent and the
 * coordinator answer with the same kind and code. So the fetcher then asks the local agent for
 * {@link #PROBE_DATA_ID}, which no map task puts: an answer with another kind (the coordinator's
 * {@code no-such-data}) shows that the coordinator answers, so the source is at fault
 * ({@link Cause#FETCH_FAILED}); {@code agent-unreachable} or no answer shows that it does not
 * ({@link Cause#COORDINATOR_UNREACHABLE}), and the map output is not to blame.
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
    /** {@code agent-unreachable} past the retries, and the coordinator does not answer the local agent. */
    COORDINATOR_UNREACHABLE,
    /** The agent answered that the block cannot be delivered, or its stream broke or was malformed. */
    FETCH_FAILED,
    /** The get did not complete within the fetch timeout. */
    TIMED_OUT,
    /** The block is larger than one buffer holds ({@link #MAX_BLOCK}): no fetch can bring it. */
    TOO_LARGE,
  }

  /**
   * The data id asked for to learn whether the coordinator answers: no map task puts it (Spark's
   * blocks are {@code shuffle_<shuffle>_<map>_<reduce>}), so a coordinator that answers says
   * {@code no-such-data}.
   */
  static final String PROBE_DATA_ID = "coflow-spark-probe";

  /** The largest block a get gathers: what one byte array (and so one {@link ByteString}) holds. */
  static final long MAX_BLOCK = Integer.MAX_VALUE - 8;

  /** A block fetched in full, or why it was not. */
  static final class Fetched<T> {
    final Want<T> want;
    /** The block's bytes, exactly the announced piece size; null on failure. */
    final ByteString bytes;
    final Cause cause;
    final String message;
    final Throwable error;

    private Fetched(Want<T> want, ByteString bytes, Cause cause, String message, Throwable error) {
      this.want = want;
      this.bytes = bytes;
      this.cause = cause;
      this.message = message;
      this.error = error;
    }

    boolean ok() {
      return bytes != null;
    }
  }

  private final AgentGrpc.AgentStub stub;
  private final long coflowId;
  private final long maxBytesInFlight;
  private final int maxStreams;
  private final long timeoutMs;
  private final int maxRetries;
  private final long retryWaitMs;
  /** Held while a retry starts and while the fetcher closes, so no get starts after it closed. */
  private final Object starting = new Object();
  private final ArrayDeque<Want<T>> pending;
  private final LinkedBlockingQueue<Fetched<T>> done = new LinkedBlockingQueue<>();
  private final Set<Get> open = ConcurrentHashMap.newKeySet();
  // Touched by the task's thread only.
  private long bytesInFlight;
  private int inFlight;
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
   * As above, asking a get answered {@code agent-unreachable}, or not answered by the local agent,
   * again after {@code retryWaitMs}, at most {@code maxRetries} times.
   */
  BlockFetcher(AgentGrpc.AgentStub stub, long coflowId, List<Want<T>> wants, long maxBytesInFlight, int maxStreams,
      long timeoutMs, int maxRetries, long retryWaitMs) {
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
    while (!closed && !pending.isEmpty() && inFlight < maxStreams
        && (inFlight == 0 || bytesInFlight + Math.max(0, pending.peek().approxSize()) <= maxBytesInFlight)) {
      Want<T> w = pending.poll();
      inFlight++;
      bytesInFlight += Math.max(0, w.approxSize());
      start(new Get(w, 0));
    }
  }

  private void start(Get g) {
    open.add(g);
    GetRequest req = GetRequest.newBuilder().setCoflowId(coflowId).setDataId(g.want.dataId()).build();
    stub.withDeadlineAfter(timeoutMs, TimeUnit.MILLISECONDS).get(req, g);
  }

  /** Asks for a block again, on the retry timer's thread, unless the fetcher closed meanwhile. */
  private void retry(Want<T> want, int attempt) {
    synchronized (starting) {
      if (!closed) {
        if (stub.getChannel() instanceof ManagedChannel) {
          // A restarted agent is asked at once, not after gRPC's reconnect backoff (up to two minutes).
          ((ManagedChannel) stub.getChannel()).resetConnectBackoff();
        }
        Get g = new Get(want, attempt);
        try {
          start(g);
        } catch (RuntimeException e) {
          // On the timer's thread: unless it is reported, the task would wait for this block forever.
          g.finish(new Fetched<>(want, null, Cause.FETCH_FAILED, "could not ask again: " + e, e));
        }
      }
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
    inFlight--;
    bytesInFlight -= Math.max(0, f.want.approxSize());
    startGets();
    return f;
  }

  /** Gets open (streaming or complete and not yet taken). */
  int inFlight() {
    return inFlight;
  }

  /** Cancels every open get and forgets what was not taken. */
  @Override
  public void close() {
    synchronized (starting) {
      closed = true;
    }
    pending.clear();
    for (Get g : new ArrayList<>(open)) {
      g.cancel();
    }
    open.clear();
    done.clear();
  }

  /** One get, drained into memory on gRPC's threads. */
  private final class Get implements ClientResponseObserver<GetRequest, GetChunk> {
    private final Want<T> want;
    /** How many times this block was asked for before. */
    private final int attempt;
    private final long started = System.nanoTime();
    private final List<ByteString> chunks = new ArrayList<>();
    private ClientCallStreamObserver<GetRequest> call;
    /** The probe's call, once {@link #probe} asked. */
    private volatile ClientCallStreamObserver<GetRequest> probeCall;
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
    public void onNext(GetChunk chunk) {
      if (finished) {
        return;
      }
      if (chunk.hasPieceSize() && size == null) {
        size = chunk.getPieceSize();
        if (size < 0 || size > MAX_BLOCK) {
          // Told before a byte comes: refused at once rather than failing when gathered.
          finish(new Fetched<>(want, null, Cause.TOO_LARGE, "the block holds " + Long.toUnsignedString(size)
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
      if (!data.isEmpty()) {
        chunks.add(data);
      }
    }

    @Override
    public void onError(Throwable t) {
      if (finished) {
        return;
      }
      String kind = CoflowChannels.kind(t);
      boolean timedOut = t instanceof StatusRuntimeException
          && ((StatusRuntimeException) t).getStatus().getCode() == Status.Code.DEADLINE_EXCEEDED
          && kind == null
          && System.nanoTime() - started >= TimeUnit.MILLISECONDS.toNanos(timeoutMs);
      boolean retry = !timedOut && ("agent-unreachable".equals(kind) || CoflowChannels.unreachable(t));
      if (retry && attempt < maxRetries && !closed) {
        finished = true;
        chunks.clear();
        open.remove(this);
        RETRIES.schedule(() -> retry(want, attempt + 1), retryWaitMs, TimeUnit.MILLISECONDS);
        return;
      }
      String msg = CoflowChannels.describe(t) + (attempt > 0 ? " (asked " + (attempt + 1) + " times)" : "");
      if (timedOut) {
        finish(new Fetched<>(want, null, Cause.TIMED_OUT,
            "not fetched within " + timeoutMs + " ms (" + CoflowConf.FETCH_TIMEOUT + ")", t));
      } else if (CoflowChannels.unreachable(t)) {
        finish(new Fetched<>(want, null, Cause.LOCAL_AGENT_UNREACHABLE, msg, t));
      } else if ("agent-unreachable".equals(kind)) {
        probe(msg, t);
      } else {
        finish(new Fetched<>(want, null, Cause.FETCH_FAILED, msg, t));
      }
    }

    /**
     * Asks the local agent for {@link #PROBE_DATA_ID}, to tell a source at fault from a
     * coordinator out of reach, then finishes this get with what that shows.
     */
    private void probe(String msg, Throwable t) {
      finished = true;
      chunks.clear();
      if (closed) {
        open.remove(this);
        return;
      }
      ClientResponseObserver<GetRequest, GetChunk> asked = new ClientResponseObserver<GetRequest, GetChunk>() {
        @Override
        public void beforeStart(ClientCallStreamObserver<GetRequest> requestStream) {
          probeCall = requestStream;
        }

        @Override
        public void onNext(GetChunk chunk) {}

        @Override
        public void onError(Throwable p) {
          String k = CoflowChannels.kind(p);
          if (k == null || "agent-unreachable".equals(k) || "shutting-down".equals(k)) {
            finish(new Fetched<>(want, null, Cause.COORDINATOR_UNREACHABLE, msg + "; the local agent cannot reach the"
                + " coordinator either (" + CoflowChannels.describe(p) + ")", t));
          } else {
            sourceAtFault();
          }
        }

        @Override
        public void onCompleted() {
          sourceAtFault();
        }

        private void sourceAtFault() {
          finish(new Fetched<>(want, null, Cause.FETCH_FAILED, msg, t));
        }
      };
      try {
        GetRequest req = GetRequest.newBuilder().setCoflowId(coflowId).setDataId(PROBE_DATA_ID).build();
        stub.withDeadlineAfter(timeoutMs, TimeUnit.MILLISECONDS).get(req, asked);
      } catch (RuntimeException e) {
        finish(new Fetched<>(want, null, Cause.FETCH_FAILED, msg, t));
      }
    }

    @Override
    public void onCompleted() {
      if (finished) {
        return;
      }
      if (size == null) {
        finish(new Fetched<>(want, null, Cause.FETCH_FAILED, "the agent's stream ended before the piece's size", null));
      } else if (received != size) {
        finish(new Fetched<>(want, null, Cause.FETCH_FAILED,
            "the agent's stream ended after " + received + " of the piece's " + size + " bytes", null));
      } else {
        ByteString block;
        try {
          block = ByteString.copyFrom(chunks);
        } catch (RuntimeException | OutOfMemoryError e) {
          // On gRPC's thread: unless it is reported, the task would wait for this block forever.
          finish(new Fetched<>(want, null, Cause.TOO_LARGE, "cannot gather the block's " + size + " bytes: " + e, e));
          return;
        }
        finish(new Fetched<>(want, block, null, null, null));
      }
    }

    private void malformed(String msg) {
      finish(new Fetched<>(want, null, Cause.FETCH_FAILED, msg, null));
      call.cancel("coflow: " + msg, null);
    }

    private void finish(Fetched<T> f) {
      finished = true;
      chunks.clear();
      open.remove(this);
      if (!closed) {
        done.add(f);
      }
    }

    void cancel() {
      if (call != null) {
        call.cancel("coflow: the task no longer needs this block", null);
      }
      ClientCallStreamObserver<GetRequest> p = probeCall;
      if (p != null) {
        p.cancel("coflow: the task no longer needs this block", null);
      }
    }
  }
}
