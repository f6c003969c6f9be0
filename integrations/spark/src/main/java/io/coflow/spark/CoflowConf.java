package io.coflow.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;

import org.apache.spark.SparkConf;

/**
 * The plugin's configuration, read from the Spark configuration once per process.
 *
 * <p>Every key is documented in integrations/spark/README.md. An executor finds its local agent
 * from {@code spark.coflow.agent.<executorId>} (several executors on one host, each with its own
 * agent: tests and emulated clusters), else {@code spark.coflow.agent} (one agent per worker host,
 * the real-cluster case); the data directory likewise. Both may name environment variables of the
 * executor's process as {@code ${env:NAME}}, expanded where the executor runs (a worker that knows
 * its own agent's directory passes it to its executors in its environment).
 */
public final class CoflowConf {
  private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(CoflowConf.class);
  public static final String PREFIX = "spark.coflow.";
  public static final String COORDINATOR = PREFIX + "coordinator";
  public static final String AGENT = PREFIX + "agent";
  public static final String DATA_DIR = PREFIX + "dataDir";
  public static final String TOKEN = PREFIX + "token";
  public static final String TOKEN_FILE = PREFIX + "tokenFile";
  public static final String TLS_CA = PREFIX + "tls.ca";
  public static final String TLS_CERT = PREFIX + "tls.cert";
  public static final String TLS_KEY = PREFIX + "tls.key";
  public static final String REGISTER_TIMEOUT = PREFIX + "register.timeout";
  public static final String PUT_TIMEOUT = PREFIX + "put.timeout";
  public static final String FETCH_TIMEOUT = PREFIX + "fetch.timeout";
  public static final String MAX_STREAMS = PREFIX + "reader.maxStreams";
  public static final String MAX_BYTES_IN_FLIGHT = PREFIX + "reader.maxBytesInFlight";
  public static final String FALLBACK = PREFIX + "fallback";
  public static final String MAX_PIECES = PREFIX + "maxPieces";
  public static final String LEASE = PREFIX + "lease";
  /** Spark's own bound on a reducer's bytes in flight, the default of {@link #MAX_BYTES_IN_FLIGHT}. */
  static final String SPARK_MAX_SIZE_IN_FLIGHT = "spark.reducer.maxSizeInFlight";
  /** Spark's retries of a fetch, which the reader's gets follow. */
  static final String SPARK_MAX_RETRIES = "spark.shuffle.io.maxRetries";
  static final String SPARK_RETRY_WAIT = "spark.shuffle.io.retryWait";
  /** {@link #MAX_PIECES}'s default: half the coordinator's default {@code max_pieces_per_coflow}. */
  static final long DEFAULT_MAX_PIECES = 500_000L;
  /** The most times a get or put is asked again, whatever {@link #SPARK_MAX_RETRIES} says. */
  static final int MAX_RETRIES = 100;
  /** Spark's switch to name map outputs by partition, which the plugin refuses. */
  static final String OLD_FETCH_PROTOCOL = "spark.shuffle.useOldFetchProtocol";

  /** When a shuffle uses Spark's own path instead of coflow ({@code spark.coflow.fallback}). */
  public enum Fallback {
    /** When the coordinator cannot be reached at registration (the default). */
    AUTO,
    /** Never: a shuffle whose registration fails fails its job. */
    NEVER,
    /** Always: every shuffle is Spark's own; the plugin stays installed but does nothing. */
    ALWAYS;

    static Fallback parse(String v) {
      switch (v.trim().toLowerCase(java.util.Locale.ROOT)) {
        case "auto":
          return AUTO;
        case "never":
          return NEVER;
        case "always":
          return ALWAYS;
        default:
          throw new IllegalArgumentException(
              "coflow: " + FALLBACK + " must be auto, never or always, got " + v);
      }
    }
  }

