"""The batching plan: cached prefixes at the prefix tree's branch points that save enough positions, batches by
what each prompt has left."""

from __future__ import annotations

from behavioral.inference.prefix_plan import batches, cached_prefixes, with_branch_points


def test_branch_points_that_save_enough_are_cached():
    a = [1] * 40  # a persona's 40 tokens
    b = [2] * 40
    prompts = [a + [7, 7, 7, 7] + [e] for e in (10, 11, 12)] + [b + [e] for e in (10, 11)] + [[3, 4, 5]]
    # a's three prompts share 44 tokens (saving 2 x 44); b's two share 40 (saving 40 < 64: computed in the rows);
    # the prompt alone has nothing to share
    assert cached_prefixes(prompts, min_saved=64) == [44, 44, 44, 0, 0, 0]
    assert cached_prefixes(prompts, min_saved=40) == [44, 44, 44, 40, 40, 0]


def test_nested_branch_points_extend_the_one_above():
    trunk = [1] * 30
    prompts = [trunk + [k] * 20 + [e] for k in (5, 6) for e in (10, 11, 12)]
    # the trunk saves 5 x 30; each branch adds 20 tokens shared by 3 prompts (saving 2 x 20)
    assert cached_prefixes(prompts, min_saved=40) == [50] * 6
    assert cached_prefixes(prompts, min_saved=64) == [30] * 6


def test_identical_and_nested_prompts_keep_a_token_of_their_own():
    prompts = [[1, 2, 3], [1, 2, 3], [1, 2, 3, 4]]
    assert cached_prefixes(prompts, min_saved=1) == [2, 2, 3]
    assert cached_prefixes([], min_saved=1) == []


def test_batches_group_by_what_is_left_and_respect_the_budget():
    prompts = [[1] * 10 + [2] * n for n in (5, 1, 3, 9)]
    prefixes = [10, 10, 10, 10]
    assert batches(prompts, prefixes, batch_size=2, extra=0) == [[(1, 10), (2, 10)], [(0, 10), (3, 10)]]
    # at most 12 positions a batch (rows x (longest remainder + 2 new tokens))
    assert batches(prompts, prefixes, batch_size=4, extra=2, max_tokens=12) == [
        [(1, 10), (2, 10)], [(0, 10)], [(3, 10)]]
    assert batches(prompts, [0] * 4, batch_size=4, extra=0) == [[(1, 0), (2, 0), (0, 0), (3, 0)]]


def test_batches_are_cut_where_padding_would_pass_its_share():
    prompts = [[1] * n for n in (10, 10, 11, 20, 21, 40)]
    prefixes = [0] * 6
    # 10, 10, 11 pad 2 of 33 positions; adding 20 would pad 31 of 80: a new batch, and again at 40
    assert batches(prompts, prefixes, batch_size=6, extra=0, max_padding=0.1, min_rows=1) == [
        [(0, 0), (1, 0), (2, 0)], [(3, 0), (4, 0)], [(5, 0)]]
    # new tokens (or tree nodes) are positions too, never padding: with 100 a row, 10-21 pad 33 of 605 positions
    assert batches(prompts, prefixes, batch_size=6, extra=100, max_padding=0.1, min_rows=1) == [
        [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0)], [(5, 0)]]
    # a batch of min_rows or fewer is never cut for padding
    assert batches(prompts, prefixes, batch_size=6, extra=0, max_padding=0.1, min_rows=6) == [
        [(i, 0) for i in range(6)]]


def test_branch_points_between_cached_prefixes_are_added():
    a, b, c = (1, 2, 3, 4, 5), (1, 2, 3, 9), (1, 7)
    assert with_branch_points([a, b, c, a], min_saved=1) == {a, b, c, (1, 2, 3), (1,)}
    assert with_branch_points([(5, 6), (7,)], min_saved=1) == {(5, 6), (7,)}  # nothing shared: no empty prefix


def test_a_branch_point_is_kept_only_where_it_saves_enough_over_the_point_above():
    trunk = (1,) * 60
    a, b, c = trunk + (2, 3, 4), trunk + (2, 3, 5), trunk + (6,)
    # the trunk is shared by three prefixes (saving 2 x 60); trunk + (2, 3) by two (1 x 2 over the trunk)
    assert with_branch_points([a, b, c], min_saved=24) == {a, b, c, trunk}
    assert with_branch_points([a, b, c], min_saved=2) == {a, b, c, trunk, trunk + (2, 3)}
    # without the trunk kept, the two-token point is measured from the root: 1 x 62
    assert with_branch_points([a, b], min_saved=24) == {a, b, trunk + (2, 3)}
    assert with_branch_points([(), a]) == {a}  # a prompt without a cached prefix adds nothing to compute
