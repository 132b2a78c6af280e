"""A one-process trial context under a launcher that started several ranks is refused
(``dethpc.pytorch._trial.check_world``): before, each rank silently trained alone."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from dethpc.common.errors import DethpcError  # noqa: E402
from dethpc.core import DistributedContext  # noqa: E402
from dethpc.pytorch._trial import check_world  # noqa: E402


@pytest.mark.parametrize(("world_env", "size", "refused"), [
    ({}, 1, False),                         # plain python
    ({"WORLD_SIZE": "1"}, 1, False),        # a launcher with one rank
    ({"WORLD_SIZE": ""}, 1, False),
    ({"WORLD_SIZE": "4"}, 1, True),         # core.init() without distributed=
    ({"WORLD_SIZE": "4"}, 4, False),        # the process group of 4
    ({"WORLD_SIZE": "x"}, 1, False),        # not a launcher's value: not ours to judge
])
def test_check_world(world_env: dict[str, str], size: int, refused: bool) -> None:
    dist = DistributedContext(rank=0, size=size, local_size=size)
    if refused:
        with pytest.raises(DethpcError, match=r"WORLD_SIZE=4 .*dethpc\.pytorch\.init\(\)"):
            check_world(dist, world_env)
    else:
        check_world(dist, world_env)
