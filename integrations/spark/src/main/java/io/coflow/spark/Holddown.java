package io.coflow.spark;

/**
 * After the coordinator could not be reached at a shuffle's registration, how long the driver
 * sends the next shuffles Spark's own way without asking again, so that a query of many exchanges
 * does not wait out the registration timeout at each. Pure: the caller passes the time.
 */
final class Holddown {
  private final long spanNanos;
  /** Until when shuffles are not registered, in {@link System#nanoTime} terms; valid while {@code held}. */
  private long until;
  private boolean held;

  Holddown(long spanNanos) {
    this.spanNanos = spanNanos;
  }

  /** Whether a shuffle registering at {@code now} should ask the coordinator. */
  synchronized boolean asks(long now) {
    if (held && now - until < 0) {
      return false;
    }
    held = false;
    return true;
  }

  /** The coordinator could not be reached at {@code now}: hold the next shuffles back. */
  synchronized void unreachable(long now) {
    held = true;
    until = now + spanNanos;
  }

  /** The coordinator answered: the next shuffle asks again. */
  synchronized void answered() {
    held = false;
  }
}