  /** When shuffles use Spark's own path. */
  public final Fallback fallback;
  /** The coordinator's gRPC address, {@code host:port}; null under {@code fallback=always}. */
  public final String coordinator;
  /** The cluster token, or null when TLS identities are used instead. */
  public final String token;
  /** PEM files for mutual TLS; all null for plaintext. */
  public final String tlsCa;
  public final String tlsCert;
  public final String tlsKey;
  /** How long registering (or unregistering) a shuffle may take. */
  public final Duration registerTimeout;
  /** How long the local agent may take to store and announce a map task's pieces. */
  public final Duration putTimeout;
  /** How long one block's get may take, end to end. */
  public final Duration fetchTimeout;
  /** How many gets a reduce task keeps open at once. */
  public final int maxStreams;
  /** The bytes a reduce task asks for and holds before it takes them (one block is always allowed). */
  public final long maxBytesInFlight;
  /**
   * How many times a get or put answered {@code agent-unreachable} or {@code coordinator-unreachable},
   * or not answered by the local agent, is asked again: Spark's {@code spark.shuffle.io.maxRetries},
   * at most {@link #MAX_RETRIES}.
   */
  public final int maxRetries;
  /** How long before it is: Spark's {@code spark.shuffle.io.retryWait}. */
  public final Duration retryWait;
  /**
   * The most pieces a shuffle may have (maps times reduces) to go through coflow; a wider shuffle
   * goes Spark's own way. Half the coordinator's default {@code max_pieces_per_coflow}
   * (1,000,000) by default, since the coordinator counts every put, and a shuffle's retried and
   * speculative map attempts put pieces of their own.
   */
  public final long maxPieces;
  /**
   * The lease each shuffle's coflow is registered with, which the driver renews every third of
   * it, so that the coflows of a driver that dies without unregistering them are dropped a lease
   * later; zero for none (they then live until the coordinator restarts without their pieces).
   */
  public final Duration lease;

  private final SparkConf conf;

  private CoflowConf(SparkConf conf) {
    this.conf = conf;
    this.fallback = Fallback.parse(conf.get(FALLBACK, "auto"));
    this.registerTimeout = Duration.ofMillis(time(conf, REGISTER_TIMEOUT, "10s"));
    this.putTimeout = Duration.ofMillis(time(conf, PUT_TIMEOUT, "60s"));
    this.fetchTimeout = Duration.ofMillis(time(conf, FETCH_TIMEOUT, "10min"));
    this.maxStreams = (int) Math.min(Integer.MAX_VALUE, positive(conf, MAX_STREAMS, 64));
    // Spark reads a bare number of its key as MiB (ours, as Spark's sizes, as bytes).
    String sparkInFlight = conf.get(SPARK_MAX_SIZE_IN_FLIGHT, "48m").trim();
    this.maxBytesInFlight = size(conf, MAX_BYTES_IN_FLIGHT,
        sparkInFlight.matches("[0-9]+") ? sparkInFlight + "m" : sparkInFlight);
    this.maxPieces = positive(conf, MAX_PIECES, DEFAULT_MAX_PIECES);
    this.lease = lease(conf);
    long retries = nonNegative(conf, SPARK_MAX_RETRIES, 3);
    if (retries > MAX_RETRIES) {
      LOG.warn("coflow: {} is {}; gets and puts through the agents are asked again at most {} times", SPARK_MAX_RETRIES,
          retries, MAX_RETRIES);
    }
    this.maxRetries = (int) Math.min(MAX_RETRIES, retries);
    // Spark reads a bare number of its key as seconds.
    String wait = conf.get(SPARK_RETRY_WAIT, "5s").trim();
    long waitMs;
    try {
      waitMs = org.apache.spark.network.util.JavaUtils.timeStringAsMs(wait.matches("[0-9]+") ? wait + "s" : wait);
    } catch (RuntimeException e) {
      throw new IllegalArgumentException("coflow: " + SPARK_RETRY_WAIT + " is not a duration (e.g. 5s): " + wait, e);
    }
    if (waitMs < 0) {
      throw new IllegalArgumentException("coflow: " + SPARK_RETRY_WAIT + " must not be negative, got " + wait);
    }
    this.retryWait = Duration.ofMillis(waitMs);
    if (fallback == Fallback.ALWAYS) {
      // Nothing is registered or fetched: no coordinator, no credentials needed.
      this.coordinator = null;
      this.token = null;
      this.tlsCa = null;
      this.tlsCert = null;
      this.tlsKey = null;
      return;
    }
    if (conf.getBoolean(OLD_FETCH_PROTOCOL, false)) {
      // Then a map output is named by its partition rather than its task attempt, so a retried
      // map task's pieces would take the names of its first attempt's.
      throw new IllegalArgumentException("coflow: " + OLD_FETCH_PROTOCOL + "=true names map outputs by partition, "
          + "so a retried map task could not put its pieces; unset it, or set " + FALLBACK + "=always");
    }
    this.token = readToken(conf);
    this.tlsCa = conf.get(TLS_CA, null);
    this.tlsCert = conf.get(TLS_CERT, null);
    this.tlsKey = conf.get(TLS_KEY, null);
    boolean anyTls = tlsCa != null || tlsCert != null || tlsKey != null;
    boolean allTls = tlsCa != null && tlsCert != null && tlsKey != null;
    this.coordinator = address(COORDINATOR, required(conf, COORDINATOR), allTls);
    if (anyTls && !allTls) {
      throw new IllegalArgumentException(
          "coflow: " + TLS_CA + ", " + TLS_CERT + " and " + TLS_KEY + " go together; set all three or none");
    }
    if (!allTls && token == null) {
      throw new IllegalArgumentException(
          "coflow: no credentials: set " + TOKEN + " or " + TOKEN_FILE + " (or the three " + PREFIX + "tls.* files)");
    }
  }

