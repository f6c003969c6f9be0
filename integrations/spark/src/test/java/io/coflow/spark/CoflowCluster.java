package io.coflow.spark;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

/**
 * A coflow cluster on loopback, from the built {@code coflow} binary: one coordinator and one agent
 * per emulated machine, each agent with its own data directory and port cap. Executor {@code i} of a
 * Spark {@code local-cluster} uses agent {@code i} ({@link #sparkConf}).
 */
final class CoflowCluster implements AutoCloseable {
  final Path work;
  final String token = "spark-it-" + UUID.randomUUID();
  final String policy;
  int coordinatorPort;
  int coordinatorMetricsPort;
  final List<Agent> agents = new ArrayList<>();
  private final Path bin;
  private final Path agentConfig;
  /** The certificates' directory under TLS, else null. */
  final Path certs;
  private Process coordinator;

  /** One agent process and its addresses. */
  static final class Agent {
    final int machine;
    final int grpcPort;
    final int dataPort;
    final int metricsPort;
    final Path dataDir;
    Process process;

    Agent(int machine, int grpcPort, int dataPort, int metricsPort, Path dataDir) {
      this.machine = machine;
      this.grpcPort = grpcPort;
      this.dataPort = dataPort;
      this.metricsPort = metricsPort;
      this.dataDir = dataDir;
    }
  }

  /**
   * Starts a coordinator running {@code policy} and {@code machines} agents capped at
   * {@code portRate} (e.g. {@code 400MB/s}), and waits until every agent has registered.
   */
  CoflowCluster(Path work, String policy, int machines, String portRate) throws IOException, InterruptedException {
    this(work, policy, machines, portRate, null);
  }

  /** As above, every agent also given {@code agentToml} as its config file (fields of {@code AgentConfig}). */
  CoflowCluster(Path work, String policy, int machines, String portRate, String agentToml)
      throws IOException, InterruptedException {
    this(work, policy, machines, portRate, agentToml, false);
  }

  /**
   * As above; with {@code tls}, every connection is mutual TLS from certificates made by
   * {@code coflow certs} in {@code work/certs} (the coordinator's, one per agent, and the client
   * {@code spark} that {@link #sparkConf} names), and no token is used.
   */
  CoflowCluster(Path work, String policy, int machines, String portRate, String agentToml, boolean tls)
      throws IOException, InterruptedException {
    this.bin = binary();
    this.certs = tls ? work.resolve("certs") : null;
    this.agentConfig = agentToml == null ? null : work.resolve("agent.toml");
    this.work = work;
    this.policy = policy;
    Files.createDirectories(work);
    if (agentConfig != null) {
      Files.writeString(agentConfig, agentToml);
    }
    if (certs != null) {
      certs("init");
      certs("issue", "--coordinator", "127.0.0.1");
      certs("issue", "--client", "spark");
      for (int i = 0; i < machines; i++) {
        certs("issue", "--agent", Integer.toString(i), "--host", "127.0.0.1");
      }
    }
    try {
      startAll(machines, portRate);
    } catch (IOException | InterruptedException | RuntimeException e) {
      // No process outlives a cluster that failed to start.
      close();
      throw e;
    }
  }

  private void startAll(int machines, String portRate) throws IOException, InterruptedException {
    List<String> tlsArgs = certs == null ? List.of() : List.of("--tls-ca", certs.resolve("ca.crt").toString(),
        "--tls-cert", certs.resolve("coordinator.crt").toString(), "--tls-key", certs.resolve("coordinator.key").toString());
    for (int attempt = 1; ; attempt++) {
      int port = freePort();
      int metricsPort = freePort();
      Process p = start("coordinator", concat(tlsArgs, bin.toString(), "coordinator",
          "--listen", "127.0.0.1:" + port,
          "--metrics-listen", "127.0.0.1:" + metricsPort,
          "--policy", policy,
          // Every shuffle is scheduled, however small.
          "--bypass-threshold-bytes", "0"));
      if (listens(port, p, "coordinator", attempt)) {
        coordinator = p;
        coordinatorPort = port;
        coordinatorMetricsPort = metricsPort;
        break;
      }
    }
    for (int i = 0; i < machines; i++) {
      Path dataDir = work.resolve("agent-" + i + "-data");
      Files.createDirectories(dataDir);
      for (int attempt = 1; ; attempt++) {
        Agent a = new Agent(i, freePort(), freePort(), freePort(), dataDir);
        if (startAgent(a, portRate, attempt)) {
          agents.add(a);
          break;
        }
      }
    }
    Instant deadline = Instant.now().plus(Duration.ofSeconds(30));
    while (coordinatorMetric("agents_alive") < machines) {
      if (Instant.now().isAfter(deadline)) {
        throw new IOException("agents did not register within 30 s; see " + work);
      }
      Thread.sleep(100);
    }
  }

