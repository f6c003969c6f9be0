package io.coflow.spark;

import org.apache.spark.shuffle.BaseShuffleHandle;
import org.apache.spark.shuffle.ShuffleHandle;

/**
 * A shuffle that is a coflow: Spark's own handle (which picks the sort writer) plus the coflow id,
 * so executors need no lookup.
 */
public final class CoflowShuffleHandle extends ShuffleHandle {
  private static final long serialVersionUID = 1L;

  private final BaseShuffleHandle<?, ?, ?> inner;
  private final long coflowId;

  CoflowShuffleHandle(BaseShuffleHandle<?, ?, ?> inner, long coflowId) {
    super(inner.shuffleId());
    this.inner = inner;
    this.coflowId = coflowId;
  }

  /** The handle Spark's sort shuffle made for this shuffle. */
  public BaseShuffleHandle<?, ?, ?> inner() {
    return inner;
  }

  /** The coflow this shuffle's blocks belong to. */
  public long coflowId() {
    return coflowId;
  }

  @Override
  public String toString() {
    return "CoflowShuffleHandle(shuffle " + shuffleId() + ", coflow " + coflowId + ")";
  }
}