  /**
   * Where this process keeps the files it puts, relative to the agent's data directory: with TLS,
   * the directory of the identity its client certificate names ({@code clients/NAME} for
   * {@code coflow://client/NAME}, {@code admin} for the admin), since an agent serves a client
   * only its own files beneath it; else the data directory itself (the empty path).
   */
  public Path home() {
    if (!tls()) {
      return Path.of("");
    }
    String role = roleOf(Path.of(tlsCert));
    if (role.equals("coflow://admin")) {
      return Path.of("admin");
    }
    String client = "coflow://client/";
    String name = role.startsWith(client) ? role.substring(client.length()) : "";
    if (!name.matches("[A-Za-z0-9._-]{1,64}") || name.equals(".") || name.equals("..")) {
      throw new IllegalArgumentException(
          "coflow: " + TLS_CERT + " " + tlsCert + " is not a client's certificate (it names " + role + ")");
    }
    return Path.of("clients", name);
  }

  /** The {@code coflow://} role a certificate names in its subject alternative names. */
  static String roleOf(Path pem) {
    try (java.io.InputStream in = Files.newInputStream(pem)) {
      java.security.cert.X509Certificate cert = (java.security.cert.X509Certificate)
          java.security.cert.CertificateFactory.getInstance("X.509").generateCertificate(in);
      java.util.Collection<java.util.List<?>> names = cert.getSubjectAlternativeNames();
      if (names != null) {
        for (java.util.List<?> n : names) {
          // 6: a uniform resource identifier.
          if (n.size() == 2 && Integer.valueOf(6).equals(n.get(0)) && String.valueOf(n.get(1)).startsWith("coflow://")) {
            return String.valueOf(n.get(1));
          }
        }
      }
      return "no coflow:// name";
    } catch (IOException | java.security.cert.CertificateException e) {
      throw new IllegalArgumentException("coflow: cannot read " + TLS_CERT + " " + pem + ": " + e.getMessage(), e);
    }
  }

  /** Spark's key for the shuffle's data IO, which must name {@link CoflowShuffleDataIO} or nothing. */
  public static final String DATA_IO = "spark.shuffle.sort.io.plugin.class";

