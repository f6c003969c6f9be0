package io.coflow.spark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import com.google.common.util.concurrent.ListenableFuture;
import com.google.common.util.concurrent.Uninterruptibles;
import io.coflow.v1.CoflowOptions;
import io.coflow.v1.CoordinatorGrpc;
import io.coflow.v1.Readiness;
import io.coflow.v1.RegisterRequest;
import io.coflow.v1.RenewRequest;
import io.coflow.v1.RenewResponse;
import io.coflow.v1.UnregisterRequest;
import io.coflow.v1.UnregisterResponse;
import io.grpc.ManagedChannel;
import io.grpc.StatusRuntimeException;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.shuffle.BaseShuffleHandle;
import org.apache.spark.shuffle.ShuffleBlockResolver;
import org.apache.spark.shuffle.ShuffleHandle;
import org.apache.spark.shuffle.ShuffleManager;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.shuffle.ShuffleReader;
import org.apache.spark.shuffle.ShuffleWriteMetricsReporter;
import org.apache.spark.shuffle.ShuffleWriter;
import org.apache.spark.shuffle.sort.SortShuffleManager;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Spark's shuffles as coflows ({@code spark.shuffle.manager}). On the driver, every shuffle is
 * registered as one coflow ({@code <app id>/shuffle-<id>}, width maps × reduces, scheduled as
 * gets arrive, naming as parents the coflows of the shuffles its map side reads, so that
 * {@code aalo-job} ranks the shuffles connected by lineage together) and its id travels in the
 * handle. Writing is Spark's own sort shuffle, with map output
 * placed by {@link CoflowShuffleDataIO}; reading is {@link CoflowShuffleReader}, through the local
 * agent. Under {@code spark.coflow.fallback=auto} a shuffle whose coordinator cannot be reached at
 * registration stays on Spark's own path, and the log says so; under {@code never} that fails the
 * job; under {@code always} every shuffle is Spark's own. Each coflow is registered with a lease
 * ({@code spark.coflow.lease}) that the driver renews every third of it, so that the coflows of a
 * driver that dies without unregistering them are dropped a lease later.
 *
 * <p>In {@code local[N]} one instance is both driver and executor, so nothing here branches on
 * {@code isDriver} alone: the driver's part is whatever registered coflows, the executor's part is
 * {@link ExecutorSide}, created on first use.
 */
public final class CoflowShuffleManager implements ShuffleManager {
  private static final Logger LOG = LoggerFactory.getLogger(CoflowShuffleManager.class);
  /** The most parents a registration may name (the coordinator refuses more). */
  static final int MAX_PARENTS = 1024;
  /** The most registrations inside one another that walk the lineage ({@link #parents}). */
  static final int MAX_NESTED = 32;
  private static final ThreadLocal<int[]> NESTED = ThreadLocal.withInitial(() -> new int[1]);

  private final SortShuffleManager sort;
  private final CoflowConf conf;
  private final boolean isDriver;
  private final Map<Integer, Long> coflows = new ConcurrentHashMap<>();
  private ManagedChannel coordinator;
  private CoordinatorGrpc.CoordinatorBlockingStub stub;
  /** Under {@code auto}: after an unreachable registration, the next shuffles do not ask for a while. */
  private final Holddown holddown = new Holddown(TimeUnit.SECONDS.toNanos(30));
  /** The most coflow ids one renewal may name (the coordinator's limit). */
  static final int MAX_RENEW_IDS = 4096;
  /** How soon a renewal that did not get through is tried again. */
  static final long RETRY_MS = 1_000;
  /** Renews the leases of {@link #coflows}; null without a lease. */
  private ScheduledExecutorService renewer;
  /** Set by {@link #stop}: the renewals end, quietly. */
  private volatile boolean stopping;
  /** The coflows a renewal was refused for, named in the log once each. */
  private final Set<Long> notRenewed = ConcurrentHashMap.newKeySet();

