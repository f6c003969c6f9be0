package io.coflow.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Stream;

import io.coflow.v1.AgentGrpc;
import io.grpc.ManagedChannel;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What one executor process shares across its tasks: the channel to its local agent, the agent's
 * data directory, and which shuffles are coflows (filled by {@code getWriter} and read by the
 * map-output writer, which Spark gives no handle).
 */
final class ExecutorSide {
  private static final Logger LOG = LoggerFactory.getLogger(ExecutorSide.class);
  private static ExecutorSide instance;

  final CoflowConf conf;
  final String executorId;
  final String agent;
  /** The agent's data directory (absolute). */
  final Path dataDir;
  /**
   * This executor's files: {@code <dataDir>/<home>/spark/<appId>/<executorId>}, where the home is
   * {@code clients/NAME} with TLS ({@link CoflowConf#home}) and empty otherwise.
   */
  final Path ownDir;
  final ManagedChannel channel;
  final AgentGrpc.AgentBlockingStub blocking;
  final AgentGrpc.AgentFutureStub futures;
  final AgentGrpc.AgentStub async;
  private final Map<Integer, Long> coflows = new ConcurrentHashMap<>();

  ExecutorSide(SparkConf sparkConf, String appId, String executorId) {
    this.conf = CoflowConf.from(sparkConf);
    this.executorId = executorId;
    this.agent = conf.agentFor(executorId);
    this.dataDir = conf.dataDirFor(executorId).toAbsolutePath().normalize();
    this.ownDir = dataDir.resolve(conf.home()).resolve("spark").resolve(safe(appId)).resolve(safe(executorId));
    this.channel = CoflowChannels.open(conf, agent);
    this.channel.getState(true); // connect now: the first call would otherwise pay for it
    this.blocking = AgentGrpc.newBlockingStub(channel);
    this.futures = AgentGrpc.newFutureStub(channel);
    this.async = AgentGrpc.newStub(channel);
    LOG.info("coflow: executor {} uses agent {} with data directory {}", executorId, agent, dataDir);
  }

  /** This process's executor side, created on first use. */
  static synchronized ExecutorSide get() {
    if (instance == null) {
      SparkEnv env = SparkEnv.get();
      instance = new ExecutorSide(env.conf(), env.conf().getAppId(), env.executorId());
    }
    return instance;
  }

  /** The executor side if it was created, else null (nothing to clean up). */
  static synchronized ExecutorSide peek() {
    return instance;
  }

  /** Ends this process's executor side: closes the channel and deletes this executor's files. */
  static synchronized void stop() {
    if (instance != null) {
      instance.close();
      instance = null;
    }
  }

  /** Closes the channel and deletes this executor's files. */
  void close() {
    CoflowChannels.close(channel);
    deleteTree(ownDir);
  }

  void track(int shuffleId, long coflowId) {
    coflows.put(shuffleId, coflowId);
  }

  /** The coflow of a shuffle this executor writes, or null for a shuffle on Spark's own path. */
  Long coflowOf(int shuffleId) {
    return coflows.get(shuffleId);
  }

  /** Forgets a shuffle and deletes its map output files. */
  void forget(int shuffleId) {
    coflows.remove(shuffleId);
    deleteTree(shuffleDir(shuffleId));
  }

  Path shuffleDir(int shuffleId) {
    return ownDir.resolve("shuffle_" + shuffleId);
  }

  /** A map task's one data file, as the agent names it (relative to its data directory). */
  String relative(Path file) {
    return dataDir.relativize(file).toString();
  }

  /** The data id of one block: map task attempt and reduce partition, unique in the coflow. */
  static String dataId(int shuffleId, long mapTaskId, int reduceId) {
    return "shuffle_" + shuffleId + "_" + mapTaskId + "_" + reduceId;
  }

  private static String safe(String s) {
    return s.replaceAll("[^A-Za-z0-9._-]", "_");
  }

  static void deleteTree(Path root) {
    if (!Files.exists(root)) {
      return;
    }
    try (Stream<Path> s = Files.walk(root)) {
      s.sorted(Comparator.reverseOrder()).forEach(p -> {
        try {
          Files.deleteIfExists(p);
        } catch (IOException e) {
          throw new UncheckedIOException(e);
        }
      });
    } catch (IOException | UncheckedIOException e) {
      LOG.warn("coflow: could not delete {}: {}", root, e.toString());
    }
  }
}
