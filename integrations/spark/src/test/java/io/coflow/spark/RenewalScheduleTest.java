package io.coflow.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;

import org.junit.jupiter.api.Test;

/** When the driver renews its leases next. */
class RenewalScheduleTest {
  @Test
  void a_third_of_the_lease_after_an_answer_a_second_after_a_failure() {
    Duration twoMin = Duration.ofMinutes(2);
    assertEquals(40_000, CoflowShuffleManager.nextRenewalMs(true, twoMin));
    assertEquals(CoflowShuffleManager.RETRY_MS, CoflowShuffleManager.nextRenewalMs(false, twoMin));
    // A lease shorter than three retries: the retry comes within its third too.
    assertEquals(500, CoflowShuffleManager.nextRenewalMs(false, Duration.ofMillis(1_500)));
    assertEquals(500, CoflowShuffleManager.nextRenewalMs(true, Duration.ofMillis(1_500)));
  }
}
