"""The pure helpers of the memory soak: reading VmRSS, growth after the settling minutes."""

from __future__ import annotations

import os

import pytest

from benchmarks import _memory

STATUS = "Name:\tpython\nVmPeak:\t  200000 kB\nVmRSS:\t  123456 kB\nThreads:\t4\n"


def test_vmrss_is_read_from_a_status_text_in_kib():
    assert _memory.parse_vmrss_kib(STATUS) == 123456.0
    assert _memory.parse_vmrss_kib("Name:\tzombie\nState:\tZ\n") == 0.0


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc (Linux only)")
def test_rss_of_this_process_is_positive_and_of_a_gone_pid_none():
    rss = _memory.rss_mib(os.getpid())
    assert rss is not None and rss > 0
    assert _memory.rss_mib(2**22 + 12345) is None  # above any pid_max


def test_growth_counts_from_the_first_sample_at_or_after_the_settling_minute():
    series = [(0.0, 50.0), (5.0, 90.0), (10.0, 100.0), (30.0, 104.0), (60.0, 103.0)]
    assert _memory.growth_pct(series, 10.0) == pytest.approx(3.0)
    assert _memory.growth_pct(series, 9.0) == pytest.approx(3.0)
    assert _memory.growth_pct(series, 0.0) == pytest.approx(106.0)


def test_growth_is_none_without_two_settled_samples_or_a_positive_start():
    assert _memory.growth_pct([(0.0, 1.0), (10.0, 2.0)], 10.0) is None
    assert _memory.growth_pct([], 0.0) is None
    assert _memory.growth_pct([(10.0, 0.0), (20.0, 5.0)], 10.0) is None
