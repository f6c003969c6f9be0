package io.coflow.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.OutputStream;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import com.google.protobuf.ByteString;
import io.coflow.v1.AgentGrpc;
import io.coflow.v1.CoflowOptions;
import io.coflow.v1.CoordinatorGrpc;
import io.coflow.v1.GetChunk;
import io.coflow.v1.GetRequest;
import io.coflow.v1.RegisterRequest;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.InsecureServerCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Server;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.StreamObserver;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The reader's gets: checked against the piece size the agent announces (against a fake agent
 * that sends exactly what each case says), opened within the bytes-in-flight bound, and drained
 * while the task is busy elsewhere (against a real agent whose data idle timeout is short).
 */
class BlockFetcherTest {
  /** An agent whose get answers with the chunks listed for the data id, then ends with OK. */
  private static final class Scripted extends AgentGrpc.AgentImplBase {
    private final Map<String, List<GetChunk>> script;

    Scripted(Map<String, List<GetChunk>> script) {
      this.script = script;
    }

    @Override
    public void get(GetRequest req, StreamObserver<GetChunk> out) {
      if (req.getDataId().equals("hang")) {
        out.onNext(size(10)); // and never another message
        return;
      }
      for (GetChunk c : script.get(req.getDataId())) {
        out.onNext(c);
      }
      out.onCompleted();
    }
  }

  private static GetChunk size(long n) {
    return GetChunk.newBuilder().setPieceSize(n).build();
  }

  private static GetChunk bytes(String s) {
    return GetChunk.newBuilder().setData(ByteString.copyFromUtf8(s)).build();
  }

  private static List<BlockFetcher.Want<String>> wants(long approx, String... ids) {
    List<BlockFetcher.Want<String>> w = new ArrayList<>();
    for (String id : ids) {
      w.add(new BlockFetcher.Want<>(id, approx, id));
    }
    return w;
  }