  public CoflowShuffleManager(SparkConf conf, boolean isDriver) {
    CoflowConf.installDataIO(conf);
    this.sort = new SortShuffleManager(conf);
    this.conf = CoflowConf.from(conf);
    this.isDriver = isDriver;
    if (isDriver && this.conf.fallback != CoflowConf.Fallback.ALWAYS) {
      this.coordinator = CoflowChannels.open(this.conf, this.conf.coordinator);
      this.coordinator.getState(true); // connect now: the first shuffle should not pay for it
      this.stub = CoordinatorGrpc.newBlockingStub(coordinator);
      if (!this.conf.lease.isZero()) {
        this.renewer = Executors.newSingleThreadScheduledExecutor(r -> {
          Thread t = new Thread(r, "coflow-lease-renewer");
          t.setDaemon(true);
          return t;
        });
        this.renewer.schedule(this::renewThenReschedule, this.conf.lease.toMillis() / 3, TimeUnit.MILLISECONDS);
      }
    }
  }

  /**
   * How long after a renewal the next one goes: a third of the lease, or {@link #RETRY_MS} (at
   * most that third) after one that did not get through, so that a coordinator out of the
   * driver's reach for two thirds of a lease, less a request's deadline and a retry, costs no
   * coflow.
   */
  static long nextRenewalMs(boolean answered, java.time.Duration lease) {
    long third = lease.toMillis() / 3;
    return answered ? third : Math.min(RETRY_MS, third);
  }

  /** Renews the driver's leases, then schedules the next renewal ({@link #nextRenewalMs}). */
  private void renewThenReschedule() {
    boolean answered = false;
    try {
      answered = renew();
    } catch (Throwable t) {
      LOG.error("coflow: renewing leases", t);
    } finally {
      try {
        if (!stopping) {
          renewer.schedule(this::renewThenReschedule, nextRenewalMs(answered, conf.lease), TimeUnit.MILLISECONDS);
        }
      } catch (RejectedExecutionException e) {
        // Stopped meanwhile.
      }
    }
  }

  /**
   * Renews the leases of the coflows this driver registered, {@link #MAX_RENEW_IDS} to a request,
   * each answered within a third of the lease at most; whether every request was answered. A
   * coflow the coordinator did not renew is named once in the log, and asked for again: a
   * restarted coordinator adopts it a little later.
   */
  private boolean renew() {
    List<Long> ids = new ArrayList<>(coflows.values());
    long deadline = Math.min(conf.registerTimeout.toMillis(), conf.lease.toMillis() / 3);
    boolean answered = true;
    for (int i = 0; i < ids.size(); i += MAX_RENEW_IDS) {
      List<Long> some = ids.subList(i, Math.min(ids.size(), i + MAX_RENEW_IDS));
      try {
        RenewResponse r = stub.withDeadlineAfter(deadline, TimeUnit.MILLISECONDS)
            .renew(RenewRequest.newBuilder().addAllCoflowIds(some).build());
        List<Long> fresh = new ArrayList<>();
        for (long id : r.getNotRenewedList()) {
          // One unregistered since the renewal set out is no news.
          if (coflows.containsValue(id) && notRenewed.add(id)) {
            fresh.add(id);
          }
        }
        if (!fresh.isEmpty()) {
          LOG.warn("coflow: the coordinator {} did not renew coflows {} (unregistered, expired, or not yet"
              + " recovered after its restart)", conf.coordinator, fresh);
        }
      } catch (RuntimeException e) {
        answered = false;
        // The retry should not wait out gRPC's reconnect backoff (up to two minutes).
        coordinator.resetConnectBackoff();
        if (!stopping) {
          String why = e instanceof StatusRuntimeException
              ? CoflowChannels.describe((StatusRuntimeException) e) : e.toString();
          LOG.warn("coflow: renewing the leases of {} coflows at {}: {}", some.size(), conf.coordinator, why);
        }
      }
    }
    return answered;
  }

