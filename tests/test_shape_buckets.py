"""pdelab.training.shape_buckets: each batch length maps to the smallest rung that holds it,
so the padded shapes a run compiles for are few and repeat."""

from __future__ import annotations

import pytest

from pdelab.training.shape_buckets import SMALLEST, bucket_length, rungs


@pytest.mark.parametrize("max_len", [1, 10, 16, 20, 100, 257, 1024, 4000, 4096])
def test_every_length_takes_the_smallest_rung_that_holds_it(max_len: int) -> None:
    ladder = rungs(max_len)
    assert ladder == sorted(set(ladder)) and ladder[-1] == max_len
    for n in range(1, max_len + 1):
        padded = bucket_length(n, max_len)
        assert padded == min(r for r in ladder if r >= n), n


def test_the_ladder_has_two_rungs_an_octave_each_a_multiple_of_eight() -> None:
    ladder = rungs(4096)
    assert ladder[:8] == [16, 24, 32, 48, 64, 96, 128, 192]
    assert len(ladder) == 17 and all(r % 8 == 0 for r in ladder)


def test_padding_adds_at_most_half_a_batch_length() -> None:
    for n in range(SMALLEST, 5000):
        assert n <= bucket_length(n, 5000) <= 1.5 * n, n


def test_lengths_in_one_bucket_share_one_shape() -> None:
    assert {bucket_length(n, 4000) for n in range(385, 513)} == {512}
    assert bucket_length(3500, 4000) == bucket_length(3999, 4000) == 4000


@pytest.mark.parametrize(("n", "max_len"), [(5, 4), (1, 0)])
def test_a_batch_longer_than_the_cap_is_refused(n: int, max_len: int) -> None:
    with pytest.raises(ValueError):
        bucket_length(n, max_len)