  @Test
  void a_stream_is_a_block_only_when_it_carries_exactly_the_announced_size() throws Exception {
    Map<String, List<GetChunk>> script = Map.of(
        "exact", List.of(size(10), bytes("hello"), bytes("world")),
        "empty", List.of(size(0)),
        "short", List.of(size(10), bytes("hello")),
        "long", List.of(size(4), bytes("hello")),
        "unsized", List.of(bytes("hello")),
        "nothing", List.of(),
        "huge", List.of(size(3L << 30), bytes("hello")));
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create())
        .addService(new Scripted(script)).build().start();
    ManagedChannel ch = Grpc.newChannelBuilder("127.0.0.1:" + server.getPort(), InsecureChannelCredentials.create())
        .build();
    try (BlockFetcher<String> f = new BlockFetcher<>(AgentGrpc.newStub(ch), 1,
        wants(10, "exact", "empty", "short", "long", "unsized", "nothing", "huge"), 1 << 20, 64, 30_000)) {
      Set<String> seen = new HashSet<>();
      while (f.hasNext()) {
        BlockFetcher.Fetched<String> got = f.next();
        String id = got.want.tag();
        seen.add(id);
        switch (id) {
          case "exact" -> assertEquals("helloworld", got.bytes.toStringUtf8());
          case "empty" -> assertEquals(0, got.bytes.size());
          // A block past what one buffer holds fails at its announced size, at once, never hangs.
          case "huge" -> {
            assertEquals(BlockFetcher.Cause.TOO_LARGE, got.cause);
            assertTrue(got.message.startsWith("the block holds 3221225472 bytes, more than the 2147483639"), got.message);
          }
          default -> {
            assertFalse(got.ok(), id + " must fail, not be a block of " + (got.bytes == null ? 0 : got.bytes.size()));
            assertEquals(BlockFetcher.Cause.FETCH_FAILED, got.cause, id);
          }
        }
        if (id.equals("short")) {
          assertEquals("the agent's stream ended after 5 of the piece's 10 bytes", got.message);
        }
        if (id.equals("long")) {
          assertEquals("the agent sent more than the piece's 4 bytes", got.message);
        }
        if (id.equals("unsized")) {
          assertEquals("the agent sent bytes before the piece's size", got.message);
        }
        if (id.equals("nothing")) {
          assertEquals("the agent's stream ended before the piece's size", got.message);
        }
      }
      assertEquals(script.keySet(), seen);
    } finally {
      ch.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  /**
   * An agent that answers {@code kind} ({@code agent-unreachable}: the source out of reach;
   * {@code coordinator-unreachable}: the coordinator out of the agent's reach; {@code
   * client-departed}: a get this executor stopped reading) to the first {@code failures} gets of
   * each data id.
   */
  private static final class Flaky extends AgentGrpc.AgentImplBase {
    private final int failures;
    private final String kind;
    private final Map<String, Integer> asked = new java.util.concurrent.ConcurrentHashMap<>();

    Flaky(int failures, String kind) {
      this.failures = failures;
      this.kind = kind;
    }

    @Override
    public void get(GetRequest req, StreamObserver<GetChunk> out) {
      if (asked.merge(req.getDataId(), 1, Integer::sum) <= failures) {
        io.grpc.Metadata trailers = new io.grpc.Metadata();
        trailers.put(CoflowChannels.ERROR_KIND, kind);
        out.onError(io.grpc.Status.UNAVAILABLE.withDescription("out of reach").asRuntimeException(trailers));
        return;
      }
      out.onNext(size(2));
      out.onNext(bytes("ok"));
      out.onCompleted();
    }
  }

  @Test
  void a_get_answered_unreachable_is_asked_again_up_to_the_retries() throws Exception {
    for (String kind : new String[] {"agent-unreachable", "coordinator-unreachable", "client-departed"}) {
      for (int failures : new int[] {2, 3}) {
        Flaky agent = new Flaky(failures, kind);
        Server server =
            Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(agent).build().start();
        ManagedChannel ch = Grpc.newChannelBuilder("127.0.0.1:" + server.getPort(), InsecureChannelCredentials.create())
            .build();
        try (BlockFetcher<String> f = new BlockFetcher<>(AgentGrpc.newStub(ch), 1, wants(2, "a", "b"), 1 << 20, 64,
            30_000, 2, 50)) {
          for (int i = 0; i < 2; i++) {
            BlockFetcher.Fetched<String> got = f.next();
            if (failures == 2) {
              assertTrue(got.ok(), got.message);
              assertEquals("ok", got.bytes.toStringUtf8());
            } else {
              // Past the retries, the kind says whose fault it is: the coordinator's, which is not
              // the map output's; else a fetch failure. Either says how often it was asked.
              BlockFetcher.Cause want = kind.equals("coordinator-unreachable")
                  ? BlockFetcher.Cause.COORDINATOR_UNREACHABLE : BlockFetcher.Cause.FETCH_FAILED;
              assertEquals(want, got.cause, got.message);
              assertTrue(got.message.endsWith("(asked 3 times)"), got.message);
            }
          }
          assertFalse(f.hasNext());
          assertEquals(Map.of("a", 3, "b", 3), agent.asked);
        } finally {
          ch.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
          server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
        }
      }
    }
  }

  /** A loopback port nothing listens on (just closed): a local agent that is down. */
  private static int freeLoopbackPort() throws java.io.IOException {
    try (java.net.ServerSocket s = new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      return s.getLocalPort();
    }
  }

  @Test
  void a_get_while_the_local_agent_restarts_is_asked_again_until_it_is_back() throws Exception {
    int port = freeLoopbackPort();
    ManagedChannel ch = Grpc.newChannelBuilder("127.0.0.1:" + port, InsecureChannelCredentials.create()).build();
    Server server = null;
    try (BlockFetcher<String> f = new BlockFetcher<>(AgentGrpc.newStub(ch), 1, wants(2, "a"), 1 << 20, 64,
        30_000, 20, 300)) {
      // Nothing listens for the first ask; the agent is back within the retries (6 s of them, so
      // that a slow start of the server on a busy machine still comes in time).
      Thread.sleep(100);
      server = Grpc.newServerBuilderForPort(port, InsecureServerCredentials.create())
          .addService(new Flaky(0, "no-such-data")).build().start();
      BlockFetcher.Fetched<String> got = f.next();
      assertTrue(got.ok(), got.cause + ": " + got.message);
      assertEquals("ok", got.bytes.toStringUtf8());
    } finally {
      ch.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
      if (server != null) {
        server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
      }
    }
  }

  @Test
  void a_local_agent_that_stays_down_fails_the_get_as_unreachable_after_the_retries() throws Exception {
    int port = freeLoopbackPort();
    ManagedChannel ch = Grpc.newChannelBuilder("127.0.0.1:" + port, InsecureChannelCredentials.create()).build();
    try (BlockFetcher<String> f = new BlockFetcher<>(AgentGrpc.newStub(ch), 1, wants(2, "a"), 1 << 20, 64,
        30_000, 2, 50)) {
      BlockFetcher.Fetched<String> got = f.next();
      assertEquals(BlockFetcher.Cause.LOCAL_AGENT_UNREACHABLE, got.cause, got.message);
      assertTrue(got.message.endsWith("(asked 3 times)"), got.message);
    } finally {
      ch.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  /**
   * An agent whose blocks are 20 bytes: {@code big} whole, {@code cut} ending after 5 of them, and
   * {@code again} breaking after 5 with {@code agent-unreachable} on the first ask and whole on the
   * next; {@code small} is 3 bytes, {@code hold} announces 20 and sends 5, then waits.
   */
  private static final class Large extends AgentGrpc.AgentImplBase {
    static final String BIG = "0123456789abcdefghij";
    private final Map<String, Integer> asked = new java.util.concurrent.ConcurrentHashMap<>();

    @Override
    public void get(GetRequest req, StreamObserver<GetChunk> out) {
      int n = asked.merge(req.getDataId(), 1, Integer::sum);
      switch (req.getDataId()) {
        case "small" -> {
          out.onNext(size(3));
          out.onNext(bytes("abc"));
        }
        case "hold" -> {
          out.onNext(size(20));
          out.onNext(bytes(BIG.substring(0, 5)));
          return;
        }
        case "cut" -> {
          out.onNext(size(20));
          out.onNext(bytes(BIG.substring(0, 5)));
        }
        default -> {
          out.onNext(size(20));
          out.onNext(bytes(BIG.substring(0, 5)));
          if (req.getDataId().equals("again") && n == 1) {
            io.grpc.Metadata trailers = new io.grpc.Metadata();
            trailers.put(CoflowChannels.ERROR_KIND, "agent-unreachable");
            out.onError(io.grpc.Status.UNAVAILABLE.withDescription("source gone").asRuntimeException(trailers));
            return;
          }
          out.onNext(bytes(BIG.substring(5, 12)));
          out.onNext(bytes(BIG.substring(12)));
        }
      }
      out.onCompleted();
    }
  }

  private static Set<String> filesIn(Path dir) throws java.io.IOException {
    try (var s = java.nio.file.Files.list(dir)) {
      return s.map(p -> p.getFileName().toString()).collect(java.util.stream.Collectors.toSet());
    }
  }

  @Test
  void a_block_over_the_in_memory_size_arrives_in_a_file_that_goes_when_read_or_failed(@TempDir Path tmp)
      throws Exception {
    Large agent = new Large();
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(agent).build().start();
    ManagedChannel ch = Grpc.newChannelBuilder("127.0.0.1:" + server.getPort(), InsecureChannelCredentials.create())
        .build();
    java.util.concurrent.atomic.AtomicInteger made = new java.util.concurrent.atomic.AtomicInteger();
    BlockFetcher.TempFiles files = () -> tmp.resolve("block-" + made.incrementAndGet()).toFile();
    try {
      AgentGrpc.AgentStub stub = AgentGrpc.newStub(ch);
      try (BlockFetcher<String> f = new BlockFetcher<>(stub, 1, wants(20, "big", "small", "cut", "again"), 1 << 20,
          64, 30_000, 1, 50, 10, files)) {
        Set<String> seen = new HashSet<>();
        while (f.hasNext()) {
          BlockFetcher.Fetched<String> got = f.next();
          String id = got.want.tag();
          seen.add(id);
          switch (id) {
            case "small" -> {
              // At or under the size: in memory, as before.
              assertEquals("abc", got.bytes.toStringUtf8());
              assertEquals(null, got.file);
            }
            case "cut" -> {
              assertEquals(BlockFetcher.Cause.FETCH_FAILED, got.cause);
              assertEquals("the agent's stream ended after 5 of the piece's 20 bytes", got.message);
            }
            default -> {
              assertTrue(got.ok(), id + ": " + got.message);
              assertEquals(null, got.bytes);
              assertEquals(20, got.size);
              assertEquals(tmp.toFile(), got.file.getParentFile());
              assertTrue(got.file.exists());
              byte[] read;
              try (java.io.InputStream in = got.open()) {
                read = in.readAllBytes();
              }
              assertArrayEquals(Large.BIG.getBytes(java.nio.charset.StandardCharsets.UTF_8), read);
              assertFalse(got.file.exists(), "a block's file outlived its stream");
            }
          }
        }
        assertEquals(Set.of("big", "small", "cut", "again"), seen);
        // big, cut, and again twice: the retry wrote a fresh file, and none is left.
        assertEquals(4, made.get());
        assertEquals(Set.of(), filesIn(tmp));
        assertEquals(Map.of("big", 1, "small", 1, "cut", 1, "again", 2), agent.asked);
      }

      // Once wholly on disk, a block no longer counts against the bytes in flight: the next get
      // opens before the task takes it (20 + 20 > 30).
      try (BlockFetcher<String> f = new BlockFetcher<>(stub, 1, wants(20, "big", "hold"), 30, 64, 30_000, 0, 0, 10,
          files)) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (f.inFlight() < 2 && System.nanoTime() < deadline) {
          Thread.sleep(10);
        }
        assertEquals(2, f.inFlight());
        assertEquals(20, f.bytesInFlight());
        // The task ends without taking either: closing the fetcher deletes the finished block's
        // file and the one being written.
        while (filesIn(tmp).size() < 2 && System.nanoTime() < deadline) {
          Thread.sleep(10);
        }
        assertEquals(2, filesIn(tmp).size());
      }
      assertEquals(Set.of(), filesIn(tmp));

      // A block taken and never read to its end: the fetcher's close deletes its file.
      BlockFetcher.Fetched<String> kept;
      try (BlockFetcher<String> f = new BlockFetcher<>(stub, 1, wants(20, "big"), 1 << 20, 64, 30_000, 0, 0, 10,
          files)) {
        kept = f.next();
        assertTrue(kept.file.exists());
      }
      assertFalse(kept.file.exists());
      assertEquals(Set.of(), filesIn(tmp));

      // A file that cannot be written is this executor's failure, not the map output's.
      try (BlockFetcher<String> f = new BlockFetcher<>(stub, 1, wants(20, "big"), 1 << 20, 64, 30_000, 0, 0, 10,
          () -> tmp.resolve("missing").resolve("block").toFile())) {
        BlockFetcher.Fetched<String> got = f.next();
        assertEquals(BlockFetcher.Cause.LOCAL_FILE, got.cause, got.message);
        assertTrue(got.message.startsWith("cannot write the block's 20 bytes to a local file"), got.message);
      }
    } finally {
      ch.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  @Test
  void a_get_that_does_not_complete_within_the_fetch_timeout_fails_as_timed_out() throws Exception {
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create())
        .addService(new Scripted(Map.of())).build().start();
    ManagedChannel ch = Grpc.newChannelBuilder("127.0.0.1:" + server.getPort(), InsecureChannelCredentials.create())
        .build();
    try (BlockFetcher<String> f = new BlockFetcher<>(AgentGrpc.newStub(ch), 1, wants(10, "hang"), 1 << 20, 64, 300)) {
      BlockFetcher.Fetched<String> got = f.next();
      assertFalse(got.ok());
      assertEquals(BlockFetcher.Cause.TIMED_OUT, got.cause, got.message);
      assertTrue(got.message.contains(CoflowConf.FETCH_TIMEOUT), got.message);
    } finally {
      ch.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  @Test
  void gets_open_within_the_bytes_in_flight_and_the_stream_bound() throws Exception {
    Map<String, List<GetChunk>> script = Map.of(
        "a", List.of(size(1), bytes("a")), "b", List.of(size(1), bytes("b")), "c", List.of(size(1), bytes("c")),
        "d", List.of(size(1), bytes("d")));
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create())
        .addService(new Scripted(script)).build().start();
    ManagedChannel ch = Grpc.newChannelBuilder("127.0.0.1:" + server.getPort(), InsecureChannelCredentials.create())
        .build();
    try {
      AgentGrpc.AgentStub stub = AgentGrpc.newStub(ch);
      // 30 + 30 > 50: one at a time; a block larger than the bound still goes, alone.
      try (BlockFetcher<String> f = new BlockFetcher<>(stub, 1, wants(30, "a", "b", "c"), 50, 64, 30_000)) {
        assertEquals(1, f.inFlight());
        f.next();
        assertEquals(1, f.inFlight());
      }
      try (BlockFetcher<String> f = new BlockFetcher<>(stub, 1, wants(300, "a", "b"), 50, 64, 30_000)) {
        assertEquals(1, f.inFlight());
        assertTrue(f.next().ok());
      }
      // 4 × 30 fits 1000, but only 3 streams.
      try (BlockFetcher<String> f = new BlockFetcher<>(stub, 1, wants(30, "a", "b", "c", "d"), 1000, 3, 30_000)) {
        assertEquals(3, f.inFlight());
        Set<String> got = new HashSet<>();
        while (f.hasNext()) {
          got.add(f.next().bytes.toStringUtf8());
        }
        assertEquals(Set.of("a", "b", "c", "d"), got);
      }
    } finally {
      ch.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  /**
   * Needs the coflow binary (as every test that starts a cluster). An agent whose data idle
   * timeout is 500 ms gives up on a get its client does not read for longer, ending its stream
   * short (the cause of large shuffles failing when a reduce task read its open gets one after
   * another); the fetcher's gets survive a task that takes 3 s over each block.
   */
  @Test
  void open_gets_survive_a_task_busy_longer_than_the_agents_idle_timeout(@TempDir Path tmp) throws Exception {
    try (CoflowCluster cluster = new CoflowCluster(tmp.resolve("cluster"), "varys", 2, "1GB/s",
        "data_idle_timeout_ms = 500\n")) {
      SparkConf conf = new SparkConf(false);
      cluster.sparkConf().forEach(conf::set);
      ExecutorSide mapper = new ExecutorSide(conf, "app-t", "0");
      ExecutorSide reducer = new ExecutorSide(conf, "app-t", "1");
      ManagedChannel ch = CoflowChannels.open(mapper.conf, mapper.conf.coordinator);
      try {
        long coflow = CoordinatorGrpc.newBlockingStub(ch).register(RegisterRequest.newBuilder().setNumFlows(8)
            .setOptions(CoflowOptions.newBuilder().setName("app-t/shuffle-3")).build()).getCoflowId();
        Random rnd = new Random(3);
        byte[][] parts = new byte[4][24 << 20];
        CoflowMapOutputWriter w = new CoflowMapOutputWriter(mapper, coflow, 3, 5L, parts.length);
        for (int r = 0; r < parts.length; r++) {
          rnd.nextBytes(parts[r]);
          try (OutputStream out = w.getPartitionWriter(r).openStream()) {
            out.write(parts[r]);
          }
        }
        w.commitAllPartitions(new long[parts.length]);

        // The cause: a get left unread past the idle timeout is dropped by the agent.
        Iterator<GetChunk> first = reducer.blocking.get(GetRequest.newBuilder().setCoflowId(coflow)
            .setDataId("shuffle_3_5_0").build());
        Iterator<GetChunk> second = reducer.blocking.get(GetRequest.newBuilder().setCoflowId(coflow)
            .setDataId("shuffle_3_5_1").build());
        while (first.hasNext()) {
          first.next();
        }
        Thread.sleep(3000);
        long n = 0;
        String err = null;
        try {
          while (second.hasNext()) {
            n += second.next().getData().size();
          }
        } catch (StatusRuntimeException e) {
          err = CoflowChannels.describe(e);
        }
        // The agent gives up on the client and ends the stream, short; only the announced piece
        // size tells that apart from the block's end.
        assertTrue(err != null || n < parts[1].length,
            "an unread get outlived the agent's idle timeout: " + n + " bytes, error " + err);

        // The fix: the fetcher drains every open get while the task is busy.
        List<BlockFetcher.Want<Integer>> wants = new ArrayList<>();
        for (int r = 0; r < parts.length; r++) {
          wants.add(new BlockFetcher.Want<>("shuffle_3_5_" + r, parts[r].length, r));
        }
        Set<Integer> seen = new HashSet<>();
        try (BlockFetcher<Integer> f = new BlockFetcher<>(reducer.async, coflow, wants, 1L << 30, 64, 60_000)) {
          while (f.hasNext()) {
            BlockFetcher.Fetched<Integer> got = f.next();
            assertTrue(got.ok(), () -> "block " + got.want.tag() + ": " + got.message);
            assertArrayEquals(parts[got.want.tag()], got.bytes.toByteArray());
            seen.add(got.want.tag());
            Thread.sleep(3000);
          }
        }
        assertEquals(Set.of(0, 1, 2, 3), seen);
      } finally {
        CoflowChannels.close(ch);
        mapper.close();
        reducer.close();
      }
    }
  }
}
