package io.coflow.spark;

import java.io.File;
import java.io.IOException;
import java.util.concurrent.TimeUnit;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsChannelCredentials;

/**
 * Channels to the coordinator and to the local agent, with the cluster's credentials: the token as
 * {@code authorization: Bearer <token>} on every call, and/or mutual TLS from PEM files.
 */
final class CoflowChannels {
  /** The metadata key in which coordinator and agents name an error's kind. */
  static final Metadata.Key<String> ERROR_KIND = Metadata.Key.of("coflow-error", Metadata.ASCII_STRING_MARSHALLER);

  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
  /** Pieces are streamed in chunks of up to a few MiB; leave room. */
  private static final int MAX_MESSAGE_BYTES = 16 << 20;

  private CoflowChannels() {}

  /** A channel to {@code host:port} with the configured credentials. */
  static ManagedChannel open(CoflowConf conf, String target) {
    ChannelCredentials creds;
    if (conf.tls()) {
      try {
        creds = TlsChannelCredentials.newBuilder()
            .trustManager(new File(conf.tlsCa))
            .keyManager(new File(conf.tlsCert), new File(conf.tlsKey))
            .build();
      } catch (IOException e) {
        throw new IllegalArgumentException("coflow: reading the TLS files (" + CoflowConf.TLS_CA + ", "
            + CoflowConf.TLS_CERT + ", " + CoflowConf.TLS_KEY + "): " + e.getMessage(), e);
      }
    } else {
      creds = InsecureChannelCredentials.create();
    }
    var b = Grpc.newChannelBuilder(target, creds)
        .maxInboundMessageSize(MAX_MESSAGE_BYTES)
        .keepAliveTime(30, TimeUnit.SECONDS);
    if (conf.token != null) {
      b.intercept(new Bearer(conf.token));
    }
    return b.build();
  }

  /** Closes a channel, waiting briefly for calls to end. */
  static void close(ManagedChannel ch) {
    ch.shutdownNow();
    try {
      ch.awaitTermination(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** The error kind of an agent out of reach (the local one, or a get's source): retried. */
  static final String AGENT_UNREACHABLE = "agent-unreachable";
  /** The error kind of the coordinator out of reach of the local agent, or stopping: retried. */
  static final String COORDINATOR_UNREACHABLE = "coordinator-unreachable";

  /** The error kind of a get the agent ended because its reader took nothing for its idle timeout: retried. */
  static final String CLIENT_DEPARTED = "client-departed";

  /**
   * Whether a failure's kind says to ask again: an agent or the coordinator out of reach, or a get
   * this executor stopped reading (a long pause of its JVM).
   */
  static boolean retriedKind(Throwable t) {
    String kind = kind(t);
    return AGENT_UNREACHABLE.equals(kind) || COORDINATOR_UNREACHABLE.equals(kind) || CLIENT_DEPARTED.equals(kind);
  }

  /** The coflow error kind of a failed call, e.g. {@code no-such-data}; null when it has none. */
  static String kind(Throwable t) {
    Metadata trailers = Status.trailersFromThrowable(t);
    return trailers == null ? null : trailers.get(ERROR_KIND);
  }

  /** Whether a failure means the peer could not be reached at all (no answer from a coflow service). */
  static boolean unreachable(Throwable t) {
    if (!(t instanceof StatusRuntimeException)) {
      return false;
    }
    Status.Code c = ((StatusRuntimeException) t).getStatus().getCode();
    return kind(t) == null && (c == Status.Code.UNAVAILABLE || c == Status.Code.DEADLINE_EXCEEDED);
  }

  /** A one-line description of a failed call: code, kind and message. */
  static String describe(Throwable t) {
    if (t instanceof StatusRuntimeException) {
      Status s = ((StatusRuntimeException) t).getStatus();
      String kind = kind(t);
      return s.getCode() + (kind == null ? "" : " (" + kind + ")")
          + (s.getDescription() == null ? "" : ": " + s.getDescription());
    }
    return String.valueOf(t);
  }

  /** Adds the cluster token to every call. */
  private static final class Bearer implements ClientInterceptor {
    private final String value;

    Bearer(String token) {
      this.value = "Bearer " + token;
    }

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> m, CallOptions o, Channel next) {
      return new ForwardingClientCall.SimpleForwardingClientCall<Q, R>(next.newCall(m, o)) {
        @Override
        public void start(Listener<R> listener, Metadata headers) {
          headers.put(AUTHORIZATION, value);
          super.start(listener, headers);
        }
      };
    }

    @Override
    public String toString() {
      return "Bearer(redacted)";
    }
  }
}
