package io.coflow.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import io.coflow.v1.CoordinatorGrpc;
import io.coflow.v1.RegisterRequest;
import io.grpc.ManagedChannel;
import io.grpc.StatusRuntimeException;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The plugin's channels against a coordinator that requires mutual TLS (certificates from
 * {@code coflow certs}): the plugin's TLS configuration registers, a plaintext client with a token
 * is refused. {@code TlsIT} runs a whole Spark job over TLS.
 */
class TlsClientTest {
  @Test
  void the_tls_configuration_registers_and_a_plaintext_client_is_refused(@TempDir Path tmp) throws Exception {
    try (CoflowCluster cluster = new CoflowCluster(tmp.resolve("cluster"), "varys", 1, "1GB/s", null, true)) {
      SparkConf tls = new SparkConf(false);
      cluster.sparkConf().forEach(tls::set);
      CoflowConf conf = CoflowConf.from(tls);
      assertTrue(conf.tls());
      // Its files lie beneath its identity's own directory, the only place an agent takes them.
      assertEquals(Path.of("clients", "spark"), conf.home());
      SparkConf agentCert = new SparkConf(false);
      cluster.sparkConf().forEach(agentCert::set);
      agentCert.set(CoflowConf.TLS_CERT, cluster.certs.resolve("agent-0.crt").toString());
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> CoflowConf.from(agentCert).home());
      assertTrue(e.getMessage().contains("is not a client's certificate (it names coflow://agent/0)"), e.getMessage());
      ManagedChannel ch = CoflowChannels.open(conf, conf.coordinator);
      try {
        long id = CoordinatorGrpc.newBlockingStub(ch).withDeadlineAfter(10, TimeUnit.SECONDS)
            .register(RegisterRequest.newBuilder().setNumFlows(1).build()).getCoflowId();
        assertTrue(id > 0);
      } finally {
        CoflowChannels.close(ch);
      }
      SparkConf plain = new SparkConf(false).set(CoflowConf.COORDINATOR, conf.coordinator)
          .set(CoflowConf.TOKEN, "not-a-certificate");
      CoflowConf p = CoflowConf.from(plain);
      ManagedChannel pc = CoflowChannels.open(p, p.coordinator);
      try {
        assertThrows(StatusRuntimeException.class, () -> CoordinatorGrpc.newBlockingStub(pc)
            .withDeadlineAfter(10, TimeUnit.SECONDS)
            .register(RegisterRequest.newBuilder().setNumFlows(1).build()));
      } finally {
        CoflowChannels.close(pc);
      }
    }
  }
}