  @Override
  public <K, V, C> ShuffleHandle registerShuffle(int shuffleId, ShuffleDependency<K, V, C> dependency) {
    ShuffleHandle inner = sort.registerShuffle(shuffleId, dependency);
    if (conf.fallback == CoflowConf.Fallback.ALWAYS) {
      CoflowMetrics.get().shufflesFallback.inc();
      return inner;
    }
    if (stub == null) {
      return inner;
    }
    long maps = dependency.rdd().partitions().length;
    long reduces = dependency.partitioner().numPartitions();
    String name = SparkEnv.get().conf().getAppId() + "/shuffle-" + shuffleId;
    if (maps * reduces > conf.maxPieces) {
      // Its last puts, with its retried and speculative map attempts', could pass the coordinator's
      // limit on a coflow's pieces and fail the job.
      String why = name + " may put " + maps + " x " + reduces + " pieces, more than " + CoflowConf.MAX_PIECES
          + " (" + conf.maxPieces + ", kept below the coordinator's max_pieces_per_coflow)";
      if (conf.fallback == CoflowConf.Fallback.NEVER) {
        throw new IllegalStateException("coflow: " + why + " and " + CoflowConf.FALLBACK + " is never");
      }
      LOG.warn("coflow: {}; this shuffle uses Spark's own path", why);
      CoflowMetrics.get().shufflesFallback.inc();
      return inner;
    }
    // The coordinator accepts at most 10,000,000 flows per coflow (a larger value is refused).
    long width = Math.min(maps * reduces, 10_000_000L);
    RegisterRequest req = RegisterRequest.newBuilder()
        .setNumFlows(width)
        .setOptions(CoflowOptions.newBuilder()
            .setName(name)
            .setKind("shuffle")
            .setReadiness(Readiness.READINESS_ON_GET)
            .setLeaseMs(conf.lease.toMillis())
            .addAllParents(parents(dependency)))
        .build();
    if (conf.fallback == CoflowConf.Fallback.AUTO && !holddown.asks(System.nanoTime())) {
      LOG.info("coflow: the coordinator {} was unreachable less than 30 s ago; {} uses Spark's own path",
          conf.coordinator, name);
      CoflowMetrics.get().shufflesFallback.inc();
      return inner;
    }
    long id;
    try {
      id = stub.withDeadlineAfter(conf.registerTimeout.toMillis(), TimeUnit.MILLISECONDS)
          .register(req)
          .getCoflowId();
      holddown.answered();
    } catch (StatusRuntimeException e) {
      if (CoflowChannels.unreachable(e) && conf.fallback == CoflowConf.Fallback.AUTO) {
        holddown.unreachable(System.nanoTime());
        LOG.warn("coflow: coordinator {} unreachable registering {} ({}); this shuffle uses Spark's own path",
            conf.coordinator, name, CoflowChannels.describe(e));
        CoflowMetrics.get().shufflesFallback.inc();
        return inner;
      }
      if (CoflowChannels.unreachable(e)) {
        throw new IllegalStateException("coflow: the coordinator " + conf.coordinator + " is unreachable registering "
            + name + " and " + CoflowConf.FALLBACK + " is never: " + CoflowChannels.describe(e), e);
      }
      throw new IllegalStateException("coflow: the coordinator " + conf.coordinator + " refused to register "
          + name + ": " + CoflowChannels.describe(e), e);
    }
    coflows.put(shuffleId, id);
    CoflowMetrics.get().shufflesThroughCoflow.inc();
    LOG.info("coflow: registered {} as coflow {} ({} maps x {} reduces)", name, id, maps, reduces);
    return new CoflowShuffleHandle((BaseShuffleHandle<?, ?, ?>) inner, id);
  }

  /**
   * The coflows of the shuffles this one's map side reads, still registered: at most
   * {@link #MAX_PARENTS}, the earliest. Reading the map side's dependencies may create those
   * shuffles, and so register them first, inside this registration (Spark creates a shuffle's
   * dependency when its child first asks); past {@link #MAX_NESTED} registrations inside one
   * another the walk is skipped, so that a long chain of shuffles cannot exhaust the stack (Spark
   * then creates the rest itself, each registered with a fresh walk).
   */
  private List<Long> parents(ShuffleDependency<?, ?, ?> dependency) {
    int[] depth = NESTED.get();
    if (depth[0] >= MAX_NESTED) {
      return List.of();
    }
    List<Long> ids = new ArrayList<>();
    depth[0]++;
    try {
      for (int parent : Lineage.parentShuffles(dependency.rdd(), Lineage.MOST_VISITED)) {
        Long id = coflows.get(parent);
        if (id != null) {
          ids.add(id);
        }
      }
    } finally {
      depth[0]--;
    }
    ids.sort(null);
    return ids.size() > MAX_PARENTS ? ids.subList(0, MAX_PARENTS) : ids;
  }

