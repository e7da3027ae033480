"""Sizing: max useful, shrunk to observed and allowed capacity, never below the minimum."""

from __future__ import annotations

import random

from fedhpc.placement import joint_shapes, size_shape
from fedhpc.placement.context import Live
from tests.unit.test_placement_world import env, gpu_partition, pstate

G = gpu_partition("g", per_node=4, count=2, cpus=64, max_wall_s=4 * 3600, max_nodes_per_job=2)


def live(**kw: int) -> Live:
    return Live.of("s", pstate("g", G, **kw), None)


def test_shape_starts_at_max_useful_when_everything_is_free() -> None:
    s = size_shape(env(gpus=(1, 4), cpus=(4, 32), wall_time=("1h", "2h")), G, live())
    assert (s.gpus, s.cpus, s.nodes, s.wall_time_s) == (4, 32, 1, 7200)


def test_shape_shrinks_to_observed_free_gpus_but_not_below_min() -> None:
    e = env(gpus=(2, 4), cpus=8)
    assert size_shape(e, G, live(free_gpus=3, max_free_gpus_on_node=3)).gpus == 3
    assert size_shape(e, G, live(free_gpus=1, max_free_gpus_on_node=1)).gpus == 2


def test_shape_shrinks_to_partition_limits() -> None:
    s = size_shape(env(gpus=(1, 16), cpus=(4, 512), nodes=(1, 8), wall_time=("1h", "9h")), G, None)
    assert (s.gpus, s.cpus, s.nodes, s.wall_time_s) == (4, 64, 2, 4 * 3600)


def test_minimum_that_exceeds_the_node_stays_so_the_capacity_rule_can_say_why() -> None:
    assert size_shape(env(gpus=8), G, live()).gpus == 8


def test_sizing_never_goes_below_the_minimum_over_random_inputs() -> None:
    rng = random.Random(11)
    for _ in range(500):
        lo = {k: rng.randint(1, 8) for k in ("gpus", "cpus", "nodes")}
        e = env(**{k: (v, v + rng.randint(0, 8)) for k, v in lo.items()})
        free = rng.randint(0, 8)
        lv = live(free_gpus=free, max_free_gpus_on_node=min(free, 4))
        for s in (size_shape(e, G, lv), *joint_shapes(e, G, lv, limit=4)):
            assert s.gpus >= lo["gpus"] and s.cpus >= lo["cpus"] and s.nodes >= lo["nodes"]
            assert s.wall_time_s >= e.wall_time.min


def test_joint_shapes_start_with_the_paper_shape_and_are_distinct() -> None:
    e = env(gpus=(1, 4), cpus=(4, 32))
    lv = live(free_gpus=1, max_free_gpus_on_node=1)
    shapes = joint_shapes(e, G, lv, limit=4)
    assert shapes[0] == size_shape(e, G, lv)
    assert len(set(shapes)) == len(shapes) <= 4
    assert sorted(s.gpus for s in shapes) == [1, 2, 4]
    four = next(s for s in shapes if s.gpus == 4)
    assert four.cpus == 32 and next(s for s in shapes if s.gpus == 2).cpus == 16


def test_joint_shapes_of_a_cpu_task_step_the_cpus() -> None:
    shapes = joint_shapes(env(cpus=(4, 64)), G, None, limit=3)
    assert [s.cpus for s in shapes] == [64, 32, 16]
