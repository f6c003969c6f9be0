package io.coflow.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import io.coflow.v1.AgentGrpc;
import io.coflow.v1.PutRequest;
import io.coflow.v1.PutResponse;
import io.grpc.Grpc;
import io.grpc.InsecureServerCredentials;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.stub.StreamObserver;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A map task's puts against a fake agent: a put answered {@code coordinator-unreachable} (the
 * coordinator out of reach of the agent) is asked again after {@code spark.shuffle.io.retryWait},
 * at most {@code spark.shuffle.io.maxRetries} times; any other refusal fails the task at once.
 */
class PutRetryTest {
  /** Answers the first {@code failures} puts of each data id with {@code kind}, then stores it. */
  private static final class Flaky extends AgentGrpc.AgentImplBase {
    private final int failures;
    private final String kind;
    final Map<String, Integer> asked = new ConcurrentHashMap<>();

    Flaky(int failures, String kind) {
      this.failures = failures;
      this.kind = kind;
    }

    @Override
    public void put(PutRequest req, StreamObserver<PutResponse> out) {
      if (asked.merge(req.getDataId(), 1, Integer::sum) <= failures) {
        Metadata trailers = new Metadata();
        trailers.put(CoflowChannels.ERROR_KIND, kind);
        Status s = kind.endsWith("-unreachable") ? Status.UNAVAILABLE : Status.PERMISSION_DENIED;
        out.onError(s.withDescription("the coordinator did not answer in time").asRuntimeException(trailers));
        return;
      }
      out.onNext(PutResponse.newBuilder().setSize(req.getFile().getLength()).build());
      out.onCompleted();
    }
  }

  private static long[] put(Flaky agent, Path dir, int maxRetries) throws Exception {
    Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).addService(agent).build().start();
    SparkConf conf = new SparkConf(false)
        .set(CoflowConf.COORDINATOR, "127.0.0.1:1")
        .set(CoflowConf.TOKEN, "t0k")
        .set(CoflowConf.AGENT, "127.0.0.1:" + server.getPort())
        .set(CoflowConf.DATA_DIR, dir.toString())
        .set("spark.shuffle.io.retryWait", "50ms")
        .set("spark.shuffle.io.maxRetries", Integer.toString(maxRetries));
    ExecutorSide side = new ExecutorSide(conf, "app-p", "0");
    try {
      CoflowMapOutputWriter w = new CoflowMapOutputWriter(side, 5, 3, 11L, 3);
      for (int p : new int[] {0, 2}) {
        try (OutputStream out = w.getPartitionWriter(p).openStream()) {
          out.write(new byte[] {1, 2, 3});
        }
      }
      return w.commitAllPartitions(new long[3]).getPartitionLengths();
    } finally {
      side.close();
      server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  @Test
  void a_put_answered_unreachable_is_asked_again_up_to_the_retries(@TempDir Path dir) throws Exception {
    for (String kind : new String[] {"coordinator-unreachable", "agent-unreachable"}) {
      Flaky back = new Flaky(2, kind);
      assertArrayEquals(new long[] {3, 0, 3}, put(back, dir.resolve(kind + "-a"), 2));
      assertEquals(Map.of("shuffle_3_11_0", 3, "shuffle_3_11_2", 3), back.asked);

      Flaky away = new Flaky(3, kind);
      IOException e = assertThrows(IOException.class, () -> put(away, dir.resolve(kind + "-b"), 2));
      assertTrue(e.getMessage().contains(kind) && e.getMessage().endsWith("(asked 3 times)"), e.getMessage());
    }
  }

  @Test
  void a_put_refused_otherwise_is_not_asked_again(@TempDir Path dir) throws Exception {
    Flaky refusing = new Flaky(1, "permission-denied");
    IOException e = assertThrows(IOException.class, () -> put(refusing, dir, 3));
    assertTrue(e.getMessage().contains("permission-denied"), e.getMessage());
    assertEquals(1, refusing.asked.get("shuffle_3_11_0"));
  }
}