  @Override
  public <K, V> ShuffleWriter<K, V> getWriter(ShuffleHandle handle, long mapId, TaskContext context,
      ShuffleWriteMetricsReporter metrics) {
    if (handle instanceof CoflowShuffleHandle) {
      CoflowShuffleHandle h = (CoflowShuffleHandle) handle;
      ExecutorSide.get().track(h.shuffleId(), h.coflowId());
      return sort.getWriter(h.inner(), mapId, context, metrics);
    }
    return sort.getWriter(handle, mapId, context, metrics);
  }

  @Override
  public <K, C> ShuffleReader<K, C> getReader(ShuffleHandle handle, int startMapIndex, int endMapIndex,
      int startPartition, int endPartition, TaskContext context, ShuffleReadMetricsReporter metrics) {
    if (handle instanceof CoflowShuffleHandle) {
      return new CoflowShuffleReader<>((CoflowShuffleHandle) handle, startMapIndex, endMapIndex, startPartition,
          endPartition, context, metrics, ExecutorSide.get());
    }
    return sort.getReader(handle, startMapIndex, endMapIndex, startPartition, endPartition, context, metrics);
  }

  @Override
  public boolean unregisterShuffle(int shuffleId) {
    Long id = coflows.remove(shuffleId);
    if (id != null) {
      unregister(shuffleId, id);
    }
    ExecutorSide side = ExecutorSide.peek();
    if (side != null) {
      side.forget(shuffleId);
    }
    return sort.unregisterShuffle(shuffleId);
  }

  private void unregister(int shuffleId, long id) {
    awaitUnregister(shuffleId, id, startUnregister(id));
  }

  /** Asks the coordinator to unregister coflow {@code id}, to be answered within {@code register.timeout}. */
  private ListenableFuture<UnregisterResponse> startUnregister(long id) {
    notRenewed.remove(id);
    return CoordinatorGrpc.newFutureStub(coordinator)
        .withDeadlineAfter(conf.registerTimeout.toMillis(), TimeUnit.MILLISECONDS)
        .unregister(UnregisterRequest.newBuilder().setCoflowId(id).build());
  }

  /** Waits for the answer to an unregister (which has its deadline, so even if interrupted) and logs it. */
  private static void awaitUnregister(int shuffleId, long id, ListenableFuture<UnregisterResponse> call) {
    try {
      Uninterruptibles.getUninterruptibly(call);
      LOG.info("coflow: unregistered coflow {} (shuffle {})", id, shuffleId);
    } catch (ExecutionException x) {
      Throwable why = x.getCause();
      LOG.warn("coflow: unregistering coflow {} (shuffle {}): {}", id, shuffleId,
          why instanceof StatusRuntimeException ? CoflowChannels.describe((StatusRuntimeException) why) : why);
    }
  }

  /**
   * Unregisters every coflow still registered, all at once, each call answered within one
   * {@code register.timeout}: a coordinator out of reach costs {@link #stop} one timeout rather
   * than one per shuffle (an adaptive query may leave hundreds); with a lease, the coordinator
   * drops a lease later what it did not hear.
   */
  private void unregisterAll() {
    if (stub == null) {
      coflows.clear();
      return;
    }
    Map<Integer, Long> ids = new LinkedHashMap<>();
    List<ListenableFuture<UnregisterResponse>> calls = new ArrayList<>();
    for (Integer shuffle : coflows.keySet()) {
      Long id = coflows.remove(shuffle);
      if (id != null) {
        ids.put(shuffle, id);
        calls.add(startUnregister(id));
      }
    }
    int i = 0;
    for (var e : ids.entrySet()) {
      awaitUnregister(e.getKey(), e.getValue(), calls.get(i++));
    }
  }

  @Override
  public ShuffleBlockResolver shuffleBlockResolver() {
    return sort.shuffleBlockResolver();
  }

  @Override
  public void stop() {
    stopping = true;
    if (renewer != null) {
      renewer.shutdownNow();
      try {
        renewer.awaitTermination(1, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    // Spark may never call unregisterShuffle (it follows garbage collection): unregister the rest.
    unregisterAll();
    if (coordinator != null) {
      CoflowChannels.close(coordinator);
    }
    ExecutorSide.stop();
    sort.stop();
  }

  @Override
  public String toString() {
    return "CoflowShuffleManager(" + (isDriver ? "driver" : "executor") + ", coordinator " + conf.coordinator
        + ", fallback " + conf.fallback + ")";
  }
}
