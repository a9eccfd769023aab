import pytest
import torch

from nemo_rl.data import PromptIterator, left_pad, right_pad


def test_iterator_covers_each_epoch_once_and_reshuffles():
    it = PromptIterator(list(range(10)), seed=3)
    first, second = it.next_batch(10), it.next_batch(10)
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second  # a new order each epoch


def test_state_dict_resumes_the_exact_order():
    straight = PromptIterator(list(range(7)), seed=1)
    expected = [straight.next_batch(3) for _ in range(6)]

    resumed = PromptIterator(list(range(7)), seed=1)
    got = [resumed.next_batch(3) for _ in range(4)]  # crosses an epoch boundary
    state = resumed.state_dict()
    fresh = PromptIterator(list(range(7)), seed=1)
    fresh.load_state_dict(state)
    got += [fresh.next_batch(3) for _ in range(2)]
    assert got == expected


def test_state_from_another_seed_is_rejected():
    it = PromptIterator([1, 2], seed=1)
    with pytest.raises(ValueError, match="seed"):
        it.load_state_dict(PromptIterator([1, 2], seed=2).state_dict())


def test_left_and_right_padding_masks():
    ids, mask = left_pad([[5, 6], [7]], pad_id=0)
    assert ids.tolist() == [[5, 6], [0, 7]]
    assert mask.tolist() == [[1, 1], [0, 1]]
    ids, mask = right_pad([[5, 6], [7]], pad_id=0)
    assert ids.tolist() == [[5, 6], [7, 0]]
    assert mask.tolist() == [[1, 1], [1, 0]]
    assert ids.dtype == mask.dtype == torch.long
