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
  void the_manager_without_its_data_io_fails_naming_the_key() {
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> CoflowConf.requireDataIO(base()));
    assertTrue(e.getMessage().contains(CoflowConf.DATA_IO + "=" + CoflowShuffleDataIO.class.getName()),
        e.getMessage());
    assertThrows(IllegalArgumentException.class, () -> CoflowConf.requireDataIO(
        base().set(CoflowConf.DATA_IO, "org.apache.spark.shuffle.sort.io.LocalDiskShuffleDataIO")));
    CoflowConf.requireDataIO(base().set(CoflowConf.DATA_IO, CoflowShuffleDataIO.class.getName()));
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
        () -> CoflowConf.from(base().set(CoflowConf.REGISTER_TIMEOUT_MS, "soon")))
        .getMessage().contains(CoflowConf.REGISTER_TIMEOUT_MS));
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
  void data_ids_name_shuffle_map_attempt_and_partition() {
    assertEquals("shuffle_3_17_5", ExecutorSide.dataId(3, 17, 5));
  }
}
