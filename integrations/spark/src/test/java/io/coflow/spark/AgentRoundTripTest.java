package io.coflow.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Iterator;
import java.util.Random;

import io.coflow.v1.CoflowOptions;
import io.coflow.v1.CoordinatorGrpc;
import io.coflow.v1.GetChunk;
import io.coflow.v1.GetRequest;
import io.coflow.v1.RegisterRequest;
import io.grpc.ManagedChannel;
import io.grpc.StatusRuntimeException;
import org.apache.spark.SparkConf;
import org.apache.spark.shuffle.api.metadata.MapOutputCommitMessage;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The plugin's two halves against a real coordinator and agents, without Spark's scheduler: a map
 * task's partitions put as file segments come back exactly through another machine's agent, empty
 * partitions are never put, and the error kinds the reader maps are the ones the agents send.
 */
class AgentRoundTripTest {
  @Test
  void map_output_comes_back_exactly_and_empty_partitions_are_not_put(@TempDir Path tmp) throws Exception {
    try (CoflowCluster cluster = new CoflowCluster(tmp.resolve("cluster"), "varys", 2, "1GB/s")) {
      SparkConf conf = new SparkConf(false);
      cluster.sparkConf().forEach(conf::set);
      int closed;
      try (ServerSocket s = new ServerSocket(0)) {
        closed = s.getLocalPort();
      }
      conf.set(CoflowConf.AGENT + ".9", "127.0.0.1:" + closed).set(CoflowConf.DATA_DIR + ".9", tmp.toString());
      ExecutorSide mapper = new ExecutorSide(conf, "app-t", "0");
      ExecutorSide reducer = new ExecutorSide(conf, "app-t", "1");
      ExecutorSide lost = new ExecutorSide(conf, "app-t", "9");
      ManagedChannel ch = CoflowChannels.open(mapper.conf, mapper.conf.coordinator);
      try {
        long coflow = CoordinatorGrpc.newBlockingStub(ch).register(RegisterRequest.newBuilder().setNumFlows(3)
            .setOptions(CoflowOptions.newBuilder().setName("app-t/shuffle-7")).build()).getCoflowId();
        Random rnd = new Random(7);
        byte[] a = new byte[100_000];
        byte[] c = new byte[3_000_000];
        rnd.nextBytes(a);
        rnd.nextBytes(c);
        CoflowMapOutputWriter w = new CoflowMapOutputWriter(mapper, coflow, 7, 42L, 3);
        write(w, 0, a);
        write(w, 1, new byte[0]);
        write(w, 2, c);
        MapOutputCommitMessage m = w.commitAllPartitions(new long[3]);
        assertArrayEquals(new long[] {a.length, 0, c.length}, m.getPartitionLengths());
        assertTrue(Files.exists(mapper.shuffleDir(7).resolve("42.data")));

        // Across machines (agent 0 to agent 1), and in place on the mapper's own agent.
        assertArrayEquals(a, readAll(reducer, coflow, "shuffle_7_42_0"));
        assertArrayEquals(c, readAll(reducer, coflow, "shuffle_7_42_2"));
        assertArrayEquals(c, readAll(mapper, coflow, "shuffle_7_42_2"));
        assertEquals((double) a.length + c.length, cluster.agentsMetric("rx_bytes_total"), "bytes that crossed between agents");

        StatusRuntimeException empty =
            assertThrows(StatusRuntimeException.class, () -> readAll(reducer, coflow, "shuffle_7_42_1"));
        assertEquals("no-such-data", CoflowChannels.kind(empty), CoflowChannels.describe(empty));
        assertFalse(CoflowChannels.unreachable(empty));

        StatusRuntimeException down =
            assertThrows(StatusRuntimeException.class, () -> readAll(lost, coflow, "shuffle_7_42_0"));
        assertNull(CoflowChannels.kind(down));
        assertTrue(CoflowChannels.unreachable(down), CoflowChannels.describe(down));

        mapper.forget(7);
        assertFalse(Files.exists(mapper.shuffleDir(7)));
      } finally {
        CoflowChannels.close(ch);
        mapper.close();
        reducer.close();
        lost.close();
      }
    }
  }

  private static void write(CoflowMapOutputWriter w, int partition, byte[] bytes) throws Exception {
    try (OutputStream out = w.getPartitionWriter(partition).openStream()) {
      out.write(bytes, 0, bytes.length / 2);
      out.write(bytes, bytes.length / 2, bytes.length - bytes.length / 2);
    }
  }

  private static byte[] readAll(ExecutorSide side, long coflow, String dataId) {
    Iterator<GetChunk> it = side.blocking.get(GetRequest.newBuilder().setCoflowId(coflow).setDataId(dataId).build());
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    while (it.hasNext()) {
      out.writeBytes(it.next().getData().toByteArray());
    }
    return out.toByteArray();
  }
}
