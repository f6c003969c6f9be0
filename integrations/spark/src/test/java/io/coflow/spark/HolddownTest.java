package io.coflow.spark;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class HolddownTest {
  @Test
  void shuffles_after_an_unreachable_coordinator_skip_it_for_the_span_then_ask_again() {
    Holddown h = new Holddown(30);
    assertTrue(h.asks(0), "nothing failed yet");
    h.unreachable(100);
    assertFalse(h.asks(100));
    assertFalse(h.asks(129));
    assertTrue(h.asks(130), "the span is over");
    h.unreachable(200);
    h.answered();
    assertTrue(h.asks(201), "an answer ends the hold-down");
    // Across the wrap of System.nanoTime.
    h.unreachable(Long.MAX_VALUE - 10);
    assertFalse(h.asks(Long.MIN_VALUE + 5));
    assertTrue(h.asks(Long.MIN_VALUE + 20));
  }
}