  /** Starts agent {@code a}; false if one of its ports was taken before it could bind it. */
  private boolean startAgent(Agent a, String portRate, int attempt) throws IOException, InterruptedException {
    List<String> cmd = new ArrayList<>(List.of(bin.toString(), "agent"));
    if (agentConfig != null) {
      cmd.addAll(List.of("--config", agentConfig.toString()));
    }
    if (certs != null) {
      cmd.addAll(List.of("--tls-ca", certs.resolve("ca.crt").toString(),
          "--tls-cert", certs.resolve("agent-" + a.machine + ".crt").toString(),
          "--tls-key", certs.resolve("agent-" + a.machine + ".key").toString()));
    }
    cmd.addAll(List.of("--machine", Integer.toString(a.machine),
        "--coordinator", (certs == null ? "http" : "https") + "://127.0.0.1:" + coordinatorPort,
        "--listen", "127.0.0.1:" + a.grpcPort,
        "--data-listen", "127.0.0.1:" + a.dataPort,
        "--metrics-listen", "127.0.0.1:" + a.metricsPort,
        "--data-dir", a.dataDir.toString(),
        "--port-rate", portRate));
    a.process = start("agent-" + a.machine, cmd);
    return listens(a.grpcPort, a.process, "agent-" + a.machine, attempt);
  }

  /** The built {@code coflow} binary: {@code -Dcoflow.bin}, else ../../target/release/coflow. */
  static Path binary() {
    String p = System.getProperty("coflow.bin");
    Path bin = p != null ? Path.of(p) : Path.of("../../target/release/coflow");
    if (!Files.isExecutable(bin)) {
      throw new IllegalStateException("the coflow binary is missing at " + bin.toAbsolutePath()
          + ": build it with `cargo build --release -p coflow-cli` (scripts/test-all spark does)");
    }
    return bin;
  }

  /** The Spark configuration that sends every shuffle through this cluster. */
  Map<String, String> sparkConf() {
    Map<String, String> c = new HashMap<>();
    // The manager's key alone: it installs its data IO (the registration tests set both keys).
    c.put("spark.shuffle.manager", CoflowShuffleManager.class.getName());
    c.put(CoflowConf.COORDINATOR, "127.0.0.1:" + coordinatorPort);
    if (certs == null) {
      c.put(CoflowConf.TOKEN, token);
    } else {
      c.put(CoflowConf.TLS_CA, certs.resolve("ca.crt").toString());
      c.put(CoflowConf.TLS_CERT, certs.resolve("client-spark.crt").toString());
      c.put(CoflowConf.TLS_KEY, certs.resolve("client-spark.key").toString());
    }
    for (Agent a : agents) {
      c.put(CoflowConf.AGENT + "." + a.machine, "127.0.0.1:" + a.grpcPort);
      c.put(CoflowConf.DATA_DIR + "." + a.machine, a.dataDir.toString());
    }
    return c;
  }

  /** {@link #sparkConf} for an application in {@code local[N]}, whose driver is its executor, on machine 0. */
  Map<String, String> localConf() {
    Map<String, String> c = sparkConf();
    c.put(CoflowConf.AGENT, c.get(CoflowConf.AGENT + ".0"));
    c.put(CoflowConf.DATA_DIR, c.get(CoflowConf.DATA_DIR + ".0"));
    return c;
  }

  /** Kills an agent at once (SIGKILL), as a machine failure would. */
  void kill(int machine) throws InterruptedException {
    Process p = agents.get(machine).process;
    p.destroyForcibly();
    p.waitFor();
  }

  /**
   * Starts a killed agent again on its own ports and data directory, as a restart would (its
   * memory, and so every piece it held, is lost).
   */
  void restart(int machine, String portRate) throws IOException, InterruptedException {
    startAgent(agents.get(machine), portRate, START_ATTEMPTS);
  }

  /** Freezes the coordinator ({@code SIGSTOP}): it holds its connections and answers nothing. */
  void freezeCoordinator() throws IOException, InterruptedException {
    signalCoordinator("-STOP");
  }

  /** Lets a frozen coordinator run again ({@code SIGCONT}). */
  void thawCoordinator() throws IOException, InterruptedException {
    signalCoordinator("-CONT");
  }

  private void signalCoordinator(String signal) throws IOException, InterruptedException {
    Process kill = new ProcessBuilder("kill", signal, Long.toString(coordinator.pid())).inheritIO().start();
    if (kill.waitFor() != 0) {
      throw new IOException("kill " + signal + " " + coordinator.pid() + " failed");
    }
  }

  /** A counter or gauge from the coordinator's /metrics. */
  double coordinatorMetric(String name) throws IOException {
    return metric(coordinatorMetricsPort, "coflow_coordinator_" + name);
  }