  /**
   * Makes the shuffle's data IO the plugin's when it is not set, so that the manager's key alone
   * is enough; fails, naming the key, when it names another data IO (map output would go there
   * while reducers ask the agents). Called before Spark's sort shuffle reads the key.
   */
  public static void installDataIO(SparkConf conf) {
    String io = conf.get(DATA_IO, null);
    String want = CoflowShuffleDataIO.class.getName();
    if (io == null || io.trim().isEmpty()) {
      conf.set(DATA_IO, want);
    } else if (!want.equals(io.trim())) {
      throw new IllegalArgumentException("coflow: spark.shuffle.manager=" + CoflowShuffleManager.class.getName()
          + " needs " + DATA_IO + "=" + want + " or no value (it is " + io + ")");
    }
  }

  /** Reads and validates the configuration; the error names the key. */
  public static CoflowConf from(SparkConf conf) {
    return new CoflowConf(conf);
  }

  /** Whether channels use mutual TLS. */
  public boolean tls() {
    return tlsCa != null;
  }

  /** The local agent of this executor: {@code spark.coflow.agent.<id>}, else {@code spark.coflow.agent}. */
  public String agentFor(String executorId) {
    return address(AGENT, expandEnv(perExecutor(AGENT, executorId), System.getenv()), tls());
  }

  /** The local agent's data directory for this executor, resolved like {@link #agentFor}. */
  public Path dataDirFor(String executorId) {
    return Path.of(expandEnv(perExecutor(DATA_DIR, executorId), System.getenv()));
  }

  private String perExecutor(String key, String executorId) {
    String own = conf.get(key + "." + executorId, null);
    if (own != null) {
      return own;
    }
    String all = conf.get(key, null);
    if (all == null) {
      throw new IllegalArgumentException(
          "coflow: executor " + executorId + " has no " + key + "." + executorId + " and no " + key);
    }
    return all;
  }

  /**
   * Replaces every {@code ${env:NAME}} in {@code value} by the variable's value in {@code env}; a
   * variable that is not set is an error naming it.
   */
  static String expandEnv(String value, java.util.Map<String, String> env) {
    StringBuilder out = new StringBuilder();
    int at = 0;
    while (true) {
      int start = value.indexOf("${env:", at);
      if (start < 0) {
        return out.append(value, at, value.length()).toString();
      }
      int end = value.indexOf('}', start);
      if (end < 0) {
        throw new IllegalArgumentException("coflow: unterminated ${env:...} in " + value);
      }
      String name = value.substring(start + 6, end);
      String v = env.get(name);
      if (name.isEmpty() || v == null) {
        throw new IllegalArgumentException(
            "coflow: " + value + " names the environment variable " + name + ", which this executor does not have");
      }
      out.append(value, at, start).append(v);
      at = end + 1;
    }
  }

  private static String required(SparkConf conf, String key) {
    String v = conf.get(key, null);
    if (v == null || v.isBlank()) {
      throw new IllegalArgumentException("coflow: " + key + " is not set");
    }
    return v.trim();
  }

  private static long nonNegative(SparkConf conf, String key, long dflt) {
    return atLeast(conf, key, dflt, 0, "must not be negative");
  }

  private static long positive(SparkConf conf, String key, long dflt) {
    return atLeast(conf, key, dflt, 1, "must be positive");
  }

  /** A whole number of at least {@code min}; the error names the key and says {@code what}. */
  private static long atLeast(SparkConf conf, String key, long dflt, long min, String what) {
    String v = conf.get(key, Long.toString(dflt));
    try {
      long n = Long.parseLong(v.trim());
      if (n < min) {
        throw new IllegalArgumentException("coflow: " + key + " " + what + ", got " + v);
      }
      return n;
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("coflow: " + key + " is not a number: " + v, e);
    }
  }

