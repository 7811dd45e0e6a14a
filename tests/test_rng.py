"""bertkit.utils.rng: the one splitmix64. Its outputs decide every collation seed and every packing choice, so a
run is reproducible across versions only while they stay the same: the values below were computed by the two
implementations it replaced (training/trainer.py's example_seed and data/pretraining/packing.py's draw)."""

from __future__ import annotations

import numpy as np

from bertkit.data.pretraining.packing import randint, uniform
from bertkit.training.data_order import example_seed
from bertkit.utils.rng import draw, mix


def test_collation_seeds_are_the_ones_runs_had():
    cases = [(0, 0, 0), (42, 0, 0), (42, 1, 7), (1234, 3, 99999), (2**63 - 1, 5, 2**40), (-1, 0, 3)]
    assert [example_seed(*case) for case in cases] == [
        1279368494785126216, 3569207718454509475, 976209689342350205, 6492836455141128663, 6097863461128828719,
        5005296516824801671]


def test_packing_draws_are_the_ones_plans_had():
    assert draw(0, 42, 7, 3).tolist() == [17680642119211242809]
    assert draw(0, 42, np.arange(4), 3).tolist() == [3133863162058083004, 10717792572613970916,
                                                     2065760409411080217, 15645688893661902055]
    assert draw(draw(0, 1, 2), np.array([[0], [1]]), np.arange(3)).tolist() == [
        [8460352000482166300, 14418179372084732305, 4382340305287313794],
        [1155881950921884847, 7822107688032465790, 3515582392223918691]]
    assert draw(123456789, 0).tolist() == [2466975172287755897]
    assert draw(0, -5).tolist() == [1635312068028924514]
    assert uniform(0, 7, np.arange(3)).tolist() == [0.7215081806049702, 0.23928447285727472, 0.27598243332716743]
    assert randint(2, 9, 0, 11, np.arange(5)).tolist() == [6, 2, 3, 8, 6]


def test_python_integers_and_numpy_arrays_give_the_same_bits():
    values = [(0, 42, 7, 3), (5, -1, 2**63, 11), (draw(0, 9)[0].item(), 1)]
    for key, *rest in values:
        assert mix(key, *rest) == int(draw(key, *rest)[0])
        assert mix(key, *rest) == int(draw(key, *(np.array([v], np.uint64 if v >= 0 else np.int64)
                                                  for v in rest))[0])
    assert example_seed(42, 1, 7) == mix(0, 42, 1, 7) >> 1 == int(draw(0, 42, 1, 7)[0]) >> 1
    assert mix(mix(0, 3, 4), 5) == mix(0, 3, 4, 5)  # an earlier result is a key