  /** A counter summed over the live agents' /metrics. */
  double agentsMetric(String name) throws IOException {
    double sum = 0;
    for (Agent a : agents) {
      if (a.process.isAlive()) {
        sum += metric(a.metricsPort, "coflow_agent_" + name);
      }
    }
    return sum;
  }

  /** {@code coflow status} against this cluster. */
  String status() throws IOException, InterruptedException {
    ProcessBuilder pb = new ProcessBuilder(bin.toString(), "status", "--coordinator",
        "http://127.0.0.1:" + coordinatorPort);
    pb.environment().put("COFLOW_TOKEN", token);
    pb.redirectErrorStream(true);
    Process p = pb.start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    if (p.waitFor() != 0) {
      throw new IOException("coflow status failed: " + out);
    }
    return out;
  }

  private static double metric(int port, String name) throws IOException {
    String text;
    try (InputStream in = URI.create("http://127.0.0.1:" + port + "/metrics").toURL().openStream()) {
      text = new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }
    for (String line : text.split("\n")) {
      if (line.startsWith(name + " ") || line.startsWith(name + "{")) {
        return Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
      }
    }
    throw new IOException("no metric " + name + " at port " + port);
  }

  /** The binary's arguments, then the TLS flags (after the subcommand). */
  private static List<String> concat(List<String> tail, String... head) {
    List<String> all = new ArrayList<>(List.of(head));
    all.addAll(tail);
    return all;
  }

  /** Runs {@code coflow certs ARGS... work/certs}. */
  private void certs(String... args) throws IOException, InterruptedException {
    List<String> cmd = new ArrayList<>(List.of(bin.toString(), "certs"));
    cmd.addAll(List.of(args));
    cmd.add(certs.toString());
    ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
    Process p = pb.start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    if (p.waitFor() != 0) {
      throw new IOException("coflow certs " + String.join(" ", args) + " failed: " + out);
    }
  }

  private Process start(String name, List<String> cmd) throws IOException {
    ProcessBuilder pb = new ProcessBuilder(cmd);
    if (certs == null) {
      pb.environment().put("COFLOW_TOKEN", token);
    }
    pb.environment().put("RUST_LOG", "info");
    // The logs go to files: no colour codes.
    pb.environment().put("NO_COLOR", "1");
    pb.redirectErrorStream(true);
    pb.redirectOutput(work.resolve(name + ".log").toFile());
    return pb.start();
  }

  /** How many times a process is started on freshly picked ports before its start counts as failed. */
  private static final int START_ATTEMPTS = 5;

  /**
   * Waits (at most 30 s) until {@code p}, logging to {@code name}.log, listens on {@code port}.
   * False if it exited because another process took one of its ports between {@link #freePort}
   * and its bind, and fewer than {@link #START_ATTEMPTS} attempts were made: the caller picks
   * new ports. Any other exit is an error that names the log.
   */
  private boolean listens(int port, Process p, String name, int attempt) throws IOException, InterruptedException {
    Instant deadline = Instant.now().plus(Duration.ofSeconds(30));
    Path log = work.resolve(name + ".log");
    while (true) {
      if (!p.isAlive()) {
        String text = Files.exists(log) ? Files.readString(log) : "";
        if (text.contains("Address already in use") && attempt < START_ATTEMPTS) {
          return false;
        }
        throw new IOException("a coflow process exited with " + p.exitValue() + "; see " + log + ":\n" + text);
      }
      try (Socket s = new Socket()) {
        s.connect(new InetSocketAddress("127.0.0.1", port), 200);
        return true;
      } catch (IOException e) {
        if (Instant.now().isAfter(deadline)) {
          throw new IOException("nothing listens on port " + port + " after 30 s; see " + log, e);
        }
        Thread.sleep(50);
      }
    }
  }

  private static int freePort() throws IOException {
    try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      return s.getLocalPort();
    }
  }

  /** Stops every process (SIGTERM, then SIGKILL after 10 s). */
  @Override
  public void close() {
    List<Process> all = new ArrayList<>();
    for (Agent a : agents) {
      all.add(a.process);
    }
    all.add(coordinator);
    for (Process p : all) {
      if (p != null) {
        p.destroy();
      }
    }
    for (Process p : all) {
      if (p == null) {
        continue;
      }
      try {
        if (!p.waitFor(10, java.util.concurrent.TimeUnit.SECONDS)) {
          p.destroyForcibly().waitFor();
        }
      } catch (InterruptedException e) {
        p.destroyForcibly();
        Thread.currentThread().interrupt();
      }
    }
  }

  @Override
  public String toString() {
    return "CoflowCluster(" + policy + ", " + agents.size() + " agents, " + work + File.separator + ")";
  }
}
