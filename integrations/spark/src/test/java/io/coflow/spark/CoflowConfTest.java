package io.coflow.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;

import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class CoflowConfTest {
  private static SparkConf base() {
    return new SparkConf(false).set(CoflowConf.COORDINATOR, "http://127.0.0.1:7070/").set(CoflowConf.TOKEN, "t0k");
  }

  @Test
  void executors_find_their_own_agent_before_the_host_default() {
    SparkConf c = base()
        .set(CoflowConf.AGENT, "127.0.0.1:7071")
        .set(CoflowConf.AGENT + ".1", "127.0.0.1:7171")
        .set(CoflowConf.DATA_DIR, "/data/coflow")
        .set(CoflowConf.DATA_DIR + ".1", "/data/coflow-1");
    CoflowConf conf = CoflowConf.from(c);
    assertEquals("127.0.0.1:7070", conf.coordinator);
    assertEquals("127.0.0.1:7071", conf.agentFor("0"));
    assertEquals("127.0.0.1:7171", conf.agentFor("1"));
    assertEquals(Path.of("/data/coflow"), conf.dataDirFor("driver"));
    assertEquals(Path.of("/data/coflow-1"), conf.dataDirFor("1"));
    assertFalse(conf.tls());
    assertEquals(64, conf.maxStreams);
  }

  @Test
  void a_lease_is_none_or_from_a_second_to_a_day() {
    assertEquals(java.time.Duration.ofMinutes(2), CoflowConf.from(base()).lease);
    assertEquals(java.time.Duration.ZERO, CoflowConf.from(base().set(CoflowConf.LEASE, "0")).lease);
    assertEquals(java.time.Duration.ZERO, CoflowConf.from(base().set(CoflowConf.LEASE, "0s")).lease);
    assertEquals(java.time.Duration.ofSeconds(1), CoflowConf.from(base().set(CoflowConf.LEASE, "1s")).lease);
    assertEquals(java.time.Duration.ofDays(1), CoflowConf.from(base().set(CoflowConf.LEASE, "1d")).lease);
    for (String bad : new String[] {"999ms", "25h", "soon", "-1s"}) {
      String msg = assertThrows(IllegalArgumentException.class,
          () -> CoflowConf.from(base().set(CoflowConf.LEASE, bad)), bad).getMessage();
      assertTrue(msg.contains(CoflowConf.LEASE) && msg.contains(bad), msg);
    }
  }

  @Test
  void env_references_expand_in_the_executors_environment() {
    java.util.Map<String, String> env = java.util.Map.of("DIR", "/data/h3", "PORT", "7171");
    assertEquals("/data/h3/coflow", CoflowConf.expandEnv("${env:DIR}/coflow", env));
    assertEquals("127.0.0.1:7171", CoflowConf.expandEnv("127.0.0.1:${env:PORT}", env));
    assertEquals("/plain", CoflowConf.expandEnv("/plain", env));
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> CoflowConf.expandEnv("${env:NOPE}/x", env));
    assertTrue(e.getMessage().contains("NOPE"), e.getMessage());
    assertThrows(IllegalArgumentException.class, () -> CoflowConf.expandEnv("${env:DIR", env));
  }

  @Test
  void the_manager_installs_its_data_io_and_refuses_another_naming_the_key() {
    SparkConf alone = base();
    CoflowConf.installDataIO(alone);
    assertTrue(CoflowShuffleDataIO.class.getName().equals(alone.get(CoflowConf.DATA_IO)), "installed");
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> CoflowConf.installDataIO(
        base().set(CoflowConf.DATA_IO, "org.apache.spark.shuffle.sort.io.LocalDiskShuffleDataIO")));
    assertTrue(e.getMessage().contains(CoflowConf.DATA_IO + "=" + CoflowShuffleDataIO.class.getName()),
        e.getMessage());
    CoflowConf.installDataIO(base().set(CoflowConf.DATA_IO, CoflowShuffleDataIO.class.getName()));
  }

  @Test
  void a_missing_agent_names_the_keys_to_set() {
    CoflowConf conf = CoflowConf.from(base());
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> conf.agentFor("3"));
    assertTrue(e.getMessage().contains("spark.coflow.agent.3") && e.getMessage().contains("spark.coflow.agent"),
        e.getMessage());
  }

  @Test
  void bad_settings_are_named() {
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> CoflowConf.from(new SparkConf(false).set(CoflowConf.TOKEN, "x")))
        .getMessage().contains(CoflowConf.COORDINATOR));
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> CoflowConf.from(new SparkConf(false).set(CoflowConf.COORDINATOR, "h:1")))
        .getMessage().contains(CoflowConf.TOKEN));
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> CoflowConf.from(base().set(CoflowConf.MAX_STREAMS, "0")))
        .getMessage().contains(CoflowConf.MAX_STREAMS));
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> CoflowConf.from(base().set(CoflowConf.REGISTER_TIMEOUT, "soon")))
        .getMessage().contains(CoflowConf.REGISTER_TIMEOUT));
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> CoflowConf.from(base().set(CoflowConf.PUT_TIMEOUT, "0s")))
        .getMessage().contains(CoflowConf.PUT_TIMEOUT));
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> CoflowConf.from(base().set(CoflowConf.FETCH_TIMEOUT, "10 parsecs")))
        .getMessage().contains(CoflowConf.FETCH_TIMEOUT));
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> CoflowConf.from(base().set(CoflowConf.MAX_BYTES_IN_FLIGHT, "lots")))
        .getMessage().contains(CoflowConf.MAX_BYTES_IN_FLIGHT));
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> CoflowConf.from(base().set(CoflowConf.FALLBACK, "sometimes")))
        .getMessage().contains(CoflowConf.FALLBACK));
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> CoflowConf.from(base().set(CoflowConf.TLS_CA, "/ca.pem")))
        .getMessage().contains(CoflowConf.TLS_KEY));
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> CoflowConf.from(base().set(CoflowConf.TOKEN, "  ")))
        .getMessage().contains("empty"));
  }

  @Test
  void the_token_comes_from_a_file_trimmed(@TempDir Path dir) throws Exception {
    Path f = dir.resolve("token");
    Files.writeString(f, "s3cret\n");
    SparkConf c = new SparkConf(false).set(CoflowConf.COORDINATOR, "h:1").set(CoflowConf.TOKEN_FILE, f.toString());
    assertEquals("s3cret", CoflowConf.from(c).token);
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> CoflowConf.from(c.clone().set(CoflowConf.TOKEN, "x"))).getMessage().contains("not both"));
    SparkConf missing = new SparkConf(false).set(CoflowConf.COORDINATOR, "h:1")
        .set(CoflowConf.TOKEN_FILE, dir.resolve("nope").toString());
    assertTrue(assertThrows(IllegalArgumentException.class, () -> CoflowConf.from(missing))
        .getMessage().contains(CoflowConf.TOKEN_FILE));
  }

  @Test
  void tls_files_alone_are_credentials() {
    SparkConf c = new SparkConf(false).set(CoflowConf.COORDINATOR, "h:1")
        .set(CoflowConf.TLS_CA, "ca.pem").set(CoflowConf.TLS_CERT, "c.pem").set(CoflowConf.TLS_KEY, "k.pem");
    CoflowConf conf = CoflowConf.from(c);
    assertTrue(conf.tls());
    assertNull(conf.token);
  }

  @Test
  void durations_and_sizes_are_spelled_as_spark_spells_them() {
    CoflowConf d = CoflowConf.from(base());
    assertEquals(java.time.Duration.ofSeconds(10), d.registerTimeout);
    assertEquals(java.time.Duration.ofSeconds(60), d.putTimeout);
    assertEquals(java.time.Duration.ofMinutes(10), d.fetchTimeout);
    assertEquals(48L << 20, d.maxBytesInFlight, "Spark's spark.reducer.maxSizeInFlight default");
    assertEquals(CoflowConf.Fallback.AUTO, d.fallback);
    CoflowConf c = CoflowConf.from(base()
        .set(CoflowConf.REGISTER_TIMEOUT, "1500ms")
        .set(CoflowConf.PUT_TIMEOUT, "2min")
        .set(CoflowConf.FETCH_TIMEOUT, "250") // a bare number is milliseconds, as in Spark
        .set(CoflowConf.MAX_BYTES_IN_FLIGHT, "96m")
        .set(CoflowConf.FALLBACK, " Never "));
    assertEquals(java.time.Duration.ofMillis(1500), c.registerTimeout);
    assertEquals(java.time.Duration.ofMinutes(2), c.putTimeout);
    assertEquals(java.time.Duration.ofMillis(250), c.fetchTimeout);
    assertEquals(96L << 20, c.maxBytesInFlight);
    assertEquals(CoflowConf.Fallback.NEVER, c.fallback);
    // Spark's own bound is the default when the plugin's is not set.
    assertEquals(8L << 20, CoflowConf.from(base().set("spark.reducer.maxSizeInFlight", "8m")).maxBytesInFlight);
    // A bare number of Spark's key is MiB, as Spark reads it.
    assertEquals(96L << 20, CoflowConf.from(base().set("spark.reducer.maxSizeInFlight", "96")).maxBytesInFlight);
    assertEquals(500_000L, d.maxPieces, "half the coordinator's default max_pieces_per_coflow (1,000,000)");
    // Gets are retried as Spark's fetches are, with Spark's keys and their units.
    assertEquals(3, d.maxRetries);
    assertEquals(java.time.Duration.ofSeconds(5), d.retryWait);
    CoflowConf r = CoflowConf.from(base().set("spark.shuffle.io.maxRetries", "0").set("spark.shuffle.io.retryWait", "2"));
    assertEquals(0, r.maxRetries);
    assertEquals(java.time.Duration.ofSeconds(2), r.retryWait, "a bare number is seconds, as Spark reads it");
    assertThrows(IllegalArgumentException.class, () -> CoflowConf.from(base().set("spark.shuffle.io.maxRetries", "-1")));
    assertEquals(CoflowConf.MAX_RETRIES,
        CoflowConf.from(base().set("spark.shuffle.io.maxRetries", "1000")).maxRetries, "capped, with a warning");
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> CoflowConf.from(base().set("spark.shuffle.io.retryWait", "-5s")))
        .getMessage().contains("spark.shuffle.io.retryWait must not be negative"));
    assertEquals(java.time.Duration.ZERO, CoflowConf.from(base().set("spark.shuffle.io.retryWait", "0s")).retryWait);
    assertEquals(5L, CoflowConf.from(base().set(CoflowConf.MAX_PIECES, "5")).maxPieces);
    assertThrows(IllegalArgumentException.class, () -> CoflowConf.from(base().set(CoflowConf.MAX_PIECES, "0")));
  }

  @Test
  void an_address_needs_a_port_and_https_needs_the_tls_files() {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> CoflowConf.from(base().set(CoflowConf.COORDINATOR, "https://coord:7070")));
    assertTrue(e.getMessage().contains("the connection would be plaintext"), e.getMessage());
    e = assertThrows(IllegalArgumentException.class, () -> CoflowConf.from(base().set(CoflowConf.COORDINATOR, "coord")));
    assertTrue(e.getMessage().contains("must be host:port, got coord"), e.getMessage());
    e = assertThrows(IllegalArgumentException.class,
        () -> CoflowConf.from(base().set(CoflowConf.AGENT, "127.0.0.1")).agentFor("0"));
    assertTrue(e.getMessage().contains(CoflowConf.AGENT + " must be host:port"), e.getMessage());
    assertEquals("[::1]:7070", CoflowConf.from(base().set(CoflowConf.COORDINATOR, "http://[::1]:7070/")).coordinator);
  }

  @Test
  void the_old_fetch_protocol_is_refused_naming_its_key() {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> CoflowConf.from(base().set("spark.shuffle.useOldFetchProtocol", "true")));
    assertTrue(e.getMessage().contains("spark.shuffle.useOldFetchProtocol=true"), e.getMessage());
    CoflowConf.from(new SparkConf(false).set(CoflowConf.FALLBACK, "always").set("spark.shuffle.useOldFetchProtocol", "true"));
  }

  @Test
  void fallback_always_needs_no_coordinator_nor_credentials() {
    CoflowConf c = CoflowConf.from(new SparkConf(false).set(CoflowConf.FALLBACK, "always"));
    assertEquals(CoflowConf.Fallback.ALWAYS, c.fallback);
    assertNull(c.coordinator);
  }

  @Test
  void data_ids_name_shuffle_map_attempt_and_partition() {
    assertEquals("shuffle_3_17_5", ExecutorSide.dataId(3, 17, 5));
  }
}