  /** A duration as Spark spells it ({@code 10s}, {@code 500ms}, {@code 2min}; a bare number is ms), positive. */
  private static long time(SparkConf conf, String key, String dflt) {
    long ms = millis(conf, key, dflt);
    if (ms <= 0) {
      throw new IllegalArgumentException("coflow: " + key + " must be positive, got " + conf.get(key, dflt));
    }
    return ms;
  }

  /** A duration as Spark spells it, in milliseconds, whatever its sign. */
  private static long millis(SparkConf conf, String key, String dflt) {
    try {
      return conf.getTimeAsMs(key, dflt);
    } catch (RuntimeException e) {
      throw new IllegalArgumentException(
          "coflow: " + key + " is not a duration (e.g. 10s, 500ms, 2min): " + conf.get(key, dflt), e);
    }
  }

  /** {@link #LEASE}: 0 (none), or from a second to a day, as the coordinator accepts. */
  private static Duration lease(SparkConf conf) {
    long ms = millis(conf, LEASE, "2min");
    if (ms != 0 && (ms < 1_000 || ms > 86_400_000)) {
      throw new IllegalArgumentException(
          "coflow: " + LEASE + " must be 0 (none) or from 1s to 1d, got " + conf.get(LEASE, "2min"));
    }
    return Duration.ofMillis(ms);
  }

  /** A size as Spark spells it ({@code 48m}, {@code 1g}; a bare number is bytes), positive. */
  private static long size(SparkConf conf, String key, String dflt) {
    String v = conf.get(key, dflt);
    long n;
    try {
      n = conf.getSizeAsBytes(key, dflt);
    } catch (RuntimeException e) {
      throw new IllegalArgumentException("coflow: " + key + " is not a size (e.g. 48m, 1g): " + v, e);
    }
    if (n <= 0) {
      throw new IllegalArgumentException("coflow: " + key + " must be positive, got " + v);
    }
    return n;
  }

  private static String readToken(SparkConf conf) {
    String t = conf.get(TOKEN, null);
    String file = conf.get(TOKEN_FILE, null);
    if (t != null && file != null) {
      throw new IllegalArgumentException("coflow: set " + TOKEN + " or " + TOKEN_FILE + ", not both");
    }
    if (file != null) {
      try {
        t = Files.readString(Path.of(file), StandardCharsets.UTF_8);
      } catch (IOException e) {
        throw new IllegalArgumentException("coflow: " + TOKEN_FILE + ": cannot read " + file + ": " + e, e);
      }
    }
    if (t == null) {
      return null;
    }
    t = t.trim();
    if (t.isEmpty()) {
      throw new IllegalArgumentException("coflow: the cluster token (" + TOKEN + " / " + TOKEN_FILE + ") is empty");
    }
    return t;
  }

  /**
   * The {@code host:port} of a service named by {@code key}: {@code http://} and {@code https://}
   * are taken as the coflow CLI takes them, but {@code https://} without the TLS files is refused
   * (the connection would be plaintext, the token in clear), and so is an address with no port
   * (gRPC would take 443).
   */
  static String address(String key, String value, boolean tls) {
    if (value.trim().startsWith("https://") && !tls) {
      throw new IllegalArgumentException("coflow: " + key + " is " + value.trim() + " but " + TLS_CA + ", " + TLS_CERT
          + " and " + TLS_KEY + " are not set: the connection would be plaintext");
    }
    String a = stripScheme(value);
    if (!a.matches(".*:[0-9]{1,5}")) {
      throw new IllegalArgumentException("coflow: " + key + " must be host:port, got " + value.trim());
    }
    return a;
  }

  /** Accepts {@code http://host:port} as well as {@code host:port}, as the coflow CLI does. */
  static String stripScheme(String addr) {
    String a = addr.trim();
    for (String s : new String[] {"http://", "https://"}) {
      if (a.startsWith(s)) {
        a = a.substring(s.length());
      }
    }
    if (a.endsWith("/")) {
      a = a.substring(0, a.length() - 1);
    }
    return a;
  }
}
