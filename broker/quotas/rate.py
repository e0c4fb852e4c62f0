"""The rate a client quota is measured with: Kafka's ``Rate`` over a ``WindowedSum``
(clients/.../metrics/stats/Rate.java and SampledStat.java), so a quota throttles exactly when and
for as long as Kafka's would. Pure: the time is passed in.

The rate keeps up to ``samples + 1`` samples of ``window_ms`` each (Kafka's quota.window.num = 11
of quota.window.size.seconds = 1: about ten seconds of history). A value recorded goes into the
current sample, or starts the next one once the current has lasted ``window_ms``. A sample whose
last value is ``samples * window_ms`` old no longer counts (it is reset). The rate is the sum of
the samples over the elapsed time since the oldest one started, taken as at least ``samples - 1``
whole windows so that a first burst is not measured over a few milliseconds.
"""

from __future__ import annotations

__all__ = ["Rate", "throttle_time_ms"]


class _Sample:
    __slots__ = ("start_ms", "last_ms", "value")

    def __init__(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.last_ms = now_ms
        self.value = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.last_ms = now_ms
        self.value = 0.0


class Rate:
    """Units per second over the last ``samples`` windows of ``window_ms``; see the module
    docstring. Not thread-safe (the trio thread owns it)."""

    __slots__ = ("samples", "window_ms", "_samples", "_current")

    def __init__(self, samples: int, window_ms: int) -> None:
        if samples < 1 or window_ms < 1:
            raise ValueError(
                f"a rate needs samples >= 1 and window_ms >= 1, not {samples}, {window_ms}"
            )
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        """Add ``value`` (negative to take back what a throttled fetch did not send)."""
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            # Kafka keeps one sample more than configured for the one overlapping the window
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current >= len(self._samples):
                sample = _Sample(now_ms)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.last_ms = now_ms

    def measure(self, now_ms: int) -> float:
        """The rate per second at ``now_ms``."""
        self._purge(now_ms)
        total = sum(s.value for s in self._samples)
        return total / (self.window_size_ms(now_ms) / 1000.0)

    def window_size_ms(self, now_ms: int) -> int:
        """The time the rate divides by (Rate.windowSize): since the oldest sample started, at
        least ``samples - 1`` whole windows, at least 1 ms."""
        self._purge(now_ms)
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        elapsed = now_ms - min(s.start_ms for s in self._samples)
        full_windows = elapsed // self.window_ms
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_ms
        return max(elapsed, 1)

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample.last_ms >= expire_ms:
                sample.reset(now_ms)


def throttle_time_ms(rate: Rate, bound: float, now_ms: int) -> int:
    """How long the client must stay quiet for ``rate`` to come back to ``bound``, 0 when it is
    within it (Kafka's QuotaUtils.throttleTime: with O the observed rate, T the bound and W the
    window, X = (O - T) / T * W, rounded)."""
    observed = rate.measure(now_ms)
    if observed <= bound:
        return 0
    # Java's Math.round: half up
    return int((observed - bound) / bound * rate.window_size_ms(now_ms) + 0.5)
